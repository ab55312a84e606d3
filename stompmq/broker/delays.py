"""Delayed messages: held apart until due, the earliest in memory, the rest in the store.

Theory of operation
-------------------
A SEND with ``delay``, ``deliver-at`` or ``AMQ_SCHEDULED_DELAY`` is not ready: it is stored
apart (``delayed_messages``, indexed by due time) and, when due, published into its queue as a
new message (a new sequence number), so a queue orders it by the time it became ready: the
order is (priority, due time, sequence) without the queue's paging knowing about delays.

``Delayed`` keeps in memory, in a heap, only the messages due first, at most ``capacity`` (the
queue window's size; ``None`` with a store that keeps nothing: then all of them).  It is a
ready window keyed by ``(deliver_at, seq)`` instead of queue order: ``boundary`` is the key of
the last message it covers while ``spilled`` says the store may hold more after it; a message
sent beyond the boundary stays in the store only; when the heap is half empty it pages the next
ones in (``Store.load_due``, a range of the due-time index); a heap over capacity drops its
latest quarter back to the store.  The same two counters as the window's make a page read
that races with new SENDs safe (``epoch``: the boundary moved back; ``skipped`` and ``late``:
a message sent beyond the boundary while the read was in flight).

One deadline (``DELAY_DUE``) is armed for the earliest message; the engine's handler takes
what is due (``take_due``) and publishes it.  Deadlines run on the runtime's monotonic clock
and due times are wall-clock milliseconds: a timer that fires early re-arms for the rest.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial

from ..storage.base import Store, StoredMessage, StoreError
from .clock import Clock
from .reads import Reads, StoreRead
from .timers import Deadlines, Timer

log = logging.getLogger(__name__)

#: Deadline kinds: the earliest delayed message is due; a failed page read is retried.
DELAY_DUE = "delay-due"
DELAY_PAGE_RETRY = "delay-page-retry"
#: Seconds before a failed page read of delayed messages is retried.
PAGE_RETRY_SECONDS = 0.1
#: Delayed messages one read of a walk over them all takes (``DueWalk``).
WALK_PAGE = 1000

Key = tuple[int, int]  # (deliver_at, seq)


@dataclass(frozen=True, slots=True)
class DuePage:
    """A read of up to ``limit`` delayed messages after ``after``, as the schedule was when asked."""

    after: Key | None
    limit: int
    epoch: int
    skipped: int
    rescan: bool = False  # from the start, for rows another broker freed before the boundary


class Delayed:
    __slots__ = ("store", "deadlines", "reads", "capacity", "heap", "spilled", "boundary", "epoch", "loading",
                 "skipped", "late", "timer", "armed_for", "clock", "page_reads", "dropped", "withdrawn")

    def __init__(self, store: Store, clock: Clock, deadlines: Deadlines, reads: Reads, capacity: int | None) -> None:
        self.store = store
        self.deadlines = deadlines
        self.reads = reads
        self.capacity = capacity  # None: every delayed message stays in memory (non-durable store)
        self.heap: list[tuple[int, int, StoredMessage]] = []  # (deliver_at, seq, message)
        self.spilled = capacity is not None  # at start the store may hold any number of them
        self.boundary: Key | None = None
        self.epoch = 0
        self.loading = False
        self.skipped = 0
        self.late: Key | None = None
        self.timer: Timer | None = None
        self.armed_for: int | None = None  # the due time the timer is armed for
        self.clock = clock  # its wall time says what is due
        self.page_reads = 0
        self.dropped = 0  # the epoch of the last ``drop``: a read asked for before it is stale
        self.withdrawn: set[int] = set()  # seqs withdrawn while a read that may hold them was in flight

    def __len__(self) -> int:
        """Delayed messages in memory."""
        return len(self.heap)

    def start(self) -> None:
        """The broker starts: page in the earliest delayed messages the store holds."""
        self._page_if_wanted()

    def add(self, msg: StoredMessage) -> None:
        """Store a delayed message and keep it in memory if it is due before the boundary."""
        assert msg.deliver_at is not None
        key = (msg.deliver_at, msg.seq)
        if self.spilled and (self.boundary is None or key > self.boundary):
            self.skipped += 1
            if self.loading and (self.late is None or key < self.late):
                self.late = key
            msg.held = False
            self.store.insert(msg)
            self._page_if_wanted()
            return
        heapq.heappush(self.heap, (msg.deliver_at, msg.seq, msg))
        msg.held = True
        if self.capacity is not None and len(self.heap) > self.capacity:
            self._evict()
        self.store.insert(msg)
        self._arm()

    def _evict(self) -> None:
        """Leave the latest quarter to the store and move the boundary before it."""
        assert self.capacity is not None
        heap = self.heap
        heap.sort()  # a sorted list is a heap
        keep = max(1, self.capacity * 3 // 4)
        for _, _, msg in heap[keep:]:
            msg.held = False
        del heap[keep:]
        self.boundary = heap[-1][:2]
        self.spilled = True
        self.epoch += 1

    def take_due(self) -> list[StoredMessage]:
        """The messages due now, earliest first; re-arms for the next one."""
        self.timer = self.armed_for = None  # the timer that called this is spent
        heap, now, due = self.heap, self.clock.wall_ms, []
        while heap and heap[0][0] <= now:
            due.append(heapq.heappop(heap)[2])
        self._arm()
        self._page_if_wanted()
        return due

    def drop(self) -> None:
        """The lease this broker claimed them under lapsed (a shared store): another broker may
        promote them now.  Forget every one in memory (a pending insert goes in free) and read
        the store afresh, ignoring a read asked for before."""
        for _, _, msg in self.heap:
            msg.held = False
        self.heap.clear()
        if self.timer is not None:
            self.deadlines.cancel(self.timer)
        self.timer = self.armed_for = None
        self.spilled, self.boundary = True, None
        self.epoch += 1
        self.dropped = self.epoch
        self._page_if_wanted()

    def withdraw(self, row: StoredMessage) -> bool:
        """Cancel the delayed message ``row`` (a listing read it from the store): delete it, and
        take it out of memory if it is there.  False if it is no longer waiting: memory covers
        its due time but does not hold it, so it was promoted (or withdrawn) since."""
        return self.withdraw_all([row]) == 1

    def withdraw_all(self, rows: Sequence[StoredMessage]) -> int:
        """``withdraw`` each of ``rows`` (a purge of their queue), with one pass over memory:
        how many were still waiting."""
        wanted = {row.seq: row for row in rows}
        kept = []
        withdrawn = 0
        for entry in self.heap:
            msg = entry[2]
            if wanted.pop(msg.seq, None) is None:
                kept.append(entry)
                continue
            msg.held = False
            self.store.delete(msg)
            withdrawn += 1
        if withdrawn:
            heapq.heapify(kept)
            self.heap[:] = kept  # (the deadline armed for one of them finds nothing due, re-arms)
        for row in wanted.values():
            assert row.deliver_at is not None
            if not self.spilled or (self.boundary is not None and (row.deliver_at, row.seq) <= self.boundary):
                continue  # memory covers it and holds it no more: promoted (or withdrawn) since
            if self.loading:  # the read in flight may hold it (it was asked for before the delete)
                self.withdrawn.add(row.seq)
            self.store.delete(row)
            withdrawn += 1
        return withdrawn

    def deferred(self) -> None:
        """The deadline fired, but the engine promotes nothing now: ``rearm`` arms it again."""
        self.timer = self.armed_for = None

    def rearm(self) -> None:
        self._arm()

    def _arm(self) -> None:
        """Have the deadline fire when the earliest message in memory is due."""
        if not self.heap:
            return
        first = self.heap[0][0]
        if self.timer is not None:
            if self.armed_for is not None and self.armed_for <= first:
                return
            self.deadlines.cancel(self.timer)
        self.timer = self.deadlines.arm(max(0.0, (first - self.clock.wall_ms) / 1000), DELAY_DUE)
        self.armed_for = first

    def store_changed(self) -> None:
        """Another broker sharing the store may have freed delayed messages, due before the
        boundary too (a dead broker's): read the earliest again (the 5 s poll calls this)."""
        if self.capacity is not None and not self.loading:
            self._read(DuePage(None, self.capacity, self.epoch, self.skipped, rescan=True))

    def of_queue(self, queue: str) -> Callable[[Store], Awaitable[list[StoredMessage]]]:
        """A read of every delayed message of ``queue`` (a purge's), for ``withdraw_all``: the
        store's rows in due order (a walk over every queue's: ``DueWalk``), or, on a store
        that keeps nothing, those in memory."""
        if self.capacity is None:
            held = [msg for _, _, msg in self.heap if msg.queue == queue]
            return lambda store: _now(held)

        async def fetch(store: Store) -> list[StoredMessage]:
            walk, found = DueWalk(store), []
            while not walk.done:
                found += [msg for msg in await walk.next_page() if msg.queue == queue]
            return found

        return fetch

    # -- paging -------------------------------------------------------------------------------
    def _page_if_wanted(self) -> None:
        capacity = self.capacity
        if capacity is None or not self.spilled or self.loading or len(self.heap) > capacity // 2:
            return
        self._read(DuePage(self.boundary, max(1, capacity - len(self.heap)), self.epoch, self.skipped))

    def _read(self, request: DuePage) -> None:
        self.loading = True
        self.page_reads += 1

        def fetch(store: Store) -> Awaitable[Sequence[StoredMessage]]:
            return store.load_due(request.after, request.limit)

        self.reads.submit(StoreRead(fetch, partial(self._loaded, request), self._failed))

    def _loaded(self, request: DuePage, rows: Sequence[StoredMessage]) -> None:
        self.loading = False
        late, self.late = self.late, None
        withdrawn, self.withdrawn = self.withdrawn, set()  # (empty but after a cancel)
        if request.epoch < self.dropped:
            pass  # claimed under a lease that lapsed since: the rows may be another broker's
        elif request.rescan:
            self._rescanned(request, rows, late, withdrawn)
        elif request.epoch == self.epoch:
            if late is not None:  # a message sent meanwhile may be missing: stop before it
                rows = [m for m in rows if (m.deliver_at, m.seq) < late]
            for msg in rows:
                assert msg.deliver_at is not None
                if msg.seq not in withdrawn:
                    heapq.heappush(self.heap, (msg.deliver_at, msg.seq, msg))
            if rows:
                last = rows[-1]
                assert last.deliver_at is not None
                self.boundary = (last.deliver_at, last.seq)
            if late is None and len(rows) < request.limit and request.skipped == self.skipped:
                self.spilled = False
                self.boundary = None
            self._arm()
        self._page_if_wanted()

    def _rescanned(self, request: DuePage, rows: Sequence[StoredMessage], late: Key | None,
                   withdrawn: set[int]) -> None:
        """Add the rows a rescan found that are not here and lie within what the schedule
        covers (the rest come with the pages after the boundary)."""
        here = {seq for _, seq, _ in self.heap}
        cut = self.boundary if self.spilled else None
        if late is not None and (cut is None or late < cut):
            cut = late  # a SEND during the read may be missing from it: the boundary stops before it
        if len(rows) == request.limit:  # the store may hold more than the rescan saw
            last = rows[-1]
            assert last.deliver_at is not None
            key = (last.deliver_at, last.seq)
            cut = key if cut is None or key < cut else cut
        if cut is not None and (self.boundary is None or cut < self.boundary or not self.spilled):
            self.spilled, self.boundary = True, cut
            self.epoch += 1
            kept = [entry for entry in self.heap if entry[:2] <= cut]  # the rest: read again later
            if len(kept) < len(self.heap):
                for _, _, msg in self.heap:
                    if (msg.deliver_at, msg.seq) > cut:
                        msg.held = False
                heapq.heapify(kept)
                self.heap = kept
        for msg in rows:
            assert msg.deliver_at is not None
            if msg.seq not in here and msg.seq not in withdrawn and (cut is None or (msg.deliver_at, msg.seq) <= cut):
                heapq.heappush(self.heap, (msg.deliver_at, msg.seq, msg))
        if self.capacity is not None and len(self.heap) > self.capacity:
            self._evict()
        self._arm()

    def _failed(self, error: StoreError) -> None:
        log.debug("reading delayed messages failed, retrying: %s", error)  # the store logs its outage
        self.deadlines.arm(PAGE_RETRY_SECONDS, DELAY_PAGE_RETRY)

    def retry_page(self) -> None:
        self.loading = False
        self._page_if_wanted()


class DueWalk:
    """A walk over every delayed message of the store's vhost in due order, ``page`` rows a
    read, claiming nothing (``Store.browse_due``): the walks of a listing's cancel and of a
    purge.  A class rather than an async generator, which the compiled engine cannot have."""

    def __init__(self, store: Store, page: int = WALK_PAGE) -> None:
        self.store = store
        self.page = page
        self.after: Key | None = None
        self.done = False  # the last read came back short: nothing is left

    async def next_page(self) -> Sequence[StoredMessage]:
        rows = await self.store.browse_due(self.after, self.page)
        if len(rows) < self.page:
            self.done = True
        else:
            last = rows[-1]
            assert last.deliver_at is not None
            self.after = (last.deliver_at, last.seq)
        return rows


async def _now(rows: list[StoredMessage]) -> list[StoredMessage]:
    return rows
