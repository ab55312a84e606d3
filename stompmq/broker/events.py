"""What happens to queue messages, reported to observers outside the engine: OpenTelemetry
spans (server/tracing.py) and a vhost's durable trace (tracestream.py).

Theory of operation
-------------------
Nobody watches most brokers, and then the engine must not pay even a test per message.  So
the engine has no hook in its hot path at all: ``watch`` swaps instance attributes in for the
few methods every message passes through (``Dispatcher.publish``, ``deliver``,
``dead_letter``, ``discard``; ``Acks.settle_ack``, ``nack``), each calling the class's own
method and telling the observers, and ``unwatch`` of the last observer deletes them, which
leaves the class's methods, exactly as before.  Calls through ``self.`` and the engine's per-call
look-ups (``Broker.handle_frames`` reads ``dispatcher.publish`` once per call) find the swapped
attributes; nothing keeps a bound method across calls.

The observers are called synchronously on the engine's thread, after the step (a delivery
that a publish makes before it returns is told after the publish; a NACK and a dead letter
before their step, whose own events follow), so an observer must be quick and must not call
back into the engine except to append to a stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..storage.base import StoredMessage
from .acks import AckRun, acked_ids
from .consumer import AckMode
from .dispatch import EXPIRED
from .queue import Queue
from .session import Subscription
from .stats import QueueStats

if TYPE_CHECKING:
    from .engine import Broker


class MessageEvents(Protocol):
    """An observer of queue messages (every method is called on the engine's thread)."""

    def published(self, msg: StoredMessage) -> None:
        """``msg`` was stored in its queue (``msg.deliver_at`` set: delayed until then)."""

    def delivered(self, msg: StoredMessage, sub: Subscription) -> None:
        """``msg`` was handed to ``sub``."""

    def acked(self, msg: StoredMessage, sub: Subscription) -> None:
        """``sub`` acknowledged ``msg``."""

    def nacked(self, msg: StoredMessage, sub: Subscription, requeue: bool) -> None:
        """``sub`` refused ``msg`` (``requeue``: it goes back to its queue)."""

    def dead_lettered(self, msg: StoredMessage, reason: str) -> None:
        """``msg`` left its queue for its dead-letter queue (or was dropped) for ``reason``."""

    def expired(self, msg: StoredMessage) -> None:
        """``msg`` passed its expiry before anyone took it."""


#: The instance attributes ``watch`` sets, per object of the engine.
_SWAPPED = {"dispatcher": ("publish", "deliver", "dead_letter", "discard"), "acks": ("settle_ack", "nack")}


def watch(engine: Broker, observer: MessageEvents) -> None:
    """Report ``engine``'s queue messages to ``observer`` too (from the next message on)."""
    observers = engine.observers
    if observer in observers:
        return
    observers.append(observer)
    if len(observers) == 1:
        _swap_in(engine, observers)


def unwatch(engine: Broker, observer: MessageEvents) -> None:
    """Stop reporting to ``observer``; with no observer left the engine is as if never watched."""
    observers = engine.observers
    if observer not in observers:
        return
    observers.remove(observer)
    if not observers:
        for name, methods in _SWAPPED.items():
            target = getattr(engine, name)
            for method in methods:
                delattr(target, method)


def _swap_in(engine: Broker, observers: list[MessageEvents]) -> None:
    dispatcher, acks = engine.dispatcher, engine.acks
    cls_dispatcher, cls_acks = type(dispatcher), type(acks)

    # A publish may deliver before it returns: those deliveries are told after the publish.
    held_back: list[tuple[StoredMessage, Subscription]] | None = None

    def publish(queue_name: str, headers: dict[str, str], body: bytes, *options: Any) -> StoredMessage:
        nonlocal held_back
        outermost = held_back is None  # within another publish, that one tells the deliveries
        delivered: list[tuple[StoredMessage, Subscription]] = []
        if outermost:
            held_back = delivered
        try:
            msg = cls_dispatcher.publish(dispatcher, queue_name, headers, body, *options)
            for observer in observers:
                observer.published(msg)
        finally:
            if outermost:
                held_back = None
        for one, sub in delivered:
            for observer in observers:
                observer.delivered(one, sub)
        return msg

    def deliver(queue: Queue[Subscription], sub: Subscription, msg: StoredMessage) -> None:
        cls_dispatcher.deliver(dispatcher, queue, sub, msg)
        if held_back is not None:
            held_back.append((msg, sub))
            return
        for observer in observers:
            observer.delivered(msg, sub)

    def dead_letter(msg: StoredMessage, reason: str) -> None:
        for observer in observers:  # before the dead letter is published: its events follow
            observer.dead_lettered(msg, reason)
        cls_dispatcher.dead_letter(dispatcher, msg, reason)

    def discard(msg: StoredMessage, reason: str, stats: QueueStats) -> None:
        if reason == EXPIRED:
            for observer in observers:
                observer.expired(msg)
        cls_dispatcher.discard(dispatcher, msg, reason, stats)

    def settle_ack(run: AckRun, sub: Subscription, ack_id: str) -> None:
        settled = _held(sub, ack_id)
        cls_acks.settle_ack(acks, run, sub, ack_id)
        for msg in settled:
            for observer in observers:
                observer.acked(msg, sub)

    def nack(sub: Subscription, ack_id: str, requeue: bool) -> None:
        settled = _held(sub, ack_id)
        for msg in settled:  # before: a NACK may dead-letter, whose events follow
            for observer in observers:
                observer.nacked(msg, sub, requeue)
        cls_acks.nack(acks, sub, ack_id, requeue)

    swapped: dict[str, Callable[..., Any]] = {
        "publish": publish, "deliver": deliver, "dead_letter": dead_letter, "discard": discard,
        "settle_ack": settle_ack, "nack": nack,
    }
    for name, methods in _SWAPPED.items():
        target = getattr(engine, name)
        for method in methods:
            setattr(target, method, swapped[method])


def _held(sub: Subscription, ack_id: str) -> list[StoredMessage]:
    """The queue messages an ACK or NACK of ``ack_id`` settles (none for topics and streams)."""
    if sub.queue is None:
        return []
    unacked = sub.unacked
    if sub.ack_mode is not AckMode.CLIENT:  # one delivery: the common case, without a list walk
        msg = unacked.get(ack_id)
        return [] if msg is None else [msg]
    return [unacked[one] for one in acked_ids(sub, ack_id) if one in unacked]
