"""parse_destination: the memo and the short path for keyed exchange destinations
must answer exactly what the full checks in _parse answer, errors included."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from stompmq.broker.destinations import MAX_NAME_BYTES, Destination, Kind, _parse, parse_destination
from stompmq.broker.errors import ClientError


def outcome(parse, raw: str | None) -> Destination | str:
    try:
        return parse(raw)
    except ClientError as error:
        return f"error: {error}"


prefixes = st.sampled_from(["/exchange/", "/queue/", "/topic/", "/control/", "/exchange", "/", "", "exchange/"])
tails = st.text(alphabet=st.sampled_from(["a", "/", "é", "\n", "\r", "\x00", " ", "\u2028"]), max_size=12)


@given(prefix=prefixes, tail=tails, padding=st.sampled_from([0, 240, 250, 260]))
@example(prefix="/exchange/", tail="e/" + "k" * 243, padding=0)  # exactly 255 bytes: accepted
@example(prefix="/exchange/", tail="e/" + "k" * 244, padding=0)  # 256 bytes: refused
def test_short_path_and_memo_agree_with_full_checks(prefix: str, tail: str, padding: int) -> None:
    raw = prefix + "x" * padding + tail
    expected = outcome(_parse, raw)
    assert outcome(parse_destination, raw) == expected
    assert outcome(parse_destination, raw) == expected  # a second time, when it may come from the memo


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


@pytest.mark.parametrize("raw", ["/queue/" + "é" * 130, "/exchange/e/" + "é" * 130, "/exchange/e/" + "k" * 250])
def test_limit_is_in_utf8_bytes(raw: str) -> None:
    assert len(raw.encode()) > MAX_NAME_BYTES
    with pytest.raises(ClientError, match="longer than 255 bytes"):
        parse_destination(raw)
