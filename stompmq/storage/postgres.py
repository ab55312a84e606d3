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
import functools
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import trio

from stompmq.storage import jsontext, pg_liveness
from stompmq.storage.base import (
    SEQ_CHUNK,
    Brokers,
    Recovery,
    StoredMessage,
    StoreError,
    StreamState,
)
from stompmq.storage.groupcommit import FLUSH_INTERVAL, MAX_BACKLOG_BYTES, MAX_GROUP, GroupCommitStore
from stompmq.storage.pg_backend import PostgresBackend
from stompmq.storage.pg_listener import Listener
from stompmq.storage.pg_sql import (
    CONNECT_TIMEOUT,
)
from stompmq.vhost_names import DEFAULT_VHOST

_loads = jsontext.loads


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

    async def brokers(self) -> Brokers:
        leases, departed = await self._read(self._pg.brokers)
        return Brokers(leases, departed)

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
