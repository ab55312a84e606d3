"""Connections in virtual time: ack timeouts, heart-beats, deadlines and redelivery, with no sleep.

Every test runs under ``autojump_clock``: trio jumps the clock whenever all tasks are
blocked, so the 30-second and 10-second waits below take no real time.
"""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from stompmq.broker import BrokerConfig
from stompmq.protocol import Frame
from stompmq.server.connection import Connection
from stompmq.server.settings import ServerSettings

from ..support.pair import PeerClient, broker_pair


async def test_ack_timeout_redelivers_to_the_other_subscriber(autojump_clock: trio.abc.Clock) -> None:
    async with broker_pair() as pair:
        slow = await pair.connected()
        other = await pair.connected()
        await slow.send("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "client-individual",
                                      "ack-timeout": "30", "receipt": "r"})
        assert (await slow.receive()).command == "RECEIPT"
        await other.send("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "client-individual",
                                       "receipt": "r"})
        assert (await other.receive()).command == "RECEIPT"
        start = trio.current_time()
        await slow.send("SEND", {"destination": "/queue/q"}, b"job")
        first = await slow.receive()
        assert first.headers["redelivered"] == "false"
        assert await other.nothing_within(29.0)
        again = await other.receive()
        assert again.body == b"job" and again.headers["redelivered"] == "true"
        assert 30.0 <= trio.current_time() - start < 30.5


async def test_ack_before_the_timeout_cancels_it(autojump_clock: trio.abc.Clock) -> None:
    async with broker_pair() as pair:
        client = await pair.connected()
        await client.send("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "client-individual",
                                        "ack-timeout": "5"})
        await client.send("SEND", {"destination": "/queue/q"}, b"job")
        msg = await client.receive()
        await client.send("ACK", {"id": msg.headers["ack"]})
        assert await client.nothing_within(60.0)
        assert len(pair.broker.deadlines) == 0


