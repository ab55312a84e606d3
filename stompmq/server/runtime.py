"""The runtime that drives the pure engine: time, deadlines, store reads, the store's lifetime.

The engine (stompmq/broker) cannot await and reads no clock.  This module gives
it both: ``tick`` hands it trio's clock and the wall clock before any work,
one task sleeps until the engine's next deadline and runs what is due, another
performs the store reads the engine queued (page loads, ``/control`` counts)
and hands the results back.  The engine's waker sets an event, so neither task
polls: they sleep until a deadline or until the engine says there is work.
Everything the store reports (tickets committed or failed, commit groups, stream states, and
what other brokers sharing it did: new messages, topic messages, exchange changes) comes to the
runtime itself: it is the store's ``StoreEvents``, bound once, here, and hands each report to
the engines with their time brought up to date first.

Virtual hosts: one engine per vhost (``engines``), all on the one store.  The default
vhost's engine is the one the runtime is made with and uses the store itself; every other
gets a ``storage.vhosts.VhostStore`` view.  The runtime gives every engine the time, runs
every engine's deadlines and reads, and hands each the store's news about its own vhost
(the store names things by store key, ``vhost_space(vhost) + name``).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from ..broker import Broker
from ..broker.dispatch import settling_soon
from ..broker.exchanges import PRIVATE_QUEUE_PREFIX
from ..broker.reads import StoreRead
from ..broker.stats import totals
from ..storage.base import (
    Recovery,
    StoredMessage,
    StoreError,
    StoreEvents,
    StoreRejected,
    StreamState,
)
from ..storage.records import BindingRecord, ExchangeRecord
from ..storage.rows import DropVhost, SavePolicy, SaveShovel, SaveVhost
from ..storage.vhosts import VhostStore, split_definitions, split_recovery
from ..tomlfile import load_definitions
from ..vhost_names import DEFAULT_VHOST, split_key, vhost_space
from . import definitions_apply as definitions
from .alarms import ResourceAlarms
from .outbox import WriteBatch
from .policies import Policies
from .shovels import Shovels

if TYPE_CHECKING:
    from .otel import Tracing

log = logging.getLogger(__name__)

#: Commit latency buckets (seconds): an fsync is ~0.1-10 ms on SSDs, far more on a busy disk.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
GROUP_SIZE_BUCKETS = (1, 2, 5, 10, 50, 100, 500, 1000, 5000, 10000, 50000)


class Histogram:
    """Observations counted into buckets as plain integers, rendered for ``/metrics`` at scrape
    time (``metrics.histogram``): prometheus-client loads with the HTTP side, after the start."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # a bucket counts values <= its bound
        self.total += value


class StoreMetrics:
    """The store's commit groups, fed by ``StoreEvents.group_committed`` (per group, never per
    message).  A commit's latency includes its fsync: SQLite does not time them apart."""

    def __init__(self) -> None:
        self.latency = Histogram(LATENCY_BUCKETS)
        self.size = Histogram(GROUP_SIZE_BUCKETS)

    def observe(self, seconds: float, size: int) -> None:
        self.latency.observe(seconds)
        self.size.observe(size)


