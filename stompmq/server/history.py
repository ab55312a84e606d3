"""Rate history for the dashboard's charts: the last minute to the last eight hours, bounded.

Every sample of the counters (``http.Rates``, every 5 s) adds one point of messages per
second (publish, deliver, ack) to the totals' ring and to the ring of each queue that has
one.  A ring keeps two resolutions, as RabbitMQ's charts do: the last hour at one point a
sample, for the ranges up to an hour, and eight hours at one point a minute (the mean of
``COARSE_EVERY`` samples), for the longer range; a range's answer from the coarse points ends
with the fine ones newer than the last of them, so a chart's right edge is current.  A queue
gets a ring the first time it is seen busy, while fewer than ``HISTORY_QUEUES`` queues have
one, and loses it when it is deleted; so memory stays bounded (about 150 KB per ring) however
many queues there are, and a page opened now shows the hours before it was opened.
"""

from __future__ import annotations

from collections import deque

#: Points the fine resolution keeps: an hour at one sample every 5 s.
HISTORY_POINTS = 720
#: Samples in one point of the coarse resolution (a minute at one sample every 5 s).
COARSE_EVERY = 12
#: Points the coarse resolution keeps: eight hours at one a minute.
COARSE_POINTS = 480
#: The ranges a chart may ask for, in seconds: a minute, ten minutes, an hour, eight hours.
RANGES = (60, 600, 3600, 28800)
#: The range shown unless another is asked for.
HOUR_RANGE = 3600
#: Queues with a ring of their own (the first ones seen busy); the totals always have one.
HISTORY_QUEUES = 50

Counters = tuple[int, int, int]  # published, delivered, acked
QueueKey = tuple[str, str]  # (vhost, queue)
Point = tuple[float, float, float, float]  # wall-clock seconds, publish/s, deliver/s, ack/s


class Ring:
    """One subject's points at both resolutions."""

    __slots__ = ("fine", "coarse", "sums", "count", "full")

    def __init__(self, points: int, coarse_points: int) -> None:
        self.fine: deque[Point] = deque(maxlen=points)
        self.coarse: deque[Point] = deque(maxlen=coarse_points)
        self.sums = [0.0, 0.0, 0.0]  # of the samples since the last coarse point
        self.count = 0
        self.full = points  # the fine points of a ring that has dropped some

    def add(self, point: Point) -> None:
        self.fine.append(point)
        for i in range(3):
            self.sums[i] += point[i + 1]
        self.count += 1
        if self.count == COARSE_EVERY:
            publish, deliver, ack = (round(total / COARSE_EVERY, 2) for total in self.sums)
            self.coarse.append((point[0], publish, deliver, ack))
            self.sums = [0.0, 0.0, 0.0]
            self.count = 0

    def within(self, seconds: int) -> tuple[list[Point], bool]:
        """The points of the last ``seconds`` before the newest, and whether they are coarse
        (the fine ones do not reach back that far)."""
        if not self.fine:
            return [], False
        start = self.fine[-1][0] - seconds
        if self.fine[0][0] <= start or len(self.fine) < self.full:  # nothing older was dropped
            return [p for p in self.fine if p[0] >= start], False
        coarse = [p for p in self.coarse if p[0] >= start]
        if not coarse:  # (a ring smaller than a coarse point: the test's)
            return list(self.fine), False
        return coarse + [p for p in self.fine if p[0] > coarse[-1][0]], True


class RateHistory:
    """Rings of rate points: the totals', and some queues'."""

    def __init__(self, points: int = HISTORY_POINTS, queues: int = HISTORY_QUEUES,
                 coarse_points: int = COARSE_POINTS) -> None:
        self.points = points
        self.coarse_points = coarse_points
        self.max_queues = queues
        self.totals = Ring(points, coarse_points)
        self.queues: dict[QueueKey, Ring] = {}

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
                ring = self.queues[key] = Ring(self.points, self.coarse_points)
            if ring is not None:
                ring.add((wall, round(rates[0], 2), round(rates[1], 2), round(rates[2], 2)))
        for key in self.queues.keys() - now.keys():  # deleted: its counters are gone
            del self.queues[key]
        self.totals.add((wall, round(total[0], 2), round(total[1], 2), round(total[2], 2)))

    def of(self, key: QueueKey | None, seconds: int = HOUR_RANGE) -> tuple[list[Point], bool]:
        """The last ``seconds`` of a queue's points (none if it has no ring), or of the totals'
        for None; and whether they are the coarse ones."""
        ring = self.totals if key is None else self.queues.get(key)
        return ring.within(seconds) if ring is not None else ([], False)
