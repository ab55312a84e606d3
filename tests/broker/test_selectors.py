"""JMS selector vectors, a table per grammar feature group: (selector, expected match).

Every vector runs against one message whose headers and broker facts are ``MESSAGE`` below; the
expected answers are JMS 1.1's three-valued rules, with a header's string read as a number or a
boolean when the other side is one (docs/selectors.md lists where ActiveMQ answers otherwise).
"""

from __future__ import annotations

import pytest

from stompmq.broker.selectors import SelectorError, compile_selector
from stompmq.storage.base import StoredMessage

HEADERS = {
    "region": "eu",
    "price": "5.5",
    "count": "12",
    "neg": "-3",
    "flag": "true",
    "off": "FALSE",
    "word": "hello",
    "x-tenant": "acme",
    "path": "a%b_c",
    "quote": "it's",
    "empty": "",
    "sci": "1e3",
    "type": "order",
    "correlation-id": "c-42",
    "JMSXGroupID": "g1",
    "persistent": "true",
    "multi": "line\nbreak",
}
MESSAGE = StoredMessage(77, "q", 7, HEADERS, b"body", 1_700_000_000_000, redeliveries=2, expires=1_800_000_000_000)


def matches(selector: str) -> bool:
    compiled = compile_selector(selector)
    assert compiled is not None
    return compiled.matches(MESSAGE)


