"""Reading client headers: what a SEND forwards, its priority, ack timeouts, expiry, delay and
schedule, boolean flags.

Every number is range-checked here, where it enters (docs/limits.md has the table): a value
out of range is an ERROR for its frame alone.  The bounds keep every time a SEND or a
declaration gives, added to the wall clock, inside what the store holds (a signed 64-bit
integer) and what a float counts exactly (2**53), so no value can reach the store that the
store refuses: one client's SEND never stalls the commit group that carries everybody's."""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.headers import headers_without
from .cron import Cron, CronError, next_fire, parse_cron
from .delivery import BROKER_HEADERS, MESSAGE_TYPE, TEXT
from .errors import ClientError

#: Priority of a SEND that names none (the JMS convention).
DEFAULT_PRIORITY = 4
#: SEND headers that give a message an expiry or a delay (milliseconds): absolute epoch times
#: (``expires`` as JMS/ActiveMQ, ``deliver-at``, Artemis' ``_AMQ_SCHED_DELIVERY`` and
#: ``AMQ_SCHEDULED_TIME``) or from now (``ttl``, ``delay``, ActiveMQ's ``AMQ_SCHEDULED_DELAY``).
#: ``expires:0`` means never, as in JMS.
EXPIRES, TTL, DELAY, DELIVER_AT, AMQ_SCHEDULED_DELAY = "expires", "ttl", "delay", "deliver-at", "AMQ_SCHEDULED_DELAY"
AMQ_SCHEDULED_TIME, AMQ_SCHED_DELIVERY = "AMQ_SCHEDULED_TIME", "_AMQ_SCHED_DELIVERY"
#: The delay headers: each says when the message is ready, from now (a base of 1) or absolute (0).
DUE = ((DELAY, 1), (AMQ_SCHEDULED_DELAY, 1), (DELIVER_AT, 0), (AMQ_SCHEDULED_TIME, 0), (AMQ_SCHED_DELIVERY, 0))
DUE_HEADERS = frozenset(name for name, _ in DUE)
#: ActiveMQ's headers that make a SEND a schedule (schedules.py), repeated copies of one message.
PERIOD, REPEAT, CRON = "AMQ_SCHEDULED_PERIOD", "AMQ_SCHEDULED_REPEAT", "AMQ_SCHEDULED_CRON"
RECURRING = frozenset({PERIOD, REPEAT, CRON})
#: The broker's headers on a schedule's row: its id (also on every copy) and the firings left.
SCHEDULE_ID, SCHEDULE_LEFT = "scheduledJobId", "x-schedule-left"
#: ``AMQ_SCHEDULED_REPEAT`` of a schedule that never ends, and the largest count (a Java int).
FOREVER, MAX_REPEAT = -1, 2**31 - 1
#: The largest time in milliseconds a header may give, relative (ttl, delay, message-ttl) or
#: absolute (expires, deliver-at): 10**15 ms is about 31,700 years, and the wall clock plus it
#: stays below 2**53.
MAX_MS = 10**15
#: The largest number of seconds (ack-timeout): MAX_MS in seconds.
MAX_SECONDS = MAX_MS / 1000
#: The largest count (max-length, max-length-bytes): below 2**63, what the store holds.
MAX_COUNT = 10**18
#: The lifecycle headers that make a message wait: a delay or a schedule.
TIMING_HEADERS = DUE_HEADERS | RECURRING
LIFECYCLE_HEADERS = frozenset({EXPIRES, TTL}) | TIMING_HEADERS
#: The identity headers: who published a message (RabbitMQ's ``user-id``, ActiveMQ's ``JMSXUserID``).
IDENTITY_HEADERS = ("user-id", "JMSXUserID")
#: What the broker says about a message (or a relay of another broker's: a shovel), never its sender:
#: why and from where it was dead-lettered, a shovel's possible-duplicate mark, delivery counts
#: (JMSXDeliveryCount is each delivery's own, delivery.BROKER_HEADERS, whoever sent it).
BROKER_FACTS = frozenset({
    "original-destination", "dead-letter-reason", "shovel-redelivered",
    "x-delivery-count", "x-death", "x-first-death-reason", "x-first-death-queue", SCHEDULE_ID, SCHEDULE_LEFT,
})
#: SEND headers the broker must see before it forwards a SEND (``sender_headers``).
SENDER_HEADERS = BROKER_FACTS | frozenset(IDENTITY_HEADERS)
#: Headers that make a SEND more than a plain message (options, a reply-to, a transaction, a
#: header only the broker may set): a SEND without any of them is published with the defaults,
#: its options never read.
SPECIAL_HEADERS = LIFECYCLE_HEADERS | SENDER_HEADERS | {"priority", "ack-timeout", "reply-to", "transaction"}


