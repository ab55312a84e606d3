"""A message a client acknowledges within the flush interval never reaches the disk,
whether it was out for delivery or still waiting in the consumer's ready window (behind its
prefetch) when the flush timer fired; and a message nobody settles is still on disk within two
flush intervals.  A real broker (runtime, connections) and a real store of each durable kind,
driven in virtual time: the flush timer fires exactly when the test jumps the clock.  What
reached the database is what the group commit handed to the backend (and, for SQLite, what the
file holds).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from stompmq.storage.groupcommit import GroupCommitStore

from ..support.pair import PeerClient, broker_pair
from ..support.stores import make_store_factory
from ..support.waiting import committed

#: The conftest stores' --flush-interval.
FLUSH = 0.01
DURABLE = ["sqlite", "postgres"]


def spy_inserts(store: GroupCommitStore) -> list[bytes]:
    """The bodies of the rows the store inserts, as its backend commits them."""
    inserted: list[bytes] = []
    backend: Any = store._backend
    commit = backend.commit

    def counted(rows: Any) -> None:
        commit(rows)
        inserted.extend(row[4] for row in rows.inserts)

    backend.commit = counted
    return inserted


@asynccontextmanager
async def consumer_and_producer(
    store_kind: str, tmp_path: Path
) -> AsyncIterator[tuple[GroupCommitStore, list[bytes], PeerClient, PeerClient]]:
    """A broker on a fresh store of ``store_kind``; the store, the bodies it inserts, a consumer
    subscribed to /queue/wb (client-individual, prefetch 1) and a producer."""
    store = make_store_factory(store_kind, tmp_path)()
    assert isinstance(store, GroupCommitStore)
    inserted = spy_inserts(store)
    async with broker_pair(store) as pair:
        consumer = await pair.connected()
        await consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/wb", "ack": "client-individual",
                                          "prefetch": "1", "receipt": "sub"})
        assert (await consumer.receive()).headers["receipt-id"] == "sub"
        # The new subscription's first page read (of an empty queue) may commit what is buffered
        # when it runs (a PostgreSQL read goes behind the pending group; SQLite's reads through
        # it): a /control count is read behind it, so its RECEIPT says it is done.
        await consumer.send("SEND", {"destination": "/control/count-msgs/queue/wb", "receipt": "count"})
        assert (await consumer.receive()).headers["num-messages"] == "0"
        yield store, inserted, consumer, await pair.connected()


@pytest.mark.parametrize("store_kind", DURABLE)
async def test_client_acked_within_the_flush_interval_never_reaches_the_disk(
    store_kind: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with consumer_and_producer(store_kind, tmp_path) as (store, inserted, consumer, producer):
        for i in range(3):
            await producer.send("SEND", {"destination": "/queue/wb"}, b"WRITE-BEHIND-%d" % i)
        msg = await consumer.receive()  # m0 out for delivery; m1 and m2 wait behind the prefetch
        mock_clock.jump(FLUSH)  # the flush timer fires with all three buffered
        await trio.testing.wait_all_tasks_blocked()
        for i in range(3):
            assert msg.body == b"WRITE-BEHIND-%d" % i
            await consumer.send("ACK", {"id": msg.headers["ack"], **({"receipt": "last"} if i == 2 else {})})
            msg = await consumer.receive()
        assert msg.headers["receipt-id"] == "last"  # the ACKs' deletes are committed
    assert inserted == []
    if store_kind == "sqlite":
        files = [tmp_path / ("broker.db" + suffix) for suffix in ("", "-wal")]
        data = b"".join(path.read_bytes() for path in files if path.exists())
        assert b"WRITE-BEHIND" not in data


@pytest.mark.parametrize("store_kind", DURABLE)
async def test_unsettled_messages_in_a_consumer_window_are_on_disk_at_the_second_flush(
    store_kind: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """The hold-back is once only: a SEND without receipt is stored within two flush intervals.
    A message for a queue nobody here consumes is not held back at all."""
    async with consumer_and_producer(store_kind, tmp_path) as (store, inserted, consumer, producer):
        await producer.send("SEND", {"destination": "/queue/wb"}, b"in-flight")
        await producer.send("SEND", {"destination": "/queue/wb"}, b"in-window")
        await producer.send("SEND", {"destination": "/queue/nobody"}, b"unconsumed")
        assert (await consumer.receive()).body == b"in-flight"
        ticket = store.committed
        mock_clock.jump(FLUSH)
        await committed(store, ticket + 1, interval=0)  # the virtual clock stands still meanwhile
        assert inserted == [b"unconsumed"]
        mock_clock.jump(FLUSH)
        await committed(store, ticket + 2, interval=0)
        assert sorted(inserted) == [b"in-flight", b"in-window", b"unconsumed"]
