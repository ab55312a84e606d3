"""The ready window of a queue: the head of its ready messages in memory, the rest in the store.

Theory of operation
-------------------
Messages live in the store; a queue only holds in memory the *head* of its
ready messages, in ``(priority desc, seq asc)`` order, at most ``capacity`` of
them and at most ``max_bytes`` of them (``len(body) + MESSAGE_OVERHEAD`` each;
but always at least one message, or a huge one could never be delivered), with
``capacity`` ``None`` for a store that is not durable: then both are unbounded.  ``boundary`` is
the order key of the last message the window covers while ``spilled`` says the
store holds ready messages beyond it (``boundary`` None while spilled: the
window covers nothing yet and the store holds the queue from its start).

* A message beyond the boundary stays in the store only (*skipped*); one before
  it enters the window, evicting the tail when full, which moves the boundary
  back (and bumps ``epoch``).
* When the window runs low (half empty in messages and in bytes) the owner
  asks for a page: up to ``limit`` ready messages strictly after the boundary
  (``PageRequest``).  The store pages by count, so the byte budget becomes a
  count through ``unit``, the largest of the mean size of the last page and
  of the messages in memory; before either is known the page is a probe of
  ``PROBE_PAGE`` messages.  A page that still overshoots is trimmed at once.  A page read runs
  concurrently with new SENDs, so two counters make merging it safe:
  ``epoch`` (a page asked for before the boundary moved back is stale and
  dropped) and ``skipped`` (a page that came back short only proves the store
  is exhausted if nothing was skipped meanwhile).  A message skipped while the
  read is in flight may be missed by the read (its insert may commit after it),
  so the lowest such key (``late``) cuts the page: only rows before it are used.
* A spilled window keeps the newest skipped messages in memory too, as its
  ``tail`` (at most half its budgets): every skipped message after ``tail[0]``
  is in the tail.  Once the window is ``tracked`` (it held every ready message
  at some point, so whatever the store has beyond the boundary went through
  it) the store only has to be read up to ``tail[0]``; before that (a queue
  just activated, a purge, another broker's messages) older rows of a lower
  priority may sort after ``tail[0]``, so only a page that reads the store to
  its end, finding nothing there but the tail, will do.  Such a page, with
  nothing lost meanwhile, joins the tail to the window and the queue is in
  memory again.  Without it a queue
  whose producers kept sending never came back: each read missed the SENDs
  made while it ran, so the next read had to look for them, and every message
  was inserted, read back and deleted for the rest of the run (four producers
  and four consumers: 48-53k msg/s spilled against 112-117k in memory).  A
  message that does not
  continue the tail (the tail is full, or it sorts before the tail's end) is
  *lost* to the store: ``held`` goes False, ``skipped`` counts it.  While
  ``gapless`` (the tail was cut off the window itself and nothing was lost
  since) the store holds nothing between the boundary and the tail, and the
  window refills from the tail without a read.

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

from ..storage.base import MESSAGE_OVERHEAD, StoredMessage, by_order

OrderKey = tuple[int, int]

#: Messages in a page read while their size is unknown: small enough for 64 KiB bodies (6.4 MB),
#: and the next page, sized from this one, follows at once.
PROBE_PAGE = 100


@dataclass(frozen=True, slots=True)
class PageRequest:
    """A read of up to ``limit`` ready messages after ``after``, as the window was when asked."""

    after: OrderKey | None
    limit: int
    epoch: int
    skipped: int


#: The order key below every message's: a sift floor from the start of the queue.
FROM_START: OrderKey = (-(1 << 62), 0)


def _just_before(key: OrderKey) -> OrderKey:
    """The order key a page read starts after to read ``key`` first."""
    return key[0], key[1] - 1


def _place(level: deque[StoredMessage], msg: StoredMessage) -> None:
    """Put ``msg`` into ``level`` at its place by seq.  Every level must stay in seq order: its
    last message is the window's end (``boundary``, eviction), and a page read after a boundary
    taken from a level out of order read again, as a second copy, a message still in memory,
    which was then delivered twice, both unflagged."""
    if not level or level[0].seq > msg.seq:
        level.appendleft(msg)
    elif level[-1].seq < msg.seq:
        level.append(msg)
    else:
        index = next(i for i, m in enumerate(level) if m.seq > msg.seq)
        level.insert(index, msg)


class ReadyWindow:
    __slots__ = ("capacity", "max_bytes", "levels", "prios", "size", "bytes", "unit", "spilled", "boundary", "epoch",
                 "loading", "skipped", "late", "tail", "tail_bytes", "tail_capacity", "tail_max_bytes", "gapless",
                 "tracked", "marks", "rewind", "rewind_first", "sift_floor")

    def __init__(self, capacity: int | None, spilled: bool, max_bytes: int | None = None) -> None:
        self.capacity = capacity  # None: everything stays in memory (non-durable store)
        self.max_bytes = max_bytes if max_bytes is not None and capacity is not None else 1 << 62
        self.levels: dict[int, deque[StoredMessage]] = {}
        self.prios: list[int] = []  # priorities present in `levels`, ascending
        self.size = 0  # ready messages in memory
        self.bytes = 0  # what they count against max_bytes
        self.unit: int | None = None  # mean bytes per message of the last page read
        self.spilled = spilled  # the store holds ready messages after `boundary`
        self.boundary: OrderKey | None = None
        self.epoch = 0  # bumped whenever the boundary moves back
        self.loading = False  # a page read is in flight
        self.skipped = 0  # messages left to the store because they lie beyond the boundary
        self.late: OrderKey | None = None  # lowest key skipped while a page was loading
        self.tail: deque[StoredMessage] = deque()  # the newest skipped messages, in order
        self.tail_bytes = 0
        self.tail_capacity = max(1, capacity // 2) if capacity is not None else 0
        self.tail_max_bytes = self.max_bytes // 2
        self.gapless = False  # the store holds no ready message between the boundary and the tail
        # Every ready message the store holds beyond the boundary went through this window (was
        # skipped or evicted): true since the window last held them all, until a purge or another
        # broker's messages.  Only then is the tail known to be the store's newest; before, a page
        # must read the store to its end to show it.
        self.tracked = not spilled
        # fills(): (messages, bytes) at which the window fills 1/divisor, by divisor; a publish asks
        # once per SEND (pacing), so the divisions are done once.
        self.marks: dict[int, tuple[int, int]] = {}
        #: The lowest order key of a ready message taken from the window because no subscriber's
        #: selector matched it (``sift_out``), since the queue last looked back for them (sift.py).
        self.sift_floor: OrderKey | None = None
        #: look_back() came while a page was loading: the read after it looks back, to
        #: ``rewind_first`` (the lowest key it was given; None: to the start)
        self.rewind = False
        self.rewind_first: OrderKey | None = None

    # -- adding -------------------------------------------------------------------------------
    def push(self, msg: StoredMessage) -> bool:
        """A freshly sent message: newest of its priority, so it goes last in its level (on a
        store several brokers share, not always: ``SharedReadyWindow``).
        False: it lies beyond the boundary and stays in the store only (not even in the tail)."""
        if self.spilled:
            key = msg.order_key
            if self.boundary is None or key > self.boundary:
                return self._skip(msg, key)
        level = self.levels.get(msg.priority)
        if level is None:
            level = self._new_level(msg.priority)
        level.append(msg)
        self.size += 1
        self.bytes += len(msg.body) + MESSAGE_OVERHEAD
        if self.capacity is not None and (self.size > self.capacity or self.bytes > self.max_bytes):
            self._evict()
        return True

    def requeue(self, msg: StoredMessage) -> bool:
        """A message coming back (NACK, lost connection, ack timeout): back to its place by seq.
        False: it lies beyond the boundary and stays in the store only (not even in the tail)."""
        if self.spilled:
            key = msg.order_key
            if self.boundary is None or key > self.boundary:
                return self._skip(msg, key)
        level = self.levels.get(msg.priority)
        if level is None:
            level = self._new_level(msg.priority)
        _place(level, msg)
        self.size += 1
        self.bytes += len(msg.body) + MESSAGE_OVERHEAD
        if self.capacity is not None and (self.size > self.capacity or self.bytes > self.max_bytes):
            self._evict()
        return True

    def _skip(self, msg: StoredMessage, key: OrderKey) -> bool:
        """A message beyond the boundary (``key``: its order key): kept at the end of the tail if
        it sorts after it, else lost to the store (one inside the tail's range ends the tail: it
        would leave a hole)."""
        tail = self.tail
        if tail and key < tail[-1].order_key:
            if key > tail[0].order_key:
                self._drop_tail()
            self._lose(msg)
            return False
        tail.append(msg)
        self.tail_bytes += len(msg.body) + MESSAGE_OVERHEAD
        if len(tail) > self.tail_capacity or self.tail_bytes > self.tail_max_bytes:
            self._trim_tail()
        return True

    def _trim_tail(self, keep: int | None = None) -> None:
        """Lose the oldest of the tail to the store while it holds more than ``keep`` messages
        (default: its capacity) or is over its byte budget (where the newest stays, unless
        ``keep`` is 0)."""
        tail = self.tail
        if keep is None:
            keep = self.tail_capacity
        while len(tail) > keep or (self.tail_bytes > self.tail_max_bytes and len(tail) > 1):
            gone = tail.popleft()
            self.tail_bytes -= len(gone.body) + MESSAGE_OVERHEAD
            self._lose(gone)

    def _drop_tail(self) -> None:
        """Lose the whole tail to the store."""
        self._trim_tail(keep=0)

    def _lose(self, msg: StoredMessage) -> None:
        """``msg`` is ready in the store only: a page read must find it."""
        msg.held = False
        self.skipped += 1
        self.gapless = False
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
        evicted: list[StoredMessage] = []  # newest first
        while self.size > self.capacity or (self.bytes > self.max_bytes and self.size > 1):
            evicted.append(self._pop_last())
        if not evicted:
            return  # one message over the byte budget alone: it stays, and nothing spilled
        if not self.spilled or self.gapless:  # the evicted continue into the tail: no gap
            self.tail.extendleft(evicted)
            self.tail_bytes += sum(len(gone.body) + MESSAGE_OVERHEAD for gone in evicted)
            self.gapless = True
            self._trim_tail()
        else:
            for gone in evicted:
                self._lose(gone)
        self.spilled = True
        self.boundary = self.levels[self.prios[0]][-1].order_key
        self.epoch += 1

    def _pop_last(self) -> StoredMessage:
        """Remove the message delivered last (the newest of the lowest priority)."""
        prio = self.prios[0]
        level = self.levels[prio]
        gone = level.pop()
        self.size -= 1
        self.bytes -= len(gone.body) + MESSAGE_OVERHEAD
        if not level:
            del self.levels[prio]
            self.prios.pop(0)
        return gone

    # -- taking -------------------------------------------------------------------------------
    def peek(self) -> StoredMessage:
        return self.levels[self.prios[-1]][0]

    def oldest(self) -> int | None:
        """The timestamp of the oldest ready message in memory: the head of each priority level
        is that level's oldest, so the levels (at most ten) are all there is to look at."""
        return min((level[0].timestamp for level in self.levels.values()), default=None)

    def pop(self) -> StoredMessage:
        prio = self.prios[-1]
        level = self.levels[prio]
        msg = level.popleft()
        self.size -= 1
        self.bytes -= len(msg.body) + MESSAGE_OVERHEAD
        if not level:
            del self.levels[prio]
            self.prios.pop()
        return msg

    def messages(self) -> list[StoredMessage]:
        """Every ready message in memory (the window, then the tail), in delivery order."""
        return [msg for prio in reversed(self.prios) for msg in self.levels[prio]] + list(self.tail)

    def fills(self, divisor: int) -> bool:
        """Do the ready messages in memory (window and tail) fill at least ``1/divisor`` of
        either budget?  (pacing.py)"""
        marks = self.marks.get(divisor)
        if marks is None:
            capacity = self.capacity  # at least one message: a tiny window must not round to nothing
            if capacity is None:
                return False
            marks = self.marks[divisor] = (max(1, capacity // divisor), self.max_bytes // divisor)
        return self.size + len(self.tail) >= marks[0] or self.bytes + self.tail_bytes >= marks[1]

    def holds(self, msg: StoredMessage) -> bool:
        """Is ``msg``, if ready, in memory here (or possibly about to be, by a read in flight)?"""
        key = msg.order_key
        tail = self.tail
        return (self.loading or not self.spilled or (self.boundary is not None and key <= self.boundary)
                or bool(tail and key >= tail[0].order_key and (self.tracked or any(m.seq == msg.seq for m in tail))))

    def store_changed(self) -> None:
        """Another broker sharing the store made ready messages of this queue: the store may
        hold some beyond what the window covers, and a page read in flight may miss them."""
        if not self.spilled:
            self.spilled = True
            self.boundary = self.levels[self.prios[0]][-1].order_key if self.size else None
        self._drop_tail()  # their messages may sort among the tail's
        self.tracked = False
        self.skipped += 1  # a short page in flight no longer proves the store exhausted

    def release(self, keep: int) -> list[StoredMessage]:
        """Keep the first ``keep`` ready messages in memory, the window's and then the tail's, and
        give the rest back to the store (claim on demand): returned, no longer ``held``, for the
        store to free.  The tail's oldest count too: giving all of it back at every pump sent each
        SEND through the store, its own subscribers' room notwithstanding, and woke every other
        broker for it."""
        tail = self.tail
        released = []
        while len(tail) > max(0, keep - self.size):
            gone = tail.pop()
            self.tail_bytes -= len(gone.body) + MESSAGE_OVERHEAD
            released.append(gone)
        beyond = len(released)  # (the tail lies beyond the boundary: the boundary stays)
        while self.size > keep:
            released.append(self._pop_last())
        if released:
            for gone in released:
                self._lose(gone)  # (during a read: ``late`` cuts its page before them)
            if len(released) > beyond:  # the window's own: the boundary moves back before them
                self.boundary = (self.levels[self.prios[0]][-1].order_key if self.size
                                 else _just_before(released[-1].order_key))
                self.epoch += 1
            self.spilled = True
            self.tracked = False
        return released

    def look_back(self, first: OrderKey | None = None) -> None:
        """Another broker sharing the store freed ready rows of this queue, ``first`` the lowest
        key among them (None: unknown), perhaps before the boundary (a lapsed broker's claims,
        another's window given back): forget what is in memory from ``first`` on, all of it if
        None (still claimed: the next read, from just before ``first`` or from the start, finds
        it again).  Reading from ``first`` spares the read the store's head, where the entries of
        every message delivered and acked since the last vacuum lie.  A page in flight is merged
        first: ``rewind`` says the owner calls this again, with ``rewind_first``, once it is."""
        if self.loading:
            if self.rewind:
                first = None if first is None or self.rewind_first is None else min(first, self.rewind_first)
            self.rewind, self.rewind_first = True, first
            self.skipped += 1  # a short page in flight no longer proves the store exhausted
            return
        self.rewind = False
        if first is None or first == FROM_START:
            self.clear()
            return
        while self.size and self.levels[self.prios[0]][-1].order_key >= first:
            self._pop_last()
        self.tail.clear()  # (it lies beyond the boundary, among the freed rows perhaps)
        self.tail_bytes = 0
        self.gapless = self.tracked = False
        just_before = _just_before(first)
        if not self.spilled or (self.boundary is not None and just_before < self.boundary):
            self.boundary = just_before
        self.spilled = True
        self.epoch += 1

    def sift_out(self, msg: StoredMessage) -> None:
        """``msg``, popped from the window, waits in the store only: no subscriber's selector
        matches it (sift.py).  The boundary stays, so the window pages on past it; the sift floor
        says where a subscriber that may match starts reading again (``look_back``)."""
        msg.held = False
        key = msg.order_key
        if self.sift_floor is None or key < self.sift_floor:
            self.sift_floor = key

    def filtered(self, request: PageRequest) -> None:
        """The read ``request`` may leave out the rows after its start that no subscriber's
        selector can match (a header filter, storage/header_filter.py): they are sifted out
        unread, so the sift floor goes down to the read's start.  Said when the read is asked
        for, so that a subscriber joining while it is in flight looks back over it too."""
        key = FROM_START if request.after is None else (request.after[0], request.after[1] + 1)
        if self.sift_floor is None or key < self.sift_floor:
            self.sift_floor = key

    def clear(self) -> None:
        """Forget every ready message held in memory (purge): the store is the truth again."""
        self.sift_floor = None
        self.levels.clear()
        self.prios.clear()
        self.size = self.bytes = 0
        self.tail.clear()
        self.tail_bytes = 0
        self.gapless = False
        self.spilled = self.capacity is not None
        self.tracked = not self.spilled
        self.boundary = None
        self.epoch += 1

    # -- paging -------------------------------------------------------------------------------
    def wants_page(self) -> bool:
        """The store holds more, nothing is being read, and the window is at most half full."""
        return (
            self.spilled
            and not self.loading
            and self.capacity is not None
            and self.size <= self.capacity // 2
            and self.bytes <= self.max_bytes // 2
        )

    def refill(self) -> bool:
        """While ``gapless`` (no read needed), take the tail's oldest into the window up to its
        budgets; False if none fits yet (one larger than the room left: the window drains first)."""
        assert self.gapless and self.capacity is not None and not self.loading
        tail = self.tail
        moved = 0
        while tail:
            cost = len(tail[0].body) + MESSAGE_OVERHEAD
            if self.size and (self.size >= self.capacity or self.bytes + cost > self.max_bytes):
                break
            self.tail_bytes -= cost
            self._append(tail.popleft(), cost)
            moved += 1
        if not tail:
            self._in_memory()
        elif moved:
            self.boundary = self.levels[self.prios[0]][-1].order_key
        return moved > 0

    def _append(self, msg: StoredMessage, cost: int) -> None:
        """Add ``msg``, which sorts after every message of its level, without a budget check."""
        level = self.levels.get(msg.priority)
        if level is None:
            level = self._new_level(msg.priority)
        level.append(msg)
        self.size += 1
        self.bytes += cost

    def _in_memory(self) -> None:
        """Every ready message is in the window or the tail: join them and stop paging."""
        for msg in self.tail:
            self._append(msg, len(msg.body) + MESSAGE_OVERHEAD)
        self.tail.clear()
        self.tail_bytes = 0
        self.spilled = False
        self.boundary = None
        self.gapless = False
        self.tracked = True
        if self.capacity is not None and (self.size > self.capacity or self.bytes > self.max_bytes):
            self._evict()

    def start_page(self, most: int | None = None) -> PageRequest:
        """Mark a read in flight and describe it: as many messages as both budgets have room for,
        at most ``most``."""
        assert self.capacity is not None
        self.loading = True
        limit = self.capacity - self.size if most is None else min(most, self.capacity - self.size)
        unit = self.message_bytes()
        limit = min(limit, PROBE_PAGE if unit is None else (self.max_bytes - self.bytes) // unit)
        return PageRequest(self.boundary, max(1, limit), self.epoch, self.skipped)

    def message_bytes(self) -> int | None:
        """What a message counts against a byte budget, to turn it into a count: the largest of
        the mean of the last page and of the messages in memory (None: neither known yet)."""
        unit = self.unit
        if self.size:
            mean = self.bytes // self.size
            unit = mean if unit is None else max(unit, mean)
        return unit

    def page_failed(self) -> None:
        """The read failed; the next ``wants_page`` asks again."""
        self.loading = False
        self.late = None

    def page_loaded(self, request: PageRequest, rows: Sequence[StoredMessage], inflight: Container[int],
                    shared: bool = False) -> None:
        """Merge the rows a read returned; ``inflight`` holds seqs out for delivery (not ready);
        ``shared``: other brokers' rows may sort among the tail (a queue claimed on demand)."""
        self.loading = False
        late, self.late = self.late, None
        if request.epoch != self.epoch:
            return  # the boundary moved back meanwhile: this page may overlap the window
        exhausted = len(rows) < request.limit  # nothing more after the boundary when it was read
        if late is not None:  # the next page starts at the first message the read may have missed
            rows = [m for m in rows if m.order_key < late]
        tail = self.tail
        if tail and rows and rows[-1].order_key >= tail[0].order_key:
            page_end = rows[-1].order_key
            first = tail[0].order_key  # the read reached the tail, which has the rest
            seqs = {m.seq for m in tail}
            others = [m for m in rows if m.order_key >= first and m.seq not in seqs]
            rows = [m for m in rows if m.order_key < first]
            if others and not shared:  # rows beyond the tail's start that it lacks: not the newest
                self._drop_tail()
                self.tracked = False
                exhausted = False
            elif not others and self.tracked:  # nothing but the tail lies beyond its start
                exhausted = True
            elif others or not exhausted:  # the window takes what the page covered of the tail,
                taken = []  # and on a shared store the other brokers' rows among it, in order
                while tail and tail[0].order_key <= page_end:  # (dropping the tail for them lost
                    gone = tail.popleft()  # this broker's newest messages at every such read)
                    self.tail_bytes -= len(gone.body) + MESSAGE_OVERHEAD
                    taken.append(gone)
                rows += sorted(others + taken, key=by_order) if others else taken
                self.tracked = self.tracked and not others
        page_bytes = 0
        for msg in rows:
            cost = len(msg.body) + MESSAGE_OVERHEAD
            page_bytes += cost
            if msg.seq not in inflight:
                self._append(msg, cost)
        if rows:
            self.boundary = rows[-1].order_key
            self.unit = page_bytes // len(rows)
        if exhausted and late is None and request.skipped == self.skipped:
            self._in_memory()
        else:  # over budget: the sizes were underestimated, or the part of the tail taken
            self._evict()


class SharedReadyWindow(ReadyWindow):
    """The window of a queue on a store several brokers share.  Each broker numbers its SENDs
    from its own block of seqs, so a message another broker numbered higher, read into the
    window, may sort after a fresh SEND of this one: that SEND goes to its place by seq, as a
    message coming back does (``requeue``).  A subclass, so that a single broker's SENDs pay
    nothing for the check."""

    __slots__ = ()

    def push(self, msg: StoredMessage) -> bool:
        level = self.levels.get(msg.priority)
        if level and level[-1].seq > msg.seq:
            return self.requeue(msg)
        return ReadyWindow.push(self, msg)
