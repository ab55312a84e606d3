"""One vhost's view of the store every vhost shares.

Theory of operation
-------------------
Each vhost has its own engine (``broker.Broker``), and the engine is vhost-unaware: it names
queues, exchanges, streams and topics as its clients wrote them.  The default vhost's engine
uses the store itself, whose names are its names.  Any other vhost's engine gets a
``VhostStore``: every name going down gets the vhost's prefix (``vhost_space``: the store key
of ``storage/base.py``), every name coming back loses it, and every message written through it
is stamped with the prefix (``StoredMessage.space``) so the group commit files it under the
vhost.  A structural row gets the prefix on the fields its type names as store keys
(``rows.in_space``), in one place for every row type.  Writes keyed by seq (update, delete), tickets and back-pressure go straight through:
all vhosts share one write buffer, one commit group, one database thread.  The reads that
span queues (``load_due``, ``load_expired``) name the view's vhost, and the backends select
only its rows in SQL, so a vhost's engine never sees (or claims) another's messages; the
default vhost's engine names none and gets the default vhost's.

The view neither opens nor closes anything: the store's owner (``server/runtime.py``) does,
once, and hands each vhost its part of the recovery (``split_recovery``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

import trio

from ..vhost_names import DEFAULT_VHOST, split_key, vhost_space
from .ages import QueueAges
from .base import (
    Brokers,
    QueueCount,
    Recovery,
    Store,
    StoredMessage,
    StoreHealth,
    StreamMessage,
    StreamState,
)
from .header_filter import HeaderFilter
from .records import BindingRecord, ExchangeRecord
from .rows import Row, in_space

T = TypeVar("T")


def split_recovery(recovery: Recovery) -> dict[str, Recovery]:
    """What each declared vhost recovered, under its own names (the default vhost's included)."""
    parts = {vhost: Recovery(recovery.last_seq, [], [], [], [vhost]) for vhost in recovery.vhosts}
    parts.setdefault(DEFAULT_VHOST, Recovery(recovery.last_seq, [], [], [], [DEFAULT_VHOST]))

    def part(key: str) -> tuple[Recovery, str]:
        vhost, name = split_key(key)
        return parts.setdefault(vhost, Recovery(recovery.last_seq, [], [], [], [vhost])), name

    for exchange in recovery.exchanges:
        target, name = part(exchange.name)
        target.exchanges.append(dataclasses.replace(exchange, name=name))
    for binding in recovery.bindings:
        target, name = part(binding.exchange)
        target.bindings.append(dataclasses.replace(binding, exchange=name, queue=split_key(binding.queue)[1]))
    for stream in recovery.streams:
        target, name = part(stream.name)
        target.streams.append(dataclasses.replace(stream, name=name))
    for queue in recovery.queues:
        target, name = part(queue.name)
        target.queues.append(dataclasses.replace(queue, name=name))
    return parts


def split_definitions(
    exchanges: list[ExchangeRecord], bindings: list[BindingRecord], vhosts: Sequence[str]
) -> dict[str, tuple[list[ExchangeRecord], list[BindingRecord]]]:
    """The store's exchanges and bindings (store keys) per vhost, under each vhost's own names;
    every vhost in ``vhosts`` gets an entry, empty if it has nothing."""
    parts = split_recovery(Recovery(0, exchanges, bindings, [], list(vhosts)))
    return {vhost: (part.exchanges, part.bindings) for vhost, part in parts.items()}


class VhostStore(Store):
    """``store`` as the engine of ``vhost`` (not the default one) sees it."""

    def __init__(self, store: Store, vhost: str, recovery: Recovery) -> None:
        super().__init__()
        self.store = store
        self.vhost = vhost
        self.space = vhost_space(vhost)
        self.durable = store.durable
        self.shared = store.shared
        self._recovery = recovery

    def _bare(self, key: str) -> str:
        return key[len(self.space):]

    # -- several brokers ---------------------------------------------------------------------
    @property
    def node_id(self) -> str:
        return self.store.node_id

    def seq_block(self, last: int) -> tuple[int, int]:
        return self.store.seq_block(last)

    def claims_valid(self) -> bool:
        return self.store.claims_valid()

    def promoted(self, delayed: int, copy: int) -> None:
        self.store.promoted(delayed, copy)

    def publish_topic(self, topic: str, headers: dict[str, str], body: bytes) -> None:
        self.store.publish_topic(self.space + topic, headers, body)

    async def brokers(self) -> Brokers:
        return await self.store.brokers()

    # -- lifecycle: the shared store's owner opens, runs and closes it --------------------------
    async def open(self) -> Recovery:
        return self._recovery

    async def run(self) -> None:
        await trio.sleep_forever()

    async def close(self) -> None:
        pass

    # -- buffered writes -----------------------------------------------------------------------
    def insert(self, msg: StoredMessage) -> None:
        msg.space = self.space
        self.store.insert(msg)

    def update(self, msg: StoredMessage) -> None:
        self.store.update(msg)

    def pass_over(self, msg: StoredMessage) -> None:
        self.store.pass_over(msg)

    def delete(self, msg: StoredMessage) -> None:
        self.store.delete(msg)

    def delete_all(self, messages: Sequence[StoredMessage]) -> None:
        self.store.delete_all(messages)

    def write(self, row: Row) -> None:
        self.store.write(in_space(row, self.space))  # a vhost, a shovel or a policy has no key

    def append_stream(self, msg: StreamMessage) -> None:
        msg.space = self.space
        self.store.append_stream(msg)

    def save_stream_group(self, name: str, group: str, committed: int | None) -> None:
        self.store.save_stream_group(self.space + name, group, committed)

    # -- durability: one buffer for every vhost --------------------------------------------------
    @property
    def committed(self) -> int:
        return self.store.committed

    def sync_ticket(self) -> int:
        return self.store.sync_ticket()

    def full(self) -> bool:
        return self.store.full()

    async def wait_for_room(self) -> None:
        await self.store.wait_for_room()

    def withdraw(self, msg: StoredMessage) -> bool:
        return self.store.withdraw(msg)

    def health(self) -> StoreHealth:
        return self.store.health()

    # -- reads ---------------------------------------------------------------------------------
    async def load_ready(self, queue: str, after: tuple[int, int] | None, limit: int,
                         matching: HeaderFilter | None = None) -> Sequence[StoredMessage]:
        return await self.store.load_ready(self.space + queue, after, limit, matching)

    async def browse(self, queue: str, after: tuple[int, int] | None, limit: int) -> Sequence[StoredMessage]:
        return await self.store.browse(self.space + queue, after, limit)

    async def load_due(
        self, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> Sequence[StoredMessage]:
        return await self.store.load_due(after, limit, self.vhost)

    async def browse_due(
        self, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> Sequence[StoredMessage]:
        return await self.store.browse_due(after, limit, self.vhost)

    async def load_expired(
        self, now_ms: int, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> tuple[Sequence[StoredMessage], int | None]:
        return await self.store.load_expired(now_ms, after, limit, self.vhost)

    async def queue_size(self, queue: str, snapshot: Callable[[], T]) -> tuple[int, int, T]:
        return await self.store.queue_size(self.space + queue, snapshot)

    async def queue_exists(self, name: str) -> bool:
        return await self.store.queue_exists(self.space + name)

    async def queue_names(self, prefix: str) -> list[str]:
        return [self._bare(key) for key in await self.store.queue_names(self.space + prefix)]

    async def read_stream(self, name: str, start: int, limit: int) -> Sequence[StreamMessage]:
        return await self.store.read_stream(self.space + name, start, limit)

    async def stream_state(self, name: str) -> StreamState | None:
        return await self.store.stream_state(self.space + name)

    async def stream_groups(self, name: str) -> dict[str, int] | None:
        return await self.store.stream_groups(self.space + name)

    async def count(self, queue: str) -> int:
        return await self.store.count(self.space + queue)

    async def count_unacked(self, queue: str) -> int:
        return await self.store.count_unacked(self.space + queue)

    async def queue_ages(self, queue: str) -> QueueAges:
        return await self.store.queue_ages(self.space + queue)

    async def queue_page(self, after: str, limit: int, snapshot: Callable[[], T]) -> tuple[list[QueueCount], T]:
        rows, taken = await self.store.queue_page(self.space + after, limit, snapshot)
        return [dataclasses.replace(row, name=self._bare(row.name)) for row in rows], taken
