"""A definitions file (TOML or JSON) declaring exchanges, queues and bindings at start.

The format mirrors the /control verbs, so anything a file declares could also
be declared over STOMP::

    [[exchanges]]
    name = "orders"
    type = "consistent-hash"          # the only type
    hash-header = "customer-id"       # optional; or hash-property = "message-id"

    [[queues]]
    name = "q1"                       # queues are created on first use; listing them is allowed

    [[bindings]]
    exchange = "orders"
    queue = "/queue/q1"
    weight = 1

Applying a file is idempotent: an exchange already stored with the same options
is left alone, a binding's weight is set to the file's.  Anything invalid stops
the broker at start with a message naming the entry.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .destinations import Kind, parse_destination
from .errors import ClientError
from .exchanges import declaration_options, parse_weight

if TYPE_CHECKING:
    from .core import Broker


class DefinitionsError(ValueError):
    """The definitions file is unreadable or declares something invalid."""


def load_definitions(path: str) -> dict[str, Any]:
    file = Path(path)
    try:
        text = file.read_bytes()
        data = json.loads(text) if file.suffix == ".json" else tomllib.loads(text.decode())
    except (OSError, ValueError) as e:
        raise DefinitionsError(f"cannot read definitions file {path}: {e}") from None
    if not isinstance(data, dict) or set(data) - {"exchanges", "queues", "bindings"}:
        raise DefinitionsError(f"{path}: expected only 'exchanges', 'queues' and 'bindings' lists")
    return data


def apply_definitions(broker: Broker, data: dict[str, Any], source: str) -> None:
    try:
        for i, entry in enumerate(data.get("exchanges", [])):
            where = f"{source}: exchanges[{i}]"
            name = _field(entry, "name", where)
            options = {k: str(v) for k, v in entry.items() if k != "name"}
            broker.declare_exchange(name, declaration_options(options))
        for i, entry in enumerate(data.get("queues", [])):
            _queue_name(_field(entry, "name", f"{source}: queues[{i}]"))
        for i, entry in enumerate(data.get("bindings", [])):
            where = f"{source}: bindings[{i}]"
            exchange = _field(entry, "exchange", where)
            if exchange not in broker.exchanges:
                raise ClientError(f"no exchange named {exchange!r}")
            queue = _queue_name(_field(entry, "queue", where))
            broker.bind(exchange, queue, parse_weight(str(entry.get("weight", 1))))
    except ClientError as e:
        raise DefinitionsError(f"{source}: {e.message}") from None


def _field(entry: Any, name: str, where: str) -> str:
    if not isinstance(entry, dict) or not isinstance(entry.get(name), str):
        raise DefinitionsError(f"{where}: needs a string '{name}'")
    return entry[name]


def _queue_name(value: str) -> str:
    dest = parse_destination(value if value.startswith("/") else "/queue/" + value)
    if dest.kind is not Kind.QUEUE:
        raise ClientError(f"only queues can be declared or bound, not {value!r}")
    return dest.name
