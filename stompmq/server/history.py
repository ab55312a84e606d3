"""Rate history for the dashboard's charts: the last hour, one point per sample, bounded.

Every sample of the counters (``http.Rates``, every 5 s) adds one point of messages per
second (publish, deliver, ack) to the totals' ring and to the ring of each queue that has
one.  A queue gets a ring the first time it is seen busy, while fewer than
``HISTORY_QUEUES`` queues have one, and loses it when it is deleted; so memory stays
bounded (about 100 KB per ring) however many queues there are, and a page opened now
shows the hour before it was opened.
"""

from __future__ import annotations

from collections import deque

#: Points a ring keeps: an hour at one sample every 5 s.
HISTORY_POINTS = 720
#: Queues with a ring of their own (the first ones seen busy); the totals always have one.
HISTORY_QUEUES = 50

Counters = tuple[int, int, int]  # published, delivered, acked
QueueKey = tuple[str, str]  # (vhost, queue)
Point = tuple[float, float, float, float]  # wall-clock seconds, publish/s, deliver/s, ack/s


class RateHistory:
    """Rings of rate points: the totals', and some queues'."""

    def __init__(self, points: int = HISTORY_POINTS, queues: int = HISTORY_QUEUES) -> None:
        self.points = points
        self.max_queues = queues
        self.totals: deque[Point] = deque(maxlen=points)
        self.queues: dict[QueueKey, deque[Point]] = {}

    def record(self, wall: float, elapsed: float, before: dict[QueueKey, Counters],
               now: dict[QueueKey, Counters]) -> None:
        """One point from two samples of the counters ``elapsed`` seconds apart."""
        elapsed = max(elapsed, 1e-3)
        total = [0.0, 0.0, 0.0]
        for key, counters in now.items():
            previous = before.get(key, (0, 0, 0))
            rates = [max(0, n - b) / elapsed for n, b in zip(counters, previous)]
            for i, rate in enumerate(rates):
                total[i] += rate
            ring = self.queues.get(key)
            if ring is None and any(rates) and len(self.queues) < self.max_queues:
                ring = self.queues[key] = deque(maxlen=self.points)
            if ring is not None:
                ring.append((wall, round(rates[0], 2), round(rates[1], 2), round(rates[2], 2)))
        for key in self.queues.keys() - now.keys():  # deleted: its counters are gone
            del self.queues[key]
        self.totals.append((wall, round(total[0], 2), round(total[1], 2), round(total[2], 2)))

    def of(self, key: QueueKey | None) -> list[Point]:
        """The points of a queue (none if it has no ring), or the totals' for None."""
        return list(self.totals if key is None else self.queues.get(key, ()))