def sender_headers(headers: dict[str, str], login: str | None, relay: bool, stamp: bool) -> dict[str, str]:
    """A SEND's headers as the broker takes them from a sender logged in as ``login``.

    An identity header naming anyone but ``login`` is an ERROR (RabbitMQ refuses such a
    ``user-id``), and the broker's facts are dropped, unless the sender is a ``relay`` (a
    shovel forwarding what another broker said, its user tagged ``impersonator``); with
    ``stamp`` the broker sets both identity headers to ``login`` itself (ActiveMQ's
    ``populateJMSXUserID``; none without a login).  ``headers`` itself when nothing changes.
    """
    if not stamp and (relay or SENDER_HEADERS.isdisjoint(headers)):
        return headers
    if not relay:
        for name in IDENTITY_HEADERS:
            value = headers.get(name)
            if value is not None and value != login:
                raise ClientError(f"{name} {value!r} is not the login of this connection "
                                  f"({'none' if login is None else repr(login)}): the broker's header, not the sender's")
        headers = headers_without(headers, BROKER_FACTS)
    else:
        headers = dict(headers)
    if stamp:
        for name in IDENTITY_HEADERS:
            if login is None:
                headers.pop(name, None)
            elif not relay or name not in headers:
                headers[name] = login
    return headers


def user_headers(headers: dict[str, str]) -> dict[str, str]:
    """The SEND headers a MESSAGE forwards: all but the broker's own (``BROKER_HEADERS``).  A
    SEND without ``content-length`` is a text message by ActiveMQ's convention: it is kept as
    ``amq-msg-type:text`` (ActiveMQ's own header for it), unless the SEND named its type itself,
    so its MESSAGE goes without ``content-length`` too (delivery.py; docs/decisions/text-messages.md)."""
    forwarded = headers_without(headers, BROKER_HEADERS)
    if "content-length" not in headers and MESSAGE_TYPE not in headers:
        forwarded[MESSAGE_TYPE] = TEXT
    return forwarded


def with_facts(headers: dict[str, str], priority: int, expires: int | None) -> dict[str, str]:
    """A topic message's headers as they travel to the other brokers sharing the store: with its
    priority and expiry, which a MESSAGE writes from the message's facts (``without_facts``)."""
    if priority == DEFAULT_PRIORITY and expires is None:
        return headers
    facts = {**headers, "priority": str(priority)}
    if expires is not None:
        facts[EXPIRES] = str(expires)
    return facts


def without_facts(headers: dict[str, str]) -> tuple[dict[str, str], int, int | None]:
    """``with_facts`` undone: the headers, priority and expiry of a topic message from another
    broker (which validated them; anything else is taken as absent)."""
    priority, expires = headers.get("priority"), headers.get(EXPIRES)
    if priority is None and expires is None:
        return headers, DEFAULT_PRIORITY, None
    rest = {name: value for name, value in headers.items() if name != "priority" and name != EXPIRES}
    return (rest, int(priority) if priority is not None and priority.isdecimal() else DEFAULT_PRIORITY,
            int(expires) if expires is not None and expires.isdecimal() else None)


SendOptions = tuple[int, float | None, int | None, int | None]
#: Relative times (ttl, delay) seen lately, parsed: a producer usually sends the same few values,
#: and int() with its checks is most of what reading a TTL costs.  Bounded: cleared when full.
_RELATIVE: dict[str, int] = {}
_RELATIVE_MAX = 256


def send_options(headers: dict[str, str], now_ms: int) -> SendOptions:
    """Priority, ack timeout, expiry and due time (epoch ms, None: none) of a SEND, validated."""
    value = headers.get("priority")
    if value is None:
        priority = DEFAULT_PRIORITY
    else:
        if not (len(value) == 1 and "0" <= value <= "9"):  # isdigit() admits non-ASCII digits
            raise ClientError(f"priority must be an integer from 0 to 9, not {quoted(value)}")
        priority = int(value)
    ack_timeout = seconds(headers, "ack-timeout") if "ack-timeout" in headers else None  # a call less per SEND
    if LIFECYCLE_HEADERS.isdisjoint(headers):  # (the usual SEND: one test)
        return priority, ack_timeout, None, None
    expires = None
    if (value := headers.get(TTL)) is not None:
        expires = now_ms + _relative(TTL, value)
    if (value := headers.get(EXPIRES)) is not None and value != "0":  # 0: never (JMS)
        absolute = _integer(EXPIRES, value)
        if expires is None or absolute < expires:
            expires = absolute
    if TIMING_HEADERS.isdisjoint(headers):  # an expiry alone: one test for the eight waiting headers
        return priority, ack_timeout, expires, None
    due = _due(headers, now_ms)
    if RECURRING.isdisjoint(headers):
        return priority, ack_timeout, expires, due
    return priority, ack_timeout, expires, first_firing(headers, now_ms, due)


