"""Deadlines the engine keeps (ack timeouts, page retries): a heap of cancellable timers.

The engine owns no clock: the runtime sets ``now`` before handing it work, asks
``next_deadline()`` to know when to wake it, and the engine then takes the due
timers with ``pop_due()``.  A timer is data, a kind and its arguments, which the
engine maps to a handler: the modules that arm timers never call back upwards.

Timers forget: ``cancel`` marks an entry dead at once (an ACK cancels its
delivery's ack timeout), and the heap is rebuilt from its live entries whenever
the dead ones outnumber them, so memory is O(timers pending), not O(timers armed
in the last timeout period).  Arming and cancelling cost O(log n) amortised.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from typing import Any

#: Dead entries tolerated before a rebuild is considered (a rebuild of a tiny heap is waste).
MIN_COMPACT = 1024

#: A heap entry: [deadline, arming order, kind (None once cancelled or spent), arguments].  A
#: list, so the heap compares it in C; the arming order is unique, so kinds are never compared.
Timer = list[Any]


class Deadlines:
    __slots__ = ("now", "_heap", "_order", "_dead", "on_earlier")

    def __init__(self) -> None:
        self.now = 0.0  # set by the runtime (trio's clock): the engine reads no clock itself
        self._heap: list[Timer] = []
        self._order = itertools.count()
        self._dead = 0
        #: Called when a new timer comes before every other one (the runtime sleeps less).
        self.on_earlier: Callable[[], None] = lambda: None

    def __len__(self) -> int:
        """Timers pending (cancelled ones excluded)."""
        return len(self._heap) - self._dead

    def arm(self, delay: float, kind: str, *args: Any) -> Timer:
        """Make (kind, args) due ``delay`` seconds from ``now``."""
        timer: Timer = [self.now + delay, next(self._order), kind, args]
        heap = self._heap
        earlier = not heap or timer[0] < heap[0][0]
        heapq.heappush(heap, timer)
        if earlier:
            self.on_earlier()
        return timer

    def cancel(self, timer: Timer) -> None:
        if timer[2] is None:
            return
        timer[2] = timer[3] = None
        self._dead += 1
        if self._dead >= MIN_COMPACT and self._dead * 2 > len(self._heap):
            self._heap = [t for t in self._heap if t[2] is not None]
            heapq.heapify(self._heap)
            self._dead = 0

    def next_deadline(self) -> float:
        """When the earliest pending timer is due (infinity: none is)."""
        heap = self._heap
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
            self._dead -= 1
        return heap[0][0] if heap else math.inf

    def pop_due(self) -> tuple[str, tuple[Any, ...]] | None:
        """The next timer due at ``now`` as (kind, args), or None when none is."""
        heap = self._heap
        while heap and heap[0][0] <= self.now:
            timer = heapq.heappop(heap)
            kind, args = timer[2], timer[3]
            if kind is None:
                self._dead -= 1
                continue
            timer[2] = timer[3] = None  # spent: a later cancel() is a no-op
            return kind, args
        return None
