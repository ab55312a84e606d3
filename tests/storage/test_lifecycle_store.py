"""The lifecycle reads and writes of every store: delayed rows by due time, expired rows by
expiry, queue sizes with their snapshot, queue and shovel declarations across a reopen.

Each test opens a store of the parametrised kind, writes through the Store interface, and
reads back through it, after a reopen where the store is durable (the memory store keeps
nothing but declarations: the broker holds its messages itself).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from stompmq.storage.base import Recovery, Store, StoredMessage
from stompmq.storage.records import QueueRecord
from stompmq.storage.rows import SaveQueue, SaveShovel

from ..support.stores import STORES, make_store_factory

T = 1_700_000_000_000  # epoch ms the rows are stamped around


@pytest.fixture(params=STORES)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    return make_store_factory(str(request.param), tmp_path)


@asynccontextmanager
async def opened(make_store: Callable[[], Store]) -> AsyncIterator[tuple[Store, Recovery]]:
    """A store open with its background work running; closed (everything committed) on exit."""
    store = make_store()
    recovery = await store.open()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.run)
            yield store, recovery
            nursery.cancel_scope.cancel()
    finally:
        await store.close()


async def fresh_seqs(store: Store, n: int) -> list[int]:
    start, end = store.seq_block(0)
    assert end - start >= n
    return list(range(start, start + n))


def delayed(seq: int, due: int, queue: str = "q", expires: int | None = None) -> StoredMessage:
    return StoredMessage(seq, queue, 4, {"n": str(seq)}, b"d%d" % seq, T, 2.5, expires=expires, deliver_at=due)


async def test_delayed_rows_come_back_by_due_time_then_seq(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as (store, _):
        if not store.durable:
            assert await store.load_due(None, 10) == ()
            return
        a, b, c, d = await fresh_seqs(store, 4)
        for msg in [delayed(a, T + 300), delayed(b, T + 100, "r"), delayed(c, T + 300, expires=T + 999),
                    delayed(d, T + 200)]:
            store.insert(msg)
        store.insert(StoredMessage(d + 1, "q", 4, {}, b"ready", T))  # not delayed: not among them
        assert await store.load_ready("q", None, 10) != []
    async with opened(make_store) as (store, recovery):
        assert recovery.last_seq == 0 or recovery.last_seq >= d + 1
        first = await store.load_due(None, 2)
        assert [(m.seq, m.queue, m.deliver_at) for m in first] == [(b, "r", T + 100), (d, "q", T + 200)]
        rest = await store.load_due((T + 200, d), 10)
        assert [(m.seq, m.deliver_at, m.expires) for m in rest] == [(a, T + 300, None), (c, T + 300, T + 999)]
        assert (rest[1].headers, rest[1].body, rest[1].ack_timeout) == ({"n": str(c)}, b"d%d" % c, 2.5)
        store.delete(rest[0])  # promoted: its delayed row goes
        assert [m.seq for m in await store.load_ready("q", None, 10)] == [d + 1]
    async with opened(make_store) as (store, _):
        assert [m.seq for m in await store.load_due(None, 10)] == [b, d, c]


async def test_expired_rows_come_back_by_expiry_with_the_next_expiry(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as (store, _):
        if not store.durable:
            assert await store.load_expired(T, None, 10) == ((), None)
            return
        a, b, c, d, e = await fresh_seqs(store, 5)
        store.insert(StoredMessage(a, "q", 4, {}, b"a", T, expires=T + 20))
        store.insert(StoredMessage(b, "r", 4, {}, b"b", T, expires=T + 10))
        store.insert(StoredMessage(c, "q", 4, {}, b"c", T, expires=T + 500))
        store.insert(StoredMessage(d, "q", 4, {}, b"d", T))  # never expires
        taken = StoredMessage(e, "q", 4, {}, b"e", T, expires=T + 5, delivered=True)  # out for delivery
        store.insert(taken)
        rows, next_expiry = await store.load_expired(T + 100, None, 1)
        assert ([(m.seq, m.queue, m.expires) for m in rows], next_expiry) == ([(b, "r", T + 10)], T + 500)
        rows, _ = await store.load_expired(T + 100, (T + 10, b), 10)
        assert [m.seq for m in rows] == [a]
        store.delete(rows[0])
        assert [m.seq for m in (await store.load_expired(T + 100, None, 10))[0]] == [b]
        rows, next_expiry = await store.load_expired(T + 1000, (T + 10, b), 10)
        assert ([m.seq for m in rows], next_expiry) == ([c], None)


async def test_queue_size_counts_what_was_buffered_before_its_snapshot(make_store: Callable[[], Store]) -> None:
    async with opened(make_store) as (store, _):
        seqs = await fresh_seqs(store, 4)
        for seq in seqs[:3]:
            store.insert(StoredMessage(seq, "q", 4, {}, b"12345", T))
        store.insert(StoredMessage(seqs[3], "q", 4, {}, b"x", T, deliver_at=T + 1000))  # delayed: not counted
        counter = [3]
        count, size, seen = await store.queue_size("q", lambda: counter[0])
        if store.durable:
            assert (count, size, seen) == (3, 15, 3)
        else:
            assert (count, size, seen) == (0, 0, 3)  # the broker counts a memory queue itself


async def test_queue_declarations_are_recovered(make_store: Callable[[], Store]) -> None:
    store = make_store()
    if not store.durable:  # the memory store forgets at exit, but recovers while it lives
        store.write(SaveQueue("a", {"max-length": "3"}))
        assert (await store.open()).queues == [QueueRecord("a", {"max-length": "3"})]
        return
    async with opened(make_store) as (store, recovery):
        assert recovery.queues == []
        store.write(SaveQueue("b", {"message-ttl": "5"}))
        store.write(SaveQueue("a", {"max-length": "3"}))
        store.write(SaveQueue("c", {"overflow": "drop-head"}))
        store.write(SaveQueue("c", None))  # forgotten again
    async with opened(make_store) as (_, recovery):
        assert recovery.queues == [QueueRecord("a", {"max-length": "3"}), QueueRecord("b", {"message-ttl": "5"})]


async def test_shovel_declarations_are_recovered(make_store: Callable[[], Store]) -> None:
    declaration = {"from": "stomp://u:p@h/queue/a", "to": "stomp://h/queue/b", "prefetch": 5, "ack_mode": "on-confirm"}
    store = make_store()
    if not store.durable:
        store.write(SaveShovel("s", declaration))
        assert (await store.open()).facts(SaveShovel) == {"s": declaration}
        return
    async with opened(make_store) as (store, recovery):
        assert recovery.facts(SaveShovel) == {}
        store.write(SaveShovel("s", declaration))
        store.write(SaveShovel("t", {**declaration, "prefetch": 1}))
        store.write(SaveShovel("t", None))  # forgotten again
        store.write(SaveShovel("s", {**declaration, "prefetch": 7}))  # replaced
    async with opened(make_store) as (_, recovery):
        assert recovery.facts(SaveShovel) == {"s": {**declaration, "prefetch": 7}}
