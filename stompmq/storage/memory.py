"""The memory store: no durability, for ``--store memory`` and fast tests.

The broker keeps every message of a non-durable store in its queues and streams
(it never pages), so this store has nothing to hold but exchanges, bindings and
stream, queue and shovel declarations; every
write is already "committed" when it is made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, assert_never

import trio

from ..vhost_names import DEFAULT_VHOST, vhost_space
from .base import (
    QueueCount,
    Recovery,
    Store,
    StoredMessage,
    StreamMessage,
    StreamRecord,
)
from .header_filter import HeaderFilter
from .records import BindingRecord, ExchangeRecord, QueueRecord
from .rows import (
    CapExpiry,
    DropBinding,
    DropExchange,
    DropStream,
    DropVhost,
    MetaFact,
    Purge,
    Release,
    Row,
    SaveBinding,
    SaveExchange,
    SaveQueue,
    SaveStream,
    SaveVhost,
    TrimStream,
)

T = TypeVar("T")
V = TypeVar("V")


def _put(declared: dict[str, V], name: str, value: V | None) -> None:
    """Declare ``name`` as ``value`` in ``declared`` (None: forget it)."""
    if value is None:
        declared.pop(name, None)
    else:
        declared[name] = value


class MemoryStore(Store):
    durable = False

    def __init__(self) -> None:
        super().__init__()
        self._exchanges: dict[str, ExchangeRecord] = {}
        self._bindings: dict[tuple[str, str, str], BindingRecord] = {}
        self._streams: dict[str, dict[str, str]] = {}
        self._vhosts = {DEFAULT_VHOST}
        self._queues: dict[str, dict[str, str]] = {}
        self._groups: dict[str, dict[str, int]] = {}  # stream -> consumer group -> committed offset
        self._meta: dict[str, dict[str, Any]] = {}  # broker-wide facts: prefix -> key -> value

    async def open(self) -> Recovery:
        streams = [StreamRecord(name, options, 0, 0, groups=dict(self._groups.get(name, {})))
                   for name, options in sorted(self._streams.items())]
        queues = [QueueRecord(name, options) for name, options in sorted(self._queues.items())]
        return Recovery(
            0, list(self._exchanges.values()), list(self._bindings.values()), streams, sorted(self._vhosts), queues,
            {prefix: dict(sorted(facts.items())) for prefix, facts in self._meta.items()},
        )

    async def run(self) -> None:
        await trio.sleep_forever()

    async def close(self) -> None:
        pass

    def insert(self, msg: StoredMessage) -> None:
        pass

    def update(self, msg: StoredMessage) -> None:
        pass

    def delete(self, msg: StoredMessage) -> None:
        pass

    def delete_all(self, messages: Sequence[StoredMessage]) -> None:
        pass

    def append_stream(self, msg: StreamMessage) -> None:
        pass

    def write(self, row: Row) -> None:
        """Keep the declarations; the broker holds every message itself, so a row about them
        has nothing here to change."""
        match row:
            case SaveExchange(exchange=exchange):
                self._exchanges[exchange.name] = exchange
            case DropExchange(name=name):
                self._exchanges.pop(name, None)
                self._bindings = {k: v for k, v in self._bindings.items() if k[0] != name}
            case SaveBinding(binding=b):
                self._bindings[(b.exchange, b.queue, b.routing_key)] = b
            case DropBinding(exchange=exchange, queue=queue, routing_key=key):
                self._bindings.pop((exchange, queue, key), None)
            case SaveStream(name=name, options=options):
                self._streams[name] = options
            case DropStream(name=name):
                self._streams.pop(name, None)
                self._groups.pop(name, None)
            case SaveVhost(name=name):
                self._vhosts.add(name)
            case DropVhost(name=name):
                space = vhost_space(name)
                self._vhosts.discard(name)
                self._exchanges = {k: v for k, v in self._exchanges.items() if not k.startswith(space)}
                self._bindings = {k: v for k, v in self._bindings.items() if not k[0].startswith(space)}
                self._queues = {k: v for k, v in self._queues.items() if not k.startswith(space)}
            case SaveQueue(name=name, options=options):
                _put(self._queues, name, options)
            case MetaFact(key=key, value=value):
                _put(self._meta.setdefault(row.PREFIX, {}), key, value)
            case Purge() | TrimStream() | CapExpiry() | Release():
                pass  # messages and stream entries: the broker's own
            case _:
                assert_never(row)

    def save_stream_group(self, name: str, group: str, committed: int | None) -> None:
        _put(self._groups.setdefault(name, {}), group, committed)

    @property
    def committed(self) -> int:
        return 0

    def sync_ticket(self) -> int:
        return 0

    def full(self) -> bool:
        return False  # nothing is ever buffered

    async def wait_for_room(self) -> None:
        pass  # nothing is ever buffered

    def withdraw(self, msg: StoredMessage) -> bool:
        return False  # nothing is stored, so nothing can fail to be: there is nothing to give up

    async def load_ready(self, queue: str, after: tuple[int, int] | None, limit: int,
                         matching: HeaderFilter | None = None) -> Sequence[StoredMessage]:
        return ()

    async def read_stream(self, name: str, start: int, limit: int) -> Sequence[StreamMessage]:
        return ()  # the broker holds every retained entry itself

    async def queue_names(self, prefix: str) -> list[str]:
        return []

    async def count(self, queue: str) -> int:
        return 0  # nothing is stored here: the broker counts what it holds itself

    # Reads: the broker holds every message, delayed or not, of a store that keeps none, and
    # knows its own queues, so the store has nothing to add.
    async def load_due(
        self, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> Sequence[StoredMessage]:
        return ()

    async def load_expired(
        self, now_ms: int, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> tuple[Sequence[StoredMessage], int | None]:
        return (), None

    async def queue_size(self, queue: str, snapshot: Callable[[], T]) -> tuple[int, int, T]:
        return 0, 0, snapshot()

    async def queue_exists(self, name: str) -> bool:
        return False

    async def count_unacked(self, queue: str) -> int:
        return 0

    async def queue_page(self, after: str, limit: int, snapshot: Callable[[], T]) -> tuple[list[QueueCount], T]:
        return [], snapshot()
