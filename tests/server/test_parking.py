"""Idle plain TCP connections park (server/parking.py): one watcher reads their heart-beats.

The watcher alone over a socket pair, then real ``Connection`` objects over loopback TCP in
virtual time: a parked connection keeps its heart-beat semantics (the peer's beats count, its
silence closes it after the grace), and a frame arriving while it is parked is handled as any
read, split or whole.
"""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from stompmq.server.connection import Connection
from stompmq.server.parking import BUSY, REST, Parking, heart_beats_only
from stompmq.server.settings import ServerSettings

from ..support.pair import BrokerPair, PeerClient, broker_pair


class Heard:
    def __init__(self) -> None:
        self.beats: list[tuple[int, float]] = []

    def heard(self, nbytes: int, now: float) -> None:
        self.beats.append((nbytes, now))


@pytest.mark.parametrize(("data", "only"), [
    (b"\n", True), (b"\n\n\n", True), (b"\r\n", True), (b"\r\n\n\r\n", True),
    (b"\r", False), (b"\n\r", False), (b"\nS", False), (b"SEND", False), (b"\x00", False),
])
def test_heart_beats_are_eols_only(data: bytes, only: bool) -> None:
    assert heart_beats_only(data) is only


async def test_the_watcher_counts_heart_beats_and_hands_over_anything_else() -> None:
    parking = Parking()
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    heard = Heard()
    got: list[bytes] = []

    async def parked() -> None:
        got.append(await parking.park(ours.fileno(), heard))

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(parking.run)
            nursery.start_soon(parked)
            await trio.testing.wait_all_tasks_blocked()
            for beat in (b"\n", b"\r\n"):
                theirs.send(beat)
                await trio.sleep(0.01)  # the watcher reads it (real time: a real socket)
            assert [n for n, _ in heard.beats] == [1, 2] and not got and len(parking) == 1
            theirs.send(b"SEND\n")
            with trio.fail_after(5):
                while not got:
                    await trio.sleep(0.01)
            assert got == [b"SEND\n"] and len(parking) == 0
            nursery.start_soon(parked)  # parks again; the end of the stream wakes it with b""
            await trio.testing.wait_all_tasks_blocked()
            theirs.close()
            with trio.fail_after(5):
                while len(got) < 2:
                    await trio.sleep(0.01)
            assert got[1] == b""
            nursery.cancel_scope.cancel()
    finally:
        parking.close()
        ours.close()


async def test_a_cancelled_park_leaves_the_epoll() -> None:
    parking = Parking()
    ours, theirs = socket.socketpair()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(parking.park, ours.fileno(), Heard())
            await trio.testing.wait_all_tasks_blocked()
            assert len(parking) == 1
            nursery.cancel_scope.cancel()
        assert len(parking) == 0
        with trio.move_on_after(0.01):  # and can park again
            await parking.park(ours.fileno(), Heard())
    finally:
        parking.close()
        ours.close()
        theirs.close()


async def test_beats_are_read_as_they_come_until_busy_then_in_batches_rest_apart(
        autojump_clock: trio.abc.Clock) -> None:
    """A wake-up per beat while under ``BUSY`` a second; above, a wake-up per batch, batches
    at least ``REST`` apart, every byte counted; after a quiet spell a frame is handed over the
    moment it arrives."""
    parking = Parking()
    pairs = [socket.socketpair() for _ in range(10)]
    heard = [Heard() for _ in pairs]
    got: list[tuple[bytes, float]] = []

    async def parked(i: int) -> None:
        got.append((await parking.park(pairs[i][0].fileno(), heard[i]), trio.current_time()))

    async def beats(gaps: list[float], seconds: float) -> list[float]:
        sent = []
        for n in range(round(seconds / sum(gaps) * len(gaps))):
            pairs[n % 10][1].send(b"\n")
            sent.append(trio.current_time())
            await trio.sleep(gaps[n % len(gaps)])
        await trio.sleep(2 * REST)
        return sent

    def batches(after: float) -> list[float]:
        return sorted({now for h in heard for _, now in h.beats if now >= after})

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(parking.run)
            for i, (ours, _) in enumerate(pairs):
                ours.setblocking(False)
                nursery.start_soon(parked, i)
            await trio.testing.wait_all_tasks_blocked()
            light = await beats([REST / 5, 4 / BUSY - REST / 5], 2.0)  # pairs: half of BUSY a second
            assert batches(0) == light  # each read as it came, the second of a pair too
            start = trio.current_time()
            heavy = await beats([REST / 10], 2.0)
            assert sum(nbytes for h in heard for nbytes, _ in h.beats) == len(light) + len(heavy)
            late = batches(start + 1.1)  # busy since the first second's count
            assert len(late) <= 0.9 / REST + 3
            assert all(later - earlier >= REST * 0.999 for earlier, later in zip(late, late[1:]))
            await trio.sleep(3)
            sent = trio.current_time()
            pairs[3][1].send(b"SEND\n")
            await trio.testing.wait_all_tasks_blocked()
            assert got == [(b"SEND\n", sent)]
            nursery.cancel_scope.cancel()
    finally:
        parking.close()
        for pair in pairs:
            for sock in pair:
                sock.close()


