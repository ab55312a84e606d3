"""Counters an operator reads (the HTTP API, /metrics): plain integers the engine bumps.

Theory of operation
-------------------
The hot path pays one attribute increment per event: no clock, no allocation,
no metric library inside the engine.  Rates are derived outside (server/) by
sampling the counters.  A queue's counters live in ``QueueStats``, created the
first time the queue is published to or activated, kept while the broker runs
(a queue's history survives it leaving memory) and dropped when the queue is
deleted, so memory follows the number of queue names in use, like the store's
``queues`` table.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The counters summed over a broker's queues: /api/overview's totals, and what a broker on a
#: shared database writes with each lease renewal (/api/cluster's totals).
TOTALS = ("published", "delivered", "acked", "redelivered", "dead_lettered")
#: Every counter of a queue, in ``QueueStats.as_dict``'s order.
COUNTERS = (*TOTALS, "expired", "dropped", "rejected")


class QueueStats:
    """What happened to one queue's messages since the broker started."""

    __slots__ = COUNTERS

    def __init__(self) -> None:
        self.published = 0
        self.delivered = 0
        self.acked = 0
        self.redelivered = 0
        self.dead_lettered = 0
        self.expired = 0  # never delivered: past their expiry (dead-lettered or not)
        self.dropped = 0  # the oldest of a full drop-head queue (dead-lettered or not)
        self.rejected = 0  # SENDs refused by a full reject-publish queue

    def as_dict(self) -> dict[str, int]:
        # By name, not through __slots__: the compiled engine's classes (mypyc) have no __slots__.
        return {name: getattr(self, name) for name in COUNTERS}


def totals(stats: Iterable[QueueStats]) -> dict[str, int]:
    """``TOTALS`` summed over ``stats`` in one pass (with many queues, the loop is the cost)."""
    published = delivered = acked = redelivered = dead_lettered = 0
    for s in stats:
        published += s.published
        delivered += s.delivered
        acked += s.acked
        redelivered += s.redelivered
        dead_lettered += s.dead_lettered
    return dict(zip(TOTALS, (published, delivered, acked, redelivered, dead_lettered)))
