"""The PostgreSQL backend's statements and tuning, and its connection helpers.

The claims (``MINE``, ``UNCLAIMED``, ``FREE``: whose a row is, under which lease epoch), the
page reads that claim (``CLAIM_*``, ``FOR UPDATE SKIP LOCKED``) or only look (``BROWSE_*``),
the binary ``COPY`` of inserts, and the LISTEN/NOTIFY channel's limits.  storage/postgres.py
says how they fit together.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

from stompmq.logs import masked
from stompmq.storage.base import (
    StoreError,
)
from stompmq.storage.migrate import VERSION_SQL

#: Key of the advisory lock held while migrating (any fixed 64-bit number; "stompmq" in ASCII).
MIGRATION_LOCK = 0x73746F6D706D71
#: Seconds to wait for the server when connecting: an unreachable server fails the start fast.
CONNECT_TIMEOUT = 5
#: Queue name -> id cache bound: millions of queues must not mean millions of cached entries.
QUEUE_ID_CACHE_MAX = 100_000
#: Seqs handed out per nextval() of message_seq (its INCREMENT BY, set by migration 0003).
SEQ_BLOCK = 65536
#: A policy's message-ttl given to the messages waiting (groups.CapExpiry): (ttl, queue id, ttl).
CAP_EXPIRY_SQL = (
    "UPDATE messages SET expires = timestamp + %s WHERE queue_id = %s"
    " AND (expires IS NULL OR expires > timestamp + %s)"
)
#: The LISTEN/NOTIFY channel of every broker on the database.
CHANNEL = "stompmq"
#: Largest topic body sent inside a notification (PostgreSQL allows 8000 bytes of payload,
#: and base64 plus the JSON around it take their share); larger ones go through topic_relay.
NOTIFY_BODY_MAX = 4000
#: Order keys one ``x:`` notification names (PostgreSQL takes payloads under 8,000 bytes).
PASSED_PER_NOTIFY = 250
#: Seconds a relayed topic message is kept for the listeners to fetch.
RELAY_KEEP = 60
#: Seconds the listener waits for notifications before checking whether it must stop.
LISTEN_TICK = 0.5
#: Seconds between reconnection attempts of the listener.
LISTEN_RETRY = 1.0
#: Share of the lease this broker trusts its claims for, counted on its own clock from the start
#: of the renewal that granted it: the database's clock judges the lease, so keep a margin.
LEASE_TRUST = 0.8
#: Seconds between two demand notifications of one queue by this broker (claim on demand).
DEMAND_EVERY = 1.0
#: Back-off between attempts to reach a database that is down: first and largest wait, seconds.
RECONNECT_FIRST = 0.1
RECONNECT_MAX = 1.0


READY_COLUMNS = ("seq", "priority", "headers", "body", "timestamp", "ack_timeout", "redeliveries", "expires")
COPY_SQL = (
    "COPY messages (seq, queue_id, priority, headers, body, delivered, ack_timeout, redeliveries,"
    " timestamp, owner, owner_epoch, expires) FROM STDIN (FORMAT BINARY)"
)
COPY_TYPES = ["int8", "int4", "int4", "text", "bytea", "bool", "float8", "int4", "int8", "text", "int8", "int8"]
DELAYED_COPY_SQL = (
    "COPY delayed_messages (seq, queue_id, priority, headers, body, ack_timeout, timestamp, expires,"
    " deliver_at, owner, owner_epoch) FROM STDIN (FORMAT BINARY)"
)
DELAYED_COPY_TYPES = ["int8", "int4", "int4", "text", "bytea", "float8", "int8", "int8", "int8", "text", "int8"]
#: Frees claimed rows (``{where}``), ready again with their redelivery count grown by ``{added}``,
#: and names the queues that got ready rows.
FREE_ROWS_SQL = (
    "WITH freed AS (UPDATE messages SET owner = NULL, owner_epoch = NULL,"
    " redeliveries = redeliveries + {added}, delivered = false WHERE {where} RETURNING queue_id)"
    " SELECT DISTINCT q.vhost, q.name FROM freed JOIN queues q ON q.id = freed.queue_id"
)
#: Rows this broker claimed under its current lease epoch: the fencing condition of the statements
#: that change or delete a claimed row, so a broker whose lease ended touches nothing another took.
#: (``IS NOT DISTINCT FROM`` is no index condition: the statements that name seqs go by the primary
#: key.  With ``=`` the planner, whose statistics never know this process's random id, took it for
#: rare and scanned ix_messages_owner and its dead entries instead.)
MINE = "m.owner_epoch = %(epoch)s AND m.owner IS NOT DISTINCT FROM %(me)s"
#: A claimed row's new state (delivered, redeliveries, priority), and whether this broker keeps
#: holding it (else it is freed); rows this broker no longer owns are left alone.  The rows are
#: found by their seqs in the primary key (``seq = ANY``: a probe each, never a range of the index
#: with the dead entries of every message acked since the last vacuum, which a merge join on
#: ``m.seq = u.seq`` alone walked from the start).  The fencing is a join condition against ``u``
#: (kept a subquery by OFFSET 0), not a filter on ``messages``: a filter the planner takes for rare
#: (this broker's id and epoch are never in its statistics), and then scans ix_messages_owner
#: (55 ms an update under load) or unnests every array once per row it passes (5 s for 2,000).
UPDATE_SQL = (
    "UPDATE messages AS m SET delivered = u.delivered, redeliveries = u.redeliveries,"
    " priority = u.priority, owner = CASE WHEN u.held THEN %(me)s ELSE NULL END,"
    " owner_epoch = CASE WHEN u.held THEN %(epoch)s ELSE NULL END"
    " FROM (SELECT u.*, %(me)s::text AS me, %(epoch)s::int8 AS epoch FROM unnest(%(delivered)s::bool[],"
    " %(redeliveries)s::int4[], %(priorities)s::int4[], %(seqs)s::int8[], %(held)s::bool[])"
    " AS u(delivered, redeliveries, priority, seq, held) OFFSET 0) AS u"
    " WHERE m.seq = ANY(%(seqs)s) AND m.seq = u.seq AND m.owner = u.me AND m.owner_epoch = u.epoch"
    " RETURNING m.queue_id, u.held OR u.delivered, m.priority, m.seq"
)
#: Acked or discarded rows: this broker's own claims, or free rows (an expired message it swept);
#: never a row another broker holds (a stale ACK of a delivery that was taken over).
DELETE_SQL = "DELETE FROM messages AS m WHERE m.seq = ANY(%(seqs)s) AND (m.owner IS NULL OR " + MINE + ")"
#: Promoted or expired delayed rows, fenced alike: a delayed row another broker took over stays its.
DELAYED_DELETE_SQL = ("DELETE FROM delayed_messages AS m WHERE m.seq = ANY(%(seqs)s) AND (m.owner IS NULL OR "
                      + MINE + ") RETURNING m.seq")
#: Rows a broker may claim: not out for delivery, and not held under the current lease epoch of
#: another registered broker (free, its own, or claimed under an epoch that ended).  A broker's
#: lease ends only by a sweep (storage/pg_liveness.py), which frees its rows: a claim read never
#: judges a lease itself, so a broker whose row is still there has lost nothing.  A row taken from
#: an ended claim counts a redelivery, as in ``free_owner``: its holder may have delivered it with
#: the delivered mark still in its buffer.
#: (A scalar subquery, not NOT EXISTS: the planner makes that an anti-join, which the re-check of a
#: row another broker claimed while this read ran does not evaluate again, so both took it.)
UNCLAIMED = (
    "(m.owner IS NULL OR (SELECT b.epoch FROM brokers b WHERE b.id = m.owner"
    " AND b.id <> %(me)s) IS DISTINCT FROM m.owner_epoch)"
)
FREE = "m.delivered = false AND " + UNCLAIMED
#: Rows a claim takes, in delivery order: from the queue's start ({after} = "true"), or after a key.
PICK = ("SELECT seq FROM messages AS m WHERE queue_id = %(q)s AND {after} AND " + FREE
        + " ORDER BY priority DESC, seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED")
#: After a key: its priority level past its seq, then the lower levels, each a range of
#: ix_messages_queue_order read lazily (the second only if the first comes short).  One condition
#: ``priority < p OR (priority = p AND seq > s)`` made a bitmap scan of every index entry after
#: the key, those of deleted rows included (a bitmap scan never marks them dead), at every claim.
PICK_AFTER = (
    "level AS (" + PICK.format(after="priority = %(p)s AND seq > %(s)s") + "), lower AS ("
    + PICK.format(after="priority < %(p)s") + "), picked AS (SELECT seq FROM level UNION ALL SELECT seq FROM lower"
    " LIMIT %(limit)s)"
)
CLAIM_SQL = (
    "WITH {picked} UPDATE messages AS m SET owner = %(me)s, owner_epoch = %(epoch)s, redeliveries = m.redeliveries"
    " + CASE WHEN m.owner IS NULL OR (m.owner = %(me)s AND m.owner_epoch = %(epoch)s) THEN 0 ELSE 1 END"
    " FROM picked WHERE m.seq = picked.seq"
    " RETURNING " + ", ".join("m." + c for c in READY_COLUMNS)
)
CLAIM_FIRST_SQL = CLAIM_SQL.format(picked="picked AS (" + PICK.format(after="true") + ")")
CLAIM_AFTER_SQL = CLAIM_SQL.format(picked=PICK_AFTER)
#: Ready messages of a queue whoever holds them, claiming none (a browsing subscriber's page).
BROWSE_SQL = (
    "SELECT " + ", ".join(READY_COLUMNS) + " FROM messages WHERE queue_id = %(q)s AND {after} AND NOT delivered"
    " ORDER BY priority DESC, seq LIMIT %(limit)s"
)
BROWSE_FIRST_SQL = BROWSE_SQL.format(after="true")
BROWSE_AFTER_SQL = BROWSE_SQL.format(after="(priority < %(p)s OR (priority = %(p)s AND seq > %(s)s))")
#: Delayed rows of one vhost a broker may claim (as ready ones: ``UNCLAIMED``), by (deliver_at, seq)
#: after a key: a range of their index (each vhost's engine pages its own).
CLAIM_DUE_SQL = (
    "WITH picked AS (SELECT seq FROM delayed_messages AS m WHERE {after}"
    " AND queue_id IN (SELECT id FROM queues WHERE vhost = %(vhost)s) AND " + UNCLAIMED
    + " ORDER BY deliver_at, seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
    " UPDATE delayed_messages AS d SET owner = %(me)s, owner_epoch = %(epoch)s FROM picked, queues q"
    " WHERE d.seq = picked.seq AND q.id = d.queue_id"
    " RETURNING d.seq, q.name, d.priority, d.headers, d.body, d.timestamp, d.ack_timeout, d.expires, d.deliver_at"
)
DUE_AFTER_KEY = "(deliver_at, seq) > (%(d)s, %(s)s)"
#: Delayed rows of one vhost whoever holds them, claiming none (the schedule listing's page).
BROWSE_DUE_SQL = (
    "SELECT d.seq, q.name, d.priority, d.headers, d.body, d.timestamp, d.ack_timeout, d.expires, d.deliver_at"
    " FROM delayed_messages AS d JOIN queues q ON q.id = d.queue_id WHERE {after} AND q.vhost = %(vhost)s"
    " ORDER BY d.deliver_at, d.seq LIMIT %(limit)s"
)
#: Ready rows of one vhost past their expiry that this broker may take (free ones): the partial
#: expiry index.
EXPIRED_SQL = (
    "SELECT m.seq, q.name, m.priority, m.headers, m.body, m.timestamp, m.ack_timeout, m.redeliveries, m.expires"
    " FROM messages m JOIN queues q ON q.id = m.queue_id WHERE m.expires IS NOT NULL"
    " AND (m.expires, m.seq) > (%(e)s, %(s)s) AND m.expires < %(now)s"
    " AND NOT m.delivered AND q.vhost = %(vhost)s AND (m.owner IS NULL OR m.owner = %(me)s"
    " OR m.owner NOT IN (SELECT id FROM brokers))"
    " ORDER BY m.expires, m.seq LIMIT %(limit)s"
)
#: The brokers on the database and their claims (ix_messages_owner: only the claimed rows).
BROKERS_SQL = (
    "SELECT b.id, b.epoch, b.lease_until, b.renewed_at, b.version, b.lease_until >= now(), b.counters,"
    " COUNT(m.seq) FILTER (WHERE NOT m.delivered), COUNT(m.seq) FILTER (WHERE m.delivered)"
    " FROM brokers b LEFT JOIN messages m ON m.owner = b.id AND m.owner_epoch = b.epoch"
    " GROUP BY b.id ORDER BY b.id"
)
#: Over every vhost: another vhost's earlier expiry only wakes the asking engine once more, early.
NEXT_EXPIRY_SQL = "SELECT MIN(expires) FROM messages WHERE expires IS NOT NULL AND expires >= %s"


#: Queues that got free ready rows in a transaction -> the lowest order key among them (None:
#: unknown, read the queue from its start); the other brokers hear of them (``_notify_queues``).
Freed = dict[str, tuple[int, int] | None]


def note_freed(freed: Freed, queue: str, first: tuple[int, int] | None) -> None:
    if queue not in freed:
        freed[queue] = first
    else:
        known = freed[queue]
        freed[queue] = None if known is None or first is None else min(known, first)


def one_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def sqlalchemy_url(url: str) -> str:
    """The same database for SQLAlchemy/alembic, through the psycopg 3 driver."""
    return re.sub(r"^postgres(ql)?://", "postgresql+psycopg://", url)


def connect(url: str) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT, autocommit=True)
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to {masked(url)}: {one_line(exc)}") from None


def stored_revisions(conn: psycopg.Connection[Any]) -> list[str]:
    """The schema revisions alembic recorded; none on a new database (autocommit: the failed
    statement aborts nothing)."""
    try:
        return [row[0] for row in conn.execute(VERSION_SQL)]
    except psycopg.errors.UndefinedTable:
        return []
