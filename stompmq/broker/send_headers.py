"""Reading client headers: what a SEND forwards, its priority, ack timeouts, boolean flags."""

from __future__ import annotations

from .delivery import BROKER_HEADERS
from .errors import ClientError

#: Priority of a SEND that names none (the JMS convention).
DEFAULT_PRIORITY = 4


def user_headers(headers: dict[str, str]) -> dict[str, str]:
    """The SEND headers a MESSAGE forwards (a SEND usually has few, so strip rather than filter)."""
    user = headers.copy()
    for name in BROKER_HEADERS.intersection(headers):
        del user[name]
    return user


def send_options(headers: dict[str, str]) -> tuple[int, float | None]:
    """Priority and ack timeout of a SEND, validated."""
    value = headers.get("priority")
    if value is None:
        priority = DEFAULT_PRIORITY
    else:
        if not (len(value) == 1 and "0" <= value <= "9"):  # isdigit() admits non-ASCII digits
            raise ClientError(f"priority must be an integer from 0 to 9, not {value!r}")
        priority = int(value)
    return priority, seconds(headers, "ack-timeout")


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
