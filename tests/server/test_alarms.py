"""Resource alarms in virtual time: past a limit publishers wait at their next SEND, consumers
(and a connection's frames before its SEND) carry on, and a cleared alarm resumes publishers."""

from __future__ import annotations

import itertools

import pytest
import trio

from stompmq.server.alarms import CHECK_SECONDS, ResourceAlarms, memory_used

from ..support.pair import broker_pair

LIMIT = 100 * 1024**2


def test_memory_is_measured() -> None:
    assert memory_used() > 1024**2


def test_watermark_fraction_and_bytes() -> None:
    assert ResourceAlarms(memory_high_watermark=4096.0).memory_limit == 4096
    fraction = ResourceAlarms(memory_high_watermark=0.5).memory_limit
    assert fraction is not None and fraction > memory_used()


async def test_alarm_blocks_senders_not_consumers(autojump_clock: trio.testing.MockClock,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    free = [10 * LIMIT]
    alarms = ResourceAlarms("store-dir", LIMIT, None, measure_disk=lambda path: free[0], measure_memory=lambda: 0)
    async with broker_pair(alarms=alarms) as pair:
        producer = await pair.connected(heart_beat="1000,0")  # the server wants a beat every 10 s
        consumer = await pair.connected()
        for i in range(2):
            await producer.send("SEND", {"destination": "/queue/q", "receipt": f"s{i}"}, b"before")
            assert (await producer.receive()).headers["receipt-id"] == f"s{i}"

        free[0] = LIMIT - 1
        await trio.sleep(CHECK_SECONDS * 2)
        assert alarms.active == {"disk"}
        assert alarms.describe()["alarms"] == ["disk"]
        assert "disk alarm set" in caplog.text

        await producer.send("SEND", {"destination": "/queue/q", "receipt": "blocked"}, b"during")
        assert await producer.nothing_within(60.0)  # held, and not closed for its missing heart-beats

        # A consumer subscribes, receives and acknowledges; a connection that consumes and then
        # publishes has its ACK handled before its SEND waits.
        await consumer.send("SUBSCRIBE", {"destination": "/queue/q", "id": "1", "ack": "client-individual"})
        first, second = await consumer.receive(), await consumer.receive()
        assert first.body == second.body == b"before"
        await consumer.send("ACK", {"id": first.headers["ack"], "receipt": "a1"})
        assert (await consumer.receive()).headers["receipt-id"] == "a1"
        await consumer.send("ACK", {"id": second.headers["ack"], "receipt": "a2"})
        await consumer.send("SEND", {"destination": "/queue/other", "receipt": "mixed"}, b"x")
        assert (await consumer.receive()).headers["receipt-id"] == "a2"
        assert await consumer.nothing_within(5.0)

        free[0] = LIMIT
        with trio.fail_after(CHECK_SECONDS * 2):
            assert (await producer.receive()).headers["receipt-id"] == "blocked"
            frames = [await consumer.receive(), await consumer.receive()]
        assert sorted(f.headers.get("receipt-id") or f.body.decode() for f in frames) == ["during", "mixed"]
        assert not alarms.active
        assert "disk alarm cleared" in caplog.text


async def test_memory_alarm_and_new_limits(autojump_clock: trio.testing.MockClock) -> None:
    resident = [10 * LIMIT]
    alarms = ResourceAlarms(None, None, float(LIMIT), measure_memory=lambda: resident[0])
    async with broker_pair(alarms=alarms) as pair:
        producer = await pair.connected()
        await trio.sleep(CHECK_SECONDS)
        assert alarms.active == {"memory"}
        await producer.send("SEND", {"destination": "/queue/q", "receipt": "r"}, b"x")
        assert await producer.nothing_within(10.0)
        operator = await pair.connected()  # a management verb is no publish: it may free the space
        await operator.send("SEND", {"destination": "/control/purge/queue/q", "receipt": "purged"})
        assert (await operator.receive()).headers["receipt-id"] == "purged"
        alarms.set_limits(None, float(20 * LIMIT))  # an operator raises the watermark
        assert (await producer.receive()).headers["receipt-id"] == "r"


#: Alarm states by the limits that make them: (disk free limit, memory watermark) against a
#: disk with 10 x LIMIT free and a process of 10 x LIMIT resident.
STATES = {
    "none": (None, None),
    "disk": (20 * LIMIT, None),
    "memory": (None, float(LIMIT)),
    "both": (20 * LIMIT, float(LIMIT)),
}
#: Every order of three alarm changes, then every alarm cleared (a bug was memory,
#: then both, then disk only cleared: the reader held by the first never woke).
SEQUENCES = [(*steps, "none") for steps in itertools.product(STATES, repeat=3)]


@pytest.mark.parametrize("sequence", SEQUENCES, ids=["-".join(s) for s in SEQUENCES])
async def test_any_sequence_of_alarms_releases_every_waiter_once_none_is_left(
        autojump_clock: trio.testing.MockClock, sequence: tuple[str, ...]) -> None:
    alarms = ResourceAlarms("store-dir", None, None, measure_disk=lambda path: 10 * LIMIT,
                            measure_memory=lambda: 10 * LIMIT)
    released: list[str] = []

    async def waiter(name: str) -> None:
        await alarms.wait_cleared()
        released.append(name)

    async with trio.open_nursery() as nursery:
        for i, state in enumerate(sequence):
            alarms.set_limits(*STATES[state])
            assert alarms.active == ({"disk", "memory"} if state == "both" else set() if state == "none" else {state})
            nursery.start_soon(waiter, f"{i}-{state}")  # a reader that reached its SEND now
            await trio.sleep(0.1)
        with trio.fail_after(1.0):
            await trio.testing.wait_all_tasks_blocked()
        assert sorted(released) == sorted(f"{i}-{state}" for i, state in enumerate(sequence))


async def test_publishers_held_by_swapped_alarms_resume_within_a_second(
        autojump_clock: trio.testing.MockClock) -> None:
    """The sequence that held publishers for good: memory alarm, then memory cleared as disk is set, then disk cleared."""
    alarms = ResourceAlarms("store-dir", None, None, measure_disk=lambda path: 10 * LIMIT,
                            measure_memory=lambda: 10 * LIMIT)
    async with broker_pair(alarms=alarms) as pair:
        producer, late = await pair.connected(), await pair.connected()
        alarms.set_limits(*STATES["memory"])
        await producer.send("SEND", {"destination": "/queue/q", "receipt": "first"}, b"x")
        assert await producer.nothing_within(5.0)
        alarms.set_limits(*STATES["disk"])
        await late.send("SEND", {"destination": "/queue/q", "receipt": "second"}, b"y")
        assert await late.nothing_within(5.0)
        alarms.set_limits(*STATES["none"])
        with trio.fail_after(1.0):
            assert (await producer.receive()).headers["receipt-id"] == "first"
            assert (await late.receive()).headers["receipt-id"] == "second"
