"""A connection's read gate: the one place its reader waits for anything but its socket.

The reasons, and the order they are waited out in, are the engine's (``broker/flow.py``:
``Hold``); here each has its wake-up and its timeout:

* ``TOPIC``: each subscriber's outbox below its hard limit, for at most --topic-block-timeout
  in one stretch (however many waits that takes); then the engine says whether the subscriber
  lags (``Broker.topic_subscriber_lagging``: a peer drains much faster, or this one wait lasted
  the whole timeout) and the publisher goes on, or a new stretch starts;
* ``PACE``: each queue drained (``Broker.pace`` calls the wake-up), or its episode's deadline;
* ``ENGINE``: the engine handled the frames that waited for a store read (``Session.ungated``);
* ``OUTBOX``: the connection's own outbox below its hard limit (or closed);
* ``STORE``: room in the store's unflushed backlog;
* ``ALARM``: every resource alarm cleared (server/alarms.py).

``reason`` is what the reader waits for now (the management API shows it, and ``STORE`` and
``ALARM`` as "held").  The reader is not ``listening`` meanwhile, so its client's heart-beats,
waiting unread, are not taken for silence.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

import trio

from ..broker import Broker, Outbox, Session, Subscription
from ..broker.flow import Hold, held_by, holds, take_queues, take_subscribers
from .outbox import ConnectionOutbox
from .runtime import Runtime
from .settings import ServerSettings

if TYPE_CHECKING:
    from ..broker.queue import Queue

#: What the reader waits out between two reads: the last read's reasons, then the next one's.
BETWEEN_READS = (Hold.TOPIC, Hold.PACE, Hold.ENGINE, Hold.OUTBOX, Hold.STORE)
#: At a SEND while an alarm is set.
AT_SEND = (Hold.ALARM,)
#: At DISCONNECT: its RECEIPT follows every frame's.
AT_DISCONNECT = (Hold.ENGINE,)


class ReadGate:
    """Why one connection's reader may not read now, and the waiting that lifts it."""

    __slots__ = ("runtime", "settings", "outbox", "store", "broker", "session", "reason")

    def __init__(self, runtime: Runtime, settings: ServerSettings, outbox: ConnectionOutbox) -> None:
        self.runtime = runtime
        self.settings = settings
        self.outbox = outbox
        self.store = runtime.broker.store  # every vhost's engine writes through it
        self.broker = runtime.broker  # the session's engine once connected (``enter``)
        self.session: Session | None = None
        #: What the reader waits for now (None: it does not wait here).
        self.reason: Hold | None = None

    def enter(self, broker: Broker, session: Session) -> None:
        """CONNECT made ``session`` in ``broker`` (its vhost's engine)."""
        self.broker, self.session = broker, session

    def shut(self) -> bool:
        """Must the reader wait before its next read?  (Once per read: the common answer is no.)"""
        session = self.session
        if session is not None and holds(session):
            return True
        outbox = self.outbox
        return outbox.size >= outbox.hard_limit or self.store.full()

    def holds(self, hold: Hold) -> bool:
        """Does ``hold`` keep the reader waiting now?"""
        if hold is Hold.OUTBOX:
            return self.outbox.size >= self.outbox.hard_limit
        if hold is Hold.STORE:
            return self.store.full()
        if hold is Hold.ALARM:
            return bool(self.runtime.alarms.active)
        return self.session is not None and held_by(self.session, hold)

    async def wait(self, reasons: tuple[Hold, ...]) -> bool:
        """Wait out each of ``reasons`` that holds when its turn comes, in order; whether any did."""
        waited = False
        for hold in reasons:
            if not self.holds(hold):
                continue
            waited = True
            self.reason = hold
            try:
                await self._wait_out(hold)
            finally:
                self.reason = None
        return waited

    async def _wait_out(self, hold: Hold) -> None:
        if hold is Hold.TOPIC:
            assert self.session is not None
            await self._wait_for_subscribers(take_subscribers(self.session))
        elif hold is Hold.PACE:
            assert self.session is not None
            await self._wait_for_consumers(take_queues(self.session))
        elif hold is Hold.ENGINE:
            assert self.session is not None
            handled = trio.Event()
            self.session.ungated = handled.set
            await handled.wait()
        elif hold is Hold.OUTBOX:
            await self.outbox.wait_below_hard_limit()
        elif hold is Hold.STORE:
            await self.store.wait_for_room()  # an outage may outlast the heart-beat grace
        else:
            await self.runtime.alarms.wait_cleared()

    async def _wait_for_subscribers(self, subscribers: dict[Outbox, Session]) -> None:
        """--topic-overflow block: until each outbox is below its hard limit, or its subscriber
        lags after --topic-block-timeout in one stretch (broker/overflow.py)."""
        timeout = self.settings.topic_block_timeout or math.inf
        for outbox, subscriber in subscribers.items():
            buffer = cast(ConnectionOutbox, outbox)
            waiting_since = trio.current_time()
            while True:
                if buffer.holding_since is None:
                    buffer.holding_since = waiting_since
                with trio.move_on_at(buffer.holding_since + timeout):
                    await buffer.wait_below_hard_limit()
                if buffer.can_take_transient() or buffer.closed:
                    break
                now = trio.current_time()
                stalled = now - waiting_since >= timeout
                if self.broker.topic_subscriber_lagging(subscriber, timeout, _drain_rate, stalled):
                    break
                buffer.holding_since = now  # it keeps pace with its peers: a new stretch starts

    async def _wait_for_consumers(self, queues: set[Queue[Subscription]]) -> None:
        """Until each backed-up queue drains, or has held its producers back for
        --queue-pace-timeout (broker/pacing.py)."""
        for queue in queues:
            while True:
                self.runtime.tick()
                drained = trio.Event()
                deadline = self.broker.pace(queue, drained.set)
                if deadline is None:
                    break
                with trio.move_on_at(deadline):
                    await drained.wait()


def _drain_rate(outbox: Outbox) -> float:
    """A subscriber's drain rate now (bytes/s), for --topic-block-timeout's comparison."""
    return cast(ConnectionOutbox, outbox).drain_rate(trio.current_time())