async def test_no_rest_asked_for_reads_every_beat_as_it_comes(autojump_clock: trio.abc.Clock) -> None:
    """``--heart-beat-batch 0``: however many beats a second, each is read the moment it comes."""
    parking = Parking(0)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    heard = Heard()
    sent = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(parking.run)
            nursery.start_soon(parking.park, ours.fileno(), heard)
            await trio.testing.wait_all_tasks_blocked()
            for _ in range(4 * BUSY):  # two seconds of twice BUSY
                theirs.send(b"\n")
                sent.append(trio.current_time())
                await trio.sleep(1 / (2 * BUSY))
            assert [now for _, now in heard.beats] == sent
            nursery.cancel_scope.cancel()
    finally:
        parking.close()
        ours.close()
        theirs.close()


async def tcp_client(pair: BrokerPair, parking: Parking) -> PeerClient:
    """A client over loopback TCP whose server side is a ``Connection`` that parks."""
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    sock = trio.socket.socket()
    await sock.connect(listener.socket.getsockname())
    server = await listener.accept()
    await listener.aclose()
    connection = Connection(server, pair.runtime, pair.settings, heart_beats=pair.heart_beats, parking=parking)
    pair.nursery.start_soon(connection.run)
    return PeerClient(trio.SocketStream(sock))


async def beat(client: PeerClient, every: float, times: int) -> None:
    for _ in range(times):
        await trio.sleep(every)
        await client.stream.send_all(b"\n")


async def test_a_parked_connection_keeps_heart_beat_semantics(autojump_clock: trio.abc.Clock) -> None:
    """Beats park the connection and keep it alive; a frame split over two reads wakes it; a
    later beat parks it again; silence past the grace closes it (up to a timer tick late)."""
    settings = ServerSettings(port=0, heart_beat=(100, 100), heart_beat_grace=2.0)
    async with broker_pair(settings=settings) as pair:
        parking = Parking()
        try:
            await pair.nursery.start(parking.run)
            client = await tcp_client(pair, parking)
            assert (await client.connect(heart_beat="100,100")).command == "CONNECTED"
            assert len(parking) == 0  # CONNECT was a frame: the connection reads as usual
            await beat(client, 0.15, 10)  # late for 100 ms, within the grace
            await trio.testing.wait_all_tasks_blocked()
            assert len(parking) == 1
            await client.stream.send_all(b"SEND\ndestination:/queue/p")
            await trio.sleep(0.05)
            assert len(parking) == 0
            await client.stream.send_all(b"\nreceipt:r\n\nbody\x00")
            reply = await client.receive()
            assert (reply.command, reply.headers["receipt-id"]) == ("RECEIPT", "r")
            await beat(client, 0.15, 2)
            await trio.testing.wait_all_tasks_blocked()
            assert len(parking) == 1
            silent = trio.current_time()
            error = await client.receive()
            assert error.headers["message"] == "heart-beat timeout"
            assert 0.2 <= trio.current_time() - silent <= 0.2 + 0.05 + 0.01
            await trio.testing.wait_all_tasks_blocked()
            assert len(parking) == 0
            pair.nursery.cancel_scope.cancel()
        finally:
            parking.close()
