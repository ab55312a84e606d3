"""An active queue: its in-memory head window of ready messages and its subscribers.

Theory of operation
-------------------
Messages live in the store; a queue only holds in memory the *head* of its
ready messages, in ``(priority desc, seq asc)`` order, at most ``window`` of
them (unbounded for a store that is not durable).  ``boundary`` is the order
key of the last message the window covers while ``spilled`` says the store
holds ready messages beyond it.  A new message beyond the boundary stays in the
store only; one before it enters the window (evicting the tail when full,
which moves the boundary back).  When the window runs low the broker pages the
next messages in after the boundary, so the order is the same whether a
message came from memory or from disk.

Ready messages are kept per priority level in deques (FIFO within a level), so
the common single-priority case is a deque append and popleft.

Subscriptions with room sit in ``ready_subs``, a round-robin deque: each
delivery costs O(1) however many subscribers the queue has.  Subscriptions
that lost their room or unsubscribed are dropped lazily when they reach the
front, and put back when an ACK or a drained socket gives them room again.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..storage.base import StoredMessage
from .subscription import Subscription

if TYPE_CHECKING:
    from .core import Broker


class Queue:
    __slots__ = (
        "name",
        "destination",
        "broker",
        "window",
        "levels",
        "prios",
        "size",
        "nsubs",
        "ready_subs",
        "inflight",
        "spilled",
        "boundary",
        "epoch",
        "loading",
        "skipped",
        "late",
        "avoid",
    )

    def __init__(self, name: str, broker: Broker, window: int | None, spilled: bool) -> None:
        self.name = name
        self.destination = "/queue/" + name
        self.broker = broker
        self.window = window  # None: everything stays in memory (non-durable store)
        self.levels: dict[int, deque[StoredMessage]] = {}
        self.prios: list[int] = []  # priorities present in `levels`, ascending
        self.size = 0  # ready messages in memory
        self.nsubs = 0  # subscriptions (the round-robin holds those with room)
        self.ready_subs: deque[Subscription] = deque()
        self.inflight: dict[int, Subscription] = {}  # seq -> subscription holding it
        self.spilled = spilled  # the store holds ready messages after `boundary`
        self.boundary: tuple[int, int] | None = None  # None while spilled: from the start
        self.epoch = 0  # bumped whenever the boundary moves back
        self.loading = False
        self.skipped = 0  # messages left in the store because they lie beyond the boundary
        # lowest order key of a message skipped while a page was loading (the read may miss it)
        self.late: tuple[int, int] | None = None
        # seq -> subscription whose ack timeout expired for it: another one gets it if it can
        self.avoid: dict[int, Subscription] | None = None

    # -- the ready window ---------------------------------------------------
    def _beyond_boundary(self, msg: StoredMessage) -> bool:
        return self.spilled and (self.boundary is None or msg.order_key > self.boundary)

    def _skip(self, msg: StoredMessage) -> None:
        """Leave ``msg`` to the store.  A page being read may not see it (its write can commit
        after the read), so remember the lowest such key: the page is only used before it."""
        self.skipped += 1
        if self.loading and (self.late is None or msg.order_key < self.late):
            self.late = msg.order_key

    def push(self, msg: StoredMessage) -> None:
        """A freshly sent message: newest of its priority, so it goes last in its level."""
        if self._beyond_boundary(msg):
            self._skip(msg)
            return
        level = self.levels.get(msg.priority)
        if level is None:
            level = self._new_level(msg.priority)
        level.append(msg)
        self.size += 1
        if self.window is not None and self.size > self.window:
            self._evict()

    def requeue(self, msg: StoredMessage) -> None:
        """A message coming back (NACK, lost connection, ack timeout): back to its place by seq."""
        if self._beyond_boundary(msg):
            self._skip(msg)
            return
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
        if self.window is not None and self.size > self.window:
            self._evict()

    def _new_level(self, priority: int) -> deque[StoredMessage]:
        level: deque[StoredMessage] = deque()
        self.levels[priority] = level
        insort(self.prios, priority)
        return level

    def _evict(self) -> None:
        """Drop the tail of the window back to the store and move the boundary before it."""
        assert self.window is not None
        while self.size > self.window:
            prio = self.prios[0]
            level = self.levels[prio]
            level.pop()
            self.size -= 1
            if not level:
                del self.levels[prio]
                self.prios.pop(0)
        tail = self.levels[self.prios[0]][-1]
        self.spilled = True
        self.boundary = tail.order_key
        self.epoch += 1

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

    def clear(self) -> None:
        """Forget every ready message held in memory (purge)."""
        self.levels.clear()
        self.prios.clear()
        self.size = 0
        self.spilled = self.window is not None
        self.boundary = None
        self.epoch += 1

    # -- paging -------------------------------------------------------------
    def wants_page(self) -> bool:
        return (
            self.spilled
            and not self.loading
            and self.window is not None
            and self.size <= self.window // 2
            and self.nsubs > 0
        )

    def page_loaded(self, rows: Sequence[StoredMessage], epoch: int, skipped: int, limit: int) -> None:
        """Merge a page the store returned for a request made at ``epoch``/``skipped``."""
        self.loading = False
        late, self.late = self.late, None
        if epoch != self.epoch:
            return  # the boundary moved back meanwhile; the broker asks again
        if late is not None:  # the next page starts at the first message the read may have missed
            rows = [m for m in rows if m.order_key < late]
        inflight = self.inflight
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
        if late is None and len(rows) < limit and skipped == self.skipped:
            self.spilled = False
            self.boundary = None

    # -- subscribers ----------------------------------------------------------
    def add_subscriber(self, sub: Subscription) -> None:
        self.nsubs += 1
        self.make_ready(sub)

    def make_ready(self, sub: Subscription) -> None:
        if not sub.in_ready and sub.active:
            sub.in_ready = True
            self.ready_subs.append(sub)

    def pump(self) -> None:
        """Deliver ready messages round-robin to subscribers with room."""
        ready_subs = self.ready_subs
        deliver = self.broker.deliver
        while self.size and ready_subs:
            sub = ready_subs[0]
            if not sub.active or not sub.has_room():
                ready_subs.popleft()
                sub.in_ready = False
                continue
            if self.avoid is not None and self._passes_over(sub):
                ready_subs.rotate(-1)
                continue
            deliver(self, sub, self.pop())
            if len(ready_subs) > 1:
                ready_subs.rotate(-1)
        if self.spilled and self.wants_page():
            self.broker.request_page(self)

    def _passes_over(self, sub: Subscription) -> bool:
        """Should ``sub`` skip the head message because its ack timeout expired there,
        and another subscription with room can take it?"""
        assert self.avoid is not None
        seq = self.peek().seq
        avoided = self.avoid.get(seq)
        if avoided is None:
            return False
        if avoided is sub and any(s is not sub and s.active and s.has_room() for s in self.ready_subs):
            return True
        del self.avoid[seq]
        if not self.avoid:
            self.avoid = None
        return False

    def expired(self, msg: StoredMessage, sub: Subscription) -> None:
        """``sub`` let ``msg``'s ack timeout expire: prefer another subscriber for it."""
        if self.avoid is None:
            self.avoid = {}
        self.avoid[msg.seq] = sub

    @property
    def idle(self) -> bool:
        """No subscribers and nothing in flight: the queue may leave memory."""
        return not self.nsubs and not self.inflight and not self.loading