def _due(headers: dict[str, str], now_ms: int) -> int | None:
    """When a delayed message is ready: the latest its headers say (None: it is ready now)."""
    due = None
    for name, relative in DUE:
        if (value := headers.get(name)) is not None:
            at = now_ms + _relative(name, value) if relative else _integer(name, value)
            if due is None or at > due:
                due = at
    return due if due is not None and due > now_ms else None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as its SEND's headers give it, validated (schedules.py fires it)."""

    delay: int  # ms: with CRON and REPEAT, from each cron minute to the series' first copy
    period: int  # ms between two copies of a series
    repeat: int  # copies of a series after its first (FOREVER: no end)
    cron: Cron | None


def read_schedule(headers: dict[str, str]) -> Schedule:
    """The schedule ``headers`` describe; ClientError naming the header that is wrong."""
    period = non_negative(headers, PERIOD, " number of milliseconds", MAX_MS) or 0
    delay = non_negative(headers, AMQ_SCHEDULED_DELAY, " number of milliseconds", MAX_MS) or 0
    repeat = 0
    if (value := headers.get(REPEAT)) == str(FOREVER):
        repeat = FOREVER
    elif value is not None:
        if not (value.isascii() and value.isdigit()) or len(value) > 10 or int(value) > MAX_REPEAT:
            raise ClientError(f"{REPEAT} must be an integer from 0 to {MAX_REPEAT}, or -1 (for ever), "
                              f"not {quoted(value)}")
        repeat = int(value)
    if repeat and not period:  # the copies would all be due at once: a loop, not a schedule
        raise ClientError(f"{PERIOD} must be from 1 to {MAX_MS} when {REPEAT} is not 0, "
                          f"not {quoted(headers.get(PERIOD, '0'))}")
    cron = None
    if (text := headers.get(CRON)) is not None:
        try:
            cron = parse_cron(text)
        except CronError as e:
            raise ClientError(f"{CRON} {quoted(text)}: {e}") from None
        if repeat == FOREVER:
            raise ClientError(f"{REPEAT} must be an integer from 0 to {MAX_REPEAT} with {CRON} "
                              "(the copies at each cron minute), not -1")
    return Schedule(delay, period, repeat, cron)


def first_firing(headers: dict[str, str], now_ms: int, due: int | None) -> int:
    """When a new schedule fires first: at ``due`` (what its delay headers say, None: now), or
    with CRON at the first cron minute after now (plus DELAY when it repeats)."""
    schedule = read_schedule(headers)
    if schedule.cron is not None:
        return next_fire(schedule.cron, now_ms) + (schedule.delay if schedule.repeat else 0)
    return now_ms if due is None else due


def _relative(name: str, value: str) -> int:
    """A ttl or delay in milliseconds, parsed once per distinct value (``_RELATIVE``)."""
    parsed = _RELATIVE.get(value)
    if parsed is None:
        parsed = _integer(name, value)
        if len(_RELATIVE) >= _RELATIVE_MAX:
            _RELATIVE.clear()
        _RELATIVE[value] = parsed
    return parsed


def non_negative(headers: dict[str, str], name: str, unit: str = "", maximum: int = MAX_COUNT) -> int | None:
    """A header holding an integer from 0 to ``maximum`` (None when absent); ERROR naming it
    otherwise."""
    value = headers.get(name)
    return None if value is None else _integer(name, value, unit, maximum)


def _integer(name: str, value: str, unit: str = " number of milliseconds", maximum: int = MAX_MS) -> int:
    # int() would take "+5", " 5" and "5_0"; the length test spares int() a 4,000-digit value.
    if not (value.isascii() and value.isdigit()) or len(value) > 19 or int(value) > maximum:
        raise ClientError(f"{name} must be an integer{unit} from 0 to {maximum}, not {quoted(value)}")
    return int(value)


def quoted(value: str) -> str:
    """A refused value as an ERROR quotes it: a huge one cut short (an ERROR stays small)."""
    return repr(value) if len(value) <= 40 else f"{value[:40]!r}... ({len(value)} characters)"


def seconds(headers: dict[str, str], name: str) -> float | None:
    """A header holding a finite, non-negative number of seconds (None when absent)."""
    value = headers.get(name)
    if value is None:
        return None
    try:
        result = float(value)
    except ValueError:
        raise ClientError(f"{name} must be a number of seconds, not {quoted(value)}") from None
    if not 0 <= result <= MAX_SECONDS:  # NaN fails both
        raise ClientError(f"{name} must be a number of seconds from 0 to {MAX_SECONDS:.0f}, not {quoted(value)}")
    return result


def flag(headers: dict[str, str], name: str, default: bool) -> bool:
    """A boolean header, case-insensitive (stomp.py sends ``requeue:False``); ERROR otherwise."""
    value = headers.get(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ClientError(f"{name} must be true or false, not {quoted(value)}")
