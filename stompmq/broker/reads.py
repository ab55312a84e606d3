"""Store reads the engine asks for: it cannot await, so the runtime reads and hands back.

A read is data: ``fetch`` names the store call (an async function of the store),
``done`` takes its result and ``failed`` its error, both on the engine's
thread.  The engine queues reads in ``Reads``; the runtime in server/ performs
them one at a time, in order.  Page loads and ``/control`` counts are reads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..storage.base import Store, StoreError


@dataclass(frozen=True, slots=True)
class StoreRead:
    fetch: Callable[[Store], Awaitable[Any]]
    done: Callable[[Any], None]
    failed: Callable[[StoreError], None]


class Reads:
    __slots__ = ("pending", "on_pending")

    def __init__(self) -> None:
        self.pending: deque[StoreRead] = deque()
        #: Called when a read is queued (the runtime wakes its reader).
        self.on_pending: Callable[[], None] = lambda: None

    def submit(self, read: StoreRead) -> None:
        self.pending.append(read)
        self.on_pending()
