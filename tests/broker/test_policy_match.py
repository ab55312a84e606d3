"""Policy matching and merging (broker/policy_match.py): pure logic, property-tested."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stompmq.broker.errors import ClientError
from stompmq.broker.policy_match import (
    CAPPED_KEYS,
    DECLARATION,
    OPERATOR_POLICY,
    POLICY,
    Policy,
    resolve,
    typed,
    winner,
)

NAMES = st.text(alphabet="abcxy.", min_size=1, max_size=6)
PATTERNS = st.sampled_from(["^a", "b", "^x\\.", ".*", "y$", "^abc$"])
NUMBERS = st.integers(min_value=0, max_value=10**6)
DEFINITIONS = st.dictionaries(st.sampled_from(["message-ttl", "max-length", "expires", "delivery-limit"]), NUMBERS,
                              min_size=1)


@st.composite
def policies(draw: st.DrawFn, operator: bool = False) -> list[Policy]:
    count = draw(st.integers(0, 5))
    return [Policy.parse(f"p{i}", {"pattern": draw(PATTERNS), "priority": draw(st.integers(-3, 3)),
                                   "apply-to": draw(st.sampled_from(["queues", "all"])),
                                   "definition": draw(DEFINITIONS)}, operator)
            for i in range(count)]


@given(policies(), NAMES)
def test_the_highest_priority_match_wins(candidates: list[Policy], queue: str) -> None:
    chosen = winner(candidates, queue)
    matching = [p for p in candidates if p.matches(queue)]
    if not matching:
        assert chosen is None
        return
    assert chosen is not None and chosen.matches(queue)
    assert all(chosen.priority >= p.priority for p in matching)
    assert chosen.name == min(p.name for p in matching if p.priority == chosen.priority)


@given(policies(), policies(operator=True), NAMES, st.dictionaries(st.sampled_from(["message-ttl", "max-length"]),
                                                                   NUMBERS.map(str)))
def test_declarations_win_over_policies_and_operator_policies_cap_both(
        ordinary: list[Policy], capping: list[Policy], queue: str, declared: dict[str, str]) -> None:
    effective = resolve(queue, declared, ordinary, capping)
    settings = effective.settings()  # always a valid set of settings
    cap = winner(capping, queue)
    chosen = winner(ordinary, queue)
    for key, value in effective.options.items():
        source, name = effective.sources[key]
        wanted = [int(declared[key])] if key in declared else (
            [chosen.definition[key]] if chosen is not None and key in chosen.definition else [])
        if cap is not None and key in cap.definition:
            wanted.append(cap.definition[key])
        assert int(value) == min(wanted)  # the stricter of what was asked
        if source == OPERATOR_POLICY:
            assert cap is not None and name == cap.name and int(value) == cap.definition[key]
        elif source == POLICY:
            assert key not in declared and chosen is not None and name == chosen.name
        else:
            assert source == DECLARATION and key in declared
    assert settings.message_ttl == (int(effective.options["message-ttl"]) if "message-ttl" in effective.options
                                    else None)


@given(st.dictionaries(st.sampled_from(CAPPED_KEYS), st.integers(0, 9), min_size=1))
def test_a_typed_definition_reads_back_the_same(definition: dict[str, int]) -> None:
    assert typed(typed(definition)) == typed(definition)
    assert typed({k: str(v) for k, v in definition.items()}) == typed(definition)


@pytest.mark.parametrize(("body", "operator", "message"), [
    ({"pattern": ".*", "definition": {"mesage-ttl": 5}}, False, "did you mean 'message-ttl'"),
    ({"pattern": ".*", "definition": {"overflow": "reject-publish"}}, True, "unknown key 'overflow'"),
    ({"pattern": "(", "definition": {"max-length": 5}}, False, "not a regular expression"),
    ({"pattern": ".*", "definition": {}}, False, "at least one setting"),
    ({"pattern": ".*", "apply-to": "exchanges", "definition": {"max-length": 1}}, False,
     "exchanges have no settings a policy can give"),
    ({"pattern": ".*", "apply-to": "streams", "definition": {"message-ttl": 1}}, False,
     "message-ttl: settings of queues, not of streams"),
    ({"pattern": ".*", "apply-to": "queues", "definition": {"max-age": 60}}, False,
     "max-age: settings of streams, not of queues"),
    ({"pattern": ".*", "apply-to": "streams", "definition": {"stream-max-segment-size-bytes": 1}}, False,
     "unknown key 'stream-max-segment-size-bytes'"),
    ({"pattern": ".*", "apply-to": "streams", "definition": {"max-age": "7D"}}, False,
     "max-age must be a number of seconds"),
    ({"pattern": ".*", "priorty": 1, "definition": {"max-length": 1}}, False, "did you mean 'priority'"),
    ({"pattern": ".*", "definition": {"max-length": -1}}, False, "max-length must be an integer"),
])
def test_a_bad_policy_is_refused_naming_what_is_wrong(body: dict[str, object], operator: bool, message: str) -> None:
    with pytest.raises(ClientError, match=message):
        Policy.parse("p", body, operator)
