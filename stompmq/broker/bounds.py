"""What each queue was declared with, and how full the bounded ones are.

``QueueBounds`` holds the declared policies (policies.py) and the ``--max-queue-bytes``
default, gives a new message its queue's TTL, and counts the size of every bounded queue
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
from .policies import REJECT_PUBLISH, QueueFull, QueuePolicy, QueueSize
from .reads import Reads, StoreRead

log = logging.getLogger(__name__)


class QueueBounds:
    __slots__ = ("store", "reads", "max_queue_bytes", "declared", "default", "sizes", "on_counted")

    def __init__(self, store: Store, reads: Reads, max_queue_bytes: int | None,
                 on_counted: Callable[[str], None]) -> None:
        self.store = store
        self.reads = reads
        self.max_queue_bytes = max_queue_bytes
        self.declared: dict[str, QueuePolicy] = {}  # declared queues
        #: the policy of an undeclared queue: --max-queue-bytes, or none
        default = QueuePolicy().with_default_bytes(max_queue_bytes)
        self.default = default if default.bounded else None
        self.sizes: dict[str, QueueSize] = {}  # bounded queues
        self.on_counted = on_counted  # the store's count of a queue came in (its bounds may bite)

    def policy(self, name: str) -> QueuePolicy | None:
        """What queue ``name`` was declared with (or the --max-queue-bytes default)."""
        policy = self.declared.get(name)
        if policy is None:
            return self.default
        return policy.with_default_bytes(self.max_queue_bytes)

    def declare(self, name: str, policy: QueuePolicy | None, save: bool) -> QueuePolicy | None:
        """Give queue ``name`` a policy (None: forget its declaration); the policy in effect now."""
        if policy is None:
            self.declared.pop(name, None)
        else:
            self.declared[name] = policy
        if save:
            self.store.save_queue(name, None if policy is None else policy.options())
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
