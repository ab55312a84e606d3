"""Ack-timeout deadlines: one heap, one task.

Arming costs O(log n); an entry is never removed when its delivery is acked
(that would cost a search) but checked against the delivery when it fires, so
a stale entry is a cheap no-op.  The task sleeps until the earliest deadline
and is woken early only when a new deadline comes before it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

import trio


class AckTimers:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, tuple[Any, ...]]] = []
        self._order = itertools.count()  # ties keep arming order and never compare payloads
        self._changed = trio.Event()

    def arm(self, timeout: float, payload: tuple[Any, ...]) -> None:
        deadline = trio.current_time() + timeout
        if not self._heap or deadline < self._heap[0][0]:
            self._changed.set()
        heapq.heappush(self._heap, (deadline, next(self._order), payload))

    async def run(self, expire: Callable[..., None]) -> None:
        """Call ``expire(*payload)`` for every deadline as it passes, until cancelled."""
        heap = self._heap
        while True:
            if heap:
                with trio.move_on_at(heap[0][0]):
                    await self._changed.wait()
            else:
                await self._changed.wait()
            self._changed = trio.Event()
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                expire(*heapq.heappop(heap)[2])
