"""A definitions file (TOML or JSON) declaring exchanges, queues and bindings at start.

The format mirrors the /control verbs, so anything a file declares could also
be declared over STOMP::

    [[exchanges]]
    name = "orders"
    type = "consistent-hash"          # the only type
    hash-header = "customer-id"       # optional; or hash-property = "message-id"

    [[queues]]
    name = "q1"                       # queues are created on first use; listing them is allowed
    message-ttl = 60000               # optional: the policy keys of /control/declare/queue
    max-length = 10000                # (message-ttl, max-length, max-length-bytes, overflow,
    overflow = "drop-head"            #  dead-letter); see queue_settings.py

    [[bindings]]
    exchange = "orders"
    queue = "/queue/q1"
    weight = 1

Other vhosts get their own lists in a ``[[vhosts]]`` entry (the vhost is declared if it is
new; the top-level lists are the default vhost's)::

    [[vhosts]]
    name = "staging"
    [[vhosts.exchanges]]
    name = "orders"
    type = "consistent-hash"

Shovels the broker runs (server/shovels.py) are top-level entries: ``name``, ``from``, ``to``
and optionally ``prefetch`` (the fields of ``PUT /api/shovels/{name}``)::

    [[shovels]]
    name = "from-old"
    from = "stomp://guest:guest@old-host:61613/queue/orders"
    to = "stomp://127.0.0.1:61613/queue/orders"

Applying a file is idempotent: an exchange already stored with the same options
is left alone, a binding's weight is set to the file's.  Anything invalid stops
the broker at start with a message naming the entry.
"""

from __future__ import annotations

from typing import Any

from ..vhost_names import DEFAULT_VHOST, vhost_name_error
from .destinations import Kind, parse_destination
from .errors import ClientError
from .exchanges import declaration_options, parse_weight
from .queue_settings import SETTING_KEYS, QueueSettings
from .routing import Router


class DefinitionsError(ValueError):
    """The definitions file is unreadable or declares something invalid."""


def vhost_definitions(data: dict[str, Any], path: str) -> dict[str, tuple[dict[str, Any], str]]:
    """The file's contents per vhost, each with the name errors should give its source."""
    parts = {DEFAULT_VHOST: ({k: v for k, v in data.items() if k not in ("vhosts", "shovels")}, path)}
    entries = data.get("vhosts", [])
    if not isinstance(entries, list):
        raise DefinitionsError(f"{path}: 'vhosts' must be a list of tables")
    for i, entry in enumerate(entries):
        where = f"{path}: vhosts[{i}]"
        name = _field(entry, "name", where)
        _known_keys(entry, ("name", "exchanges", "queues", "bindings"), where)
        error = vhost_name_error(name)
        if error is not None or name in parts:
            raise DefinitionsError(f"{where}: {error or f'vhost {name!r} appears twice'}")
        parts[name] = ({k: v for k, v in entry.items() if k != "name"}, where)
    return parts


def apply_definitions(router: Router, data: dict[str, Any], source: str) -> None:
    """Check the whole file, then apply it: a file with any invalid entry changes nothing."""
    where = source  # the entry being checked, named in any error
    declared: dict[str, dict[str, str]] = {}
    policies: dict[str, QueueSettings] = {}
    binds: list[tuple[str, str, int]] = []
    try:
        for i, entry in enumerate(data.get("exchanges", [])):
            where = f"{source}: exchanges[{i}]"
            name = _field(entry, "name", where)
            _known_keys(entry, EXCHANGE_KEYS, where)
            if not name or "/" in name:
                raise ClientError(f"exchange name {name!r} must be non-empty and must not contain '/'")
            options = declaration_options({k: str(v) for k, v in entry.items() if k != "name"})
            existing = router.exchanges.get(name)
            previous = declared.get(name, existing.options if existing is not None else None)
            if previous is not None and previous != options:
                raise ClientError(f"exchange {name!r} exists with other options: {previous}")
            declared[name] = options
        for i, entry in enumerate(data.get("queues", [])):
            where = f"{source}: queues[{i}]"
            queue = _queue_name(_field(entry, "name", where))
            _known_keys(entry, ("name", *SETTING_KEYS), where)
            if set(entry) & set(SETTING_KEYS):
                policies[queue] = QueueSettings.parse({k: _text(v) for k, v in entry.items() if k != "name"})
        for i, entry in enumerate(data.get("bindings", [])):
            where = f"{source}: bindings[{i}]"
            exchange = _field(entry, "exchange", where)
            _known_keys(entry, ("exchange", "queue", "weight"), where)
            if exchange not in router.exchanges and exchange not in declared:
                raise ClientError(f"no exchange named {exchange!r}")
            queue = _queue_name(_field(entry, "queue", where))
            binds.append((exchange, queue, parse_weight(str(entry.get("weight", 1)))))
    except ClientError as e:
        raise DefinitionsError(f"{where}: {e.message}") from None
    try:
        for name, options in declared.items():
            router.declare_exchange(name, options)
        for exchange, queue, weight in binds:
            router.bind(exchange, queue, weight)
        for queue, policy in policies.items():
            router.dispatcher.declare(queue, policy)
    except ClientError as e:  # a binding to a subscription's private queue, say
        raise DefinitionsError(f"{source}: {e.message}") from None


#: Keys an exchange entry may have: its name and the declaration options of /control/declare.
EXCHANGE_KEYS = ("name", "type", "hash-header", "hash-property", "on-missing", "on-unroutable")


def _known_keys(entry: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    """A misspelt key would otherwise be ignored silently (a binding of weight 1, say)."""
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise DefinitionsError(f"{where}: unknown key {unknown[0]!r}: use {', '.join(allowed)}")


def _text(value: Any) -> str:
    """A TOML/JSON value as a header would carry it (``true``, not ``True``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _field(entry: Any, name: str, where: str) -> str:
    if not isinstance(entry, dict) or not isinstance(entry.get(name), str):
        raise DefinitionsError(f"{where}: needs a string '{name}'")
    value: str = entry[name]
    return value


def _queue_name(value: str) -> str:
    dest = parse_destination(value if value.startswith("/") else "/queue/" + value)
    if dest.kind is not Kind.QUEUE:
        raise ClientError(f"only queues can be declared or bound, not {value!r}")
    return dest.name
