"""ConnectionOutbox: coalescing, the soft and hard limits, and the drain callback."""

from __future__ import annotations

import trio
import trio.testing

from stompmq.protocol.encoder import LARGE_BODY
from stompmq.server.outbox import ConnectionOutbox, WriteBatch


async def writer(outbox: ConnectionOutbox, taken: list[bytes]) -> None:
    """A connection's writer, keeping what it takes instead of sending it."""
    while True:
        taken.append(await outbox.take())


async def test_take_returns_everything_queued_as_one_buffer() -> None:
    outbox = ConnectionOutbox()
    outbox.write(b"a")
    outbox.write(b"bc")
    assert await outbox.take() == b"abc"
    assert outbox.size == 3  # still counted until sent
    outbox.sent(3)
    assert outbox.empty


async def test_a_waiting_writer_wakes_for_every_write_after_a_take() -> None:
    # write() wakes the writer only when the outbox was empty: the writer waits for nothing else.
    outbox = ConnectionOutbox()
    taken: list[bytes] = []

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer, outbox, taken)
        for batch in (b"a", b"bc", b"d"):
            await trio.testing.wait_all_tasks_blocked()
            for byte in batch:
                outbox.write(bytes([byte]))
            await trio.testing.wait_all_tasks_blocked()
            assert taken[-1] == batch
        outbox.write(b"e")  # a write before the writer waits again: its take finds it at once
        outbox.write(b"f")
        await trio.testing.wait_all_tasks_blocked()
        assert taken == [b"a", b"bc", b"d", b"ef"]
        nursery.cancel_scope.cancel()


def test_soft_limit_stops_queue_deliveries_and_drain_resumes_them() -> None:
    outbox = ConnectionOutbox(soft_limit=10, hard_limit=100)
    drained = []
    outbox.on_drain = lambda: drained.append(outbox.size)
    outbox.write(b"x" * 10)
    assert not outbox.has_room()
    assert outbox.can_take_transient()
    outbox.sent(4)  # 6 left: above half the soft limit
    assert drained == []
    outbox.sent(2)  # 4 left: at most half
    assert drained == [4]
    assert outbox.has_room()


def test_hard_limit_refuses_transient_messages() -> None:
    outbox = ConnectionOutbox(soft_limit=10, hard_limit=20)
    outbox.write(b"x" * 20)
    assert not outbox.can_take_transient()


async def test_wait_written_wakes_on_the_next_write() -> None:
    outbox = ConnectionOutbox()
    woke = []

    async def waiter() -> None:
        await outbox.wait_written()
        woke.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == []
        outbox.write(b"RECEIPT")
    assert woke == [True]


async def test_wait_drained_returns_when_everything_was_sent() -> None:
    outbox = ConnectionOutbox()
    outbox.write(b"abc")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.wait_drained)
        await trio.testing.wait_all_tasks_blocked()
        outbox.sent(3)


async def test_writes_in_an_open_batch_wait_for_its_close_and_others_for_the_batch_task() -> None:
    # A reader's engine call: the deliveries go out when it ends (the connection's direct send);
    # a write outside one goes out at the batch task's next turn.  Neither wakes the writer.
    batch = WriteBatch()
    outbox = ConnectionOutbox(batch=batch)
    flushed: list[bytes] = []
    outbox.flush = lambda: flushed.append(outbox.take_now())
    taken: list[bytes] = []

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer, outbox, taken)
        nursery.start_soon(batch.run)
        await trio.testing.wait_all_tasks_blocked()
        batch.open = True
        outbox.write(b"a")
        outbox.write(b"b")
        await trio.testing.wait_all_tasks_blocked()
        assert taken == [] and flushed == []
        batch.close()
        assert flushed == [b"ab"] and not batch.outboxes
        outbox.write(b"c")  # the batch is closed: its task flushes it
        outbox.write(b"d")
        assert flushed == [b"ab"]
        await trio.testing.wait_all_tasks_blocked()
        assert flushed == [b"ab", b"cd"] and taken == []
        nursery.cancel_scope.cancel()


async def test_what_a_flush_puts_back_goes_first_and_wakes_the_writer() -> None:
    outbox = ConnectionOutbox()
    outbox.write(b"abc")
    assert outbox.take_now() == b"abc"
    outbox.write(b"d")
    outbox.put_back(b"bc")  # the socket took "a"
    outbox.sent(1)
    assert await outbox.take() == b"bcd"
    assert outbox.size == 3


async def test_large_bodies_are_taken_by_reference_between_joined_runs() -> None:
    outbox = ConnectionOutbox()
    body = b"b" * LARGE_BODY
    outbox.write(b"small;")
    outbox.write_body(b"head;", body)
    outbox.write(b"next;")
    assert outbox.size == outbox.queued == 6 + 5 + LARGE_BODY + 1 + 5  # the body counts once
    buffers = await outbox.take_buffers()
    assert buffers == [b"small;head;", body, b"\0next;"] and buffers[1] is body
    outbox.write(b"plain")
    assert await outbox.take_buffers() == [b"plain"]  # no large body: one buffer, as take()
    outbox.write_body(b"h", body)
    assert await outbox.take() == b"h" + body + b"\0"  # take() joins everything (TLS, WebSocket)
