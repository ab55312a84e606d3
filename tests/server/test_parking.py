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
from stompmq.server.parking import Parking, heart_beats_only
from stompmq.server.settings import ServerSettings

from ..support.pair import BrokerPair, PeerClient, broker_pair
from ..support.waiting import until


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


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Our end (non-blocking) and the peer's of a loopback TCP connection (``SO_RCVLOWAT``
    as parking sets it is TCP's)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        theirs = socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
    ours.setblocking(False)
    return ours, theirs


async def test_the_watcher_counts_heart_beats_and_hands_over_anything_else() -> None:
    parking = Parking()
    ours, theirs = tcp_pair()
    heard = Heard()
    got: list[bytes] = []

    async def parked() -> None:
        got.append(await parking.park(ours, heard))

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(parking.run)
            nursery.start_soon(parked)
            await trio.testing.wait_all_tasks_blocked()
            for n, beat in enumerate((b"\n\n", b"\r\n"), 1):
                theirs.send(beat)
                await until(lambda n=n: len(heard.beats) == n, f"the watcher to read beat pair {n}", 5)
            assert [n for n, _ in heard.beats] == [2, 2] and not got and len(parking) == 1
            theirs.send(b"SEND\n")
            await until(lambda: got, "the frame handed over", 5)
            assert got == [b"SEND\n"] and len(parking) == 0
            nursery.start_soon(parked)  # parks again; the end of the stream wakes it with b""
            await trio.testing.wait_all_tasks_blocked()
            theirs.close()
            await until(lambda: len(got) == 2, "the end of the stream handed over", 5)
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
            nursery.start_soon(parking.park, ours, Heard())
            await trio.testing.wait_all_tasks_blocked()
            assert len(parking) == 1
            nursery.cancel_scope.cancel()
        assert len(parking) == 0
        with trio.move_on_after(0.01):  # and can park again
            await parking.park(ours, Heard())
    finally:
        parking.close()
        ours.close()
        theirs.close()


async def test_a_lone_beat_waits_for_the_timer_and_anything_more_wakes_the_watcher(
        autojump_clock: trio.abc.Clock) -> None:
    """One ``\\n`` does not wake the watcher (a wake-up per beat costs more than the beat): the
    heart-beat timer's visit reads it (``drain``).  A second beat, a frame, or the end of the
    stream are read the moment they come."""
    parking = Parking()
    ours, theirs = tcp_pair()
    heard = Heard()
    got: list[tuple[bytes, float]] = []

    async def parked() -> None:
        got.append((await parking.park(ours, heard), trio.current_time()))

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(parking.run)
            nursery.start_soon(parked)
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
            theirs.send(b"\n")
            await trio.sleep(1)
            assert heard.beats == []  # it waits in the socket
            parking.drain(ours.fileno(), trio.current_time())
            assert heard.beats == [(1, start + 1)]
            parking.drain(ours.fileno(), start + 1.5)  # nothing more: nothing heard
            theirs.send(b"\n")
            await trio.sleep(1)
            theirs.send(b"\n")
            await trio.testing.wait_all_tasks_blocked()
            assert heard.beats == [(1, start + 1), (2, start + 2)]  # the second beat woke the watcher
            theirs.send(b"SEND\n")
            await trio.testing.wait_all_tasks_blocked()
            assert got == [(b"SEND\n", start + 2)] and len(parking) == 0
            assert heard.beats[-1] == (0, start + 2)  # not silent: its task has the bytes
            assert ours.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1  # its task reads as usual
            nursery.start_soon(parked)  # parks again: the end of the stream wakes it with b""
            await trio.testing.wait_all_tasks_blocked()
            theirs.close()
            await trio.testing.wait_all_tasks_blocked()
            assert got[1] == (b"", start + 2)
            nursery.cancel_scope.cancel()
    finally:
        parking.close()
        ours.close()


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
    later beat parks it again; silence past the grace closes it (up to a visit of the timer,
    which reads a lone beat, and a tick late)."""
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
            # a real socket: the bytes come in real time (the virtual clock stands still meanwhile)
            await until(lambda: len(parking) == 0, "half a frame to wake the connection", 5, interval=0)
            await client.stream.send_all(b"\nreceipt:r\n\nbody\x00")
            reply = await client.receive()
            assert (reply.command, reply.headers["receipt-id"]) == ("RECEIPT", "r")
            await beat(client, 0.15, 2)
            await trio.testing.wait_all_tasks_blocked()
            assert len(parking) == 1
            silent = trio.current_time()
            error = await client.receive()
            assert error.headers["message"] == "heart-beat timeout"
            assert 0.2 <= trio.current_time() - silent <= 0.2 + 0.09 + 0.05 + 0.01  # grace, a beat of ours, a tick
            await trio.testing.wait_all_tasks_blocked()
            assert len(parking) == 0
            await client.stream.aclose()
            pair.nursery.cancel_scope.cancel()
        finally:
            parking.close()
