"""What happens to queue messages, reported to observers outside the engine: OpenTelemetry
spans (server/otel.py) and a vhost's durable trace (tracestream.py).

Theory of operation
-------------------
The few steps every queue message passes through (``Dispatcher.publish``, ``deliver``,
``dead_letter``, ``discard``; ``Acks.settle_ack``, ``nack``) each read one field of theirs,
``watch``: None while nobody watches the engine, which is then one attribute test per step
and nothing more; else the ``Watch`` of the engine's current observers, which the step tells
what it did.  ``Observers`` (the engine's ``observers``) sets that field in the dispatcher and
the acks whenever an observer comes or goes, and back to None when the last one goes.  The
same code runs pure and compiled: mypyc's native classes have fixed methods, but a field is a
field (docs/decisions/compiled-engine.md).  Off, that costs a plain message two tests: in
callgrind instructions (benchmarks/icount_send.py, docs/tracing.md) +0.36 % pure (40,433 to
40,578) and +0.8 % compiled (33,346 to 33,621, within what mypyc's layout alone moves), against
the methods once swapped in, which cost nothing off but could not be swapped compiled.

Most messages of a watched engine interest nobody (tracing follows the few sampled ones), so
each observer is asked once per message whether it ``follows`` it, and only the followers are
told its steps: the answer is kept on the message (``StoredMessage.watchers``), and a step of a
message nobody follows costs one identity test in the ``Watch``.  The answer names the
``Watch`` it was given under: a change of observers installs a new one, so a message is asked
again, an observer gone is told nothing more, and a new one hears the later steps of messages
in flight.

The observers are called synchronously on the engine's thread, within the step: a publish is
told before any delivery it makes (and before the store insert it buffers in the same step), a
delivery, an ACK and an expiry after their step, a NACK and a dead letter before the requeue
or the dead letter's own publish, whose events follow.  An observer must be quick and must not call
back into the engine except to append to a stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..storage.base import StoredMessage
from .session import Subscription


class MessageEvents(Protocol):
    """An observer of queue messages (every method is called on the engine's thread)."""

    def follows(self, msg: StoredMessage) -> bool:
        """Whether the observer wants ``msg``'s steps: asked once per message, at its first step
        since the observer watches (its publish, or a later step of a message published before
        or read back from the store); the other methods are called for those it follows only."""

    def published(self, msg: StoredMessage) -> None:
        """``msg`` entered its queue (``msg.deliver_at`` set: delayed until then)."""

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


#: A message's ``watchers``: the ``Watch`` it was decided under and its observers that follow it.
_Memo = tuple[object, tuple[MessageEvents, ...]]


class Watch:
    """One set of observers, as the engine's steps tell them (the ``watch`` field they read)."""

    def __init__(self, observers: tuple[MessageEvents, ...]) -> None:
        self.observers = observers
        self.only = observers[0] if len(observers) == 1 else None  # (the usual case: one observer)
        #: The memo of a message nobody follows under this watch (its identity is the test).
        self.nobody: _Memo = (self, ())
        self.everyone: _Memo = (self, observers)

    def followers(self, msg: StoredMessage) -> tuple[MessageEvents, ...]:
        """Who follows ``msg``: asked at its first step under this watch, remembered on it."""
        memo: _Memo | None = msg.watchers
        if memo is None or memo[0] is not self:
            only = self.only
            if only is not None:
                memo = self.everyone if only.follows(msg) else self.nobody
            else:
                chosen = tuple([observer for observer in self.observers if observer.follows(msg)])
                memo = (self, chosen) if chosen else self.nobody
            msg.watchers = memo
        return memo[1]

    def published(self, msg: StoredMessage) -> None:
        for observer in self.followers(msg):
            observer.published(msg)

    def delivered(self, msg: StoredMessage, sub: Subscription) -> None:
        """(``Dispatcher.deliver`` tests ``nobody`` itself: the most frequent step saves a call.)"""
        for observer in self.followers(msg):
            observer.delivered(msg, sub)

    def acked(self, msgs: Sequence[StoredMessage], sub: Subscription) -> None:
        nobody = self.nobody
        for msg in msgs:
            if msg.watchers is not nobody:
                for observer in self.followers(msg):
                    observer.acked(msg, sub)

    def nacked(self, msg: StoredMessage, sub: Subscription, requeue: bool) -> None:
        if msg.watchers is not self.nobody:
            for observer in self.followers(msg):
                observer.nacked(msg, sub, requeue)

    def dead_lettered(self, msg: StoredMessage, reason: str) -> None:
        if msg.watchers is not self.nobody:
            for observer in self.followers(msg):
                observer.dead_lettered(msg, reason)

    def expired(self, msg: StoredMessage) -> None:
        if msg.watchers is not self.nobody:
            for observer in self.followers(msg):
                observer.expired(msg)


class Hooked(Protocol):
    """An object whose steps tell the ``Watch`` in its ``watch`` field (the dispatcher, the acks)."""

    watch: Watch | None


class Observers:
    """Who watches one engine (``Broker.observers``), kept in the ``watch`` field of ``hooked``."""

    def __init__(self, hooked: Sequence[Hooked]) -> None:
        self.hooked = tuple(hooked)
        self.watching: tuple[MessageEvents, ...] = ()

    def watch(self, observer: MessageEvents) -> None:
        """Report the engine's queue messages to ``observer`` too (from the next step on)."""
        if observer not in self.watching:
            self._install(self.watching + (observer,))

    def unwatch(self, observer: MessageEvents) -> None:
        """Stop reporting to ``observer``; with no observer left the steps test None again."""
        if observer in self.watching:
            self._install(tuple([one for one in self.watching if one is not observer]))

    def _install(self, observers: tuple[MessageEvents, ...]) -> None:
        self.watching = observers
        watch = Watch(observers) if observers else None
        for hooked in self.hooked:
            hooked.watch = watch
