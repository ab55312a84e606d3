"""Reading client headers: what a SEND forwards, its priority, ack timeouts, expiry and delay,
boolean flags."""

from __future__ import annotations

from .delivery import BROKER_HEADERS
from .errors import ClientError

#: Priority of a SEND that names none (the JMS convention).
DEFAULT_PRIORITY = 4
#: SEND headers that give a message an expiry or a delay (milliseconds): absolute epoch times
#: (``expires`` as JMS/ActiveMQ, ``deliver-at``) or from now (``ttl``, ``delay``, ActiveMQ's
#: ``AMQ_SCHEDULED_DELAY``).  ``expires:0`` means never, as in JMS.
EXPIRES, TTL, DELAY, DELIVER_AT, AMQ_SCHEDULED_DELAY = "expires", "ttl", "delay", "deliver-at", "AMQ_SCHEDULED_DELAY"
LIFECYCLE_HEADERS = frozenset({EXPIRES, TTL, DELAY, DELIVER_AT, AMQ_SCHEDULED_DELAY})


def user_headers(headers: dict[str, str]) -> dict[str, str]:
    """The SEND headers a MESSAGE forwards (a SEND usually has few, so strip rather than filter)."""
    user = headers.copy()
    for name in BROKER_HEADERS.intersection(headers):
        del user[name]
    return user


SendOptions = tuple[int, float | None, int | None, int | None]


def send_options(headers: dict[str, str], now_ms: int) -> SendOptions:
    """Priority, ack timeout, expiry and due time (epoch ms, None: none) of a SEND, validated."""
    value = headers.get("priority")
    if value is None:
        priority = DEFAULT_PRIORITY
    else:
        if not (len(value) == 1 and "0" <= value <= "9"):  # isdigit() admits non-ASCII digits
            raise ClientError(f"priority must be an integer from 0 to 9, not {value!r}")
        priority = int(value)
    if LIFECYCLE_HEADERS.isdisjoint(headers):
        return priority, seconds(headers, "ack-timeout"), None, None
    return (priority, seconds(headers, "ack-timeout"), *_lifecycle(headers, now_ms))


def _lifecycle(headers: dict[str, str], now_ms: int) -> tuple[int | None, int | None]:
    """When the message expires and when it is due (the soonest expiry, the latest due time)."""
    expires = _milliseconds(headers, EXPIRES) or None  # 0: never (JMS)
    ttl = _milliseconds(headers, TTL)
    if ttl is not None and (expires is None or now_ms + ttl < expires):
        expires = now_ms + ttl
    due = None
    for name, base in ((DELAY, now_ms), (AMQ_SCHEDULED_DELAY, now_ms), (DELIVER_AT, 0)):
        value = _milliseconds(headers, name)
        if value is not None and (due is None or base + value > due):
            due = base + value
    return expires, due if due is not None and due > now_ms else None


def non_negative(headers: dict[str, str], name: str, unit: str = "") -> int | None:
    """A header holding an integer >= 0 (None when absent); ERROR naming it otherwise."""
    value = headers.get(name)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()):  # int() would take "+5", " 5" and "5_0"
        raise ClientError(f"{name} must be an integer{unit} >= 0, not {value!r}")
    return int(value)


def _milliseconds(headers: dict[str, str], name: str) -> int | None:
    return non_negative(headers, name, " number of milliseconds")


def seconds(headers: dict[str, str], name: str) -> float | None:
    """A header holding a finite, non-negative number of seconds (None when absent)."""
    value = headers.get(name)
    if value is None:
        return None
    try:
        result = float(value)
    except ValueError:
        raise ClientError(f"{name} must be a number of seconds, not {value!r}") from None
    if not result >= 0 or result == float("inf"):
        raise ClientError(f"{name} must be a finite number of seconds >= 0, not {value!r}")
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
    raise ClientError(f"{name} must be true or false, not {value!r}")