class Runtime(StoreEvents):
    """Drives every vhost's engine over the one store, and is what that store reports to."""

    def __init__(self, broker: Broker, alarms: ResourceAlarms | None = None, tracing: Tracing | None = None) -> None:
        self.broker = broker  # the default vhost's
        self.tracing = tracing  # spans of every vhost's queue messages (server/otel.py), or none
        self.alarms = alarms or ResourceAlarms()  # checked every second while the runtime runs
        self.store = store = broker.store
        #: vhost -> its engine (the default vhost's first)
        self.engines: dict[str, Broker] = {DEFAULT_VHOST: broker}
        self.shovels = Shovels(store)  # run by the server once it listens (app.serve)
        self.policies = Policies(store, self.engines)
        self._last_seq = 0  # as recovered: where every engine's sequence numbers start
        self._read_turn = 0  # which engine's reads come first next (round-robin)
        self._deadline_changed = trio.Event()
        self._reads_queued = trio.Event()
        self.store_metrics = StoreMetrics()  # the store's commit groups, for /metrics
        #: Open while a reader hands a read to an engine: deliveries then go out at its end (outbox.py).
        self.writes = WriteBatch()
        store.bind(self)
        self._watch(DEFAULT_VHOST, broker)

    def counter_totals(self) -> dict[str, int]:
        """This broker's counters summed over every vhost's queues since it started."""
        return totals(s for engine in self.engines.values() for s in engine.queue_stats.values())

    def tick(self) -> None:
        """Give the engines the current time: call before handing them anything."""
        now, wall = trio.current_time(), time.time()
        for engine in self.engines.values():
            engine.advance(now, wall)

    # -- vhosts ---------------------------------------------------------------------------------
    def declare(self, vhost: str) -> Broker:
        """The engine of ``vhost``, declaring the vhost (stored with the next commit) if it is new.
        The caller checks the name (``vhost_name_error``)."""
        engine = self.engines.get(vhost)
        if engine is None:
            self.store.write(SaveVhost(vhost))
            nothing = Recovery(self._last_seq, [], [], [], [vhost])
            engine = self._add(vhost, nothing)
            self.tick()
            engine.recover(nothing, [])
            log.info("vhost %s declared", vhost)
        return engine

    def delete(self, vhost: str) -> None:
        """Delete ``vhost`` (not the default one) with everything in it: streams, exchanges,
        declared queues, policies, then in the store its messages and the vhost.  The caller
        closes its connections first."""
        engine = self.engines[vhost]
        self.tick()
        for stream in list(engine.streams_by_name):
            engine.administer("delete/stream/" + stream)
        for name in engine.exchange_names():
            engine.administer("delete/exchange/" + name)
        for name in engine.declared_queues():
            engine.administer("delete/queue/" + name)
        for operator in (False, True):
            for policy in self.policies.of(vhost, operator):
                self.policies.delete(vhost, policy.name, operator)
        self.store.write(DropVhost(vhost))
        del self.engines[vhost]
        log.info("vhost %s deleted", vhost)

    def _add(self, vhost: str, recovery: Recovery) -> Broker:
        view = VhostStore(self.store, vhost, recovery)
        engine = self.engines[vhost] = Broker(view, self.broker.config)
        engine.set_waker(self._wake)
        self._watch(vhost, engine)
        return engine

    def _watch(self, vhost: str, engine: Broker) -> None:
        if self.tracing is not None:
            engine.observers.watch(self.tracing.spans(vhost))

    # -- what the store reports (StoreEvents) -------------------------------------------------------
    def committed(self, ticket: int) -> None:
        for engine in self.engines.values():
            engine.committed(ticket)

    def commit_failed(self, ticket: int, error: StoreError) -> None:
        self.tick()  # receipts measure how long they waited (--store-timeout)
        for engine in list(self.engines.values()):
            engine.commit_failed(ticket, error)

    def rejected(self, messages: list[StoredMessage], error: StoreRejected) -> None:
        self.tick()
        for vhost, engine in self.engines.items():
            space = vhost_space(vhost)
            mine = [msg for msg in messages if msg.space == space]
            if mine:
                engine.store_rejected(mine, error)

    def group_committed(self, seconds: float, size: int) -> None:
        self.store_metrics.observe(seconds, size)

    def own_counters(self) -> dict[str, int]:
        return self.counter_totals()

    def hold_back(self) -> Callable[[StoredMessage], bool]:
        return settling_soon  # one policy for every vhost's engine

    def queue_changed(self, key: str, first: tuple[int, int] | None = None,
                      passed: Sequence[int] | None = None) -> None:
        self.tick()
        if key == "*":
            for each in self.engines.values():
                each.store_changed(key)
            return
        vhost, name = split_key(key)
        engine = self.engines.get(vhost)
        if engine is not None:
            engine.store_changed(name, first, passed)

    def queue_wanted(self, key: str) -> None:
        self.tick()
        vhost, name = split_key(key)
        engine = self.engines.get(vhost)
        if engine is not None:
            engine.queue_wanted(name)

    def claims_renewed(self, lost: bool) -> None:
        self.tick()
        for engine in self.engines.values():
            engine.claims_renewed(lost)

    def topic(self, key: str, headers: dict[str, str], body: bytes) -> None:
        self.tick()
        vhost, name = split_key(key)
        engine = self.engines.get(vhost)
        if engine is not None:
            engine.remote_topic(name, headers, body)

    def stream_changed(self, key: str, state: StreamState | None) -> None:
        self.tick()
        vhost, name = split_key(key)
        engine = self.engines.get(vhost)
        if engine is not None:
            engine.stream_changed(name, state)

    def definitions_changed(self, exchanges: list[ExchangeRecord], bindings: list[BindingRecord]) -> None:
        self.tick()
        for vhost, (ours, bound) in split_definitions(exchanges, bindings, list(self.engines)).items():
            engine = self.engines.get(vhost)
            if engine is not None:
                engine.definitions_changed(ours, bound)

    def policies_changed(self, records: list[dict[str, Any]]) -> None:
        """Another broker changed the policies: apply all of them again."""
        self.tick()
        self.policies.load(records)

    def vhosts_changed(self, vhosts: list[str]) -> None:
        """Another broker declared vhosts: serve them too (their exchanges follow at once)."""
        self.tick()
        for vhost in vhosts:
            if vhost not in self.engines:
                self._add(vhost, Recovery(self._last_seq, [], [], [], [vhost]))
                log.info("vhost %s declared by another broker", vhost)

    def _wake(self) -> None:
        self._deadline_changed.set()
        self._reads_queued.set()

    async def open(self) -> Recovery:
        """Open the store and hand each vhost's engine what it recovered (and the definitions file)."""
        store = self.store
        recovery = await store.open()
        self._last_seq = recovery.last_seq
        try:
            path = self.broker.config.definitions
            data = load_definitions(path) if path else {}
            self.shovels.recover(recovery.facts(SaveShovel))
            for vhost, part in sorted(split_recovery(recovery).items()):
                engine = self.engines.get(vhost) or self._add(vhost, part)
                # Private queues left by a crash of this broker (on a store several brokers share,
                # the others' are theirs: only a store of one broker may purge them all).
                stale = [] if store.shared else await engine.store.queue_names(PRIVATE_QUEUE_PREFIX)
                self.tick()
                engine.recover(part, stale)
                for name, offsets in engine.stream_marks_wanted():
                    entries = [e for offset in offsets for e in await engine.store.read_stream(name, offset, 1)]
                    self.tick()
                    engine.load_stream_marks(name, entries)
            self.tick()
            self.policies.load(list(recovery.facts(SavePolicy).values()))
            if path:  # checked whole first: a file with any invalid entry changes nothing
                definitions.apply(self, definitions.plan(self, data, path, None))
            for engine in list(self.engines.values()):
                # What recovery and the file asked for (bounded queues' sizes, the delayed messages
                # due first) is read before the first client is served: a SEND must meet a full
                # queue as full.
                while (read := engine.take_read()) is not None:
                    await self._perform(read, engine)
        except BaseException:
            with trio.CancelScope(shield=True):
                await store.close()  # release the database (and its lock): the start failed
            raise
        return recovery

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The store's commit loop, the deadlines, the reads and the writes made outside a reader's
        call (``WriteBatch.run``), for the broker's lifetime."""
        for engine in self.engines.values():
            engine.set_waker(self._wake)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.store.run)
            nursery.start_soon(self._deadlines)
            nursery.start_soon(self._reads)
            nursery.start_soon(self.alarms.run)
            nursery.start_soon(self.writes.run)
            task_status.started()

    async def close(self) -> None:
        """Commit everything buffered and release the store."""
        await self.store.close()

    async def _deadlines(self) -> None:
        engines = self.engines
        while True:
            with trio.move_on_at(min(engine.next_deadline() for engine in engines.values())):
                await self._deadline_changed.wait()
            self._deadline_changed = trio.Event()
            self.tick()
            for engine in list(engines.values()):
                engine.run_due()

    async def _reads(self) -> None:
        while True:
            read, engine = self._next_read()
            if read is None:
                await self._reads_queued.wait()
                self._reads_queued = trio.Event()
                continue
            await self._perform(read, engine)

    async def _perform(self, read: StoreRead, engine: Broker) -> None:
        """Do one store read for ``engine`` (through its store view) and hand it the result (or
        the error)."""
        try:
            result = await read.fetch(engine.store)
        except StoreError as e:
            self.tick()
            read.failed(e)
        else:
            self.tick()
            read.done(result)

    def _next_read(self) -> tuple[StoreRead | None, Broker]:
        """A store read some engine wants, and that engine (the default one when none wants any).
        Engines take turns, so one vhost's paging cannot starve another's reads."""
        engines = list(self.engines.values())
        for i in range(len(engines)):
            engine = engines[(self._read_turn + i) % len(engines)]
            read = engine.take_read()
            if read is not None:
                self._read_turn += i + 1
                return read, engine
        return None, self.broker
