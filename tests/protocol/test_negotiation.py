"""Tests for protocol/negotiation.py: the specification's arithmetic, case by case."""

from __future__ import annotations

import pytest

from stompmq.protocol import (
    SUPPORTED_VERSIONS,
    ProtocolError,
    connected_heart_beat,
    heart_beat_intervals,
    negotiate_version,
    parse_heart_beat,
)
from stompmq.protocol.negotiation import MAX_BEAT_MS


def test_supported_versions() -> None:
    assert SUPPORTED_VERSIONS == ("1.0", "1.1", "1.2")


VERSION_CASES = [
    # (id, accept-version header or None, negotiated version or None)
    ("s13_missing_means_1_0", None, "1.0"),
    ("s13_only_1_0", "1.0", "1.0"),
    ("s13_only_1_1", "1.1", "1.1"),
    ("s13_all_picks_highest", "1.0,1.1,1.2", "1.2"),
    ("s13_order_does_not_matter", "1.2,1.0", "1.2"),
    ("s13_highest_common", "1.0,1.1,2.0", "1.1"),
    ("s13_spaces_tolerated", " 1.1 , 1.2 ", "1.2"),
    ("s14_none_in_common", "2.0,2.1", None),
    ("s14_empty_offers_nothing", "", None),
    ("s14_no_prefix_matching", "1.20", None),
]


@pytest.mark.parametrize(("header", "expected"), [c[1:] for c in VERSION_CASES], ids=[c[0] for c in VERSION_CASES])
def test_negotiate_version(header: str | None, expected: str | None) -> None:
    assert negotiate_version(header) == expected


HEART_BEAT_CASES = [
    ("s16_missing_is_zero", None, (0, 0)),
    ("s16_zero", "0,0", (0, 0)),
    ("s16_values", "10000,5000", (10000, 5000)),
    ("s16_spaces_tolerated", " 10 , 20 ", (10, 20)),
    ("s16_big", "99999999999,1", (MAX_BEAT_MS, 1)),  # clamped (docs/limits.md)
    ("s16_thousands_of_digits", "1," + "9" * 5000, (1, MAX_BEAT_MS)),
]


@pytest.mark.parametrize(
    ("header", "expected"), [c[1:] for c in HEART_BEAT_CASES], ids=[c[0] for c in HEART_BEAT_CASES]
)
def test_parse_heart_beat(header: str | None, expected: tuple[int, int]) -> None:
    assert parse_heart_beat(header) == expected


@pytest.mark.parametrize(
    "header",
    ["", "1", "1,2,3", "a,b", "-1,0", "0,-5", "1.5,0", "+1,0", "1_0,0", "²,0", ",", "1,", "1;2", "0x10,0"],
)
def test_s16_malformed_heart_beat(header: str) -> None:
    with pytest.raises(ProtocolError, match="heart-beat"):
        parse_heart_beat(header)


INTERVAL_CASES = [
    # (id, client (cx, cy), server (sx, sy), (server sends every, server expects every))
    ("s16_nobody_beats", (0, 0), (0, 0), (0, 0)),
    ("s16_client_declines", (0, 0), (5000, 5000), (0, 0)),
    ("s16_server_declines", (5000, 5000), (0, 0), (0, 0)),
    ("s16_max_per_direction", (100, 200), (150, 50), (200, 100)),
    ("s16_client_wants_beats_only", (0, 200), (150, 50), (200, 0)),
    ("s16_client_sends_beats_only", (100, 0), (150, 50), (0, 100)),
    ("s16_server_sends_only", (100, 200), (150, 0), (200, 0)),
    ("s16_equal", (1000, 1000), (1000, 1000), (1000, 1000)),
]


@pytest.mark.parametrize(
    ("client", "server", "expected"), [c[1:] for c in INTERVAL_CASES], ids=[c[0] for c in INTERVAL_CASES]
)
def test_heart_beat_intervals(client: tuple[int, int], server: tuple[int, int], expected: tuple[int, int]) -> None:
    assert heart_beat_intervals(client, server) == expected


CONNECTED_CASES = [
    # (id, client (cx, cy), server (sx, sy), CONNECTED's heart-beat)
    ("client_wants_none", (0, 0), (10_000, 10_000), (0, 0)),
    ("client_wants_beats", (0, 200), (10_000, 10_000), (10_000, 10_000)),
    ("client_sends_beats", (100, 0), (150, 50), (150, 50)),
    ("server_declines", (100, 100), (0, 0), (0, 0)),
]


@pytest.mark.parametrize(
    ("client", "server", "expected"), [c[1:] for c in CONNECTED_CASES], ids=[c[0] for c in CONNECTED_CASES]
)
def test_connected_heart_beat(client: tuple[int, int], server: tuple[int, int], expected: tuple[int, int]) -> None:
    answer = connected_heart_beat(client, server)
    assert answer == expected
    # whatever CONNECTED says, both sides compute the same intervals from it
    assert heart_beat_intervals(client, answer) == heart_beat_intervals(client, server)
