"""The cron parser against a brute-force walk over every minute, in several time zones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stompmq.broker.cron import CronError, next_fire, parse_cron

#: Minutes the brute force walks at most; beyond it only "not before" is checked.
WALK = 6 * 24 * 60
ZONES: list[tzinfo] = [UTC, timezone(timedelta(hours=5, minutes=30)), ZoneInfo("Europe/Berlin"),
                       ZoneInfo("America/New_York"), ZoneInfo("Australia/Lord_Howe")]
RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


@st.composite
def fields(draw: st.DrawFn) -> tuple[str, list[set[int] | None]]:
    """A random expression and, per field, the values it allows (None: ``*``)."""
    texts, sets = [], []
    for i, (low, high) in enumerate(RANGES):
        kind = draw(st.sampled_from(["star", "step", "list", "range"] if i != 3 else ["star", "list", "range"]))
        if kind == "star":
            texts.append("*")
            sets.append(None)
        elif kind == "step":
            step = draw(st.integers(1, high))
            texts.append(f"*/{step}")
            allowed = set(range(low, high + 1, step))
            sets.append(allowed if allowed != set(range(low, high + 1)) else None)
            if step == 1:
                sets[-1] = None
        elif kind == "list":
            values = draw(st.sets(st.integers(low, high), min_size=1, max_size=4))
            texts.append(",".join(str(v) for v in sorted(values)))
            sets.append(values)
        else:
            first = draw(st.integers(low, high))
            last = draw(st.integers(first, high))
            step = draw(st.integers(1, 3))
            texts.append(f"{first}-{last}" + (f"/{step}" if step > 1 else ""))
            sets.append(set(range(first, last + 1, step)))
    return " ".join(texts), sets


def matches(local: datetime, sets: list[set[int] | None], text: str) -> bool:
    minute, hour, day, month, weekday = sets
    if minute is not None and local.minute not in minute or hour is not None and local.hour not in hour:
        return False
    if month is not None and local.month not in month:
        return False
    day_fields = text.split()
    in_month = day is None or local.day in day
    in_week = weekday is None or local.isoweekday() % 7 in weekday
    if not day_fields[2].startswith("*") and not day_fields[4].startswith("*"):
        return in_month or in_week
    return in_month and in_week


def brute_force(after_ms: int, sets: list[set[int] | None], text: str, zone: tzinfo) -> int | None:
    """The first minute after ``after_ms`` that matches, walking every minute (a repeated local
    minute counts at its first occurrence only)."""
    minute_ms = (after_ms // 60_000 + 1) * 60_000
    for _ in range(WALK):
        local = datetime.fromtimestamp(minute_ms / 1000, zone)
        if not local.fold and matches(local, sets, text):
            return minute_ms
        minute_ms += 60_000
    return None


@settings(max_examples=300, deadline=None)
@given(fields(), st.integers(0, 4_000_000_000_000), st.sampled_from(range(len(ZONES))))
def test_next_fire_is_the_first_matching_minute(expression: tuple[str, list[set[int] | None]], after_ms: int,
                                               zone_index: int) -> None:
    text, sets = expression
    zone = ZONES[zone_index]
    try:
        cron = parse_cron(text)
    except CronError:
        return  # (an expression that never fires: its own test below)
    found = next_fire(cron, after_ms, zone)
    expected = brute_force(after_ms, sets, text, zone)
    if expected is None:
        assert found > after_ms + WALK * 60_000 - 60_000
    else:
        assert found == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(1_600_000_000_000, 1_900_000_000_000), st.sampled_from(range(len(ZONES))))
def test_every_minute_is_the_next_minute(after_ms: int, zone_index: int) -> None:
    zone = ZONES[zone_index]
    found = next_fire(parse_cron("* * * * *"), after_ms, zone)
    expected = brute_force(after_ms, [None] * 5, "* * * * *", zone)
    assert found == expected


def test_a_skipped_hour_never_fires_and_a_repeated_one_fires_once() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    spring = int(datetime(2026, 3, 29, 1, 0, tzinfo=berlin).timestamp() * 1000)  # 02:00-03:00 is skipped
    cron = parse_cron("30 2 * * *")
    assert datetime.fromtimestamp(next_fire(cron, spring, berlin) / 1000, berlin).date().day == 30
    autumn = int(datetime(2026, 10, 25, 0, 0, tzinfo=berlin).timestamp() * 1000)  # 02:00-03:00 twice
    first = next_fire(cron, autumn, berlin)
    assert next_fire(cron, first, berlin) - first == 25 * 3600 * 1000  # the next day's, not 1 h later


@pytest.mark.parametrize(("text", "same_as"), [
    ("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@weekly", "0 0 * * 0"), ("0 0 * * 7", "0 0 * * 0"),
    ("0 12 * jan-mar MON-fri", "0 12 * 1-3 1-5"), ("5/20 * * * *", "5,25,45 * * * *"),
])
def test_names_and_nicknames(text: str, same_as: str) -> None:
    a, b = parse_cron(text), parse_cron(same_as)
    assert (a.minutes, a.hours, a.days, a.months, a.weekdays) == (b.minutes, b.hours, b.days, b.months, b.weekdays)


@pytest.mark.parametrize(("text", "says"), [
    ("* * * *", "5 fields"), ("60 * * * *", "minute"), ("* 24 * * *", "hour"), ("* * 0 * *", "day of month"),
    ("* * * 13 *", "month"), ("* * * * 8", "day of week"), ("*/0 * * * *", "step"), ("5-1 * * * *", "backwards"),
    ("0 0 31 4,6 *", "never fires"), ("x * * * *", "minute"), ("* " * 200, "at most"),
])
def test_a_bad_expression_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(CronError, match=says):
        parse_cron(text)
