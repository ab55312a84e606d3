"""The reads of a shared PostgreSQL database: page reads that claim the rows they return
(``FOR UPDATE SKIP LOCKED``, so two brokers paging one queue never take the same row), reads
that only look (browsing, the schedule listing), counts, streams' committed states, and the
brokers' leases; a part of ``PostgresBackend`` (storage/pg_backend.py), on its database thread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from stompmq.storage import jsontext, pg_liveness, recovery
from stompmq.storage.ages import NO_AGES, QUEUE_AGES_SQL, QUEUE_UNACKED_AGE_SQL, QueueAges
from stompmq.storage.backend import QUEUE_PAGE_SQL
from stompmq.storage.base import (
    BrokerLease,
    QueueCount,
    StoredMessage,
    StoreError,
    StreamMessage,
    StreamState,
)
from stompmq.storage.header_filter import HeaderFilter
from stompmq.storage.pg_sql import (
    BROKERS_SQL,
    BROWSE_AFTER_SQL,
    BROWSE_DUE_SQL,
    BROWSE_FIRST_SQL,
    CHANNEL,
    CLAIM_AFTER_SQL,
    CLAIM_DUE_SQL,
    CLAIM_FIRST_SQL,
    DEMAND_EVERY,
    DUE_AFTER_KEY,
    EXPIRED_SQL,
    NEXT_EXPIRY_SQL,
    QUEUE_ID_CACHE_MAX,
    one_line,
)
from stompmq.storage.pg_streams import SharedStreams
from stompmq.storage.records import BindingRecord, ExchangeRecord
from stompmq.storage.rows import SavePolicy
from stompmq.vhost_names import split_key, vhost_space

_headers, _loads = jsontext.headers, jsontext.loads


class PostgresReads:
    """``PostgresBackend``'s reads; the backend holds the connection, the claims' owner and
    epoch, and the queue ids they use."""

    broker_id: str
    epoch: int | None
    streams: SharedStreams
    _demanded: dict[str, float]

    if TYPE_CHECKING:  # the backend's, declared for the type checker
        @property
        def name(self) -> str: ...
        def _connection(self) -> psycopg.Connection[Any]: ...
        def _queue_id(self, cur: psycopg.Cursor[Any], name: str, *, create: bool) -> int | None: ...

    # -- reads -----------------------------------------------------------------------------------
    def load_ready(self, queue: str, after: tuple[int, int] | None, limit: int,
                   matching: HeaderFilter | None = None) -> Sequence[StoredMessage]:
        """Claim up to ``limit`` free ready messages of ``queue`` after ``after`` for this broker,
        telling the other brokers that its subscribers want that queue (claim on demand).
        ``matching`` is not applied: the broker asks for none on a shared store, whose rows
        its selectors do not match it frees for the others (broker/sift.py)."""
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
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None
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
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None
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
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None
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
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def read_stream(self, name: str, start: int, limit: int) -> list[StreamMessage]:
        try:
            with self._connection().cursor() as cur:
                return self.streams.read(cur, name, start, limit)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None

    def stream_state(self, name: str) -> StreamState | None:
        try:
            with self._connection().cursor() as cur:
                return self.streams.state(cur, name)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None

    def stream_groups(self, name: str) -> dict[str, int]:
        try:
            with self._connection().cursor() as cur:
                return self.streams.groups(cur, name)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None

    def poll(self) -> list[tuple[str, StreamState]]:
        """The slow poll's read: every stream's state, and a ping (``p:``) to this broker's own
        listener, whose arrival shows that its connection still hears notifications."""
        try:
            with self._connection().cursor() as cur:
                cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, "p:" + self.broker_id))
                return self.streams.states(cur)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None

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
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None
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
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None
        return int(row[0]) if row else 0

    def queue_names(self, prefix: str) -> list[str]:
        vhost, start = split_key(prefix)
        try:
            rows = self._connection().execute(
                "SELECT name FROM queues WHERE vhost = %s AND starts_with(name, %s)", (vhost, start)
            ).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None
        return [vhost_space(vhost) + name for (name,) in rows]

    def queue_exists(self, name: str) -> bool:
        try:
            with self._connection().cursor() as cur:
                return self._queue_id(cur, name, create=False) is not None
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None

    def queue_page(self, after: str, limit: int) -> list[QueueCount]:
        vhost, name = split_key(after)
        try:
            rows = self._connection().execute(
                QUEUE_PAGE_SQL.format(true="TRUE", false="FALSE", vhost="%s", after="%s", limit="%s"), (vhost, name, limit)
            ).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None
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
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None
        return [BrokerLease(id_, int(epoch), until.timestamp(), None if renewed is None else renewed.timestamp(),
                            int(claimed), int(unacked), version, live, {} if counters is None else _loads(counters))
                for id_, epoch, until, renewed, version, live, counters, claimed, unacked in rows], departed

    def definitions(self) -> tuple[list[str], list[ExchangeRecord], list[BindingRecord], list[dict[str, Any]]]:
        try:
            conn = self._connection()
            policies = recovery.meta_facts(conn, [SavePolicy.PREFIX])[SavePolicy.PREFIX]
            return (*recovery.definitions(conn), list(policies.values()))
        except psycopg.Error as exc:
            raise StoreError(f"cannot read {self.name}: {one_line(exc)}") from None
