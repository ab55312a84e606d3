"""Expired messages deep in the store: found through the expiry index and removed in batches.

A message that expires at a queue's head is dropped when dispatch reaches it (dispatch.py);
one that nobody reaches (a queue without subscribers, or behind a long backlog) would wait
forever.  So the dispatcher arms ``EXPIRY_SWEEP`` a second after the earliest expiry it stores,
and ``ExpirySweep`` then asks the store for up to ``EXPIRY_BATCH`` ready messages past their
expiry (``Store.load_expired``: a range of the partial index on ``(expires, seq)``, never a
queue), and removes them as its queue's policy says (dropped, or dead-lettered with
``dead-letter-reason:expired``).  A full batch is followed at once by the next one, from where
it stopped; otherwise the next sweep comes a second after the next expiry the store reports.

Messages this broker holds in memory (its ready window covers them, a page of their queue is
being read, or they are in flight) are left to dispatch: dropping them here too could
dead-letter a message twice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence

from ..storage.base import Store, StoredMessage, StoreError
from .dispatch import EXPIRED, SWEEP_MS, Dispatcher
from .reads import StoreRead

log = logging.getLogger(__name__)

#: Expired messages one sweep removes at most (their bodies are read: the batch bounds memory).
EXPIRY_BATCH = 1000

Swept = tuple[Sequence[StoredMessage], int | None]


class ExpirySweep:
    __slots__ = ("dispatcher", "cursor", "reading", "sweeps", "removed")

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.cursor: tuple[int, int] | None = None  # (expires, seq) where a full batch stopped
        self.reading = False
        self.sweeps = 0  # store reads made
        self.removed = 0  # expired messages they removed

    def run(self) -> None:
        """The EXPIRY_SWEEP deadline: read the next batch of expired messages."""
        dispatcher = self.dispatcher
        dispatcher.sweep_timer = None
        dispatcher.sweep_at = float("inf")
        if self.reading:
            return  # the read in flight arms the next sweep
        self.reading = True
        self.sweeps += 1
        now, after = dispatcher.wall_ms, self.cursor

        def fetch(store: Store) -> Awaitable[Swept]:
            return store.load_expired(now, after, EXPIRY_BATCH)

        dispatcher.reads.submit(StoreRead(fetch, self._swept, self._failed))

    def _swept(self, result: Swept) -> None:
        rows, next_expiry = result
        self.reading = False
        dispatcher = self.dispatcher
        for msg in rows:
            if not self._held(msg):
                dispatcher.discard(msg, EXPIRED, dispatcher.queue_stats(msg.queue))
                self.removed += 1
        if len(rows) == EXPIRY_BATCH:
            last = rows[-1]
            assert last.expires is not None
            self.cursor = (last.expires, last.seq)
            dispatcher.arm_sweep(dispatcher.wall_ms)
            return
        self.cursor = None
        if next_expiry is not None:
            dispatcher.arm_sweep(max(next_expiry, dispatcher.wall_ms) + SWEEP_MS)

    def _failed(self, error: StoreError) -> None:
        self.reading = False
        log.debug("looking for expired messages failed, retrying: %s", error)  # the store logs its outage
        self.dispatcher.arm_sweep(self.dispatcher.wall_ms + SWEEP_MS)

    def _held(self, msg: StoredMessage) -> bool:
        """Does this broker hold the message in memory (so dispatch, not the sweep, drops it)?"""
        queue = self.dispatcher.queues.get(msg.queue)
        if queue is None:
            return False
        return msg.seq in queue.inflight or queue.window.holds(msg)
