"""What every SQL backend reads back when it opens, written once for all of them.

The declarations (vhosts, exchanges, bindings, queue options, broker-wide facts) and the streams'
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

from stompmq.storage.jsontext import loads
from stompmq.storage.records import BindingRecord, ExchangeRecord, QueueRecord
from stompmq.storage.rows import META_PREFIXES
from stompmq.vhost_names import vhost_space

VHOSTS_SQL = "SELECT name FROM vhosts ORDER BY name"
EXCHANGES_SQL = "SELECT vhost, name, type, options FROM exchanges ORDER BY vhost, name"
BINDINGS_SQL = (
    "SELECT vhost, exchange, queue, weight, routing_key FROM bindings ORDER BY vhost, exchange, queue, routing_key"
)
QUEUES_SQL = "SELECT vhost, name, options FROM queues WHERE options IS NOT NULL ORDER BY vhost, name"
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


def queues(conn: Connection) -> list[QueueRecord]:
    """The declared queues (by key) with their options."""
    return [QueueRecord(vhost_space(vhost) + name, loads(options)) for vhost, name, options in conn.execute(QUEUES_SQL)]


def meta_facts(conn: Connection, prefixes: Iterable[str] = META_PREFIXES) -> dict[str, dict[str, Any]]:
    """The stored broker-wide facts (``rows.MetaFact``) of those kinds' ``prefixes``
    (``Recovery.meta``: prefix -> key -> value, in key order): every kind at open, the policies
    whenever a shared store hears that another broker changed them.  The prefixes are literal
    patterns (``MetaFact`` checks them), so the one statement runs unchanged on both drivers."""
    facts: dict[str, dict[str, Any]] = {prefix: {} for prefix in sorted(prefixes)}
    where = " OR ".join(f"name LIKE '{prefix}%'" for prefix in facts)
    for name, value in conn.execute(f"SELECT name, value FROM broker_meta WHERE {where} ORDER BY name"):
        prefix, _, key = name.partition("/")
        facts[prefix + "/"][key] = loads(value)
    return facts


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
