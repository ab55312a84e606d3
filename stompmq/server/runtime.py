"""The runtime that drives the pure engine: time, deadlines, store reads, the store's lifetime.

The engine (stompmq/broker) cannot await and reads no clock.  This module gives
it both: ``tick`` hands it trio's clock and the wall clock before any work,
one task sleeps until the engine's next deadline and runs what is due, another
performs the store reads the engine queued (page loads, ``/control`` counts)
and hands the results back.  The engine's waker sets an event, so neither task
polls: they sleep until a deadline or until the engine says there is work.
What other brokers sharing the store did (new messages, topic messages,
exchange changes) reaches the engine through the store's callbacks, wired here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import ParamSpec

import trio

from ..broker import Broker
from ..broker.definitions import load_definitions
from ..broker.exchanges import PRIVATE_QUEUE_PREFIX
from ..broker.reads import StoreRead
from ..storage.base import Recovery, StoreError

log = logging.getLogger(__name__)
P = ParamSpec("P")


class Runtime:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = store = broker.store
        self._deadline_changed = trio.Event()
        self._reads_queued = trio.Event()
        store.on_queue_changed = self._timed(broker.store_changed)
        store.on_topic = self._timed(broker.remote_topic)
        store.on_definitions_changed = self._timed(broker.definitions_changed)

    def _timed(self, fn: Callable[P, None]) -> Callable[P, None]:
        """``fn`` called with the engine's time brought up to date first."""

        def call(*args: P.args, **kwargs: P.kwargs) -> None:
            self.tick()
            fn(*args, **kwargs)

        return call

    def tick(self) -> None:
        """Give the engine the current time: call before handing it anything."""
        self.broker.advance(trio.current_time(), time.time())

    def _wake(self) -> None:
        self._deadline_changed.set()
        self._reads_queued.set()

    async def open(self) -> Recovery:
        """Open the store and hand the engine what it recovered (and the definitions file)."""
        store, broker = self.store, self.broker
        recovery = await store.open()
        try:
            # Private queues left by a crash of this broker (on a store several brokers share,
            # the others' are theirs: only a store of one broker may purge them all).
            stale = [] if store.shared else await store.queue_names(PRIVATE_QUEUE_PREFIX)
            path = broker.config.definitions
            definitions = load_definitions(path) if path else None
            self.tick()
            broker.recover(recovery, stale, definitions, path or "")
            for name, offsets in broker.streams.marks_wanted():
                entries = [entry for offset in offsets for entry in await store.read_stream(name, offset, 1)]
                self.tick()
                broker.streams.load_marks(name, entries)
            # What recovery asked for (bounded queues' sizes, the delayed messages due first) is
            # read before the first client is served: a SEND must meet a full queue as full.
            while (read := broker.take_read()) is not None:
                await self._perform(read)
        except BaseException:
            with trio.CancelScope(shield=True):
                await store.close()  # release the database (and its lock): the start failed
            raise
        return recovery

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The store's commit loop, the deadlines and the reads, for the broker's lifetime."""
        self.broker.set_waker(self._wake)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.store.run)
            nursery.start_soon(self._deadlines)
            nursery.start_soon(self._reads)
            task_status.started()

    async def close(self) -> None:
        """Commit everything buffered and release the store."""
        await self.store.close()

    async def _deadlines(self) -> None:
        broker = self.broker
        while True:
            with trio.move_on_at(broker.next_deadline()):
                await self._deadline_changed.wait()
            self._deadline_changed = trio.Event()
            self.tick()
            broker.run_due()

    async def _reads(self) -> None:
        broker = self.broker
        while True:
            read = broker.take_read()
            if read is None:
                await self._reads_queued.wait()
                self._reads_queued = trio.Event()
                continue
            await self._perform(read)

    async def _perform(self, read: StoreRead) -> None:
        """Do one store read for the engine and hand it the result (or the error)."""
        try:
            result = await read.fetch(self.store)
        except StoreError as e:
            self.tick()
            read.failed(e)
        else:
            self.tick()
            read.done(result)
