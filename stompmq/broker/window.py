"""The ready window of a queue: the head of its ready messages in memory, the rest in the store.

Theory of operation
-------------------
Messages live in the store; a queue only holds in memory the *head* of its
ready messages, in ``(priority desc, seq asc)`` order, at most ``capacity`` of
them (``None``: unbounded, for a store that is not durable).  ``boundary`` is
the order key of the last message the window covers while ``spilled`` says the
store holds ready messages beyond it (``boundary`` None while spilled: the
window covers nothing yet and the store holds the queue from its start).

* A message beyond the boundary stays in the store only (*skipped*); one before
  it enters the window, evicting the tail when full, which moves the boundary
  back (and bumps ``epoch``).
* When the window runs low the owner asks for a page: up to ``limit`` ready
  messages strictly after the boundary (``PageRequest``).  A page read runs
  concurrently with new SENDs, so two counters make merging it safe:
  ``epoch`` (a page asked for before the boundary moved back is stale and
  dropped) and ``skipped`` (a page that came back short only proves the store
  is exhausted if nothing was skipped meanwhile).  A message skipped while the
  read is in flight may be missed by the read (its insert may commit after it),
  so the lowest such key (``late``) cuts the page: only rows before it are used.

The window never reads the store and never delivers: ``Queue`` does the
dispatching, the engine runs the page reads.  Every transition is a method
here, and tests/broker/test_window.py covers each of them from a table.

Ready messages are kept per priority level in deques (FIFO within a level), so
the common single-priority case is a deque append and popleft.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Container, Sequence
from dataclasses import dataclass

from ..storage.base import StoredMessage

OrderKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class PageRequest:
    """A read of up to ``limit`` ready messages after ``after``, as the window was when asked."""

    after: OrderKey | None
    limit: int
    epoch: int
    skipped: int


class ReadyWindow:
    __slots__ = ("capacity", "levels", "prios", "size", "spilled", "boundary", "epoch", "loading", "skipped", "late")

    def __init__(self, capacity: int | None, spilled: bool) -> None:
        self.capacity = capacity  # None: everything stays in memory (non-durable store)
        self.levels: dict[int, deque[StoredMessage]] = {}
        self.prios: list[int] = []  # priorities present in `levels`, ascending
        self.size = 0  # ready messages in memory
        self.spilled = spilled  # the store holds ready messages after `boundary`
        self.boundary: OrderKey | None = None
        self.epoch = 0  # bumped whenever the boundary moves back
        self.loading = False  # a page read is in flight
        self.skipped = 0  # messages left to the store because they lie beyond the boundary
        self.late: OrderKey | None = None  # lowest key skipped while a page was loading

    # -- adding -------------------------------------------------------------------------------
    def push(self, msg: StoredMessage) -> bool:
        """A freshly sent message: newest of its priority, so it goes last in its level.
        False: it lies beyond the boundary and stays in the store only."""
        if self.spilled and (self.boundary is None or msg.order_key > self.boundary):
            self._skip(msg)
            return False
        level = self.levels.get(msg.priority)
        if level is None:
            level = self._new_level(msg.priority)
        level.append(msg)
        self.size += 1
        if self.capacity is not None and self.size > self.capacity:
            self._evict()
        return True

    def requeue(self, msg: StoredMessage) -> bool:
        """A message coming back (NACK, lost connection, ack timeout): back to its place by seq.
        False: it lies beyond the boundary and stays in the store only."""
        if self.spilled and (self.boundary is None or msg.order_key > self.boundary):
            self._skip(msg)
            return False
        level = self.levels.get(msg.priority)
        if level is None:
            level = self._new_level(msg.priority)
        if not level or level[0].seq > msg.seq:
            level.appendleft(msg)
        elif level[-1].seq < msg.seq:
            level.append(msg)
        else:
            index = next(i for i, m in enumerate(level) if m.seq > msg.seq)
            level.insert(index, msg)
        self.size += 1
        if self.capacity is not None and self.size > self.capacity:
            self._evict()
        return True

    def _skip(self, msg: StoredMessage) -> None:
        self.skipped += 1
        if self.loading and (self.late is None or msg.order_key < self.late):
            self.late = msg.order_key

    def _new_level(self, priority: int) -> deque[StoredMessage]:
        level: deque[StoredMessage] = deque()
        self.levels[priority] = level
        insort(self.prios, priority)
        return level

    def _evict(self) -> None:
        """Drop the tail of the window back to the store and move the boundary before it."""
        assert self.capacity is not None
        while self.size > self.capacity:
            prio = self.prios[0]
            level = self.levels[prio]
            level.pop()
            self.size -= 1
            if not level:
                del self.levels[prio]
                self.prios.pop(0)
        self.spilled = True
        self.boundary = self.levels[self.prios[0]][-1].order_key
        self.epoch += 1

    # -- taking -------------------------------------------------------------------------------
    def peek(self) -> StoredMessage:
        return self.levels[self.prios[-1]][0]

    def pop(self) -> StoredMessage:
        prio = self.prios[-1]
        level = self.levels[prio]
        msg = level.popleft()
        self.size -= 1
        if not level:
            del self.levels[prio]
            self.prios.pop()
        return msg

    def messages(self) -> list[StoredMessage]:
        """Every ready message in memory, in delivery order."""
        return [msg for prio in reversed(self.prios) for msg in self.levels[prio]]

    def store_changed(self) -> None:
        """Another broker sharing the store made ready messages of this queue: the store may
        hold some beyond what the window covers, and a page read in flight may miss them."""
        if not self.spilled:
            self.spilled = True
            self.boundary = self.levels[self.prios[0]][-1].order_key if self.size else None
        self.skipped += 1  # a short page in flight no longer proves the store exhausted

    def clear(self) -> None:
        """Forget every ready message held in memory (purge): the store is the truth again."""
        self.levels.clear()
        self.prios.clear()
        self.size = 0
        self.spilled = self.capacity is not None
        self.boundary = None
        self.epoch += 1

    # -- paging -------------------------------------------------------------------------------
    def wants_page(self) -> bool:
        """The store holds more, nothing is being read, and the window is at most half full."""
        return self.spilled and not self.loading and self.capacity is not None and self.size <= self.capacity // 2

    def start_page(self) -> PageRequest:
        """Mark a read in flight and describe it."""
        assert self.capacity is not None
        self.loading = True
        return PageRequest(self.boundary, max(1, self.capacity - self.size), self.epoch, self.skipped)

    def page_failed(self) -> None:
        """The read failed; the next ``wants_page`` asks again."""
        self.loading = False
        self.late = None

    def page_loaded(self, request: PageRequest, rows: Sequence[StoredMessage], inflight: Container[int]) -> None:
        """Merge the rows a read returned; ``inflight`` holds seqs out for delivery (not ready)."""
        self.loading = False
        late, self.late = self.late, None
        if request.epoch != self.epoch:
            return  # the boundary moved back meanwhile: this page may overlap the window
        if late is not None:  # the next page starts at the first message the read may have missed
            rows = [m for m in rows if m.order_key < late]
        for msg in rows:
            if msg.seq in inflight:
                continue
            level = self.levels.get(msg.priority)
            if level is None:
                level = self._new_level(msg.priority)
            level.append(msg)
            self.size += 1
        if rows:
            self.boundary = rows[-1].order_key
        if late is None and len(rows) < request.limit and request.skipped == self.skipped:
            self.spilled = False
            self.boundary = None
