"""The PostgreSQL store: sync psycopg 3 on the group-commit engine's thread; brokers may share it.

Theory of operation
-------------------
psycopg's async API runs only on asyncio and a thread hop per message would be
slow, so ``PostgresBackend`` uses the sync API on the one database thread the
group-commit engine gives every backend (storage/thread.py): one connection,
one call at a time.

* **Open**: connect; run ``alembic upgrade head`` holding an advisory lock, so
  brokers started together never race on the schema; register this broker in
  ``brokers`` with a lease on the database's clock; free the claims of brokers
  whose lease lapsed.
* **Commit**: one transaction per group.  Inserts go in with binary ``COPY``;
  deletes as ``seq = ANY(array)``; updates joined against ``unnest`` of arrays.
  A unique violation (possible only for a row written back after a purge in an
  earlier group) retries the group with delete-then-copy.
* **Sequence numbers** come from the sequence ``message_seq`` in blocks of
  ``SEQ_BLOCK``: no two brokers ever hand out the same seq, and a broker asks the
  database once per block, ahead of need (``PostgresStore`` keeps a spare).

Several brokers on one database
-------------------------------
* A message row's ``owner`` is the broker holding it in memory (its ready window
  or out for delivery; ``StoredMessage.held``).  A row whose owner is NULL, or
  whose owner's lease lapsed, is *free*: any broker's next page read claims it
  (``FOR UPDATE SKIP LOCKED``, so two brokers paging one queue never wait for each
  other nor take the same row).  Each message is therefore delivered by one
  broker at a time.
* Leases are rows in ``brokers``, renewed every ``lease / 3`` seconds and judged
  with ``now()``: the database's clock, never a broker's.  The renewal also frees
  the rows of brokers whose lease lapsed (a ``kill -9``): what they had out for
  delivery becomes ready again with one more redelivery.
* ``LISTEN/NOTIFY`` on channel ``stompmq`` wakes the other brokers: ``q:BROKER:FIRST:NAME`` when
  free ready rows of a queue appear (BROKER, who freed them, ignores it; empty = everyone; FIRST
  the lowest order key among them, ``-PRIORITY.SEQ``, empty if unknown: a broker claiming on
  demand reads the queue again from there, not from its start), ``d:BROKER`` when exchanges or bindings change,
  ``t:`` + JSON for a topic message (bodies over ``NOTIFY_BODY_MAX`` travel through
  the ``topic_relay`` table and are announced by id), ``s:BROKER:NAME`` when a
  stream's counter row changed (the listener reads the row: ``S:`` + its state).  A
  listener thread with its own connection receives them; every ``poll`` seconds the
  broker looks again anyway (queues, and every stream's row), in case a notification
  was lost with a connection.
* Streams are numbered in the commit: ``storage/pg_streams.py``.

Names arrive as store keys (``storage.base``: a vhost's prefix and the name), are split
into the ``vhost`` and ``name`` columns, and travel in notifications as keys.

The password of the URL never appears in a log line or an error: ``masked``.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import logging
import math
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
import trio

from stompmq import __version__
from stompmq.logs import masked
from stompmq.storage import jsontext, pg_liveness, recovery
from stompmq.storage.ages import NO_AGES, QUEUE_AGES_SQL, QUEUE_UNACKED_AGE_SQL, QueueAges
from stompmq.storage.base import (
    BindingRecord,
    CommitInDoubt,
    BrokerLease,
    ExchangeRecord,
    SEQ_CHUNK,
    QueueCount,
    Recovery,
    StoredMessage,
    REFUSED_VALUES,
    StoreError,
    StoreRejected,
    StreamMessage,
    StreamState,
)
from stompmq.vhost_names import DEFAULT_VHOST, split_key, vhost_space
from stompmq.storage.backend import QUEUE_PAGE_SQL
from stompmq.storage.groupcommit import FLUSH_INTERVAL, MAX_BACKLOG_BYTES, MAX_GROUP, GroupCommitStore
from stompmq.storage.groups import DROP_VHOST_SQL, DelayedRow, GroupRows, InsertRow, StructuralOp, TopicMessage
from stompmq.storage.rows import (
    CapExpiry,
    DropBinding,
    DropExchange,
    DropStream,
    DropVhost,
    Purge,
    Release,
    SaveBinding,
    SaveExchange,
    SavePolicy,
    SaveQueue,
    SaveShovel,
    SaveStream,
    SaveVhost,
    TrimStream,
)
from stompmq.storage.migrate import VERSION_SQL, is_current, upgrade_to_head
from stompmq.storage.pg_streams import SharedStreams

log = logging.getLogger(__name__)
#: A row of a group's inserts, ready (``InsertRow``) or delayed (``DelayedRow``): its seq first.
Row = TypeVar("Row", InsertRow, DelayedRow)

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

_dumps, _loads = jsontext.dumps, jsontext.loads
_headers, _headers_text = jsontext.headers, jsontext.headers_text

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


def _note_freed(freed: Freed, queue: str, first: tuple[int, int] | None) -> None:
    if queue not in freed:
        freed[queue] = first
    else:
        known = freed[queue]
        freed[queue] = None if known is None or first is None else min(known, first)


def _one_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _sqlalchemy_url(url: str) -> str:
    """The same database for SQLAlchemy/alembic, through the psycopg 3 driver."""
    return re.sub(r"^postgres(ql)?://", "postgresql+psycopg://", url)


def _connect(url: str) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT, autocommit=True)
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to {masked(url)}: {_one_line(exc)}") from None


def _stored_revisions(conn: psycopg.Connection[Any]) -> list[str]:
    """The schema revisions alembic recorded; none on a new database (autocommit: the failed
    statement aborts nothing)."""
    try:
        return [row[0] for row in conn.execute(VERSION_SQL)]
    except psycopg.errors.UndefinedTable:
        return []


#: What a commit catches, and among it what the rows caused (StoreRejected), not the database.
_COMMIT_ERRORS: tuple[type[Exception], ...] = (psycopg.Error, *REFUSED_VALUES)
_REFUSED: tuple[type[Exception], ...] = (psycopg.DataError, psycopg.IntegrityError, *REFUSED_VALUES)


class PostgresBackend:
    """A PostgreSQL database as the group-commit engine's thread sees it; every method blocks."""

    def __init__(self, url: str, *, lease: float = 10.0) -> None:
        self.url = url
        self.lease = lease
        self.broker_id = uuid.uuid4().hex[:16]  # this process, as ``messages.owner`` names it
        self._conn: psycopg.Connection[Any] | None = None
        self._queue_ids: dict[str, int] = {}
        self._queue_names: dict[int, str] = {}
        self.streams = SharedStreams(self.broker_id)
        self._down = False  # the database was unreachable at the last attempt
        self._backoff = RECONNECT_FIRST  # doubles per failed attempt while the database is down
        self._committing = False  # the commit going on has sent everything but its COMMIT
        #: delayed rows whose fenced delete (their promotion) another broker's claim refused, until
        #: their promoted copy comes to be inserted (held back a flush) and is left out
        self._refused_delayed: set[int] = set()
        self._next_attempt = 0.0  # monotonic time before which no new attempt is made
        #: The lease epoch this broker's claims are made under (its fencing token; None before the
        #: first registration) and the monotonic time until which it trusts that lease (the
        #: trio thread reads both: each is one assignment).
        self.epoch: int | None = None
        self.valid_until = 0.0
        #: when this connection registered, on the database's clock: the sweep ends a peer's lease
        #: by time only a lease after it (storage/pg_liveness.py)
        self._since: Any = None
        #: what this broker counted, set by the store just before a clean close (None: not known)
        self.final_counters: dict[str, int] | None = None
        self._demanded: dict[str, float] = {}  # queue -> monotonic time of its last demand notification

    @property
    def name(self) -> str:
        return masked(self.url)

    # -- open / close ----------------------------------------------------------------------------
    def open(self) -> Recovery:
        conn = self._conn = _connect(self.url)
        try:
            if not is_current(_stored_revisions(conn)):
                conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
                try:
                    upgrade_to_head(_sqlalchemy_url(self.url))
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        except Exception as exc:  # psycopg, alembic and SQLAlchemy errors alike
            raise StoreError(f"cannot migrate {self.name}: {_one_line(exc)}") from None
        try:
            pg_liveness.hold(conn, self.broker_id)
            self._register(conn, fresh=True)
            with conn.transaction():
                self._free_gone(conn)  # a broker this one restarts after is gone: its claims free now
            vhosts, exchanges, bindings = recovery.definitions(conn)
            with conn.cursor() as cur:
                streams = self.streams.recover(cur)
            queues, shovels = recovery.declarations(conn)
            policies = recovery.policies(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot recover {self.name}: {_one_line(exc)}") from None
        return Recovery(0, exchanges, bindings, streams, vhosts, queues, shovels, policies)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(psycopg.Error):
            with conn.transaction():
                # A clean stop frees this broker's claims now instead of after its lease.
                queues = self._free_claims(conn, self.broker_id)
                pg_liveness.leave(conn, self.broker_id, self.final_counters)
                self._notify_queues(conn, queues, "")
        conn.close()

    def _connection(self) -> psycopg.Connection[Any]:
        """The connection, made again after an outage (the engine retries failed groups)."""
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
            self._conn = None
        if time.monotonic() < self._next_attempt:
            raise StoreError(f"PostgreSQL {self.name} is unreachable (retrying)")
        conn = None
        try:
            conn = _connect(self.url)
            pg_liveness.hold(conn, self.broker_id)
            self._register(conn, fresh=True)
        except (StoreError, psycopg.Error) as exc:
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
            if not self._down:  # the store logs the outage (storage/outage.py)
                log.debug("PostgreSQL %s is unreachable, retrying: %s", self.name, _one_line(exc))
                self._down = True
            self._next_attempt = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, RECONNECT_MAX)
            raise StoreError(f"PostgreSQL {self.name} is unreachable: {_one_line(exc)}") from None
        if self._down:
            log.debug("PostgreSQL %s is reachable again", self.name)
            self._down = False
        self._backoff = RECONNECT_FIRST
        self._conn = conn
        self._forget_ids()
        return conn

    def _register(self, conn: psycopg.Connection[Any], *, fresh: bool = False) -> None:
        """Hold (or renew) this broker's lease; the database's clock decides when it lapses.

        A lease another broker ended (our row is gone: a sweep deleted it and freed our rows,
        storage/pg_liveness.py) is not renewed but replaced under a new epoch: what we claimed
        under the old one may be another broker's by now, so the store tells the engine to forget
        it.  A row still there, however late the renewal (a database outage, a pause nobody swept),
        keeps its epoch: nobody could have taken anything.  ``fresh``: a new connection, from
        whose registration this broker judges others' leases."""
        start = time.monotonic()
        row = conn.execute(
            "INSERT INTO brokers (id, lease_until, epoch, renewed_at, version) VALUES (%s,"
            " now() + make_interval(secs => %s), nextval('lease_epoch'), now(), %s) ON CONFLICT (id) DO UPDATE"
            " SET lease_until = excluded.lease_until, renewed_at = excluded.renewed_at"
            " RETURNING epoch, now()",
            (self.broker_id, self.lease, __version__),
        ).fetchone()
        assert row is not None
        epoch = int(row[0])
        if fresh:
            self._since = row[1]
        if self.epoch is not None and epoch != self.epoch:
            log.warning(
                "this broker's lease on %s lapsed (it could not renew it in %s s): it holds a new one and"
                " drops the messages it held, which other brokers may have taken over", self.name, self.lease,
            )
            with conn.transaction():
                freed = self._free_rows(  # every one counts a redelivery, as for a broker that died
                    conn, "1", "owner = %s AND owner_epoch <> %s", (self.broker_id, epoch))
                self._notify_queues(conn, freed, "")
        self.epoch = epoch
        self.valid_until = start + self.lease * LEASE_TRUST

    # -- leases ------------------------------------------------------------------------------------
    def renew(self, counters: dict[str, int]) -> None:
        """Renew this broker's lease and write its ``counters`` (the cluster totals), free the
        claims of brokers whose lease lapsed, and drop relayed topic messages nobody needs any more."""
        conn = self._connection()
        try:
            with conn.transaction():
                self._register(conn)
                conn.execute("UPDATE brokers SET counters = %s WHERE id = %s", (_dumps(counters), self.broker_id))
                self._free_gone(conn)
                conn.execute(
                    "DELETE FROM topic_relay WHERE created < now() - make_interval(secs => %s)", (RELAY_KEEP,)
                )
        except psycopg.Error as exc:
            raise StoreError(f"cannot renew the lease on {self.name}: {_one_line(exc)}") from None

    def sweep(self) -> None:
        """End the leases of the brokers that are gone and free their claims (between renewals:
        a crashed broker's messages are taken over within ``pg_liveness.SWEEP_EVERY``)."""
        conn = self._connection()
        try:
            with conn.transaction():
                self._free_gone(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None

    def _free_gone(self, conn: psycopg.Connection[Any]) -> None:
        """Free every row of every broker that is gone (storage/pg_liveness.py), and forget them."""
        for dead, lapsed in pg_liveness.gone(conn, self.broker_id, self._since, self.lease):
            why = "stopped renewing its lease" if lapsed else "is gone (its database session ended)"
            log.warning("broker %s on %s %s: its messages are free again", dead, self.name, why)
            self._notify_queues(conn, self._free_claims(conn, dead, died=True), "")  # news for every broker

    @staticmethod
    def _free_claims(conn: psycopg.Connection[Any], owner: str, *, died: bool = False) -> Freed:
        """Make ``owner``'s rows free and ready (what it had out for delivery counts a
        redelivery); return the queues that got ready rows (``_free_rows``).

        A broker that stopped cleanly wrote its delivered marks first.  One that ``died`` may have
        delivered a row within its last flush interval without the mark reaching the database,
        so every row it held counts a redelivery (``redelivered:true``, as RabbitMQ marks what
        may have been delivered): a duplicate is never unmarked."""
        return PostgresBackend._free_rows(conn, "1" if died else "delivered::int", "owner = %s", (owner,))

    @staticmethod
    def _free_rows(db: psycopg.Connection[Any] | psycopg.Cursor[Any], added: str, where: str,
                   params: tuple[Any, ...]) -> Freed:
        """Make the rows ``where`` names free and ready, their redelivery count grown by the SQL
        expression ``added``, and the delayed rows it names free; the queues that got ready rows
        (from their start: their lowest key is not read)."""
        rows = db.execute(FREE_ROWS_SQL.format(added=added, where=where), params).fetchall()
        delayed = db.execute(f"UPDATE delayed_messages SET owner = NULL, owner_epoch = NULL WHERE {where}", params)
        if delayed.rowcount:  # no queue names them yet: every broker looks at its delayed messages again
            db.execute("SELECT pg_notify(%s, '*')", (CHANNEL,))
        return dict.fromkeys(vhost_space(vhost) + name for vhost, name in rows)

    @staticmethod
    def _notify_queues(conn: psycopg.Connection[Any], queues: Freed, origin: str) -> None:
        """Announce free ready rows of ``queues``; the broker named ``origin`` ignores it (it made
        them free itself), "" = every broker listens."""
        for name, first in sorted(queues.items()):
            key = "" if first is None else f"{first[0]}.{first[1]}"
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"q:{origin}:{key}:{name}"))

    def _notify_passed(self, conn: psycopg.Connection[Any], passed: dict[str, list[tuple[int, int]]]) -> None:
        """Announce rows freed because no selector here matched them, each named
        (``x:BROKER:KEY,KEY,...:NAME``, cut to fit a notification), so a broker that passed over
        every one of them already reads none again (broker/dispatch.py ``store_changed``)."""
        for name, keys in sorted(passed.items()):
            keys.sort()
            for start in range(0, len(keys), PASSED_PER_NOTIFY):
                listed = ",".join(f"{p}.{s}" for p, s in keys[start:start + PASSED_PER_NOTIFY])
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"x:{self.broker_id}:{listed}:{name}"))

    # -- sequence numbers ------------------------------------------------------------------------
    def seq_block(self) -> tuple[int, int]:
        """A block [start, end) of seqs that no other broker on this database will use."""
        try:
            row = self._connection().execute("SELECT nextval('message_seq')").fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot take sequence numbers from {self.name}: {_one_line(exc)}") from None
        assert row is not None
        return int(row[0]), int(row[0]) + SEQ_BLOCK

    # -- writes ----------------------------------------------------------------------------------
    def commit(self, group: GroupRows) -> None:
        """Commit ``group``; CommitInDoubt if the connection was lost during its COMMIT (then the
        retry, carrying the same rows, finds its inserts there or not: ``replace`` takes both)."""
        conn = self._connection()
        try:
            try:
                self._commit(conn, group, replace=False)
            except psycopg.errors.UniqueViolation:
                self._forget_ids()
                # A row written back after an earlier purge, or by a commit whose outcome was lost.
                self._commit(conn, group, replace=True)
        except _COMMIT_ERRORS as exc:
            self._forget_ids()
            if isinstance(exc, psycopg.Error) and self._committing and conn.broken:
                raise CommitInDoubt(f"commit to {self.name} may have failed: {_one_line(exc)}") from None
            if isinstance(exc, _REFUSED):
                # the rows, not the database: the same rows would fail again (groupcommit isolates them)
                raise StoreRejected(f"{self.name} refused a value: {_one_line(exc)}") from None
            raise StoreError(f"commit to {self.name} failed: {_one_line(exc)}") from None

    def _forget_ids(self) -> None:
        """A transaction rolled back: queue and stream rows it made are gone, so are their ids."""
        self._queue_ids.clear()
        self._queue_names.clear()
        self.streams.forget()

    def _commit(self, conn: psycopg.Connection[Any], group: GroupRows, *, replace: bool) -> None:
        self._committing = False
        held = group.held or frozenset()
        # The epoch the engine held those rows under; an ended one claims nothing (freed below).
        claims = self.epoch if group.claims_epoch is None else group.claims_epoch
        freed: Freed = {}
        passed: dict[str, list[tuple[int, int]]] = {}  # queue -> keys of the rows freed by pass_over
        group.stream_states = {}  # (a retried attempt reports afresh)
        refused: set[int] = set()  # delayed rows this broker's fenced delete did not remove
        with conn.transaction(), conn.cursor() as cur:
            counters = self.streams.lock(cur, group)  # first: stream rows in id order (pg_streams.py)
            releases = []
            for op in group.structural:
                if isinstance(op, SaveStream | TrimStream | DropStream):
                    self.streams.apply(cur, op, counters)
                elif isinstance(op, Release):
                    releases.append(op)  # after the updates: see _release
                else:
                    self._apply(cur, op)
            mine = {"me": self.broker_id, "epoch": self.epoch}
            if group.deletes:
                cur.execute(DELETE_SQL, {**mine, "seqs": [seq for (seq,) in group.deletes]})
            if group.delayed_deletes:
                asked = [seq for (seq,) in group.delayed_deletes]
                cur.execute(DELAYED_DELETE_SQL, {**mine, "seqs": asked})
                if len(asked) != cur.rowcount and not replace:  # (a lost outcome may have deleted them)
                    deleted = {seq for (seq,) in cur.fetchall()}
                    refused = {seq for seq in asked if seq not in deleted}
            if group.updates:
                delivered, redeliveries, priorities, seqs = (list(c) for c in zip(*group.updates, strict=True))
                cur.execute(UPDATE_SQL, {
                    **mine, "delivered": delivered, "redeliveries": redeliveries, "priorities": priorities,
                    "seqs": seqs, "held": [s in held for s in seqs],
                })
                for queue_id, kept, priority, seq in cur.fetchall():
                    if not kept:
                        name = self._queue_name(cur, queue_id)
                        if seq in group.passed:
                            passed.setdefault(name, []).append((-priority, seq))
                        else:
                            _note_freed(freed, name, (-priority, seq))
            inserts = group.inserts
            if group.promotions and (refused or self._refused_delayed):
                inserts = self._unpromoted(inserts, group.promotions, refused | self._refused_delayed)
            if inserts:
                if replace:
                    cur.execute("DELETE FROM messages WHERE seq = ANY(%s)", ([row[0] for row in inserts],))
                self._copy(cur, inserts, held, freed, claims, group.passed, passed)
            delayed = group.delayed
            if delayed and group.promotions and (refused or self._refused_delayed):  # a schedule's next row
                delayed = self._unpromoted(delayed, group.promotions, refused | self._refused_delayed)
            if delayed:
                if replace:
                    cur.execute("DELETE FROM delayed_messages WHERE seq = ANY(%s)", ([row[0] for row in delayed],))
                self._copy_delayed(cur, delayed, held, claims)
            for op in releases:
                self._release(cur, op.queue, held, freed)
            if group.stream_rows:
                self.streams.append(cur, group.stream_rows, counters)
            if group.group_offsets:
                self.streams.save_groups(cur, group.group_offsets)
            self.streams.finish(cur, counters, group)
            self._notify_queues(conn, freed, self.broker_id)
            self._notify_passed(conn, passed)
            if claims != self.epoch:  # taken before the engine learned its lease lapsed: free for all
                stale = self._free_rows(cur, "delivered::int", "owner = %s AND owner_epoch = %s",
                                        (self.broker_id, claims))
                self._notify_queues(conn, stale, "")
            self._committing = True  # only COMMIT is left: a connection lost now hides the outcome
        if refused or group.promotions and self._refused_delayed:
            # copies inserted later (held back a flush) are left out then; a copy met once is done
            self._refused_delayed = (self._refused_delayed | refused) - set(group.promotions.values())

    def _unpromoted(self, rows: list[Row], promotions: dict[int, int], void: set[int]) -> list[Row]:
        """``rows`` less the promoted copies of delayed rows another broker took over (and a
        schedule's next row): it promotes them itself, so this broker, paused past its lease
        meanwhile, must not store a second copy."""
        kept = [row for row in rows if promotions.get(row[0]) not in void]
        if len(kept) != len(rows):
            log.warning("%s: %d promoted delayed messages were taken over by another broker; not stored",
                        self.name, len(rows) - len(kept))
        return kept

    def _queue_ids_of(self, cur: psycopg.Cursor[Any], rows: list[InsertRow] | list[DelayedRow]) -> dict[str, int]:
        """The id of every queue the rows name (rows carry the queue's name second)."""
        ids = {}
        for name in {row[1] for row in rows}:
            queue_id = self._queue_id(cur, name, create=True)
            assert queue_id is not None
            ids[name] = queue_id
        return ids

    def _copy(self, cur: psycopg.Cursor[Any], rows: list[InsertRow], held: frozenset[int], freed: Freed,
              epoch: int | None, passing: frozenset[int], passed: dict[str, list[tuple[int, int]]]) -> None:
        ids = self._queue_ids_of(cur, rows)
        me = self.broker_id
        with cur.copy(COPY_SQL) as copy:
            copy.set_types(COPY_TYPES)
            for seq, name, prio, hdrs, body, delivered, ack, redel, ts, exp in rows:
                mine = seq in held
                if not mine:
                    if seq in passing:
                        passed.setdefault(name, []).append((-prio, seq))
                    else:
                        _note_freed(freed, name, (-prio, seq))
                copy.write_row(
                    (seq, ids[name], prio, _headers_text(hdrs), body, delivered, ack, redel, ts,
                     me if mine else None, epoch if mine else None, exp)
                )

    def _copy_delayed(self, cur: psycopg.Cursor[Any], rows: list[DelayedRow], held: frozenset[int],
                      epoch: int | None) -> None:
        """Delayed rows this broker holds in memory are claimed; the others are free for any broker."""
        ids = self._queue_ids_of(cur, rows)
        me = self.broker_id
        with cur.copy(DELAYED_COPY_SQL) as copy:
            copy.set_types(DELAYED_COPY_TYPES)
            for seq, name, prio, hdrs, body, ack, ts, exp, due in rows:
                mine = seq in held
                copy.write_row((seq, ids[name], prio, _headers_text(hdrs), body, ack, ts, exp, due,
                                me if mine else None, epoch if mine else None))

    def _apply(self, cur: psycopg.Cursor[Any], op: StructuralOp) -> None:
        match op:
            case Purge(queue=name):
                queue_id = self._queue_id(cur, name, create=False)
                if queue_id is not None:
                    cur.execute("DELETE FROM messages WHERE queue_id = %s", (queue_id,))
            case TopicMessage(topic=topic, headers=headers, body=body):
                self._notify_topic(cur, topic, headers, body)
            case SaveShovel() | SavePolicy():
                name, value = op.meta
                if value is None:
                    cur.execute("DELETE FROM broker_meta WHERE name = %s", (name,))
                else:
                    cur.execute("INSERT INTO broker_meta (name, value) VALUES (%s, %s)"
                                " ON CONFLICT (name) DO UPDATE SET value = excluded.value", (name, _dumps(value)))
                if isinstance(op, SavePolicy):
                    self._notify_definitions(cur)  # every broker applies policies at once
            case DropVhost(name=name):
                for statement in DROP_VHOST_SQL:
                    cur.execute(statement.replace("?", "%s"), (name,))
                self._notify_definitions(cur)
            case CapExpiry(queue=name, ttl=ttl):
                queue_id = self._queue_id(cur, name, create=False)
                if queue_id is not None:
                    cur.execute(CAP_EXPIRY_SQL, (ttl, queue_id, ttl))
            case SaveQueue(name=name, options=options):
                cur.execute(
                    "UPDATE queues SET options = %s WHERE id = %s",
                    (None if options is None else _dumps(options), self._queue_id(cur, name, create=True)),
                )
            case SaveExchange(exchange=ex):
                cur.execute(
                    "INSERT INTO exchanges (vhost, name, type, options) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (vhost, name) DO UPDATE SET type = excluded.type, options = excluded.options",
                    (*split_key(ex.name), ex.type, _dumps(ex.options)),
                )
                self._notify_definitions(cur)
            case DropExchange(name=name):
                cur.execute("DELETE FROM bindings WHERE vhost = %s AND exchange = %s", split_key(name))
                cur.execute("DELETE FROM exchanges WHERE vhost = %s AND name = %s", split_key(name))
                self._notify_definitions(cur)
            case SaveBinding(binding=b):
                cur.execute(
                    "INSERT INTO bindings (vhost, exchange, queue, weight, routing_key) VALUES (%s, %s, %s, %s, %s)"
                    " ON CONFLICT (vhost, exchange, queue, routing_key) DO UPDATE SET weight = excluded.weight",
                    (*split_key(b.exchange), split_key(b.queue)[1], b.weight, b.routing_key),
                )
                self._notify_definitions(cur)
            case DropBinding(exchange=exchange, queue=name, routing_key=key):
                cur.execute(
                    "DELETE FROM bindings WHERE vhost = %s AND exchange = %s AND queue = %s AND routing_key = %s",
                    (*split_key(exchange), split_key(name)[1], key),
                )
                self._notify_definitions(cur)
            case SaveVhost(name=name):
                cur.execute("INSERT INTO vhosts (name) VALUES (%s) ON CONFLICT (name) DO NOTHING", (name,))
                if cur.rowcount:
                    self._notify_definitions(cur)
            case _:  # streams' operations go to pg_streams and releases to _release (see _commit)
                raise TypeError(f"not a structural operation applied here: {op!r}")

    def _release(self, cur: psycopg.Cursor[Any], name: str, held: frozenset[int], freed: Freed) -> None:
        """Free the ready rows of queue ``name`` this broker claimed, after the group's updates of
        them (which need them still its own), but not those the group itself holds (the queue
        came back into memory since it left)."""
        queue_id = self._queue_id(cur, name, create=False)
        if queue_id is not None:
            cur.execute(
                "UPDATE messages AS m SET owner = NULL, owner_epoch = NULL"
                " WHERE queue_id = %(q)s AND NOT delivered AND " + MINE + " AND NOT (m.seq = ANY(%(held)s))",
                {"q": queue_id, "me": self.broker_id, "epoch": self.epoch, "held": list(held)},
            )
            if cur.rowcount:
                _note_freed(freed, name, None)

    def _notify_definitions(self, cur: psycopg.Cursor[Any]) -> None:
        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, "d:" + self.broker_id))

    def _notify_topic(self, cur: psycopg.Cursor[Any], topic: str, headers: dict[str, str], body: bytes) -> None:
        if len(body) <= NOTIFY_BODY_MAX:
            payload = _dumps({"b": self.broker_id, "t": topic, "h": headers, "d": base64.b64encode(body).decode()})
            if len(payload.encode()) < 7900:
                cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, "t:" + payload))
                return
        row = cur.execute(
            "INSERT INTO topic_relay (topic, headers, body) VALUES (%s, %s, %s) RETURNING id",
            (topic, _dumps(headers), body),
        ).fetchone()
        assert row is not None
        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, "r:" + _dumps({"b": self.broker_id, "i": row[0]})))

    def _queue_id(self, cur: psycopg.Cursor[Any], name: str, *, create: bool) -> int | None:
        queue_id = self._queue_ids.get(name)
        if queue_id is not None:
            return queue_id
        key = split_key(name)
        row = cur.execute("SELECT id FROM queues WHERE vhost = %s AND name = %s", key).fetchone()
        if row is None:
            if not create:
                return None
            # Another broker may create the same queue at the same moment: the unique name decides.
            cur.execute("INSERT INTO queues (vhost, name) VALUES (%s, %s) ON CONFLICT (vhost, name) DO NOTHING", key)
            row = cur.execute("SELECT id FROM queues WHERE vhost = %s AND name = %s", key).fetchone()
            assert row is not None
        if len(self._queue_ids) >= QUEUE_ID_CACHE_MAX:
            self._queue_ids.clear()
            self._queue_names.clear()
        queue_id = int(row[0])
        self._queue_ids[name] = queue_id
        self._queue_names[queue_id] = name
        return queue_id

    def _queue_name(self, cur: psycopg.Cursor[Any], queue_id: int) -> str:
        name = self._queue_names.get(queue_id)
        if name is None:
            row = cur.execute("SELECT vhost, name FROM queues WHERE id = %s", (queue_id,)).fetchone()
            assert row is not None
            name = vhost_space(row[0]) + row[1]
        return name

    # -- reads -----------------------------------------------------------------------------------
    def load_ready(self, queue: str, after: tuple[int, int] | None, limit: int) -> Sequence[StoredMessage]:
        """Claim up to ``limit`` free ready messages of ``queue`` after ``after`` for this broker,
        telling the other brokers that its subscribers want that queue (claim on demand)."""
        messages = self._ready(CLAIM_FIRST_SQL, CLAIM_AFTER_SQL, {"me": self.broker_id, "epoch": self.epoch},
                               queue, after, limit)
        for msg in messages:
            msg.held = True  # claimed for this broker by this read
        return messages

    def _demand(self, cur: psycopg.Cursor[Any], queue: str) -> None:
        """Tell the other brokers that subscribers here want ``queue`` (``w:BROKER:NAME``), at most
        every ``DEMAND_EVERY`` seconds: they then keep no more of it than their own subscribers
        can take (broker/dispatch.py, claim on demand)."""
        now = time.monotonic()
        if now - self._demanded.get(queue, -math.inf) < DEMAND_EVERY:
            return
        if len(self._demanded) >= QUEUE_ID_CACHE_MAX:
            self._demanded.clear()
        self._demanded[queue] = now
        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"w:{self.broker_id}:{queue}"))

    def browse(self, queue: str, after: tuple[int, int] | None, limit: int) -> Sequence[StoredMessage]:
        """Up to ``limit`` ready messages of ``queue`` after ``after``, whichever broker holds them."""
        return self._ready(BROWSE_FIRST_SQL, BROWSE_AFTER_SQL, {}, queue, after, limit)

    def _ready(self, first: str, following: str, params: dict[str, Any], queue: str,
               after: tuple[int, int] | None, limit: int) -> list[StoredMessage]:
        """Ready rows of ``queue`` in delivery order, from its start (query ``first``) or after
        ``after`` (``following``), read in one transaction; a claim also tells the other brokers
        that subscribers here want the queue (``_demand``)."""
        conn = self._connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                if first is CLAIM_FIRST_SQL:
                    self._demand(cur, queue)
                queue_id = self._queue_id(cur, queue, create=False)
                if queue_id is None or limit <= 0:
                    return []
                params = {**params, "q": queue_id, "limit": limit}
                if after is not None:
                    params["p"], params["s"] = -after[0], after[1]
                rows = cur.execute(first if after is None else following, params).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None
        rows.sort(key=lambda r: (-r[1], r[0]))  # UPDATE ... RETURNING keeps no order
        vhost, name = split_key(queue)
        space = vhost_space(vhost)
        return [
            StoredMessage(
                seq, name, prio, _headers(hdrs), bytes(body), ts, ack, redel, space=space,
                expires=exp,
            )
            for seq, prio, hdrs, body, ts, ack, redel, exp in rows
        ]

    def load_due(self, after: tuple[int, int] | None, limit: int, vhost: str) -> Sequence[StoredMessage]:
        """Claim up to ``limit`` free delayed messages of ``vhost`` after ``after`` = (deliver_at, seq)."""
        return self._due(CLAIM_DUE_SQL, after, limit, vhost, claim=True)

    def browse_due(self, after: tuple[int, int] | None, limit: int, vhost: str) -> Sequence[StoredMessage]:
        """Up to ``limit`` delayed messages of ``vhost`` after ``after``, whichever broker holds them."""
        return self._due(BROWSE_DUE_SQL, after, limit, vhost, claim=False)

    def _due(self, sql: str, after: tuple[int, int] | None, limit: int, vhost: str,
             claim: bool) -> Sequence[StoredMessage]:
        if limit <= 0:
            return []
        params: dict[str, Any] = {"me": self.broker_id, "epoch": self.epoch, "limit": limit, "vhost": vhost}
        if after is None:
            query = sql.format(after="true")
        else:
            params["d"], params["s"] = after
            query = sql.format(after=DUE_AFTER_KEY)  # (no column of queues is named so)
        try:
            conn = self._connection()
            with conn.transaction(), conn.cursor() as cur:
                rows = cur.execute(query, params).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None
        rows.sort(key=lambda r: (r[8], r[0]))
        messages = []
        space = vhost_space(vhost)
        for seq, name, prio, hdrs, body, ts, ack, exp, due in rows:
            msg = StoredMessage(seq, name, prio, _headers(hdrs), bytes(body), ts, ack,
                                space=space, expires=exp, deliver_at=due)
            msg.held = claim
            messages.append(msg)
        return messages

    def load_expired(
        self, now_ms: int, after: tuple[int, int] | None, limit: int, vhost: str
    ) -> tuple[Sequence[StoredMessage], int | None]:
        start = after if after is not None else (-1, -1)
        params = {"now": now_ms, "e": start[0], "s": start[1], "limit": limit, "me": self.broker_id, "vhost": vhost}
        try:
            conn = self._connection()
            rows = conn.execute(EXPIRED_SQL, params).fetchall()
            row = conn.execute(NEXT_EXPIRY_SQL, (now_ms,)).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None
        space = vhost_space(vhost)
        return [
            StoredMessage(seq, name, prio, _headers(hdrs), bytes(body), ts, ack, redel,
                          space=space, expires=exp)
            for seq, name, prio, hdrs, body, ts, ack, redel, exp in rows
        ], None if row is None or row[0] is None else int(row[0])

    def queue_size(self, queue: str) -> tuple[int, int]:
        try:
            with self._connection().cursor() as cur:
                queue_id = self._queue_id(cur, queue, create=False)
                if queue_id is None:
                    return 0, 0
                row = cur.execute(
                    "SELECT COUNT(*), COALESCE(SUM(octet_length(body)), 0) FROM messages WHERE queue_id = %s",
                    (queue_id,),
                ).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def read_stream(self, name: str, start: int, limit: int) -> list[StreamMessage]:
        try:
            with self._connection().cursor() as cur:
                return self.streams.read(cur, name, start, limit)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None

    def stream_state(self, name: str) -> StreamState | None:
        try:
            with self._connection().cursor() as cur:
                return self.streams.state(cur, name)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None

    def stream_groups(self, name: str) -> dict[str, int]:
        try:
            with self._connection().cursor() as cur:
                return self.streams.groups(cur, name)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None

    def poll(self) -> list[tuple[str, StreamState]]:
        """The slow poll's read: every stream's state, and a ping (``p:``) to this broker's own
        listener, whose arrival shows that its connection still hears notifications."""
        try:
            with self._connection().cursor() as cur:
                cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, "p:" + self.broker_id))
                return self.streams.states(cur)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None

    def count(self, queue: str) -> int:
        return self._count(queue, "SELECT COUNT(*) FROM messages WHERE queue_id = %s")

    def queue_ages(self, queue: str) -> QueueAges:
        try:
            with self._connection().cursor() as cur:
                queue_id = self._queue_id(cur, queue, create=False)
                if queue_id is None:
                    return NO_AGES
                params = {"id": queue_id}
                ready = cur.execute(QUEUE_AGES_SQL.format(id="%(id)s", false="FALSE"), params).fetchone()
                unacked = cur.execute(QUEUE_UNACKED_AGE_SQL.format(id="%(id)s", true="TRUE", indexed=""),
                                      params).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None
        return (ready[0] if ready else None), (unacked[0] if unacked else None)

    def count_unacked(self, queue: str) -> int:
        return self._count(queue, "SELECT COUNT(*) FROM messages WHERE queue_id = %s AND delivered")

    def _count(self, queue: str, query: str) -> int:
        try:
            with self._connection().cursor() as cur:
                queue_id = self._queue_id(cur, queue, create=False)
                if queue_id is None:
                    return 0
                row = cur.execute(query, (queue_id,)).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None
        return int(row[0]) if row else 0

    def queue_names(self, prefix: str) -> list[str]:
        vhost, start = split_key(prefix)
        try:
            rows = self._connection().execute(
                "SELECT name FROM queues WHERE vhost = %s AND starts_with(name, %s)", (vhost, start)
            ).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None
        return [vhost_space(vhost) + name for (name,) in rows]

    def queue_exists(self, name: str) -> bool:
        try:
            with self._connection().cursor() as cur:
                return self._queue_id(cur, name, create=False) is not None
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None

    def queue_page(self, after: str, limit: int) -> list[QueueCount]:
        vhost, name = split_key(after)
        try:
            rows = self._connection().execute(
                QUEUE_PAGE_SQL.format(true="TRUE", false="FALSE", vhost="%s", after="%s", limit="%s"), (vhost, name, limit)
            ).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None
        space = vhost_space(vhost)
        return [QueueCount(space + name, *counts) for name, *counts in rows]

    def brokers(self) -> tuple[list[BrokerLease], dict[str, int]]:
        """Every broker on the database with its lease and what it holds under it, and what the
        brokers that left it counted."""
        try:
            conn = self._connection()
            rows = conn.execute(BROKERS_SQL).fetchall()
            departed = pg_liveness.departed(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None
        return [BrokerLease(id_, int(epoch), until.timestamp(), None if renewed is None else renewed.timestamp(),
                            int(claimed), int(unacked), version, live, {} if counters is None else _loads(counters))
                for id_, epoch, until, renewed, version, live, counters, claimed, unacked in rows], departed

    def definitions(self) -> tuple[list[str], list[ExchangeRecord], list[BindingRecord], list[dict[str, Any]]]:
        try:
            conn = self._connection()
            return (*recovery.definitions(conn), recovery.policies(conn))
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {_one_line(exc)}") from None


class Listener:
    """A thread with its own connection, LISTENing on ``CHANNEL``: each notification goes to
    ``deliver`` on the trio thread (one ``run_sync_soon`` per batch received)."""

    def __init__(self, url: str, broker_id: str, token: trio.lowlevel.TrioToken,
                 deliver: Callable[[list[str]], None]) -> None:
        self.url = url
        self.broker_id = broker_id
        self._token = token
        self._deliver = deliver
        self._stop = threading.Event()
        #: set once the first LISTEN is in place: notifications from then on are never missed
        self.listening = threading.Event()
        #: when a notification last came (``p:`` pings included): the connection was alive then
        self.heard = -math.inf
        self._thread = threading.Thread(target=self._main, name=f"stompmq-listen {masked(url)}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(LISTEN_TICK * 4)

    def _main(self) -> None:
        connected_before = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    if connected_before:
                        self._send(["*"])  # notifications may have been lost meanwhile: look again
                    connected_before = True
                    while not self._stop.is_set():
                        # Each packet as it comes (stop_after counts packets' worth): the others
                        # hear of claims given back and demand at once, not a tick later.
                        batch = [n.payload for n in conn.notifies(timeout=LISTEN_TICK, stop_after=1)]
                        if batch:
                            self.heard = time.monotonic()
                            self._send(self._resolve(conn, batch))
            except psycopg.Error:
                self._stop.wait(LISTEN_RETRY)

    def _resolve(self, conn: psycopg.Connection[Any], payloads: list[str]) -> list[str]:
        """Replace relayed topic messages by the message itself (read from topic_relay), and
        another broker's stream news by the stream's state (``S:`` + JSON, once per stream)."""
        out = []
        streams = SharedStreams(self.broker_id)
        for payload in dict.fromkeys(payloads):
            if payload.startswith("p:"):
                continue  # a broker's ping to its own listener: ``heard`` is all it is for
            if payload.startswith("s:"):
                origin, _, key = payload[2:].partition(":")
                if origin == self.broker_id:
                    continue  # our own commit told our engine already
                with conn.cursor() as cur:
                    state = streams.state(cur, key)
                payload = "S:" + _dumps([key, None if state is None else list(dataclasses.astuple(state))])
            elif payload.startswith("r:"):
                ref = _loads(payload[2:])
                if ref["b"] == self.broker_id:
                    continue
                row = conn.execute(
                    "SELECT topic, headers, body FROM topic_relay WHERE id = %s", (ref["i"],)
                ).fetchone()
                if row is None:
                    continue  # expired before we got to it
                payload = "t:" + _dumps(
                    {"b": ref["b"], "t": row[0], "h": _loads(row[1]), "d": base64.b64encode(bytes(row[2])).decode()}
                )
            out.append(payload)
        return out

    def _send(self, payloads: list[str]) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._deliver, payloads)


class PostgresStore(GroupCommitStore):
    """A durable store in PostgreSQL with group commit; several brokers may share the database."""

    shared = True

    def __init__(
        self,
        url: str,
        *,
        flush_interval: float = FLUSH_INTERVAL,
        max_group: int = MAX_GROUP,
        max_backlog_bytes: int = MAX_BACKLOG_BYTES,
        lease: float = 10.0,
        poll: float = 5.0,
    ) -> None:
        self._pg = PostgresBackend(url, lease=lease)
        super().__init__(
            self._pg, flush_interval=flush_interval, max_group=max_group, max_backlog_bytes=max_backlog_bytes
        )
        self.url = url
        self.lease = lease
        self.poll = poll
        self._blocks: deque[tuple[int, int]] = deque()
        self._want_block = trio.Event()
        self._listener: Listener | None = None
        self._epoch: int | None = None  # the lease epoch of the claims the engine holds in memory
        self._departed: dict[str, int] = {}  # what departed brokers counted, as of ``brokers()``

    @property
    def node_id(self) -> str:
        return self._pg.broker_id

    def claims_valid(self) -> bool:
        return self._pg.epoch == self._epoch and time.monotonic() < self._pg.valid_until

    def claims_epoch(self) -> int | None:
        return self._epoch

    async def browse(self, queue: str, after: tuple[int, int] | None, limit: int) -> Sequence[StoredMessage]:
        return await self._read(self._pg.browse, queue, after, limit)

    async def browse_due(
        self, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> Sequence[StoredMessage]:
        return await self._read(self._pg.browse_due, after, limit, vhost)

    async def brokers(self) -> list[BrokerLease]:
        leases, self._departed = await self._read(self._pg.brokers)
        return leases

    def departed_counters(self) -> dict[str, int]:
        return self._departed

    async def open(self) -> Recovery:
        recovery = await super().open()
        self._epoch = self._pg.epoch
        try:
            for _ in range(2):  # one to use, one spare: the next is fetched while the spare is used
                self._blocks.append(await self._call(self._pg.seq_block))
        except BaseException:
            with trio.CancelScope(shield=True):
                await super().close()
            raise
        # Listening before the broker serves anyone: a subscriber's first read (its demand) or
        # another broker's freed claims right after the start must not go unheard until the poll.
        listener = self._listener = Listener(
            self.url, self._pg.broker_id, trio.lowlevel.current_trio_token(), self._notified
        )
        listener.start()
        await trio.to_thread.run_sync(listener.listening.wait, CONNECT_TIMEOUT)
        return recovery

    async def close(self) -> None:
        if self._thread is not None:
            self._pg.final_counters = self.events.own_counters()  # (written by the clean close)
        listener, self._listener = self._listener, None
        if listener is not None:
            await trio.to_thread.run_sync(listener.stop)
        await super().close()

    def seq_block(self, last: int) -> tuple[int, int]:
        """The next ``SEQ_CHUNK`` numbers of the database's block in use: every vhost's engine
        takes its own chunks, so a few vhosts starting at once do not empty the spare blocks."""
        if not self._blocks:
            raise StoreError("out of sequence numbers: the database did not answer in time")
        start, end = self._blocks[0]
        if end - start <= SEQ_CHUNK:
            self._blocks.popleft()
            self._want_block.set()
            return start, end
        self._blocks[0] = (start + SEQ_CHUNK, end)
        return start, start + SEQ_CHUNK

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(super().run)
            nursery.start_soon(self._renew_leases)
            nursery.start_soon(self._sweep)
            nursery.start_soon(self._refill_seqs)
            nursery.start_soon(self._poll)

    async def _call(self, fn: Callable[[], Any]) -> Any:
        """``fn`` on the database thread; its failure or success counts for the outage record
        (which logs an outage once, so the callers log nothing)."""
        thread = self._thread
        if thread is None:
            raise StoreError(f"{self._pg.name} is not open")
        try:
            result = await thread.call(fn)
        except StoreError as exc:
            self._outage.failed(exc)
            raise
        self._outage.succeeded()
        return result

    async def _renew_leases(self) -> None:
        while True:
            await trio.sleep(self.lease / 3)
            # Until when the engine may deliver what it claimed (-inf: it may not now).  A renewal
            # that comes back after that (the database thread was busy, the database slow) finds
            # the trust run out meanwhile: pumps were refused then, so pump again, or a queue
            # whose subscribers wait for nothing else (no delivery in flight, no news of the
            # store) stays idle beside free rows until the next renewal, lease / 3 later.
            trusted_until = self._pg.valid_until if self.claims_valid() else -math.inf
            try:
                await self._call(functools.partial(self._pg.renew, self.events.own_counters()))
            except StoreError:
                continue  # the store's outage record logs it (storage/outage.py)
            epoch = self._pg.epoch  # (a reconnection may have made it new before this renewal)
            if epoch != self._epoch:
                self._epoch = epoch
                self.events.claims_renewed(True)
            elif time.monotonic() >= trusted_until:
                self.events.claims_renewed(False)

    async def _sweep(self) -> None:
        """Between renewals, look for brokers that are gone (a crash ends their database session at
        once: storage/pg_liveness.py); one short transaction each time."""
        while True:
            await trio.sleep(pg_liveness.SWEEP_EVERY)
            with contextlib.suppress(StoreError):  # the store's outage record logs it
                await self._call(self._pg.sweep)

    async def _refill_seqs(self) -> None:
        while True:
            await self._want_block.wait()
            self._want_block = trio.Event()
            while len(self._blocks) < 2:
                try:
                    self._blocks.append(await self._call(self._pg.seq_block))
                except StoreError:
                    await trio.sleep(1.0)

    async def _poll(self) -> None:
        """The slow fallback: notifications can be lost with a connection.  A listener that
        reconnects says "look again" itself; the queues are looked at again here only when the
        last period's ping did not come back (a connection that died unnoticed), not with a page
        read per subscribed queue every period."""
        if not math.isfinite(self.poll) or self.poll <= 0:
            return
        pinged = -math.inf
        while True:
            await trio.sleep(self.poll)
            listener = self._listener
            if listener is None or listener.heard < pinged:
                self.events.queue_changed("*")
            pinged = time.monotonic()
            try:
                states = await self._call(self._pg.poll)
            except StoreError:
                continue
            for key, state in states:
                self.events.stream_changed(key, state)

    def _notified(self, payloads: list[str]) -> None:
        definitions = False
        for payload in payloads:
            kind, _, rest = payload.partition(":")
            if kind == "q":
                origin, _, rest = rest.partition(":")
                key, _, queue = rest.partition(":")
                if not origin:  # a broker's claims were freed (it stopped, or its lease lapsed):
                    self.events.queue_wanted(queue)  # its subscribers' share is everyone's now
                if origin != self._pg.broker_id:
                    priority, _, seq = key.partition(".")
                    self.events.queue_changed(queue, (int(priority), int(seq)) if seq else None)
            elif kind == "x":
                origin, _, rest = rest.partition(":")
                listed, _, queue = rest.partition(":")
                if origin != self._pg.broker_id:
                    keys = [(int(p), int(s)) for p, _, s in (key.partition(".") for key in listed.split(","))]
                    self.events.queue_changed(queue, min(keys), [seq for _, seq in keys])
            elif kind == "w":
                origin, _, queue = rest.partition(":")
                if origin != self._pg.broker_id:
                    self.events.queue_wanted(queue)
            elif kind == "*":
                self.events.queue_changed("*")
                definitions = True
            elif kind == "d":
                definitions = definitions or rest != self._pg.broker_id  # not our own change
            elif kind == "t":
                message = _loads(rest)
                if message["b"] != self._pg.broker_id:
                    self.events.topic(message["t"], message["h"], base64.b64decode(message["d"]))
            elif kind == "S":
                key, state = _loads(rest)
                self.events.stream_changed(key, None if state is None else StreamState(*state))
        if definitions and self._thread is not None:
            trio.lowlevel.spawn_system_task(self._reload_definitions)

    async def _reload_definitions(self) -> None:
        try:
            vhosts, exchanges, bindings, policies = await self._call(self._pg.definitions)
        except StoreError:
            return  # the store is down: its outage is logged once (storage/outage.py)
        self.events.vhosts_changed(vhosts)
        self.events.definitions_changed(exchanges, bindings)
        self.events.policies_changed(policies)
