"""What every SQL backend reads back when it opens, written once for all of them.

The declarations (vhosts, exchanges, bindings, queue options, shovels) and the streams'
idempotent producers and consumer groups are the same rows of ``schema.py``'s tables on
every database, so their statements live here, portable and without parameters: both
drivers (``sqlite3``, psycopg 3) run them through ``execute`` alone.  What stays in a
backend is what is genuinely its own: SQLite's crash requeue and its streams' offsets (the
two ends of the entries' key), PostgreSQL's leases and its streams' counter rows.
Names come back as store keys (``vhost_space(vhost) + name``, see ``storage/base.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from stompmq.storage.records import BindingRecord, ExchangeRecord, QueueRecord
from stompmq.vhost_names import vhost_space
from stompmq.storage.rows import POLICY_PREFIX, SHOVEL_PREFIX
from stompmq.storage.jsontext import loads

VHOSTS_SQL = "SELECT name FROM vhosts ORDER BY name"
EXCHANGES_SQL = "SELECT vhost, name, type, options FROM exchanges ORDER BY vhost, name"
BINDINGS_SQL = (
    "SELECT vhost, exchange, queue, weight, routing_key FROM bindings ORDER BY vhost, exchange, queue, routing_key"
)
QUEUES_SQL = "SELECT vhost, name, options FROM queues WHERE options IS NOT NULL ORDER BY vhost, name"
# A literal pattern, not a parameter: the one statement then runs unchanged on both drivers.
assert "'" not in SHOVEL_PREFIX and "%" not in SHOVEL_PREFIX and "_" not in SHOVEL_PREFIX
SHOVELS_SQL = f"SELECT name, value FROM broker_meta WHERE name LIKE '{SHOVEL_PREFIX}%' ORDER BY name"
assert "'" not in POLICY_PREFIX and "%" not in POLICY_PREFIX and "_" not in POLICY_PREFIX
POLICIES_SQL = f"SELECT value FROM broker_meta WHERE name LIKE '{POLICY_PREFIX}%' ORDER BY name"
PRODUCERS_SQL = "SELECT stream_id, producer, seq FROM stream_producers"
GROUPS_SQL = "SELECT stream_id, name, committed FROM stream_groups"


class Connection(Protocol):
    """A database connection as recovery uses it: ``sqlite3.Connection`` or ``psycopg.Connection``."""

    def execute(self, sql: str, /) -> Iterable[Any]: ...


def definitions(conn: Connection) -> tuple[list[str], list[ExchangeRecord], list[BindingRecord]]:
    """The declared vhosts, the exchanges sorted by key and the bindings by (exchange, queue,
    routing_key): at open, and whenever a shared store hears that another broker changed them."""
    vhosts = [name for (name,) in conn.execute(VHOSTS_SQL)]
    exchanges = [
        ExchangeRecord(vhost_space(vhost) + name, type_, loads(options))
        for vhost, name, type_, options in conn.execute(EXCHANGES_SQL)
    ]
    bindings = [
        BindingRecord(vhost_space(vhost) + exchange, vhost_space(vhost) + queue, weight, routing_key)
        for vhost, exchange, queue, weight, routing_key in conn.execute(BINDINGS_SQL)
    ]
    return vhosts, exchanges, bindings


def declarations(conn: Connection) -> tuple[list[QueueRecord], dict[str, dict[str, Any]]]:
    """The declared queues (by key) with their options, and the declared shovels by name."""
    queues = [QueueRecord(vhost_space(vhost) + name, loads(options)) for vhost, name, options in conn.execute(QUEUES_SQL)]
    shovels = {name[len(SHOVEL_PREFIX):]: loads(value) for name, value in conn.execute(SHOVELS_SQL)}
    return queues, shovels


def policies(conn: Connection) -> list[dict[str, Any]]:
    """Every stored policy (the records of ``SavePolicy`` rows): at open, and whenever a shared
    store hears that another broker changed them."""
    return [loads(value) for (value,) in conn.execute(POLICIES_SQL)]


def stream_positions(conn: Connection) -> tuple[dict[int, dict[str, int]], dict[int, dict[str, int]]]:
    """Per stream row id: its idempotent producers' highest sequence numbers, and its consumer
    groups' committed offsets (one read of each table: streams are few)."""
    producers: dict[int, dict[str, int]] = {}
    for stream_id, producer, seq in conn.execute(PRODUCERS_SQL):
        producers.setdefault(stream_id, {})[producer] = seq
    groups: dict[int, dict[str, int]] = {}
    for stream_id, group, committed in conn.execute(GROUPS_SQL):
        groups.setdefault(stream_id, {})[group] = committed
    return producers, groups
