"""Flow control: why a connection's reader reads nothing more from its client, in one place.

Theory of operation
-------------------
A connection's reader (``server/flow.py``'s ``ReadGate``, used by ``Connection._reader``) stops
reading its client for the reasons ``Hold`` names, and waits them out in the order they are
declared, each with its own wake-up and timeout:

* the engine's reasons, left on the session by the frames of the last read (``holds``):
  ``TOPIC``, its topic messages pushed subscribers' outboxes over their hard limit
  (--topic-overflow block, overflow.py); ``PACE``, it published into queues whose consumers
  fell behind (pacing.py); ``ENGINE``, its frames wait for a store read (``Session.waiting``);
* the server's, before the next read: ``OUTBOX``, its own outbox is over the hard limit (its
  RECEIPTs and ERRORs would land there); ``STORE``, the store's unflushed backlog is at its
  bound; and at a SEND within a read, ``ALARM``, a resource alarm is set.

The engine has no clock: the deadlines of ``PACE`` (``Broker.pace``) and the verdict on a
topic subscriber that held a publisher for --topic-block-timeout
(``Broker.topic_subscriber_lagging``) take the server's time; what to wait for under ``TOPIC``
and ``PACE`` is handed over once (``take_subscribers``, ``take_queues``), as the session
forgets it then.
"""

from __future__ import annotations

from enum import Enum

from .queue import Queue
from .session import Outbox, Session, Subscription


class Hold(Enum):
    """Why a reader waits, in the order it waits; the value is what the management API shows."""

    TOPIC = "topic-throttle"
    PACE = "queue-pace"
    ENGINE = "engine-read"
    OUTBOX = "outbox"
    STORE = "store"
    ALARM = "alarm"


#: No reason: the tuple ``holds`` returns for a session nothing holds (the common case, shared).
NOTHING: tuple[Hold, ...] = ()


def holds(session: Session) -> tuple[Hold, ...]:
    """The engine's reasons to hold ``session``'s reader after a read, in order (usually none)."""
    if not (session.throttled_by or session.paced) and session.waiting is None:
        return NOTHING
    return tuple(hold for hold in (Hold.TOPIC, Hold.PACE, Hold.ENGINE) if held_by(session, hold))


def held_by(session: Session, hold: Hold) -> bool:
    """Does the engine hold ``session``'s reader for ``hold`` (one of its own reasons) now?"""
    if hold is Hold.TOPIC:
        return bool(session.throttled_by)
    if hold is Hold.PACE:
        return bool(session.paced)
    return hold is Hold.ENGINE and session.waiting is not None


def take_subscribers(session: Session) -> dict[Outbox, Session]:
    """``TOPIC``: the subscribers (by outbox) whose output the reader waits for; forgotten here."""
    subscribers, session.throttled_by = session.throttled_by or {}, None
    return subscribers


def take_queues(session: Session) -> set[Queue[Subscription]]:
    """``PACE``: the backed-up queues the reader waits for (``Broker.pace``); forgotten here."""
    queues, session.paced = session.paced or set(), None
    return queues
