"""Streams shared live by several brokers on one PostgreSQL database (separate processes).

What must hold: appends through any broker get dense, unique offsets in commit order;
subscribers on every broker read one and the same sequence; offsets, retention, purge and
delete look the same through every broker; a broker killed mid-append loses nothing receipted
and leaves no hole a reader could skip.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from ..support.broker_process import BrokerProcess, Peer
from ..support.stompclient import BrokerError, Client
from ..support.stores import TEST_LEASE, postgres_server
from ..support.waiting import wait_until

pytestmark = pytest.mark.postgres

#: Entries per segment (the unit retention drops): small, so a few hundred entries make segments.
SEGMENT = 10


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    database = postgres_server().new_database()
    started = [
        BrokerProcess(database, "--lease", str(TEST_LEASE), "--stream-segment", str(SEGMENT)).start()
        for _ in range(2)
    ]
    try:
        yield started
    finally:
        for b in started:
            b.close()


def offsets(c: Client, stream: str) -> dict[str, int]:
    receipt = c.request("SEND", {"destination": f"/control/stream-offsets/stream/{stream}"})
    return {k: int(receipt[k]) for k in ("first-offset", "next-offset", "count")}


def read(c: Client, n: int) -> list[tuple[int, str]]:
    return [(int(m["x-stream-offset"]), m.body.decode()) for m in c.messages(n)]


def test_interleaved_appends_through_two_brokers_read_back_in_one_order_on_each(
    brokers: list[BrokerProcess],
) -> None:
    a, b = brokers
    with Peer(a.port) as pa, Peer(b.port) as pb, Client(a.port) as la, Client(b.port) as lb:
        live = [la, lb]
        for c in live:  # subscribed before anything exists: fed as the entries commit
            c.subscribe("/stream/s")
        for i in range(50):  # one at a time, alternating: the order of the receipts is the order
            pa.send_to("/stream/s", f"a{i}")
            pb.send_to("/stream/s", f"b{i}")
        expected = [(2 * i + k, f"{p}{i}") for i in range(50) for k, p in enumerate("ab")]
        for c in live:
            assert read(c, 100) == expected
        for c in (pa, pb):
            assert offsets(c, "s") == {"first-offset": 0, "next-offset": 100, "count": 100}
            c.subscribe("/stream/s", x_stream_offset="first")
            assert read(c, 100) == expected


def test_concurrent_appends_get_dense_offsets_in_one_order_everywhere(brokers: list[BrokerProcess]) -> None:
    a, b = brokers
    n = 600

    def produce(port: int, tag: str) -> None:
        with Client(port) as c:
            for i in range(n):
                c.send_to("/stream/c", f"{tag}{i}", receipt=i % 50 == 49)

    with Client(a.port) as la, Client(b.port) as lb:
        for c in (la, lb):
            c.subscribe("/stream/c")
        producers = [threading.Thread(target=produce, args=(p, t)) for p, t in ((a.port, "a"), (b.port, "b"))]
        for t in producers:
            t.start()
        for t in producers:
            t.join()
        got_a, got_b = read(la, 2 * n), read(lb, 2 * n)
    assert got_a == got_b
    assert [offset for offset, _ in got_a] == list(range(2 * n))
    for tag in "ab":  # each producer's entries in its own order, none lost, none twice
        assert [body for _, body in got_a if body[0] == tag] == [f"{tag}{i}" for i in range(n)]


def test_positions_follow_acks_on_entries_appended_through_another_broker(brokers: list[BrokerProcess]) -> None:
    a, b = brokers
    with Peer(a.port) as producer, Client(b.port) as reader:
        for i in range(5):
            producer.send_to("/stream/k", f"m{i}", receipt=False)
        producer.sync()
        reader.subscribe("/stream/k", ack="client-individual", prefetch="2", x_stream_offset="first")
        first = reader.messages(2)
        assert [m["x-stream-offset"] for m in first] == ["0", "1"]
        reader.expect_nothing(0.3)
        reader.ack(first[0])
        assert read(reader, 1) == [(2, "m2")]
        reader.ack(first[1])
        assert read(reader, 1) == [(3, "m3")]


def test_an_offset_told_by_one_broker_is_not_clamped_by_another(brokers: list[BrokerProcess]) -> None:
    """B may not have heard of A's appends yet; a SUBSCRIBE there at A's end asks the database."""
    a, b = brokers
    with Peer(a.port) as pa, Client(b.port) as reader:
        for i in range(30):
            pa.send_to("/stream/o", f"m{i}", receipt=False)
        end = offsets(pa, "o")["next-offset"]
        reader.subscribe("/stream/o", x_stream_offset=str(end - 2))
        assert read(reader, 2) == [(28, "m28"), (29, "m29")]
        reader.subscribe("/stream/o", "far", x_stream_offset="1000")  # past the end: clamped to it
        pa.send_to("/stream/o", "m30")
        assert read(reader, 1) == [(30, "m30")]


def test_retention_purge_and_delete_are_the_same_through_every_broker(brokers: list[BrokerProcess]) -> None:
    a, b = brokers
    with Peer(a.port) as pa, Peer(b.port) as pb:
        pa.request("SEND", {"destination": "/control/declare/stream/r", "max-bytes": "200"})
        for i in range(60):  # 10-byte bodies, 10 per segment: 200 bytes keep about two segments
            (pa if i % 2 else pb).send_to("/stream/r", f"entry-{i:04d}", receipt=False)
        pa.sync()
        pb.sync()

        def retained(c: Client) -> bool:
            o = offsets(c, "r")
            return o["next-offset"] == 60 and 40 <= o["first-offset"] < 60

        for c in (pa, pb):
            wait_until(lambda c=c: retained(c), "retention through every broker", timeout=10)
        assert offsets(pa, "r") == offsets(pb, "r")
        first = offsets(pb, "r")["first-offset"]
        for c in (pa, pb):  # the same retained entries, in the same order, through each
            c.subscribe("/stream/r", "all", x_stream_offset="first")
        got = read(pb, 60 - first)
        assert read(pa, 60 - first) == got and [offset for offset, _ in got] == list(range(first, 60))
        for c in (pa, pb):
            c.unsubscribe("all")

        pa.request("SEND", {"destination": "/control/purge/stream/r"})
        assert offsets(pb, "r") == {"first-offset": 60, "next-offset": 60, "count": 0}
        pb.send_to("/stream/r", "after-purge")  # offsets go on, never reused
        pa.subscribe("/stream/r", x_stream_offset="first")
        assert read(pa, 1) == [(60, "after-purge")]

    with Peer(a.port) as pa, Peer(b.port) as pb:
        pb.request("SEND", {"destination": "/control/delete/stream/r"})
        assert offsets(pa, "r") == {"first-offset": 0, "next-offset": 0, "count": 0}
        pa.send_to("/stream/r", "new")  # a new stream, from offset 0
        pb.subscribe("/stream/r", x_stream_offset="first")
        assert read(pb, 1) == [(0, "new")]


def test_a_broker_killed_mid_append_loses_nothing_receipted_and_leaves_no_hole(
    brokers: list[BrokerProcess],
) -> None:
    a, b = brokers
    receipted: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        try:
            with Client(a.port) as c:
                i = 0
                while not stop.is_set():
                    c.send_to("/stream/x", f"a{i}", receipt=False)
                    c.send_to("/stream/x", f"r{i}")  # receipted: must survive the kill
                    receipted.append(f"r{i}")
                    i += 1
        except (OSError, EOFError, TimeoutError, BrokerError):
            pass  # the broker died under us

    with Peer(b.port) as pb:
        producer = threading.Thread(target=produce)
        producer.start()
        wait_until(lambda: len(receipted) >= 100, "100 receipted appends", timeout=30)
        a.kill9()
        stop.set()
        producer.join(10)
        for i in range(20):  # the stream goes on through the other broker
            pb.send_to("/stream/x", f"b{i}", receipt=False)
        o = offsets(pb, "x")
        assert o["first-offset"] == 0 and o["count"] == o["next-offset"]
        pb.subscribe("/stream/x", x_stream_offset="first")
        got = read(pb, o["next-offset"])
        pb.expect_nothing(0.3)
    assert [offset for offset, _ in got] == list(range(o["next-offset"]))  # no hole
    bodies = [body for _, body in got]
    assert set(receipted) <= set(bodies) and len(set(bodies)) == len(bodies)
    assert bodies[-20:] == [f"b{i}" for i in range(20)]
