"""A vhost's policies at work: queues take new settings at once, and unused queues expire.

``AppliedPolicies.replace`` is every change of the vhost's policies (set, changed, cleared; on
PostgreSQL also another broker's).  The settings are resolved afresh (bounds.py), and every queue
this broker knows, then every queue the store holds messages of (one read of their names), is
looked at again without being redeclared:

* its bounds, pinning and pump (``Dispatcher.settings_changed``), as a declaration would;
* a ``message-ttl`` is given to the messages already waiting, counted from when each was
  published (those in memory here, and in the store through a ``CapExpiry`` row), and the
  expiry sweep looks at once: what is older than the TTL goes within a sweep (about a second);
  new messages take the TTL as they come (``QueueBounds.admit``).  A TTL removed or raised
  stops applying to new messages; those already given an expiry keep it.
* ``expires``: a queue without consumers has an ``QUEUE_EXPIRY`` timer; it is deleted when the
  timer runs out unless a consumer came meanwhile (with ``expires-when-empty``, unless it holds
  messages: then it is looked at again one period later).  The timer starts when the last
  consumer leaves, or when the setting first applies (after a restart: at start-up).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from functools import partial

from ..storage.base import Store, StoreError
from ..storage.rows import CapExpiry
from .dispatch import Dispatcher
from .expiry import SWEEP_MS
from .policy_match import Policy
from .queue_settings import QueueSettings
from .reads import StoreRead
from .timers import Timer

log = logging.getLogger(__name__)

#: Deadline kind: a queue's ``expires`` ran out.
QUEUE_EXPIRY = "queue-expiry"


class AppliedPolicies:
    __slots__ = ("dispatcher", "bounds", "delete", "timers")

    def __init__(self, dispatcher: Dispatcher, delete: Callable[[str], object]) -> None:
        self.dispatcher = dispatcher
        self.bounds = dispatcher.bounds
        self.delete = delete  # deletes a queue as /control/delete/queue does
        self.timers: dict[str, tuple[Timer, int]] = {}  # queue -> its expiry timer and the ms it was armed for

    def replace(self, policies: Iterable[Policy]) -> None:
        """The vhost's policies (and operator policies) are ``policies`` now."""
        ordered = sorted(policies, key=lambda p: p.name)
        self.bounds.set_policies(tuple(p for p in ordered if not p.operator), tuple(p for p in ordered if p.operator))
        dispatcher = self.dispatcher
        known = {*dispatcher.queues, *dispatcher.stats, *self.bounds.declared, *self.timers}
        for name in sorted(known):
            self.reconsider(name)
        if dispatcher.store.durable:

            def fetch(store: Store) -> Awaitable[list[str]]:
                return store.queue_names("")

            dispatcher.reads.submit(StoreRead(fetch, partial(self._stored, known), self._names_failed))

    def _stored(self, known: set[str], names: list[str]) -> None:
        for name in names:
            if name not in known:
                self.reconsider(name)

    def _names_failed(self, error: StoreError) -> None:
        log.warning("policies apply to the queues in memory only: reading the stored queues failed: %s", error)

    def declare(self, name: str, settings: QueueSettings | None, save: bool = True) -> None:
        """Give queue ``name`` settings (None: forget its declaration), in effect at once."""
        effective = self.bounds.declare(name, settings, save)
        self.dispatcher.settings_changed(name, effective)
        self._arm(name, effective, restart=False)

    def reconsider(self, name: str) -> None:
        """Queue ``name`` under the settings in effect now."""
        dispatcher = self.dispatcher
        settings = self.bounds.refresh(name)
        dispatcher.settings_changed(name, settings)
        if settings is not None and settings.message_ttl is not None:
            self._cap(name, settings.message_ttl)
        self._arm(name, settings, restart=False)

    def _cap(self, name: str, ttl: int) -> None:
        """The messages waiting in queue ``name`` expire ``ttl`` ms after they were published, at most."""
        dispatcher = self.dispatcher
        queue = dispatcher.queues.get(name)
        if queue is not None:
            for msg in queue.window.messages():
                cap = msg.timestamp + ttl
                if msg.expires is None or msg.expires > cap:
                    msg.expires = cap
            dispatcher.pump(queue)
        dispatcher.store.write(CapExpiry(name, ttl))
        dispatcher.expiry.arm(dispatcher.clock.wall_ms + SWEEP_MS // 2)  # after the next flush, likely

    # -- expires: unused queues ---------------------------------------------------------------------
    def _used(self, name: str) -> bool:
        queue = self.dispatcher.queues.get(name)
        return queue is not None and queue.nsubs > 0

    def _arm(self, name: str, settings: QueueSettings | None, restart: bool) -> None:
        after = None if settings is None else settings.expires
        current = self.timers.get(name)
        if after is None or self._used(name):
            if current is not None:
                self.dispatcher.deadlines.cancel(current[0])
                del self.timers[name]
            return
        if current is not None:
            if current[1] == after and not restart:
                return
            self.dispatcher.deadlines.cancel(current[0])
        self.timers[name] = (self.dispatcher.deadlines.arm(after / 1000, QUEUE_EXPIRY, name), after)

    def used(self, name: str) -> None:
        """A consumer subscribed to queue ``name``: it is in use."""
        current = self.timers.pop(name, None)
        if current is not None:
            self.dispatcher.deadlines.cancel(current[0])

    def unused(self, name: str) -> None:
        """The last consumer of queue ``name`` left: its ``expires`` starts now."""
        if self.bounds.ruled or name in self.bounds.declared:
            self._arm(name, self.bounds.policy(name), restart=True)

    def expire(self, name: str) -> None:
        """The ``QUEUE_EXPIRY`` deadline of queue ``name``."""
        self.timers.pop(name, None)
        settings = self.bounds.policy(name)
        if settings is None or settings.expires is None or self._used(name):
            return
        if not settings.expires_when_empty:
            self._delete(name, settings)
            return
        dispatcher = self.dispatcher
        queue = dispatcher.queues.get(name)
        if queue is not None and (queue.inflight or queue.window.size):
            self._arm(name, settings, restart=True)
        elif dispatcher.store.durable:

            def fetch(store: Store) -> Awaitable[int]:
                return store.count(name)

            dispatcher.reads.submit(StoreRead(fetch, partial(self._counted, name), partial(self._count_failed, name)))
        else:
            self._delete(name, settings)

    def _counted(self, name: str, ready: int) -> None:
        settings = self.bounds.policy(name)
        if settings is None or settings.expires is None or self._used(name) or name in self.timers:
            return  # used again, or its settings changed, meanwhile
        if ready:
            self._arm(name, settings, restart=True)
        else:
            self._delete(name, settings)

    def _count_failed(self, name: str, error: StoreError) -> None:
        log.warning("queue %s: counting its messages for expires-when-empty failed, it stays: %s", name, error)
        self._arm(name, self.bounds.policy(name), restart=True)

    def _delete(self, name: str, settings: QueueSettings) -> None:
        log.info("queue %s unused for %d ms (expires): deleted", name, settings.expires)
        self.delete(name)
