"""Producer pacing: a queue whose consumers fall behind holds its producers back, for a while.

Why: one engine thread does all the work, so a backlog costs the consumers twice.  Once a
queue's ready messages outgrow its window they are written to the store, read back and
deleted, which takes the CPU the consumers needed, so the backlog grows further: with four
producers and four consumers on one queue a run went either at 112-117k msg/s in memory or
at 48-53k spilled, for the rest of the run.  ActiveMQ blocks producers at a
destination's memory limit, for as long as it takes; RabbitMQ paces them by credit flow.

Theory of operation
-------------------
A queue is *backed up* when it has subscribers, all its ready messages are in memory (its
window, and a tail that continues it: window.py), and they fill at least half of either of
the window's budgets (``PACE_AT``).  ``Dispatcher.publish`` notes such queues; the engine
hands them to the session whose frame published into them (``Session.paced``), and the
server reads nothing more from that client until each has drained to a quarter
(``RESUME_AT``), which ``Dispatcher.pump`` signals.  So producers go at their consumers'
pace and the backlog never reaches the disk.

A queue whose subscribers all take their messages with ``ack:auto`` is paced much earlier:
at ``SOCKET_PACE_AT`` of its budgets, until nothing is left in memory.  Such a subscriber
lacks room only while its socket is behind (the server's output buffer for it is full), so
what waits in the window waits for the network, not for anyone's work: holding the producer
leaves the backlog in its socket, where it costs nothing, and the next SENDs find the window
empty and go straight to their subscriber (``Queue.taker``) instead of through the window.  With
the thresholds above, a standing backlog of a few thousand messages formed whenever a
producer's read found the consumer's output still being sent, and three in four messages of
``python -m benchmarks.load --scenario queue`` went through the window; paced early, a third do, and
the broker needs about a sixth less CPU per message (docs/decisions/early-pacing.md).  A
subscriber that acknowledges lacks room while its client works through its prefetch: a task
queue's producer must be able to post a burst without waiting for the workers, so such a
queue keeps the late thresholds.

A queue may hold its producers back for ``pace_timeout`` seconds (``--queue-pace-timeout``)
in one *episode*, from the first wait until it drains.  Past that its consumers are simply
slower than its producers (a task queue, a consumer that stopped): pacing stops, counted
and logged, and the backlog spills to the store as it always could, until the queue is all
in memory again.  So a slow queue costs its producers one wait per backlog, never a rate
limit.  Timings: the engine has no clock; the server passes its own (``now``).
"""

from __future__ import annotations

from collections.abc import Callable

#: A queue is backed up at this fraction (1/N) of its window's count or bytes...
PACE_AT = 2
#: ...and has drained at this one.
RESUME_AT = 4
#: A queue none of whose subscribers acknowledge is backed up at this fraction already, and has
#: drained when nothing ready is left in memory.
SOCKET_PACE_AT = 32


class Pace:
    """A queue's pacing episode: since when it holds producers back, who waits, or whether it
    gave up until its backlog is back in memory."""

    __slots__ = ("since", "waiters", "off")

    def __init__(self) -> None:
        self.since: float | None = None  # server time of the episode's first wait
        self.waiters: list[Callable[[], None]] = []
        self.off = False

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for wake in waiters:
            wake()
