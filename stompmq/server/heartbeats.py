"""Every connection's timers (CONNECT deadline, heart-beats) driven by one task.

Theory of operation
-------------------
A watchdog task per connection, waking every half heart-beat interval, cost each idle
connection a task with its frame, cancel scope and timer, and the broker a wake-up per
connection per half interval: 15,000 idle clients meant 3,000 wake-ups a second.  Here one
task keeps a heap of ``(when, token, watched)`` and sleeps until the earliest entry;
an entry asks its connection ``check(now)``, which acts (beats, or fails a silent peer or one
that never sent CONNECT) and answers when it next needs looking at, or None.  Receiving and
sending only update the connection's timestamps: the heap is touched once per beat owed or
deadline that may be missed, not per frame.

The task wakes at most once per ``TICK`` for heart-beats: a pass visits every entry due within
the next tick, and a connection beats then if its beat falls due in that tick (early, which
STOMP allows; ``Connection.check``).  What must not happen early (closing a silent peer, the
CONNECT deadline) is checked against the real time, and such an entry comes up again when it
said.  Spread over 9 s, 1,500 beats a second were 1,500 wake-ups of this task, each waking the
write batch's task too; now a pass is ~1/``TICK`` a second, and it flushes the beats it wrote
itself (the ``WriteBatch`` is open during the pass), each with one ``write(2)``.

``watch`` replaces a connection's entry (a new token; the old entry is skipped when it comes
up), so a connection is in the heap at most once in effect.  Entries hold their connection by a
weak reference: a closed connection is freed at once, not when its last entry falls due
(with clients coming and going, that would keep a grace period's worth of them alive).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import weakref
from typing import Protocol

import trio

from .outbox import WriteBatch

log = logging.getLogger(__name__)


class Watched(Protocol):
    """What the timer asks of a connection."""

    #: The token of the connection's live entry (``HeartBeats.watch`` sets it); None: none.
    beat_token: int | None

    def check(self, now: float, ahead: float) -> float | None:
        """Act on whatever is due at ``now`` (heart-beats: due within ``ahead`` seconds too);
        when to be checked next (None: never)."""
        ...


#: Seconds of heart-beats one pass of the timer sends (see the module docstring).
TICK = 0.05


class HeartBeats:
    """One timer task for the heart-beats and CONNECT deadlines of every connection."""

    def __init__(self, batch: WriteBatch | None = None, tick: float = TICK) -> None:
        #: What the checks write to goes out at the end of the pass (plain TCP connections).
        self._batch = batch
        self._tick = tick
        self._heap: list[tuple[float, int, weakref.ref[Watched]]] = []
        self._order = itertools.count()
        self._wake = trio.Event()

    def watch(self, watched: Watched, when: float) -> None:
        """Check ``watched`` at ``when`` (instead of when it said before)."""
        token = next(self._order)
        watched.beat_token = token
        if not self._heap or when < self._heap[0][0]:
            self._wake.set()  # earlier than the run task sleeps for
        heapq.heappush(self._heap, (when, token, weakref.ref(watched)))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Check each connection when due, forever."""
        task_status.started()
        heap = self._heap
        while True:
            self._wake = trio.Event()
            with trio.move_on_at(heap[0][0] if heap else math.inf):
                await self._wake.wait()
            now = trio.current_time()
            horizon = now + self._tick
            later: list[tuple[float, int, weakref.ref[Watched]]] = []  # pushed after the pass
            batch = self._batch
            if batch is not None:
                batch.open = True
            try:
                while heap and heap[0][0] <= horizon:
                    _, token, ref = heapq.heappop(heap)
                    watched = ref()
                    if watched is None or watched.beat_token != token:
                        continue  # the connection ended, or a later watch replaced this entry
                    try:
                        when = watched.check(now, self._tick)
                    except Exception:  # one connection's failure must not stop everyone's heart-beats
                        log.exception("heart-beat check failed")
                        when = None
                    if when is None:
                        watched.beat_token = None
                    else:
                        token = next(self._order)
                        watched.beat_token = token
                        later.append((when, token, ref))
            finally:
                if batch is not None:
                    batch.close()
            for entry in later:
                heapq.heappush(heap, entry)
