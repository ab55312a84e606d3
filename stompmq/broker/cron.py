"""Cron expressions (``AMQ_SCHEDULED_CRON``): five fields, and the next minute they name.

Theory of operation
-------------------
``parse_cron`` reads the classic five fields, ``minute hour day-of-month month day-of-week``,
each a comma-separated list of ``*``, ``N``, ``N-M``, with an optional ``/STEP`` after ``*``,
a range or a single ``N`` (from ``N`` to the field's end); months and weekdays may be named
(``jan``, ``mon``), weekday 0 and 7 are Sunday; ``@hourly``, ``@daily`` (``@midnight``),
``@weekly``, ``@monthly`` and ``@yearly`` (``@annually``) stand for their five fields.  As in
Vixie cron and POSIX, when both day fields are restricted (neither starts with ``*``) a day
matches if either does.  An expression that can never fire (``0 0 30 2 *``) is refused when
parsed, so ``next_fire`` always finds a minute.

``next_fire`` walks local dates from the instant given, skipping whole months and days that
do not match, and returns the first matching local minute strictly after it, as epoch
milliseconds.  Local time is that of ``zone`` (None: the system's time zone, through the C
library, as ``datetime.fromtimestamp`` sees it).  Around daylight-saving changes a local
minute that does not exist (the hour skipped in spring) never fires, and one that occurs twice
(the hour repeated in autumn) fires once, at its first occurrence.

Pure logic: no clock is read; the caller says when "now" is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo

#: Field names as an ERROR names them, and each field's range.
FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))
MONTHS = {name: i for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}
WEEKDAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
NICKNAMES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
#: The longest an expression may be: an ERROR quotes it, and nobody writes more.
MAX_LENGTH = 200
#: The most days each month can have (February in a leap year).
MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
#: Days ``next_fire`` looks ahead: the rarest expression (29 February) waits at most 8 years.
HORIZON_DAYS = 366 * 9


class CronError(ValueError):
    """A cron expression that cannot be read or never fires; the message says which field."""


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed expression: the values each field allows (weekdays 0-6, Sunday 0)."""

    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool  # the day-of-month field starts with "*"
    any_weekday: bool  # the day-of-week field starts with "*"

    def day_matches(self, day: date) -> bool:
        """Does ``day`` match both day fields (either, when both are restricted)?"""
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week


def parse_cron(text: str) -> Cron:
    """The expression ``text``; CronError saying what is wrong otherwise."""
    if len(text) > MAX_LENGTH:
        raise CronError(f"a cron expression has at most {MAX_LENGTH} characters")
    fields = NICKNAMES.get(text.strip().lower(), text).split()
    if len(fields) != 5:
        raise CronError(f"a cron expression has 5 fields (minute hour day-of-month month day-of-week), "
                        f"not {len(fields)}")
    values = [_field(spec, *FIELDS[i], MONTHS if i == 3 else WEEKDAYS if i == 4 else {})
              for i, spec in enumerate(fields)]
    weekdays = frozenset(v % 7 for v in values[4])
    cron = Cron(text, tuple(sorted(values[0])), tuple(sorted(values[1])), frozenset(values[2]),
                frozenset(values[3]), weekdays, fields[2].startswith("*"), fields[4].startswith("*"))
    if cron.any_weekday and not any(day <= MONTH_DAYS[month - 1] for month in cron.months for day in cron.days):
        raise CronError(f"{text!r} never fires: no month it names has such a day")
    return cron


def _field(spec: str, name: str, low: int, high: int, names: dict[str, int]) -> set[int]:
    allowed: set[int] = set()
    for item in spec.split(","):
        part, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or not 1 <= int(step_text) <= high:
                raise CronError(f"the {name} field's step must be an integer from 1 to {high}, not {step_text!r}")
            step = int(step_text)
        if part == "*":
            first, last = low, high
        elif "-" in part:
            start, _, end = part.partition("-")
            first, last = _value(start, name, low, high, names), _value(end, name, low, high, names)
            if first > last:
                raise CronError(f"the {name} field's range {part!r} runs backwards")
        else:
            first = _value(part, name, low, high, names)
            last = high if slash else first
        allowed.update(range(first, last + 1, step))
    return allowed


def _value(text: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    named = names.get(text.lower())
    if named is not None:
        return named
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise CronError(f"the {name} field takes {low}-{high}{' or a name' if names else ''}, not {text!r}")
    return int(text)


def next_fire(cron: Cron, after_ms: int, zone: tzinfo | None = None) -> int:
    """The first minute ``cron`` names strictly after ``after_ms`` (epoch ms), in epoch ms."""
    start = datetime.fromtimestamp(after_ms // 1000, zone).date()
    day = start
    end = start + timedelta(days=HORIZON_DAYS)
    while day < end:
        if day.month not in cron.months:
            day = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
            continue
        if cron.day_matches(day):
            found = _first_minute(cron, day, after_ms, zone)
            if found is not None:
                return found
        day += timedelta(days=1)
    raise CronError(f"{cron.text!r} does not fire within {HORIZON_DAYS // 366} years")  # parse_cron prevents it


def _first_minute(cron: Cron, day: date, after_ms: int, zone: tzinfo | None) -> int | None:
    """The first minute of ``day`` that ``cron`` names, exists locally, and is after ``after_ms``."""
    for hour in cron.hours:
        for minute in cron.minutes:
            local = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
            ms = int(local.timestamp()) * 1000
            if ms <= after_ms:
                continue
            shown = datetime.fromtimestamp(ms // 1000, zone)
            if (shown.hour, shown.minute, shown.day) == (hour, minute, day.day):  # not in a skipped hour
                return ms
    return None