COMPARISONS = [
    ("region = 'eu'", True), ("region = 'us'", False), ("region <> 'us'", True), ("region <> 'eu'", False),
    ("count = 12", True), ("count > 11", True), ("count >= 12", True), ("count < 12", False), ("count <= 12", True),
    ("count <> 12", False), ("price > 5", True), ("price < 6", True), ("price = 5.5", True), ("price = 5.50", True),
    ("neg < 0", True), ("sci = 1000", True), ("sci > 999.5", True), ("word > 1", False), ("word = 1", False),
    ("12 = count", True), ("5 < price", True), ("flag = TRUE", True), ("flag = FALSE", False), ("off = FALSE", True),
    ("flag <> FALSE", True), ("word = TRUE", False), ("empty = ''", True), ("empty = 0", False),
    ("region = 'EU'", False), ("quote = 'it''s'", True), ("count = '12'", True), ("missing = 'x'", False),
    ("missing <> 'x'", False), ("missing > 1", False), ("priority = 7", True), ("priority > 4", True),
]
LOGIC = [
    # chains of three (one closure each): the dominant value anywhere decides, else unknown stays unknown
    ("region = 'eu' AND count = 12 AND price > 5", True), ("missing = 'x' AND region = 'eu' AND count = 12", False),
    ("NOT (region = 'eu' AND count = 12 AND missing = 'x')", False),
    ("NOT (region = 'us' AND missing = 'x' AND count = 12)", True),
    ("missing = 'x' OR region = 'us' OR count = 12", True), ("NOT (missing = 'x' OR region = 'us' OR count = 13)", False),
    ("NOT (region = 'us' OR count = 13 OR price < 5)", True),
    ("region = 'eu' AND count = 12", True), ("region = 'eu' AND count = 13", False),
    ("region = 'us' OR count = 12", True), ("region = 'us' OR count = 13", False),
    ("NOT region = 'us'", True), ("NOT region = 'eu'", False), ("NOT missing = 'x'", False),
    ("missing = 'x' OR region = 'eu'", True), ("missing = 'x' AND region = 'us'", False),
    ("NOT (missing = 'x' AND region = 'us')", True), ("NOT (missing = 'x' AND region = 'eu')", False),
    ("NOT (missing = 'x' OR region = 'us')", False), ("region = 'us' OR region = 'eu' AND count = 12", True),
    ("(region = 'us' OR region = 'eu') AND count = 13", False), ("region = 'us' OR (region = 'eu' AND count = 12)", True),
    ("flag", True), ("off", False), ("NOT off", True), ("NOT flag", False), ("word", False), ("NOT word", False),
    ("TRUE", True), ("FALSE", False), ("NOT FALSE", True), ("flag AND NOT off", True),
    ("region = 'eu' and count = 12", True), ("region = 'eu' Or count = 0", True), ("not region = 'us'", True),
    ("NOT NOT region = 'eu'", True), ("redelivered", True), ("JMSRedelivered = TRUE", True),
]
BETWEEN = [
    ("price BETWEEN 5 AND 10", True), ("price BETWEEN 6 AND 10", False), ("price NOT BETWEEN 6 AND 10", True),
    ("price NOT BETWEEN 5 AND 10", False), ("count BETWEEN 12 AND 12", True), ("count BETWEEN 13 AND 11", False),
    ("count BETWEEN 1 AND 100", True), ("neg BETWEEN -5 AND -1", True), ("neg BETWEEN -2 AND 0", False),
    ("sci BETWEEN 999 AND 1001", True), ("word BETWEEN 1 AND 2", False), ("word NOT BETWEEN 1 AND 2", False),
    ("missing BETWEEN 1 AND 2", False), ("missing NOT BETWEEN 1 AND 2", False), ("priority BETWEEN 5 AND 9", True),
    ("priority BETWEEN 0 AND 4", False), ("count BETWEEN 10 + 1 AND 13", True), ("count * 2 BETWEEN 20 AND 25", True),
    ("price BETWEEN 5.5 AND 5.5", True), ("price BETWEEN 5.51 AND 6", False), ("count between 1 and 20", True),
    ("NOT count BETWEEN 1 AND 20", False),
]
IN = [
    ("region IN ('eu', 'us')", True), ("region IN ('us', 'asia')", False), ("region NOT IN ('us', 'asia')", True),
    ("region NOT IN ('eu')", False), ("region IN ('eu')", True), ("missing IN ('a', 'b')", False),
    ("missing NOT IN ('a', 'b')", False), ("type IN ('order', 'refund')", True), ("type in ('refund')", False),
    ("JMSType IN ('order')", True), ("quote IN ('it''s')", True), ("empty IN ('')", True),
    ("count IN (11, 12, 13)", True), ("count IN (1, 2)", False), ("count NOT IN (1, 2)", True),
    ("price IN (5.5)", True), ("neg IN (-3, 3)", True), ("word IN (1, 2)", False), ("word NOT IN (1, 2)", False),
    ("priority IN (7, 8)", True), ("priority NOT IN (7)", False), ("\"x-tenant\" IN ('acme', 'other')", True),
]
LIKE = [
    ("word LIKE 'hel%'", True), ("word LIKE '%llo'", True), ("word LIKE '%ll%'", True), ("word LIKE 'h_llo'", True),
    ("word LIKE 'h_lo'", False), ("word LIKE 'hello'", True), ("word LIKE 'Hello'", False), ("word LIKE '%'", True),
    ("word LIKE '_____'", True), ("word LIKE '______'", False), ("word NOT LIKE 'x%'", True),
    ("word NOT LIKE 'h%'", False), ("missing LIKE '%'", False), ("missing NOT LIKE '%'", False),
    ("path LIKE 'a\\%b%' ESCAPE '\\'", True), ("path LIKE 'a!%b!_c' ESCAPE '!'", True),
    ("path LIKE 'a!_%' ESCAPE '!'", False), ("empty LIKE ''", True), ("empty LIKE '%'", True),
    ("quote LIKE 'it''%'", True), ("multi LIKE 'line%break'", True), ("region LIKE 'e.'", False),
    ("region LIKE '[e]u'", False), ("\"x-tenant\" LIKE 'ac%'", True), ("type LIKE 'ord%'", True),
]
NULLS = [
    ("missing IS NULL", True), ("region IS NULL", False), ("missing IS NOT NULL", False),
    ("region IS NOT NULL", True), ("empty IS NULL", False), ("empty IS NOT NULL", True),
    ("\"x-tenant\" IS NOT NULL", True), ("\"x-other\" IS NULL", True), ("JMSCorrelationID IS NOT NULL", True),
    ("JMSReplyTo IS NULL", True), ("priority IS NULL", False), ("missing + 1 IS NULL", True),
    ("count + 1 IS NULL", False), ("word * 2 IS NULL", True), ("missing IS NULL AND region = 'eu'", True),
    ("missing IS NULL OR missing = 'x'", True), ("NOT missing IS NULL", False), ("missing is null", True),
    ("region is not null", True), ("JMSXGroupID IS NOT NULL", True), ("JMSXGroupSeq IS NULL", True),
]
ARITHMETIC = [
    ("count + 1 = 13", True), ("count - 2 = 10", True), ("count * 2 = 24", True), ("count / 5 = 2", True),
    ("count / 5.0 = 2.4", True), ("price * 2 > 10", True), ("price * 2 = 11", True), ("-count = -12", True),
    ("- neg = 3", True), ("+count = 12", True), ("count + price = 17.5", True), ("2 + 3 * 4 = 14", True),
    ("(2 + 3) * 4 = 20", True), ("count / 0 = 1", False), ("count / 0 IS NULL", True), ("7 / 2 = 3", True),
    ("-7 / 2 = -3", True), ("7.0 / 2 = 3.5", True), ("word + 1 = 1", False), ("missing * 2 > 0", False),
    ("sci / 10 = 100", True), ("priority * 10 = 70", True), ("count - count = 0", True), ("1 - 1 - 1 = -1", True),
]
LITERALS = [
    ("count = 0xC", True), ("count = 0XC", True), ("count = 12L", True), ("price = 5.5D", True),
    ("price = 5.5f", True), ("sci = 1E3", True), ("sci = 1e+3", True), ("sci = 10000e-1", True),
    ("price = .55E1", True), ("count = 12.", True), ("price > 5.", True), ("count = 1.2e1", True),
    ("quote = 'it''s'", True), ("empty = ''", True), ("'eu' = region", True), ("TRUE = flag", True),
    ("flag = true", True), ("off = false", True), ("count = 012", True), ("neg = -3", True),
    ("neg = -3.0", True), ("count = +12", True),
]
IDENTIFIERS = [
    ("JMSPriority = 7", True), ("JMSPriority > 7", False), ("JMSTimestamp = 1700000000000", True),
    ("JMSMessageID = '77'", True), ("\"message-id\" = '77'", True),
    ("JMSRedelivered", True), ("\"redelivery-count\" = 2", True), ("JMSXDeliveryCount = 3", True),
    ("JMSExpiration = 1800000000000", True), ("JMSCorrelationID = 'c-42'", True), ("JMSType = 'order'", True),
    ("type = 'order'", True), ("JMSDeliveryMode = 'PERSISTENT'", True), ("JMSXGroupID = 'g1'", True),
    ("\"x-tenant\" = 'acme'", True), ("\"correlation-id\" = 'c-42'", True), ("timestamp > 0", True),
    ("expires > timestamp", True), ("$odd IS NULL", True), ("_under IS NULL", True), ("Region = 'eu'", False),
    ("\"with\"\"quote\" IS NULL", True), ("\"priority\" = 7", True),
]
GROUPS = {
    "comparisons": COMPARISONS, "logic": LOGIC, "between": BETWEEN, "in": IN, "like": LIKE, "nulls": NULLS,
    "arithmetic": ARITHMETIC, "literals": LITERALS, "identifiers": IDENTIFIERS,
}


