"""The durable schema, defined once in SQLAlchemy Core for every SQL backend.

Alembic migrations (``stompmq/migrations/versions``) are written by hand to
produce exactly these tables; a test compares ``alembic upgrade head`` against
this ``metadata``.  The hot paths (the SQLite backend, later the
PostgreSQL one) issue raw SQL against these tables; cold paths may use the
``Table`` objects directly.

Why the tables look like this:

* ``messages.seq`` is assigned by the broker (global, strictly increasing), so
  it is the primary key and never autoincrements.  On SQLite it is declared
  ``INTEGER PRIMARY KEY`` so it *is* the rowid: no second key copy per row.
* ``messages.queue_id`` references ``queues.id`` instead of repeating the
  queue's name (up to 255 bytes) in every row and in every index entry: a
  million messages over ten queues cost one small integer each.  Queue rows are
  never deleted; the id of a name is stable for the life of the database.
* ``ix_messages_queue_order`` is ``(queue_id, priority DESC, seq)``: exactly the
  order a queue pages in (``WHERE queue_id = ? ORDER BY priority DESC, seq``),
  so paging after a key is a range scan with no sort, and counting a queue
  walks only that queue's slice of the index.
* ``headers`` is JSON text of the SEND's user headers and ``exchanges.options``
  JSON text of the declaration options: portable and never queried inside.
* ``broker_meta`` is a small name-value table; ``last_seq`` there is the
  highest seq ever handed to the store, so seqs stay increasing across restarts
  even when every message was acked (deleted) before shutdown.
* ``stream_messages`` is keyed by ``(stream_id, position)`` (the stream offset;
  ``offset`` is an SQL keyword): reading a stream from an offset and retention
  (``DELETE ... WHERE stream_id = ? AND position < ?``) are range operations on
  that key, and the first and last offsets are its two ends.  ``bytes_before``
  (the stream's body bytes before the entry) makes the size of any range two
  point lookups, so byte retention never sums a stream.  ``seq`` is the
  broker-wide message id.
* Foreign keys are declared for PostgreSQL and for readers; the SQLite store
  does not turn on ``PRAGMA foreign_keys`` (a parent lookup per inserted
  message buys nothing: the writer creates the queue row first).

Only portable types are used (Integer, BigInteger, String, Text, Float,
Boolean, LargeBinary) so the same metadata serves PostgreSQL.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from .base import GROUP_NAME_LENGTH, PRODUCER_ID_LENGTH

# Queue and exchange names are at most 255 bytes of UTF-8 (broker/destinations.py), hence at most 255 chars.
NAME_LENGTH = 255
# Exchange types are short words ("consistent-hash").
TYPE_LENGTH = 64
# Names in broker_meta are short identifiers chosen by the code.
META_NAME_LENGTH = 64
# A broker's id on a shared database (random hex chosen at start).
BROKER_ID_LENGTH = 64

# Explicit constraint names so every backend and every migration agree on them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# A 64-bit seq everywhere, but plain INTEGER on SQLite so that it is the rowid.
SEQ_TYPE = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# The declared virtual hosts; "/" always exists.  Every named thing below has a ``vhost``
# column (default "/") and is unique per (vhost, name): the same name in two vhosts is two things.
vhosts = Table(
    "vhosts",
    metadata,
    Column("name", String(NAME_LENGTH), primary_key=True),
)


def _vhost_column() -> Column[str]:
    return Column("vhost", String(NAME_LENGTH), nullable=False, server_default="/")


queues = Table(
    "queues",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    _vhost_column(),
    Column("name", String(NAME_LENGTH), nullable=False),
    # JSON text of a /control/declare/queue declaration (message-ttl, max-length, overflow ...);
    # NULL for a queue never declared (most of them), so start-up reads only the declared ones.
    Column("options", Text, nullable=True),
    UniqueConstraint("vhost", "name"),
)


def _message_columns() -> list[Column[object]]:
    """What a ready and a delayed message both are: a seq, its queue, priority, headers, body."""
    return [
        Column("seq", SEQ_TYPE, primary_key=True, autoincrement=False),
        Column("queue_id", Integer, ForeignKey("queues.id"), nullable=False),
        Column("priority", Integer, nullable=False),
        Column("headers", Text, nullable=False),
        Column("body", LargeBinary, nullable=False),
    ]


def _claim_columns() -> list[Column[object]]:
    """Who holds a row in memory on a shared database, and under which lease: ``owner`` is the
    broker (NULL: free, see brokers), ``owner_epoch`` its lease epoch when it claimed the row
    (brokers.epoch), the fencing token.  Both are always NULL on SQLite."""
    return [
        Column("owner", String(BROKER_ID_LENGTH), nullable=True),
        Column("owner_epoch", BigInteger, nullable=True),
    ]


# PostgreSQL also has ix_messages_owner, partial (WHERE owner IS NOT NULL), made by migration
# 0003 only: SQLite has no use for it, and its inserts should not pay for it.
messages = Table(
    "messages",
    metadata,
    *_message_columns(),
    Column("delivered", Boolean, nullable=False),
    Column("ack_timeout", Float, nullable=True),
    Column("redeliveries", Integer, nullable=False),
    Column("timestamp", BigInteger, nullable=False),
    *_claim_columns(),
    # Epoch milliseconds after which the message is dropped (NULL: never).
    Column("expires", BigInteger, nullable=True),
)

Index(
    "ix_messages_queue_order",
    messages.c.queue_id,
    messages.c.priority.desc(),
    messages.c.seq,
)

# Partial: a message without a TTL costs the index nothing; the expiry sweep walks it from its
# start (the earliest expiry) and never scans a queue.
Index(
    "ix_messages_expires",
    messages.c.expires,
    messages.c.seq,
    sqlite_where=messages.c.expires.isnot(None),
    postgresql_where=messages.c.expires.isnot(None),
)

# SQLite only, partial: the rows out for delivery, which start-up makes ready again after a crash
# (``UPDATE ... WHERE delivered = 1``) in time proportional to them, not to the whole backlog.
# PostgreSQL recovers through ``owner`` instead, and an index on ``delivered`` there would cost
# every delivery its heap-only update.
Index(
    "ix_messages_delivered",
    messages.c.seq,
    sqlite_where=messages.c.delivered == True,  # noqa: E712 (SQL, not a Python comparison)
).ddl_if(dialect="sqlite")

# Delayed messages wait here, apart from the ready ones, so paging a queue never walks over
# them; they are published into their queue (with a new seq) when due.
delayed_messages = Table(
    "delayed_messages",
    metadata,
    *_message_columns(),
    Column("ack_timeout", Float, nullable=True),
    Column("timestamp", BigInteger, nullable=False),
    Column("expires", BigInteger, nullable=True),
    Column("deliver_at", BigInteger, nullable=False),
    *_claim_columns(),
)

Index("ix_delayed_messages_deliver_at", delayed_messages.c.deliver_at, delayed_messages.c.seq)

exchanges = Table(
    "exchanges",
    metadata,
    Column("vhost", String(NAME_LENGTH), primary_key=True, server_default="/"),
    Column("name", String(NAME_LENGTH), primary_key=True),
    Column("type", String(TYPE_LENGTH), nullable=False),
    Column("options", Text, nullable=False),
)

bindings = Table(
    "bindings",
    metadata,
    Column("vhost", String(NAME_LENGTH), primary_key=True, server_default="/"),
    Column("exchange", String(NAME_LENGTH), primary_key=True),
    # The queue's name, not its id: bindings are few, and a bound queue may hold no message yet.
    Column("queue", String(NAME_LENGTH), primary_key=True),
    Column("weight", Integer, nullable=False),
    # A direct or topic exchange binds a queue once per key; consistent-hash bindings use "".
    Column("routing_key", String(NAME_LENGTH), primary_key=True, server_default=""),
    ForeignKeyConstraint(["vhost", "exchange"], ["exchanges.vhost", "exchanges.name"]),
)

# Live brokers on a shared database, each with a lease it renews on the database's clock.
brokers = Table(
    "brokers",
    metadata,
    Column("id", String(BROKER_ID_LENGTH), primary_key=True),
    Column("lease_until", DateTime(timezone=True), nullable=False),
    # Numbers each lease the broker holds (the lease_epoch sequence, PostgreSQL): a broker whose
    # lease lapsed gets a new one, and what it claimed under the old one is no longer its own.
    Column("epoch", BigInteger, nullable=False, server_default="0"),
    # When it last renewed (the database's clock) and the stompmq version it runs (migration 0010).
    Column("renewed_at", DateTime(timezone=True), nullable=True),
    Column("version", String(64), nullable=True),
    # What it counted since it started, over all its queues (JSON {"published": N, ...}), written
    # at each renewal for the management API's cluster totals (migration 0012); NULL on SQLite.
    Column("counters", Text, nullable=True),
)

broker_meta = Table(
    "broker_meta",
    metadata,
    Column("name", String(META_NAME_LENGTH), primary_key=True),
    Column("value", Text, nullable=False),
)

streams = Table(
    "streams",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    _vhost_column(),
    Column("name", String(NAME_LENGTH), nullable=False),
    # JSON text of the declaration options (max-age, max-bytes); "{}" for an implicit stream.
    Column("options", Text, nullable=False),
    # The counter row the PostgreSQL store numbers appends from (migration 0008; unused by SQLite).
    Column("first_offset", BigInteger, nullable=False, server_default="0"),
    Column("next_offset", BigInteger, nullable=False, server_default="0"),
    Column("end_bytes", BigInteger, nullable=False, server_default="0"),
    Column("last_ts", BigInteger, nullable=False, server_default="0"),
    UniqueConstraint("vhost", "name"),
)

# An idempotent producer's highest sequence number on a stream, written in the commit of its
# entries (x-producer-id / x-producer-seq): an append at or below it is a duplicate.
stream_producers = Table(
    "stream_producers",
    metadata,
    Column("stream_id", Integer, ForeignKey("streams.id"), primary_key=True),
    Column("producer", String(PRODUCER_ID_LENGTH), primary_key=True),
    Column("seq", BigInteger, nullable=False),
)

# A consumer group's committed offset on a stream (x-stream-group): the next entry it reads.
stream_groups = Table(
    "stream_groups",
    metadata,
    Column("stream_id", Integer, ForeignKey("streams.id"), primary_key=True),
    Column("name", String(GROUP_NAME_LENGTH), primary_key=True),
    Column("committed", BigInteger, nullable=False),
)

stream_messages = Table(
    "stream_messages",
    metadata,
    Column("stream_id", Integer, ForeignKey("streams.id"), primary_key=True),
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("seq", BigInteger, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("timestamp", BigInteger, nullable=False),
    Column("headers", Text, nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column("bytes_before", BigInteger, nullable=False),
)
