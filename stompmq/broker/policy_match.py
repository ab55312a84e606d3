"""Policies, RabbitMQ's model: settings given to every queue or stream whose name matches a pattern.

A policy has a name, a pattern (a regular expression searched in the resource's name, as
RabbitMQ's), ``apply-to`` (``queues``, ``streams``, ``exchanges`` or ``all``), a priority and
a definition: queue settings (queue_settings.py's keys) and stream retention (``max-age``
seconds and ``max-length-bytes``, RabbitMQ's stream keys; ``KEYS_OF`` says which key a kind
takes, and ``all`` gives each kind the keys it has).  Of the policies matching a resource the
one of highest priority applies (a tie goes to the lowest name, so every broker picks the same);
its keys fill in what the declaration leaves unset.  An **operator policy** caps: of its
numeric keys the smaller value wins over the declaration's or the policy's (the stricter).
Exchanges have no setting a policy could give (RabbitMQ's one, ``alternate-exchange``, has no
counterpart here), so a policy for exchanges alone is refused rather than stored unused.

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
    ACK_TIMEOUT,
    DEAD_LETTER,
    DELIVERY_LIMIT,
    EXPIRES,
    EXPIRES_WHEN_EMPTY,
    MAX_LENGTH,
    MAX_LENGTH_BYTES,
    MAX_PRIORITY,
    MESSAGE_TTL,
    OVERFLOW,
    SINGLE_ACTIVE,
    QueueSettings,
)
from .send_headers import seconds

#: What a policy may apply to (RabbitMQ's ``apply-to``).
QUEUES, STREAMS, EXCHANGES, ALL = "queues", "streams", "exchanges", "all"
APPLY_TO = (QUEUES, STREAMS, EXCHANGES, ALL)
#: A stream's retention by age, in seconds (RabbitMQ's stream key, whose "7D" forms are seconds here).
MAX_AGE = "max-age"
#: The keys a policy's definition may have.
POLICY_KEYS = (MESSAGE_TTL, EXPIRES, EXPIRES_WHEN_EMPTY, MAX_LENGTH, MAX_LENGTH_BYTES, OVERFLOW, DEAD_LETTER,
               DELIVERY_LIMIT, ACK_TIMEOUT, MAX_PRIORITY, MAX_AGE)
#: The keys each kind of resource takes (a stream's ``max-length-bytes`` is its ``max-bytes``).
KEYS_OF = {QUEUES: tuple(key for key in POLICY_KEYS if key != MAX_AGE), STREAMS: (MAX_AGE, MAX_LENGTH_BYTES)}
#: The keys an operator policy may cap: the numeric ones, where "stricter" means smaller.
CAPPED_KEYS = (MESSAGE_TTL, EXPIRES, MAX_LENGTH, MAX_LENGTH_BYTES, DELIVERY_LIMIT, ACK_TIMEOUT, MAX_PRIORITY, MAX_AGE)
#: Where an effective setting came from (``DEFAULT``: the broker's flag, for streams' retention).
DECLARATION, POLICY, OPERATOR_POLICY, DEFAULT = "declaration", "policy", "operator-policy", "default"
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
        if apply_to == EXCHANGES:
            raise ClientError("exchanges have no settings a policy can give (RabbitMQ's alternate-exchange has no "
                              "counterpart here): apply-to queues, streams or all")
        priority = body.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool) or not -(10**9) <= priority <= 10**9:
            raise ClientError(f"priority must be a whole number, not {priority!r}")
        definition = body.get("definition")
        if not isinstance(definition, Mapping) or not definition:
            raise ClientError("definition must be an object of at least one setting, e.g. {\"message-ttl\": 60000}")
        allowed = CAPPED_KEYS if operator else POLICY_KEYS
        unknown_key(definition, allowed, "an operator policy key (they cap numbers)" if operator else "a policy key")
        if apply_to != ALL:
            other = next(kind for kind in KEYS_OF if kind != apply_to)
            wrong = sorted(key for key in definition if key not in KEYS_OF[apply_to])  # the other kind's
            if wrong:
                raise ClientError(f"{', '.join(wrong)}: settings of {other}, not of {apply_to} (whose keys are "
                                  f"{', '.join(KEYS_OF[apply_to])}); apply-to all gives each kind its own")
        return cls(name, pattern, apply_to, priority, typed(definition), operator)

    def matches(self, name: str, kind: str = QUEUES) -> bool:
        """Does the policy apply to the queue (or stream, ``kind``) ``name``?"""
        return self.apply_to in (kind, ALL) and re.search(self.pattern, name) is not None

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
    headers = {key: header_text(value) for key, value in definition.items()}
    settings = QueueSettings.parse(headers)
    options = settings.options()
    result: dict[str, Any] = {}
    for key in definition:
        text = options.get(key)
        if key in (ACK_TIMEOUT, MAX_AGE):
            value = seconds(headers, key) or 0.0
            result[key] = int(value) if value.is_integer() else value
        elif key in (DEAD_LETTER, EXPIRES_WHEN_EMPTY, SINGLE_ACTIVE):
            result[key] = text == "true"
        elif key == OVERFLOW:
            result[key] = settings.overflow
        elif text is not None:
            result[key] = int(text)
    return result


def header_text(value: Any) -> str:
    """A JSON/TOML value as a header would carry it (``true``, not ``True``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def winner(policies: Iterable[Policy], name: str, kind: str = QUEUES) -> Policy | None:
    """The policy that applies to the queue (or stream) ``name``: the highest priority among
    those matching, a tie to the lowest name."""
    best: Policy | None = None
    for policy in policies:
        if policy.matches(name, kind) and (
                best is None or (-policy.priority, policy.name) < (-best.priority, best.name)):
            best = policy
    return best


@dataclass(frozen=True, slots=True)
class Effective:
    """A queue's (or stream's) settings and where each came from (``DECLARATION``, ``POLICY``,
    ``OPERATOR_POLICY``, the latter two with the policy's name, or a stream's ``DEFAULT``)."""

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


def resolve(name: str, declared: Mapping[str, str], policies: Iterable[Policy],
            operator_policies: Iterable[Policy], kind: str = QUEUES,
            defaults: Mapping[str, str] | None = None) -> Effective:
    """The settings of queue (or stream, ``kind``) ``name``: its declaration's
    (``QueueSettings.options``), what the winning policy adds (over ``defaults``, a stream's
    retention flags), then capped by the winning operator policy.  A stream's 0 is "keep
    everything", so any cap is stricter."""
    keys = KEYS_OF[kind]
    options = {**(defaults or {}), **declared}
    sources: dict[str, tuple[str, str | None]] = {key: (DECLARATION if key in declared else DEFAULT, None)
                                                  for key in options}
    policy = winner(policies, name, kind)
    if policy is not None:
        for key, value in policy.definition.items():
            if key in keys and key not in declared:
                options[key] = header_text(value)
                sources[key] = (POLICY, policy.name)
    cap = winner(operator_policies, name, kind)
    if cap is not None:
        for key, value in cap.definition.items():
            text = header_text(value)
            unbounded = key not in options or (kind == STREAMS and options[key] == "0")
            if key in keys and (unbounded or float(text) < float(options[key])):
                options[key] = text
                sources[key] = (OPERATOR_POLICY, cap.name)
    return Effective(options, sources)