async def test_unacked_messages_of_a_closed_connection_go_to_another(autojump_clock: trio.abc.Clock) -> None:
    async with broker_pair() as pair:
        leaving = await pair.connected()
        staying = await pair.connected()
        await leaving.send("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "client"})
        await leaving.send("SEND", {"destination": "/queue/q"}, b"job")
        await leaving.receive()
        await staying.send("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "client"})
        await leaving.stream.aclose()
        again = await staying.receive()
        assert again.body == b"job" and again.headers["redelivery-count"] == "1"


async def test_server_heart_beats_keep_their_interval(autojump_clock: trio.abc.Clock) -> None:
    async with broker_pair(settings=ServerSettings(port=0, heart_beat=(1000, 0))) as pair:
        client = await pair.connected(heart_beat="0,1000")
        start = trio.current_time()
        with trio.move_on_after(10.0):
            await client.receive()
        # at least one beat per second (the server beats a little early, never late)
        assert client.heart_beats >= 10
        assert trio.current_time() - start >= 10.0


async def test_a_silent_peer_is_closed_after_the_grace_period(autojump_clock: trio.abc.Clock) -> None:
    async with broker_pair(settings=ServerSettings(port=0, heart_beat=(0, 1000), heart_beat_grace=2.0)) as pair:
        client = await pair.connected(heart_beat="1000,0")
        start = trio.current_time()
        error = await client.receive()
        assert error.command == "ERROR" and error.headers["message"] == "heart-beat timeout"
        assert 2.0 <= trio.current_time() - start <= 3.0


async def test_one_timer_beats_for_connections_of_different_intervals(autojump_clock: trio.abc.Clock) -> None:
    """The server's single heart-beat timer keeps each connection's own interval and closes only
    the silent one."""
    settings = ServerSettings(port=0, heart_beat=(1000, 1000), heart_beat_grace=2.0)
    async with broker_pair(settings=settings) as pair:
        fast = await pair.connected(heart_beat="0,1000")
        slow = await pair.connected(heart_beat="0,4000")  # the server beats every 4 s at least
        silent = await pair.connected(heart_beat="1000,0")  # promises a beat a second, sends none
        start = trio.current_time()
        error = await silent.receive()
        assert error.headers["message"] == "heart-beat timeout"
        assert 2.0 <= trio.current_time() - start <= 3.0
        async with trio.open_nursery() as nursery:
            for client in (fast, slow):
                nursery.start_soon(client.nothing_within, start + 12.0 - trio.current_time())
        assert fast.heart_beats >= 12 and 3 <= slow.heart_beats <= 6


def tasks() -> int:
    """Every task running now."""
    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(child) for nursery in task.child_nurseries for child in nursery.child_tasks)

    return count(trio.lowlevel.current_root_task())


async def test_an_idle_connection_has_no_timer_task_of_its_own(autojump_clock: trio.abc.Clock) -> None:
    """Tasks are memory: a connection over a stream without a socket (TLS, WebSocket, these
    in-memory ones) runs its reader and writer; heart-beats and the CONNECT deadline belong to
    the server's one timer."""
    async with broker_pair(settings=ServerSettings(port=0, heart_beat=(1000, 1000))) as pair:
        clients = [await pair.connected(heart_beat="1000,1000")]
        await trio.testing.wait_all_tasks_blocked()
        before = tasks()
        clients += [await pair.connected(heart_beat="1000,1000") for _ in range(3)]
        await trio.testing.wait_all_tasks_blocked()
        assert tasks() - before == 3 * 2


async def test_a_plain_tcp_connection_runs_a_writer_only_while_its_socket_is_full() -> None:
    """Over plain TCP what the socket takes goes out without a writer task (outbox.py:
    ``WriteBatch``): an idle connection is one task.  A writer runs while the peer does not read
    what it is sent, and ends once everything went."""
    async with broker_pair() as pair:
        producer = await pair.connected()
        listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # full after a few KiB
        await sock.connect(listener.socket.getsockname())
        server = await listener.accept()
        server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        await trio.testing.wait_all_tasks_blocked()
        before = tasks()
        pair.nursery.start_soon(Connection(server, pair.runtime, pair.settings, heart_beats=pair.heart_beats).run)
        consumer = PeerClient(trio.SocketStream(sock))
        assert (await consumer.connect()).command == "CONNECTED"
        await consumer.send("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "receipt": "r"})
        assert (await consumer.receive()).command == "RECEIPT"
        await trio.testing.wait_all_tasks_blocked()
        assert tasks() - before == 1  # the reader
        body = b"x" * 8000  # below LARGE_BODY: one write(2), no sendmsg
        for i in range(64):
            await producer.send("SEND", {"destination": "/queue/q", "receipt": str(i)}, body)
        for i in range(64):
            assert (await producer.receive()).headers["receipt-id"] == str(i)
        await trio.testing.wait_all_tasks_blocked()
        assert tasks() - before == 2  # the socket is full: a writer waits for it
        for _ in range(64):
            assert (await consumer.receive()).body == body
        await trio.testing.wait_all_tasks_blocked()
        assert tasks() - before == 1  # all sent: the writer ended
        await consumer.stream.aclose()
        await listener.aclose()


async def test_no_connect_frame_in_time(autojump_clock: trio.abc.Clock) -> None:
    async with broker_pair(settings=ServerSettings(port=0, connect_timeout=10.0)) as pair:
        client = pair.open()
        error = await client.receive()
        assert error.headers["message"] == "no CONNECT frame in time"
        assert trio.current_time() >= 10.0


async def test_disconnect_receipt_waits_for_the_commit_and_closes(autojump_clock: trio.abc.Clock) -> None:
    async with broker_pair(config=BrokerConfig()) as pair:
        client = await pair.connected()
        await client.send("SEND", {"destination": "/queue/q", "receipt": "s"}, b"x")
        await client.send("DISCONNECT", {"receipt": "bye"})
        assert [(await client.receive()).headers["receipt-id"] for _ in range(2)] == ["s", "bye"]
        try:
            await client.receive()
            raise AssertionError("the connection stayed open")
        except EOFError:
            pass


async def test_nothing_is_delivered_after_the_receipt_of_a_disconnect(autojump_clock: trio.abc.Clock) -> None:
    """A client closes once its DISCONNECT's RECEIPT came and reads nothing after it, while the
    broker still flushes the connection's outbox before closing it: a message sent meanwhile
    must go to the next subscriber, not after the RECEIPT, where an auto-ack delivery is lost
    (seen in the restart contract: an exclusive consumer's DISCONNECT, a SEND right after)."""
    async with broker_pair() as pair:
        leaving = await pair.connected(lockstep=True)  # its outbox drains only as it reads
        await leaving.send("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "auto", "receipt": "sub"})
        assert (await leaving.receive()).headers["receipt-id"] == "sub"
        await leaving.send("DISCONNECT", {"receipt": "bye"})
        await trio.testing.wait_all_tasks_blocked()  # the RECEIPT waits in the outbox
        producer = await pair.connected()
        await producer.send("SEND", {"destination": "/queue/q", "receipt": "s"}, b"after the DISCONNECT")
        assert (await producer.receive()).headers["receipt-id"] == "s"
        after = []
        with pytest.raises(EOFError):
            while True:
                after.append(await leaving.receive())
        assert [(f.command, f.headers.get("receipt-id")) for f in after] == [("RECEIPT", "bye")]
        staying = await pair.connected()
        await staying.send("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "auto"})
        msg = await staying.receive()
        assert (msg.body, msg.headers["redelivered"]) == (b"after the DISCONNECT", "false")


async def test_a_stalled_auto_ack_subscriber_loses_nothing(autojump_clock: trio.abc.Clock) -> None:
    """What never reached the socket of a closed auto-ack subscriber goes to the next
    one, in order, marked redelivered; what reached it counts as delivered; nothing is lost."""
    n = 3000
    async with broker_pair() as pair:
        stalled = await pair.connected(lockstep=True)
        await stalled.send("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "auto"})
        producer = await pair.connected()
        for i in range(n):
            await producer.send("SEND", {"destination": "/queue/q"}, b"%05d" % i + b"x" * 1000)
        await producer.send("DISCONNECT", {"receipt": "done"})
        assert (await producer.receive()).command == "RECEIPT"
        got_stalled = []
        while len(got_stalled) < 10:  # read a little, then stall
            got_stalled.append(int((await stalled.receive()).body[:5]))
        got_stalled += [int(f.body[:5]) for f in stalled.frames]  # parsed but not yet returned
        await trio.testing.wait_all_tasks_blocked()
        queue = pair.broker.queues["q"]
        held = len(queue.inflight)
        assert 0 < held < 700  # bounded by the outbox's soft limit (512 KiB / ~1 KiB)
        await stalled.stream.aclose()
        await trio.sleep(60)  # EOF: the broker tries to flush for 30 s, then closes the session
        assert len(queue.inflight) == 0
        other = await pair.connected()
        await other.send("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "auto"})
        got_other = []
        redelivered = []
        while len(set(got_stalled) | set(got_other)) < n:
            frame = await other.receive()
            got_other.append(int(frame.body[:5]))
            redelivered.append(frame.headers["redelivered"] == "true")
        assert set(got_stalled) | set(got_other) == set(range(n))
        assert got_other == sorted(got_other)  # the requeued ones first, in order, then the rest
        assert any(redelivered)
        # Duplicates come only from the one write the socket took in part (at-least-once).
        assert len(set(got_stalled) & set(got_other)) <= 512 * 1024 // 1000


async def test_a_topics_only_subscriber_that_never_reads_holds_its_publisher_for_the_timeout_only(
    autojump_clock: trio.abc.Clock,
) -> None:
    """--topic-overflow block, --topic-block-timeout 5: a subscriber that reads nothing holds the
    publisher back for 5 s (not less: it could be busy), then it counts as slow though it is the
    topic's only subscriber, and the publisher goes on at once."""
    big = b"x" * (64 * 1024)
    async with broker_pair(settings=ServerSettings(port=0, topic_block_timeout=5.0)) as pair:
        stalled = await pair.connected(lockstep=True)  # the server's writes wait for reads: none come
        await stalled.send("SUBSCRIBE", {"id": "1", "destination": "/topic/t"})
        publisher = await pair.connected()
        start = trio.current_time()
        for _ in range(200):  # 12.5 MiB: over the outbox's 8 MiB hard limit
            await publisher.send("SEND", {"destination": "/topic/t"}, big)
        await publisher.send("SEND", {"destination": "/control/stats/topic/t", "receipt": "r"})
        stats = (await publisher.receive()).headers
        assert 5.0 <= trio.current_time() - start < 6.0
        assert stats["total-lagging"] == "1" and int(stats["subscription-0-dropped"]) > 0, stats


def ack_headers(version: str, msg: Frame) -> dict[str, str]:
    """The headers that name ``msg`` in an ACK/NACK of ``version``."""
    if version == "1.2":
        return {"id": msg.headers["ack"]}
    if version == "1.1":
        return {"message-id": msg.headers["message-id"], "subscription": msg.headers["subscription"]}
    return {"message-id": msg.headers["message-id"]}


@pytest.mark.parametrize("version, how", [("1.0", "resubscribe"), ("1.1", "nack"), ("1.2", "nack")])
async def test_ack_timeout_of_a_redelivery_runs_from_its_own_delivery(
    autojump_clock: trio.abc.Clock, version: str, how: str
) -> None:
    """A message requeued (NACK, UNSUBSCRIBE) and delivered again to the same session gets a
    fresh ack timeout: the first delivery's timer must not expire the second one early.
    (1.0/1.1 ACK by message-id, so both deliveries share one ack key.)  Requeued 0.8 s into a
    1 s ack timeout, the second delivery must live until 1.8 s."""
    async with broker_pair() as pair:
        client = await pair.connected(version)
        subscribe = {"destination": "/queue/q", "ack": "client-individual", "ack-timeout": "1.0"}
        if version != "1.0":
            subscribe["id"] = "s"
        await client.send("SUBSCRIBE", subscribe)
        await client.send("SEND", {"destination": "/queue/q"}, b"x")
        first = await client.receive()
        await trio.sleep(0.8)
        if how == "nack":
            await client.send("NACK", ack_headers(version, first))
        else:
            await client.send("UNSUBSCRIBE", {"destination": "/queue/q"})
            await client.send("SUBSCRIBE", subscribe)
        second = await client.receive()
        assert (second.command, second.headers["redelivery-count"]) == ("MESSAGE", "1")
        assert await client.nothing_within(0.5)  # the first delivery's deadline passes: nothing happens
        await client.send("ACK", {**ack_headers(version, second), "receipt": "acked"})
        assert (await client.receive()).headers["receipt-id"] == "acked"
        assert await client.nothing_within(1.0)  # past the second delivery's own deadline
        await client.send("SEND", {"destination": "/control/count-msgs/queue/q", "receipt": "n"})
        assert (await client.receive()).headers["num-messages"] == "0"