@pytest.mark.parametrize(("selector", "expected"), [v for vs in GROUPS.values() for v in vs],
                         ids=[f"{g}:{v[0]}" for g, vs in GROUPS.items() for v in vs])
def test_vector(selector: str, expected: bool) -> None:
    assert matches(selector) is expected


def test_every_group_has_twenty_vectors() -> None:
    assert {name: len(vs) for name, vs in GROUPS.items() if len(vs) < 20} == {}


MALFORMED = [
    ("region = ", 9, "expected a value"),
    ("region = 'eu", 9, "unterminated quote"),
    ("region == 'eu'", 8, "expected a value"),
    ("(region = 'eu'", 14, "expected a closing )"),
    ("region = 'eu')", 13, "unexpected ')'"),
    ("region ~ 'eu'", 7, "unexpected character"),
    ("count > 'a'", 6, None),
    ("region < 'eu'", 7, "does not apply to a string"),
    ("region = NULL", 7, "IS NULL"),
    ("count BETWEEN 1", 15, "expected AND"),
    ("word LIKE 5", 10, "must be a string"),
    ("word LIKE 'x' ESCAPE 'ab'", 21, "one character"),
    ("count IN ()", 10, "expected a literal"),
    ("count IN (1, 'a')", 6, "of one type"),
    ("priority IN ('a')", 9, "cannot compare a number with a string"),
    ("count IN (1 2)", 12, "expected , or )"),
    ("count IS 5", 9, "NULL after IS"),
    ("'a' + 1 = 2", 0, "arithmetic needs numbers"),
    ("TRUE + 1 = 2", 0, "arithmetic needs numbers"),
    ("count + 1", 6, "not a condition"),
    ("'eu'", 0, "not a condition"),
    ("region AND", 10, "expected a value"),
    ("NOT", 3, "expected a value"),
    ("5 AND region = 'x'", 0, "expected a condition"),
    ("priority LIKE '1'", 9, "LIKE applies to strings"),
    ("\"\" = 1", 0, "an empty quoted name"),
    ("message-id = '77'", 11, "cannot compare a number with a string"),
]


@pytest.mark.parametrize(("selector", "position", "problem"), MALFORMED)
def test_malformed_selector_names_the_position(selector: str, position: int, problem: str | None) -> None:
    with pytest.raises(SelectorError) as caught:
        compile_selector(selector)
    assert caught.value.position == position
    assert f"at character {position + 1}" in caught.value.message
    if problem is not None:
        assert problem in caught.value.message


def test_empty_selector_selects_everything() -> None:
    assert compile_selector("") is None
    assert compile_selector("   ") is None


def test_deep_nesting_is_refused_not_a_crash() -> None:
    with pytest.raises(SelectorError, match="nested deeper"):
        compile_selector("(" * 200 + "flag" + ")" * 200)
    with pytest.raises(SelectorError, match="nested deeper"):
        compile_selector("NOT " * 200 + "flag")
    with pytest.raises(SelectorError, match="longer than"):
        compile_selector("flag OR " * 1000 + "flag")


def test_long_flat_chains_compile_and_evaluate() -> None:
    """A long OR chain nests left-deep closures: it must not hit the recursion limit at MAX_SELECTOR_LENGTH."""
    text = " OR ".join(["region = 'zz'"] * 200)
    assert len(text) < 4096
    assert matches(text) is False
