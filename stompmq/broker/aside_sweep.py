"""The expiry of the messages a queue set aside because no subscriber's selector matched them.

On a store that keeps nothing (the memory store), those messages wait in ``Queue.aside`` rather
than in the store (``sift.py``), so the store's expiry sweep (``expiry.py``) never sees them and
no dispatch reaches them while nobody matches.  They expire as the store's do: swept a second
after the earliest expiry among them, so at most about once a second per queue, and each
expired one is dropped as the dispatcher drops any expired message (counted, dead-lettered if
the queue asks for it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..storage.base import StoredMessage
from .clock import Clock
from .expiry import SWEEP_MS
from .timers import Deadlines, Timer

if TYPE_CHECKING:
    from .queue import Queue
    from .session import Subscription

#: Deadline kind: drop the expired messages of a queue's ``aside``.
ASIDE_SWEEP = "aside-sweep"


class AsideSweeps:
    """One armed sweep per queue whose ``aside`` holds a message that can expire."""

    def __init__(self, clock: Clock, deadlines: Deadlines, queues: dict[str, Queue[Subscription]],
                 expire: Callable[[Queue[Subscription], StoredMessage], None]) -> None:
        self.clock = clock
        self.deadlines = deadlines
        self.queues = queues  # the active queues, by name: a sweep of a queue gone since does nothing
        self.expire = expire
        #: queue -> (wall ms, deadline) of its armed sweep
        self.armed: dict[Queue[Subscription], tuple[int, Timer]] = {}

    def arm(self, queue: Queue[Subscription], expires: int) -> None:
        """Sweep ``queue`` a second after ``expires`` (epoch ms), unless one comes sooner."""
        at = max(expires, self.clock.wall_ms) + SWEEP_MS
        armed = self.armed.get(queue)
        if armed is not None:
            if armed[0] <= at:
                return
            self.deadlines.cancel(armed[1])
        timer = self.deadlines.arm((at - self.clock.wall_ms) / 1000, ASIDE_SWEEP, queue)
        self.armed[queue] = (at, timer)

    def sweep(self, queue: Queue[Subscription]) -> None:
        """The ASIDE_SWEEP deadline: the expired messages no selector matched leave ``queue``."""
        del self.armed[queue]
        aside = queue.aside
        if not aside or self.queues.get(queue.name) is not queue:
            return
        now = self.clock.wall_ms
        kept: deque[StoredMessage] = deque()
        expired = []
        later = None
        for msg in aside:
            expires = msg.expires
            if expires is not None and expires < now:
                expired.append(msg)
                continue
            kept.append(msg)
            if expires is not None and (later is None or expires < later):
                later = expires
        queue.aside, queue.aside_expires = kept or None, later
        for msg in expired:
            self.expire(queue, msg)
        if later is not None:
            self.arm(queue, later)
