"""Policies, RabbitMQ's model: settings given to every queue whose name matches a pattern.

A policy has a name, a pattern (a regular expression searched in the queue's name, as
RabbitMQ's), ``apply-to`` (``queues``, ``streams``, ``exchanges`` or ``all``), a priority and
a definition: queue settings (queue_settings.py's keys).  Of the policies matching a queue the
one of highest priority applies (a tie goes to the lowest name, so every broker picks the same);
its keys fill in what the queue's declaration leaves unset.  An **operator policy** caps: of its
numeric keys the smaller value wins over the declaration's or the policy's (the stricter).

Everything here is pure: ``resolve`` is what a queue's settings are and where each came from,
for the engine (bounds.py) and for whoever shows them (the API, ``/control``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ClientError
from .queue_settings import (
    ACK_TIMEOUT, DEAD_LETTER, DELIVERY_LIMIT, EXPIRES, EXPIRES_WHEN_EMPTY, MAX_LENGTH, MAX_LENGTH_BYTES,
    MAX_PRIORITY, MESSAGE_TTL, OVERFLOW, SINGLE_ACTIVE, QueueSettings,
)

#: What a policy may apply to (RabbitMQ's ``apply-to``); only queues have settings today.
APPLY_TO = ("queues", "streams", "exchanges", "all")
#: The keys a policy's definition may have.
POLICY_KEYS = (MESSAGE_TTL, EXPIRES, EXPIRES_WHEN_EMPTY, MAX_LENGTH, MAX_LENGTH_BYTES, OVERFLOW, DEAD_LETTER,
               DELIVERY_LIMIT, ACK_TIMEOUT, MAX_PRIORITY)
#: The keys an operator policy may cap: the numeric ones, where "stricter" means smaller.
CAPPED_KEYS = (MESSAGE_TTL, EXPIRES, MAX_LENGTH, MAX_LENGTH_BYTES, DELIVERY_LIMIT, ACK_TIMEOUT, MAX_PRIORITY)
#: Where an effective setting came from.
DECLARATION, POLICY, OPERATOR_POLICY = "declaration", "policy", "operator-policy"
#: The fields of a stored (and exported) policy.
FIELDS = ("name", "pattern", "apply-to", "priority", "definition")
#: The longest pattern (a pattern is searched in every queue name a policy change looks at).
MAX_PATTERN = 255


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    pattern: str
    apply_to: str
    priority: int
    definition: Mapping[str, Any]  # typed values: int, bool, str (overflow), float (ack-timeout)
    operator: bool = False

    @classmethod
    def parse(cls, name: str, body: Mapping[str, Any], operator: bool = False) -> Policy:
        """The policy ``body`` describes (``FIELDS`` but the name); ClientError naming what is wrong."""
        if not name or "/" in name or len(name) > 255:
            raise ClientError(f"a policy name must be 1-255 characters without '/', not {name!r}")
        unknown_key(body, FIELDS[1:], "a policy field")
        pattern = body.get("pattern")
        if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN:
            raise ClientError(f"pattern must be a regular expression of at most {MAX_PATTERN} characters")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ClientError(f"pattern {pattern!r} is not a regular expression: {e}") from None
        apply_to = body.get("apply-to", "all")
        if apply_to not in APPLY_TO:
            raise ClientError(f"apply-to must be one of {', '.join(APPLY_TO)}, not {apply_to!r}")
        priority = body.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool) or not -(10**9) <= priority <= 10**9:
            raise ClientError(f"priority must be a whole number, not {priority!r}")
        definition = body.get("definition")
        if not isinstance(definition, Mapping) or not definition:
            raise ClientError("definition must be an object of at least one setting, e.g. {\"message-ttl\": 60000}")
        allowed = CAPPED_KEYS if operator else POLICY_KEYS
        unknown_key(definition, allowed, "an operator policy key (they cap numbers)" if operator else "a policy key")
        if apply_to in ("streams", "exchanges"):
            raise ClientError(f"{', '.join(sorted(definition))}: queue settings, which apply to queues, not {apply_to}")
        return cls(name, pattern, apply_to, priority, typed(definition), operator)

    def matches(self, queue: str) -> bool:
        return self.apply_to in ("queues", "all") and re.search(self.pattern, queue) is not None

    def record(self) -> dict[str, Any]:
        """The policy as stored, exported and shown (``parse`` reads it back)."""
        return {"name": self.name, "pattern": self.pattern, "apply-to": self.apply_to, "priority": self.priority,
                "definition": dict(sorted(self.definition.items()))}


def unknown_key(entry: Mapping[str, Any], allowed: Iterable[str], what: str) -> None:
    """ClientError for the first key of ``entry`` not in ``allowed``, naming the nearest one."""
    allowed = tuple(allowed)
    for key in sorted(entry):
        if key not in allowed:
            near = difflib.get_close_matches(key, allowed, 1, 0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ClientError(f"unknown key {key!r}{hint}: {what} is one of {', '.join(allowed)}")


def typed(definition: Mapping[str, Any]) -> dict[str, Any]:
    """A definition checked (as a declaration would be) and given its values' types: numbers as
    numbers, flags as booleans, whichever way they were written (``"60000"`` or ``60000``)."""
    settings = QueueSettings.parse({key: header_text(value) for key, value in definition.items()})
    options = settings.options()
    result: dict[str, Any] = {}
    for key in definition:
        text = options.get(key)
        if key in (DEAD_LETTER, EXPIRES_WHEN_EMPTY, SINGLE_ACTIVE):
            result[key] = text == "true"
        elif key == OVERFLOW:
            result[key] = settings.overflow
        elif key == ACK_TIMEOUT:
            value = float(text) if text is not None else 0.0
            result[key] = int(value) if value.is_integer() else value
        elif text is not None:
            result[key] = int(text)
    return result


def header_text(value: Any) -> str:
    """A JSON/TOML value as a header would carry it (``true``, not ``True``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def winner(policies: Iterable[Policy], queue: str) -> Policy | None:
    """The policy that applies to ``queue``: the highest priority among those matching, a tie
    to the lowest name."""
    best: Policy | None = None
    for policy in policies:
        if policy.matches(queue) and (
                best is None or (-policy.priority, policy.name) < (-best.priority, best.name)):
            best = policy
    return best


@dataclass(frozen=True, slots=True)
class Effective:
    """A queue's settings and where each came from (``DECLARATION``, ``POLICY`` or
    ``OPERATOR_POLICY``, the latter two with the policy's name)."""

    options: dict[str, str]  # as a declaration would give them
    sources: dict[str, tuple[str, str | None]]

    def settings(self) -> QueueSettings:
        return QueueSettings.parse(self.options)

    def describe(self) -> dict[str, dict[str, Any]]:
        """``{key: {"value": V, "source": S, "policy"?: NAME}}``, values typed."""
        values = typed(self.options)
        shown: dict[str, dict[str, Any]] = {}
        for key, (source, name) in sorted(self.sources.items()):
            shown[key] = {"value": values[key], "source": source, **({"policy": name} if name else {})}
        return shown


def resolve(queue: str, declared: Mapping[str, str], policies: Iterable[Policy],
            operator_policies: Iterable[Policy]) -> Effective:
    """Queue ``queue``'s settings: its declaration's (``QueueSettings.options``), what the winning
    policy adds, then capped by the winning operator policy."""
    options = dict(declared)
    sources: dict[str, tuple[str, str | None]] = {key: (DECLARATION, None) for key in options}
    policy = winner(policies, queue)
    if policy is not None:
        for key, value in policy.definition.items():
            if key not in options:
                options[key] = header_text(value)
                sources[key] = (POLICY, policy.name)
    cap = winner(operator_policies, queue)
    if cap is not None:
        for key, value in cap.definition.items():
            text = header_text(value)
            if key not in options or float(text) < float(options[key]):
                options[key] = text
                sources[key] = (OPERATOR_POLICY, cap.name)
    return Effective(options, sources)
