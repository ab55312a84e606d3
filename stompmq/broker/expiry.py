"""Expired messages deep in the store: found through the expiry index and removed in batches.

A message that expires at a queue's head is dropped when dispatch reaches it (dispatch.py);
one that nobody reaches (a queue without subscribers, or behind a long backlog) would wait
forever.  So the dispatcher has ``EXPIRY_SWEEP`` armed a second after the earliest expiry it
stores (``ExpirySweep.arm``), and ``ExpirySweep`` then asks the store for up to
``EXPIRY_BATCH`` ready messages past their expiry (``Store.load_expired``: a range of the
partial index on ``(expires, seq)``, never a queue), and has the dispatcher remove them as
their queue's policy says (dropped, or dead-lettered with ``dead-letter-reason:expired``).  A
full batch is followed at once by the next one, from where it stopped; otherwise the next sweep
comes a second after the next expiry the store reports.

Messages this broker holds in memory (its ready window covers them, a page of their queue is
being read, or they are in flight) are left to dispatch: dropping them here too could
dead-letter a message twice.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence

from ..storage.base import Store, StoredMessage, StoreError
from .clock import Clock
from .reads import Reads, StoreRead
from .timers import Deadlines, Timer

log = logging.getLogger(__name__)

#: Deadline kind: look in the store for expired messages; armed for a second after the earliest
#: expiry stored, so sweeps come at most about once a second.
EXPIRY_SWEEP = "expiry-sweep"
SWEEP_MS = 1000
#: Expired messages one sweep removes at most (their bodies are read: the batch bounds memory).
EXPIRY_BATCH = 1000

Swept = tuple[Sequence[StoredMessage], int | None]


class ExpirySweep:
    __slots__ = ("clock", "deadlines", "reads", "expire", "holds", "at", "timer", "cursor", "reading", "sweeps",
                 "removed")

    def __init__(self, clock: Clock, deadlines: Deadlines, reads: Reads, durable: bool,
                 expire: Callable[[StoredMessage], None], holds: Callable[[StoredMessage], bool]) -> None:
        self.clock = clock
        self.deadlines = deadlines
        self.reads = reads
        self.expire = expire  # removes an expired message as its queue's policy says
        self.holds = holds  # does this broker hold the message in memory (dispatch drops it there)?
        #: wall ms the EXPIRY_SWEEP deadline is armed for: inf, none; -inf, never (a store that
        #: keeps nothing has nothing to sweep), so ``expires + SWEEP_MS < at`` is the whole test
        #: a publish makes
        self.at = math.inf if durable else -math.inf
        self.timer: Timer | None = None
        self.cursor: tuple[int, int] | None = None  # (expires, seq) where a full batch stopped
        self.reading = False
        self.sweeps = 0  # store reads made
        self.removed = 0  # expired messages they removed

    def arm(self, at_ms: float) -> None:
        """Look for expired messages in the store by wall time ``at_ms`` (or earlier)."""
        if at_ms >= self.at:
            return
        if self.timer is not None:
            self.deadlines.cancel(self.timer)
        self.at = at_ms
        self.timer = self.deadlines.arm(max(0.0, (at_ms - self.clock.wall_ms) / 1000), EXPIRY_SWEEP)

    def soon(self) -> None:
        """Sweep a second from now (at start: whatever expired while the broker was stopped)."""
        self.arm(self.clock.wall_ms + SWEEP_MS)

    def run(self) -> None:
        """The EXPIRY_SWEEP deadline: read the next batch of expired messages."""
        self.timer = None
        self.at = math.inf
        if self.reading:
            return  # the read in flight arms the next sweep
        self.reading = True
        self.sweeps += 1
        now, after = self.clock.wall_ms, self.cursor

        def fetch(store: Store) -> Awaitable[Swept]:
            return store.load_expired(now, after, EXPIRY_BATCH)

        self.reads.submit(StoreRead(fetch, self._swept, self._failed))

    def _swept(self, result: Swept) -> None:
        rows, next_expiry = result
        self.reading = False
        for msg in rows:
            if not self.holds(msg):
                self.expire(msg)
                self.removed += 1
        if len(rows) == EXPIRY_BATCH:
            last = rows[-1]
            assert last.expires is not None
            self.cursor = (last.expires, last.seq)
            self.arm(self.clock.wall_ms)
            return
        self.cursor = None
        if next_expiry is not None:
            self.arm(max(next_expiry, self.clock.wall_ms) + SWEEP_MS)

    def _failed(self, error: StoreError) -> None:
        self.reading = False
        log.debug("looking for expired messages failed, retrying: %s", error)  # the store logs its outage
        self.soon()
