"""What each queue's settings are, and how full the bounded ones are.

``QueueBounds`` holds the declared settings (queue_settings.py), the vhost's policies
(policy_match.py: the settings they give are resolved once per queue and kept until they
change) and the ``--max-queue-bytes`` default, gives a new message its queue's TTL, and counts the size of every bounded queue
(``QueueSize``): +1 for each message stored ready, -1 for each deleted, corrected once by the
store's count of the queue (``Store.queue_size``, read the first time the queue is bounded).
A ``reject-publish`` queue refuses what would break its bounds (``admit``); dropping the head
of a ``drop-head`` one is the dispatcher's (it dead-letters what it drops).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from ..storage.base import Store, StoredMessage, StoreError
from ..storage.rows import SaveQueue
from .policy_match import Effective, Policy, resolve
from .queue_settings import REJECT_PUBLISH, QueueFull, QueueSettings, QueueSize
from .reads import Reads, StoreRead

log = logging.getLogger(__name__)
#: Queues whose resolved settings are kept at most (past it the cache starts afresh: resolving
#: again is a few pattern searches).
MAX_RESOLVED = 10_000


class QueueBounds:
    __slots__ = ("store", "reads", "max_queue_bytes", "declared", "default", "sizes", "on_counted", "policies",
                 "operator_policies", "ruled", "resolved")

    def __init__(self, store: Store, reads: Reads, max_queue_bytes: int | None,
                 on_counted: Callable[[str], None]) -> None:
        self.store = store
        self.reads = reads
        self.max_queue_bytes = max_queue_bytes
        self.declared: dict[str, QueueSettings] = {}  # declared queues
        #: the policy of an undeclared queue: --max-queue-bytes, or none
        default = QueueSettings().with_default_bytes(max_queue_bytes)
        self.default = default if default.bounded else None
        self.sizes: dict[str, QueueSize] = {}  # bounded queues
        self.on_counted = on_counted  # the store's count of a queue came in (its bounds may bite)
        self.policies: tuple[Policy, ...] = ()
        self.operator_policies: tuple[Policy, ...] = ()
        self.ruled = False  # the vhost has policies: every queue's settings are resolved
        self.resolved: dict[str, QueueSettings | None] = {}

    def policy(self, name: str) -> QueueSettings | None:
        """Queue ``name``'s settings: declared, given by policies, or the --max-queue-bytes default."""
        if self.ruled:
            try:
                return self.resolved[name]
            except KeyError:
                return self._resolve(name)
        policy = self.declared.get(name)
        if policy is None:
            return self.default
        return policy.with_default_bytes(self.max_queue_bytes)

    def _resolve(self, name: str) -> QueueSettings | None:
        effective = self.effective(name)
        settings = effective.settings().with_default_bytes(self.max_queue_bytes) if effective.options else self.default
        if len(self.resolved) >= MAX_RESOLVED:
            self.resolved.clear()
        self.resolved[name] = settings
        return settings

    def effective(self, name: str) -> Effective:
        """Queue ``name``'s settings with where each came from (the ``--max-queue-bytes`` default
        is not among them)."""
        declared = self.declared.get(name)
        return resolve(name, {} if declared is None else declared.options(), self.policies, self.operator_policies)

    def set_policies(self, policies: tuple[Policy, ...], operator_policies: tuple[Policy, ...]) -> None:
        """The vhost's policies now: every queue's settings are resolved afresh."""
        self.policies, self.operator_policies = policies, operator_policies
        self.ruled = bool(policies or operator_policies)
        self.resolved.clear()

    def ack_timeout(self, name: str, default: float) -> float:
        """Seconds a delivery of queue ``name`` may stay unacked (its ``ack-timeout`` setting)."""
        policy = self.policy(name)
        return default if policy is None or policy.ack_timeout is None else policy.ack_timeout

    def delivery_limit(self, name: str, default: int | None) -> int | None:
        """Redeliveries before a message of queue ``name`` is dead-lettered (``delivery-limit``)."""
        policy = self.policy(name)
        return default if policy is None or policy.delivery_limit is None else policy.delivery_limit

    def capped_priority(self, name: str, priority: int) -> int:
        """A message's priority under its queue's ``max-priority``."""
        policy = self.policy(name)
        top = None if policy is None else policy.max_priority
        return priority if top is None or priority <= top else top

    def declare(self, name: str, policy: QueueSettings | None, save: bool) -> QueueSettings | None:
        """Give queue ``name`` settings (None: forget its declaration); the settings in effect now."""
        if policy is None:
            self.declared.pop(name, None)
        else:
            self.declared[name] = policy
        self.resolved.pop(name, None)
        if save:
            self.store.write(SaveQueue(name, None if policy is None else policy.options()))
        return self.refresh(name)

    def refresh(self, name: str) -> QueueSettings | None:
        """Queue ``name``'s settings in effect now, its size counted if they bound it."""
        effective = self.policy(name)
        if effective is not None and effective.bounded:
            self.size(name)
        else:
            self.sizes.pop(name, None)
        return effective

    def admit(self, name: str, nbytes: int, expires: int | None, deliver_at: int | None, now_ms: int) -> int | None:
        """A message of ``nbytes`` for queue ``name``: its expiry under the queue's TTL, counted in
        the queue's size once ready; QueueFull if a ``reject-publish`` queue is full."""
        policy = self.policy(name)
        if policy is None:
            return expires
        ttl = policy.message_ttl  # a delayed message's runs from when it is due (published again)
        if ttl is not None and deliver_at is None and (expires is None or now_ms + ttl < expires):
            expires = now_ms + ttl
        if deliver_at is None and policy.bounded:
            size = self.size(name)
            if policy.overflow == REJECT_PUBLISH and policy.over(size.length + 1, size.bytes + nbytes):
                raise QueueFull(f"queue {name!r} is full (max-length {policy.max_length},"
                                f" max-length-bytes {policy.max_length_bytes}, overflow reject-publish)")
            size.length += 1
            size.bytes += nbytes
        return expires

    def size(self, name: str) -> QueueSize:
        """The counted size of a bounded queue; the first time, the store is asked for its count."""
        size = self.sizes.get(name)
        if size is None:
            size = self.sizes[name] = QueueSize()
            if self.store.durable:  # a memory store starts empty: counting from zero is exact

                def fetch(store: Store) -> Awaitable[tuple[int, int, tuple[int, int]]]:
                    return store.queue_size(name, lambda: (size.length, size.bytes))

                self.reads.submit(StoreRead(fetch, partial(self._counted, name, size), partial(self._count_failed, name)))
        return size

    def _counted(self, name: str, size: QueueSize, result: tuple[int, int, tuple[int, int]]) -> None:
        count, nbytes, (length, body_bytes) = result
        size.length += count - length  # what the store held, plus what happened since it looked
        size.bytes += nbytes - body_bytes
        self.on_counted(name)

    def _count_failed(self, name: str, error: StoreError) -> None:
        log.warning("counting queue %s failed (its bounds count from now): %s", name, error)

    def removed(self, messages: Sequence[StoredMessage]) -> None:
        """Messages left their queues for good: the bounded queues among them shrink."""
        sizes = self.sizes
        for msg in messages:
            size = sizes.get(msg.queue)
            if size is not None and msg.deliver_at is None:  # a delayed one counts once ready
                size.length -= 1
                size.bytes -= len(msg.body)

    def purged(self, name: str, kept: Sequence[StoredMessage]) -> None:
        """Queue ``name`` was purged but for ``kept`` (its deliveries in flight)."""
        size = self.sizes.get(name)
        if size is not None:
            size.length = len(kept)
            size.bytes = sum(len(msg.body) for msg in kept)
