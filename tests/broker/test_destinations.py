"""parse_destination: the memo and the short path for keyed exchange destinations
must answer exactly what the full checks in _parse answer, errors included."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from stompmq.broker.destinations import MAX_NAME_BYTES, Destination, Kind, _known, _parse, parse_destination
from stompmq.broker.errors import ClientError


def outcome(parse, raw: str | None) -> Destination | str:
    try:
        return parse(raw)
    except ClientError as error:
        return f"error: {error}"


prefixes = st.sampled_from(["/exchange/", "/queue/", "/topic/", "/control/", "/exchange", "/", "", "exchange/"])
# Non-printable characters other than NUL/CR/LF (tab, NEL, NBSP, LINE SEPARATOR) and a lone
# surrogate are legal or illegal in other ways: they must leave the short path and get the
# full checks' answer.
tails = st.text(
    alphabet=st.sampled_from(["a", "/", "é", "\n", "\r", "\x00", " ", "\t", "\x85", "\xa0", "\u2028", "\ud800"]),
    max_size=12,
)


@given(prefix=prefixes, tail=tails, padding=st.sampled_from([0, 240, 250, 260]))
@example(prefix="/exchange/", tail="e/" + "k" * 243, padding=0)  # exactly 255 bytes: accepted
@example(prefix="/exchange/", tail="e/" + "k" * 244, padding=0)  # 256 bytes: refused
def test_short_path_and_memo_agree_with_full_checks(prefix: str, tail: str, padding: int) -> None:
    raw = prefix + "x" * padding + tail
    expected = outcome(_parse, raw)
    for _ in range(2):  # the second time it may come from the memo
        got = outcome(parse_destination, raw)
        assert got == expected
        if isinstance(got, Destination):
            assert isinstance(expected, Destination) and got.kind is expected.kind  # the broker compares with "is"


def test_keyed_exchange_destinations_are_not_memoised() -> None:
    for raw in ("/exchange/memo/k1", "/exchange/memo/clé", "/exchange/memo/k\t2"):
        parse_destination(raw)
        assert raw not in _known
    parse_destination("/exchange/memo")
    assert "/exchange/memo" in _known


def test_unencodable_destination_is_a_client_error() -> None:
    # Frames cannot carry a lone surrogate (strict UTF-8), a JSON definitions file can.
    with pytest.raises(ClientError, match="not encodable as UTF-8"):
        parse_destination("/queue/a\ud800b")


@pytest.mark.parametrize(
    ("raw", "name", "key"),
    [
        ("/exchange/orders/customer-42", "orders", "customer-42"),
        ("/exchange/orders/a/b", "orders", "a/b"),  # only the first slash separates the key
        ("/exchange/orders/", "orders", ""),
        ("/exchange/orders", "orders", ""),
        ("/exchange/orders/ключ", "orders", "ключ"),
    ],
)
def test_exchange_name_and_key(raw: str, name: str, key: str) -> None:
    assert parse_destination(raw) == Destination(Kind.EXCHANGE, name, raw, key)


def test_other_kinds_have_no_key() -> None:
    assert parse_destination("/queue/a/b") == Destination(Kind.QUEUE, "a/b", "/queue/a/b", "")


# Multi-byte names (full checks) and a long ASCII keyed exchange destination (short path).
@pytest.mark.parametrize("raw", ["/queue/" + "é" * 130, "/exchange/e/" + "é" * 130, "/exchange/e/" + "k" * 250])
def test_limit_is_255_utf8_bytes(raw: str) -> None:
    assert len(raw.encode()) > MAX_NAME_BYTES
    with pytest.raises(ClientError, match="longer than 255 bytes"):
        parse_destination(raw)
