"""PostgresBackend: a PostgreSQL database shared by several brokers, as the group-commit
engine's thread sees it (storage/postgres.py has the theory of operation).

Its commit applies a group under this broker's claims and lease epoch and tells the other
brokers what changed (LISTEN/NOTIFY); its page reads claim the rows they return; its leases
are renewed and the lapsed ones swept from here.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import time
import uuid
from typing import Any, TypeVar

import psycopg

from stompmq import __version__
from stompmq.logs import masked
from stompmq.storage import jsontext, pg_liveness, recovery
from stompmq.storage.base import (
    REFUSED_VALUES,
    CommitInDoubt,
    Recovery,
    StoreError,
    StoreRejected,
)
from stompmq.storage.groups import DROP_VHOST_SQL, DelayedRow, GroupRows, InsertRow, StructuralOp, TopicMessage
from stompmq.storage.migrate import is_current, upgrade_to_head
from stompmq.storage.pg_reads import PostgresReads
from stompmq.storage.pg_sql import (
    CAP_EXPIRY_SQL,
    CHANNEL,
    COPY_SQL,
    COPY_TYPES,
    DELAYED_COPY_SQL,
    DELAYED_COPY_TYPES,
    DELAYED_DELETE_SQL,
    DELETE_SQL,
    FREE_ROWS_SQL,
    LEASE_TRUST,
    MIGRATION_LOCK,
    MINE,
    NOTIFY_BODY_MAX,
    PASSED_PER_NOTIFY,
    QUEUE_ID_CACHE_MAX,
    RECONNECT_FIRST,
    RECONNECT_MAX,
    RELAY_KEEP,
    SEQ_BLOCK,
    UPDATE_SQL,
    Freed,
    connect,
    note_freed,
    one_line,
    sqlalchemy_url,
    stored_revisions,
)
from stompmq.storage.pg_streams import SharedStreams
from stompmq.storage.rows import (
    CapExpiry,
    DropBinding,
    DropExchange,
    DropStream,
    DropVhost,
    MetaFact,
    Purge,
    Release,
    SaveBinding,
    SaveExchange,
    SavePolicy,
    SaveQueue,
    SaveStream,
    SaveVhost,
    TrimStream,
)
from stompmq.vhost_names import split_key, vhost_space

log = logging.getLogger(__name__)
_dumps = jsontext.dumps
_headers_text = jsontext.headers_text
#: A row of a group's inserts, ready (``InsertRow``) or delayed (``DelayedRow``): its seq first.
Row = TypeVar("Row", InsertRow, DelayedRow)

#: What a commit catches, and among it what the rows caused (StoreRejected), not the database.
_COMMIT_ERRORS: tuple[type[Exception], ...] = (psycopg.Error, *REFUSED_VALUES)
_REFUSED: tuple[type[Exception], ...] = (psycopg.DataError, psycopg.IntegrityError, *REFUSED_VALUES)


class PostgresBackend(PostgresReads):
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
        conn = self._conn = connect(self.url)
        try:
            if not is_current(stored_revisions(conn)):
                conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
                try:
                    upgrade_to_head(sqlalchemy_url(self.url))
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        except Exception as exc:  # psycopg, alembic and SQLAlchemy errors alike
            raise StoreError(f"cannot migrate {self.name}: {one_line(exc)}") from None
        try:
            pg_liveness.hold(conn, self.broker_id)
            self._register(conn, fresh=True)
            with conn.transaction():
                self._free_gone(conn)  # a broker this one restarts after is gone: its claims free now
            vhosts, exchanges, bindings = recovery.definitions(conn)
            with conn.cursor() as cur:
                streams = self.streams.recover(cur)
            queues = recovery.queues(conn)
            meta = recovery.meta_facts(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot recover {self.name}: {one_line(exc)}") from None
        return Recovery(0, exchanges, bindings, streams, vhosts, queues, meta)

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
            conn = connect(self.url)
            pg_liveness.hold(conn, self.broker_id)
            self._register(conn, fresh=True)
        except (StoreError, psycopg.Error) as exc:
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
            if not self._down:  # the store logs the outage (storage/outage.py)
                log.debug("PostgreSQL %s is unreachable, retrying: %s", self.name, one_line(exc))
                self._down = True
            self._next_attempt = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, RECONNECT_MAX)
            raise StoreError(f"PostgreSQL {self.name} is unreachable: {one_line(exc)}") from None
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
            raise StoreError(f"cannot renew the lease on {self.name}: {one_line(exc)}") from None

    def sweep(self) -> None:
        """End the leases of the brokers that are gone and free their claims (between renewals:
        a crashed broker's messages are taken over within ``pg_liveness.SWEEP_EVERY``)."""
        conn = self._connection()
        try:
            with conn.transaction():
                self._free_gone(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None

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
            raise StoreError(f"cannot take sequence numbers from {self.name}: {one_line(exc)}") from None
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
                raise CommitInDoubt(f"commit to {self.name} may have failed: {one_line(exc)}") from None
            if isinstance(exc, _REFUSED):
                # the rows, not the database: the same rows would fail again (groupcommit isolates them)
                raise StoreRejected(f"{self.name} refused a value: {one_line(exc)}") from None
            raise StoreError(f"commit to {self.name} failed: {one_line(exc)}") from None

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
                            note_freed(freed, name, (-priority, seq))
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
                        note_freed(freed, name, (-prio, seq))
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
            case MetaFact():
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
                note_freed(freed, name, None)

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
