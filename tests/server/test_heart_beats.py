"""Heart-beating (STOMP-CHECKLIST S16-S18) in virtual time: the negotiated intervals, the grace.

The intervals are the server's ``heart_beat=(100, 100)`` ms against what each client asks for,
with a grace of 2.0, as the end-to-end conformance suite runs them over real sockets; here the
clock is trio's ``MockClock(autojump_threshold=0)`` (the ``autojump_clock`` fixture), so
"at least every 300 ms" and "closed after 600 ms of silence" are asserted exactly, with no
margin left to a busy machine.
"""

from __future__ import annotations

import trio

from stompmq.server import ServerSettings

from ..support.pair import PeerClient, broker_pair

SETTINGS = ServerSettings(port=0, heart_beat=(100, 100), heart_beat_grace=2.0)


async def beat_gaps(client: PeerClient, seconds: float) -> list[float]:
    """Seconds between the heart-beats that arrive within ``seconds`` (counted from now)."""
    start = trio.current_time()
    with trio.move_on_after(seconds):
        frame = await client.receive()
        raise AssertionError(f"a frame where only heart-beats were due: {frame}")
    times = [start, *(t for t in client.beat_times if t >= start)]
    return [b - a for a, b in zip(times, times[1:])]


async def alive(client: PeerClient) -> bool:
    """The session still answers: a RECEIPT comes back."""
    await client.send("BEGIN", {"transaction": "t", "receipt": "alive"})
    reply = await client.receive()
    return reply.command == "RECEIPT"


async def beat_every(client: PeerClient, seconds: float, times: int) -> None:
    for _ in range(times):
        await trio.sleep(seconds)
        await client.stream.send_all(b"\n")


async def test_s16_no_heart_beat_header_means_none_either_way(autojump_clock: trio.abc.Clock) -> None:
    async with broker_pair(settings=SETTINGS) as pair:
        client = pair.open()
        await client.send("CONNECT", {"accept-version": "1.2", "host": "/"})
        assert (await client.receive()).headers["heart-beat"] == "0,0"  # none asked: none offered, as RabbitMQ and ActiveMQ answer
        assert await client.nothing_within(10.0) and client.heart_beats == 0
        assert await alive(client)  # and it expected none: 10 s of silence did not close it


async def test_s16_zero_heart_beat_means_none(autojump_clock: trio.abc.Clock) -> None:
    async with broker_pair(settings=SETTINGS) as pair:
        client = await pair.connected(heart_beat="0,0")
        assert await client.nothing_within(10.0) and client.heart_beats == 0
        assert await alive(client)


async def test_s16_the_server_beats_at_the_larger_of_both_intervals(autojump_clock: trio.abc.Clock) -> None:
    """The client wants beats every 300 ms, the server could send every 100: every max() = 300
    at the latest, and never at the server's own 100 ms (it beats at most a tick, half of the
    interval it may not exceed, early)."""
    async with broker_pair(settings=SETTINGS) as pair:
        client = await pair.connected(heart_beat="0,300")
        gaps = await beat_gaps(client, 3.0)
        assert len(gaps) >= 10
        assert all(0.1 < gap <= 0.3 for gap in gaps), gaps


async def test_s17_the_server_beats_at_least_every_interval_from_connected_on(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with broker_pair(settings=SETTINGS) as pair:
        client = await pair.connected(heart_beat="0,200")
        gaps = await beat_gaps(client, 2.0)
        assert len(gaps) >= 10 and max(gaps) <= 0.2, gaps
        assert await alive(client)


async def test_s16_the_server_expects_the_larger_interval_times_the_grace(autojump_clock: trio.abc.Clock) -> None:
    """The client beats every 300 ms, the server wants 100: it expects max() = 300 x 2.0 grace, so
    beats 250 ms apart (late for 100 ms) keep the session, and 600 ms of silence end it."""
    async with broker_pair(settings=SETTINGS) as pair:
        client = await pair.connected(heart_beat="300,0")
        await beat_every(client, 0.25, 12)
        assert await alive(client)
        silent = trio.current_time()
        error = await client.receive()
        assert error.command == "ERROR" and error.headers["message"] == "heart-beat timeout"
        assert 0.6 < trio.current_time() - silent <= 0.6 + 0.15  # grace, then at most one tick


async def test_s18_late_beats_within_the_grace_are_tolerated_and_silence_beyond_it_is_not(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with broker_pair(settings=SETTINGS) as pair:
        client = await pair.connected(heart_beat="100,0")
        await beat_every(client, 0.15, 20)  # late for 100 ms, within 100 ms x 2.0
        assert await alive(client)
        silent = trio.current_time()
        error = await client.receive()
        assert error.headers["message"] == "heart-beat timeout"
        assert 0.2 < trio.current_time() - silent <= 0.2 + 0.05


async def test_s18_any_octet_resets_the_timer(autojump_clock: trio.abc.Clock) -> None:
    """A frame trickling in, 8 bytes per 120 ms, is no silence although it takes seconds."""
    async with broker_pair(settings=SETTINGS) as pair:
        client = await pair.connected(heart_beat="100,0")
        data = b"SEND\ndestination:/queue/s18\nreceipt:slow\n\nbody\x00"
        for i in range(0, len(data), 8):
            await client.stream.send_all(data[i : i + 8])
            await trio.sleep(0.12)
        reply = await client.receive()
        assert (reply.command, reply.headers["receipt-id"]) == ("RECEIPT", "slow")
