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

Most messages of a watched engine interest nobody (tracing follows the few sampled ones), so
each observer is asked once per message whether it ``follows`` it, and only the followers are
told its steps: the answer is kept on the message (``StoredMessage.watchers``), and a step of a
message nobody follows costs one identity test after the engine's own work.

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
from .build import COMPILED
from .consumer import AckMode
from .dispatch import EXPIRED
from .errors import ClientError
from .queue import Queue
from .session import Subscription
from .stats import QueueStats

if TYPE_CHECKING:
    from .engine import Broker


class MessageEvents(Protocol):
    """An observer of queue messages (every method is called on the engine's thread)."""

    def follows(self, msg: StoredMessage) -> bool:
        """Whether the observer wants ``msg``'s steps: asked once per message, at its first step
        since the observer watches (its publish, or a later step of a message published before
        or read back from the store); the other methods are called for those it follows only."""

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


CLIENT = AckMode.CLIENT
#: The instance attributes ``watch`` sets, per object of the engine.
_SWAPPED = {"dispatcher": ("publish", "deliver", "dead_letter", "discard"), "acks": ("settle_ack", "nack")}

#: A message's ``watchers``: the watch it was decided in (an object of its own per watch) and
#: the observers that follow the message in it.
_Memo = tuple[object, tuple[MessageEvents, ...]]
#: A delivery a publish made, to tell its followers once the publish is told.
_Delivery = tuple[StoredMessage, Subscription, tuple[MessageEvents, ...]]


#: Why nothing can watch a compiled engine: its classes' methods are fixed, so the steps cannot
#: be swapped for watched ones (docs/decisions/compiled-engine.md).
COMPILED_REFUSAL = ("message tracing needs the pure-Python engine: this broker's engine is compiled "
                    "(build without STOMPMQ_MYPYC to trace)")


def watch(engine: Broker, observer: MessageEvents) -> None:
    """Report ``engine``'s queue messages to ``observer`` too (from the next step on); refused
    (ClientError) on the compiled engine."""
    if COMPILED:
        raise ClientError(COMPILED_REFUSAL)
    observers = engine.observers
    if observer in observers:
        return
    observers.append(observer)
    _swap_in(engine, tuple(observers))


def unwatch(engine: Broker, observer: MessageEvents) -> None:
    """Stop reporting to ``observer``; with no observer left the engine is as if never watched."""
    observers = engine.observers
    if observer not in observers:
        return
    observers.remove(observer)
    if observers:
        _swap_in(engine, tuple(observers))
        return
    for name, methods in _SWAPPED.items():
        target = getattr(engine, name)
        for method in methods:
            delattr(target, method)


def _swap_in(engine: Broker, observers: tuple[MessageEvents, ...]) -> None:
    """Install the steps that tell ``observers`` (replacing those of an earlier set of them).

    Each message is asked about once: its first step records in ``msg.watchers`` who follows
    it, and every later step of a message nobody follows costs one identity test.  The memo
    names this set of observers (``nobody``'s first item): a message decided under an earlier
    set is asked again, so an observer gone is told nothing more and a new one is asked."""
    dispatcher, acks = engine.dispatcher, engine.acks
    # The classes' own methods, looked up once (an attribute of a class is not cached per call).
    base_publish, base_deliver = type(dispatcher).publish, type(dispatcher).deliver
    base_dead_letter, base_discard = type(dispatcher).dead_letter, type(dispatcher).discard
    base_settle_ack, base_nack = type(acks).settle_ack, type(acks).nack
    nobody: _Memo = (object(), ())
    this_watch = nobody[0]
    everyone: _Memo = (this_watch, observers)
    only = observers[0] if len(observers) == 1 else None

    def followers(msg: StoredMessage) -> tuple[MessageEvents, ...]:
        memo: _Memo | None = msg.watchers
        if memo is None or memo[0] is not this_watch:
            if only is not None:  # (the usual case: one observer)
                memo = everyone if only.follows(msg) else nobody
            else:
                chosen = tuple([observer for observer in observers if observer.follows(msg)])
                memo = (this_watch, chosen) if chosen else nobody
            msg.watchers = memo
        return memo[1]

    # A publish may deliver before it returns: those deliveries are told after the publish.
    held_back: list[_Delivery] | None = None

    def publish(queue_name: str, headers: dict[str, str], body: bytes, *options: Any) -> StoredMessage:
        nonlocal held_back
        if held_back is not None:  # within another publish (a dead letter's): it tells the deliveries
            msg = base_publish(dispatcher, queue_name, headers, body, *options)
            for observer in followers(msg):
                observer.published(msg)
            return msg
        delivered: list[_Delivery] = []
        held_back = delivered
        try:
            msg = base_publish(dispatcher, queue_name, headers, body, *options)
        finally:
            held_back = None
        if msg.watchers is not nobody:  # (decided here, or by its delivery within the publish)
            for observer in followers(msg):
                observer.published(msg)
            for one, sub, told in delivered:
                for observer in told:
                    observer.delivered(one, sub)
        return msg

    def deliver(queue: Queue[Subscription], sub: Subscription, msg: StoredMessage) -> None:
        base_deliver(dispatcher, queue, sub, msg)
        if msg.watchers is nobody:
            return
        told = followers(msg)
        if held_back is not None:
            if told:
                held_back.append((msg, sub, told))
            return
        for observer in told:
            observer.delivered(msg, sub)

    def dead_letter(msg: StoredMessage, reason: str) -> None:
        if msg.watchers is not nobody:
            for observer in followers(msg):  # before the dead letter is published: its events follow
                observer.dead_lettered(msg, reason)
        base_dead_letter(dispatcher, msg, reason)

    def discard(msg: StoredMessage, reason: str, stats: QueueStats) -> None:
        if reason == EXPIRED and msg.watchers is not nobody:
            for observer in followers(msg):
                observer.expired(msg)
        base_discard(dispatcher, msg, reason, stats)

    def settle_ack(run: AckRun, sub: Subscription, ack_id: str) -> None:
        if sub.ack_mode is not CLIENT:  # one delivery, the common case: no list made
            msg = sub.unacked.get(ack_id)
            base_settle_ack(acks, run, sub, ack_id)
            if msg is not None and msg.watchers is not nobody and sub.queue is not None:
                for observer in followers(msg):
                    observer.acked(msg, sub)
            return
        settled = _held(sub, ack_id)
        base_settle_ack(acks, run, sub, ack_id)
        for msg in settled:
            if msg.watchers is not nobody:
                for observer in followers(msg):
                    observer.acked(msg, sub)

    def nack(sub: Subscription, ack_id: str, requeue: bool) -> None:
        for msg in _held(sub, ack_id):  # before: a NACK may dead-letter, whose events follow
            if msg.watchers is not nobody:
                for observer in followers(msg):
                    observer.nacked(msg, sub, requeue)
        base_nack(acks, sub, ack_id, requeue)

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
    if sub.ack_mode is not AckMode.CLIENT:  # one delivery, without a list walk
        msg = unacked.get(ack_id)
        return [] if msg is None else [msg]
    return [unacked[one] for one in acked_ids(sub, ack_id) if one in unacked]
