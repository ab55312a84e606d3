"""Streams (/stream/NAME) through the real broker, on every store: offsets, subscriptions from an
offset, prefetch, reads from the store, retention, restarts, partitioned streams."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from stompmq.broker import BrokerConfig

from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.stores import make_store_factory
from ..support.waiting import wait_past, wait_until


def offsets(c: Client, stream: str) -> dict[str, int]:
    receipt = c.request("SEND", {"destination": f"/control/stream-offsets/stream/{stream}"})
    return {k: int(receipt[k]) for k in ("first-offset", "last-offset", "next-offset", "count")}


def publish(c: Client, stream: str, n: int, start: int = 0, size: int = 0) -> None:
    """SEND ``n`` bodies ("m<i>", padded to ``size``) pipelined; one round trip covers them."""
    for i in range(start, start + n):
        c.send_to(f"/stream/{stream}", f"m{i}".ljust(size, "."), receipt=False)
    c.sync()


def read(c: Client, n: int) -> list[tuple[int, str]]:
    return [(int(m["x-stream-offset"]), m.body.decode().rstrip(".")) for m in c.messages(n)]


def test_entries_stay_and_carry_their_offsets(broker: BrokerThread) -> None:
    with Client(broker.port) as c:
        publish(c, "s", 5)
        assert offsets(c, "s") == {"first-offset": 0, "last-offset": 4, "next-offset": 5, "count": 5}
        for _ in range(2):  # consuming removes nothing: a second reader sees the same entries
            sub = c.subscribe("/stream/s", x_stream_offset="first")
            assert read(c, 5) == [(i, f"m{i}") for i in range(5)]
            c.unsubscribe(sub)
        c.subscribe("/stream/s", x_stream_offset="3")
        assert read(c, 2) == [(3, "m3"), (4, "m4")]
        c.expect_nothing()


def test_start_positions(broker: BrokerThread) -> None:
    with Client(broker.port) as c, Client(broker.port) as other:
        publish(c, "p", 3)
        c.subscribe("/stream/p", "next")  # the default: only what comes next
        c.subscribe("/stream/p", "last", x_stream_offset="last")
        c.subscribe("/stream/p", "far", x_stream_offset="99")  # clamped to the end
        assert sorted((m["subscription"], m["x-stream-offset"]) for m in c.messages(1)) == [("last", "2")]
        c.expect_nothing()
        publish(other, "p", 1, start=3)
        got = sorted((m["subscription"], m["x-stream-offset"]) for m in c.messages(3))
        assert got == [("far", "3"), ("last", "3"), ("next", "3")]
        c.expect_nothing()


def test_a_subscription_stops_at_its_end(broker: BrokerThread) -> None:
    with Client(broker.port) as c:
        publish(c, "e", 5)
        c.subscribe("/stream/e", x_stream_offset="1", x_stream_end="3")
        assert read(c, 2) == [(1, "m1"), (2, "m2")]
        c.subscribe("/stream/e", "later", x_stream_offset="next", x_stream_end="6")  # ends past the end
        publish(c, "e", 3, start=5)
        assert read(c, 1) == [(5, "m5")]
        c.expect_nothing()


def test_timestamp_start(broker: BrokerThread) -> None:
    with Client(broker.port) as c:
        publish(c, "t", 3)
        wait_past(time.time() * 1000, "a millisecond after the first three")
        cut = time.time()
        wait_past(cut * 1000, "a millisecond after the cut")
        publish(c, "t", 2, start=3)
        c.subscribe("/stream/t", x_stream_offset=f"timestamp={cut:.3f}")
        assert read(c, 2) == [(3, "m3"), (4, "m4")]
        c.expect_nothing()


def offset_at(c: Client, stream: str, ms: int) -> int:
    receipt = c.request("SEND", {"destination": f"/control/stream-offsets/stream/{stream}", "timestamp": str(ms)})
    return int(receipt["timestamp-offset"])


def test_offset_at_a_timestamp_is_the_first_entry_that_late(tmp_path: Path, store_kind: str) -> None:
    """``/control/stream-offsets`` with ``timestamp``: found from the marks, the tail and (durable
    stores) a binary search of the store, before and after a restart (marks only, no tail)."""
    make = make_store_factory(store_kind, tmp_path)
    config = BrokerConfig(window=10, stream_segment=16)  # most entries only in the store
    with BrokerThread(make, config=config).start() as thread, Client(thread.port) as c:
        assert offset_at(c, "ts", 0) == 0  # never written: its end
        for burst in range(6):
            publish(c, "ts", 40, start=burst * 40)
            wait_past(time.time() * 1000, "a later timestamp for the next burst")
        c.subscribe("/stream/ts", x_stream_offset="first")
        stamps = [int(m["timestamp"]) for m in c.messages(240)]
        assert stamps == sorted(stamps)  # non-decreasing along a stream
        probes = sorted({0, stamps[0] - 1, *stamps, stamps[-1] + 1, *(t + 1 for t in stamps)})
        expected = {ms: next((i for i, t in enumerate(stamps) if t >= ms), 240) for ms in probes}
        assert {ms: offset_at(c, "ts", ms) for ms in probes} == expected
        c.frame("SEND", {"destination": "/control/stream-offsets/stream/ts", "timestamp": "soon"})
        assert "epoch milliseconds" in c.expect_error()["message"]
    if store_kind != "memory":
        with BrokerThread(make, config=config).start() as thread, Client(thread.port) as c:
            assert {ms: offset_at(c, "ts", ms) for ms in probes} == expected
    with BrokerThread(make, config=config).start() as thread, Client(thread.port) as c:
        if store_kind == "memory":
            publish(c, "ts", 240)
        c.request("SEND", {"destination": "/control/declare/stream/ts", "max-bytes": "400"})  # ~100 entries
        first = offsets(c, "ts")["first-offset"]
        assert 0 < first < 200
        assert offset_at(c, "ts", 0) == first  # what retention dropped is not an answer
        if store_kind != "memory":
            assert {ms: offset_at(c, "ts", ms) for ms in probes} == {ms: max(o, first) for ms, o in expected.items()}


def test_client_ack_position_advances_with_acks(broker: BrokerThread) -> None:
    with Client(broker.port) as c:
        publish(c, "a", 5)
        c.subscribe("/stream/a", ack="client-individual", prefetch="2", x_stream_offset="first")
        first = c.messages(2)
        c.expect_nothing()
        c.ack(first[0])
        assert read(c, 1) == [(2, "m2")]
        c.nack(first[1])  # settles too: streams never redeliver
        assert read(c, 1) == [(3, "m3")]
        c.expect_nothing()


def test_reads_older_entries_from_the_store_and_survives_a_restart(tmp_path: Path) -> None:
    make = make_store_factory("sqlite", tmp_path)
    config = BrokerConfig(window=10, stream_segment=7)  # 10 entries in memory, the rest from disk
    with BrokerThread(make, config=config).start() as thread:
        with Client(thread.port) as c:
            publish(c, "d", 100)
            c.subscribe("/stream/d", x_stream_offset="first")
            assert read(c, 100) == [(i, f"m{i}") for i in range(100)]
    with BrokerThread(make, config=config).start() as thread:
        with Client(thread.port) as c:
            assert offsets(c, "d")["next-offset"] == 100
            publish(c, "d", 1, start=100)  # offsets continue, never reused
            c.subscribe("/stream/d", x_stream_offset="95")
            assert read(c, 6) == [(i, f"m{i}") for i in range(95, 101)]


def test_long_reads_from_the_store_read_ahead_without_gaps(tmp_path: Path, store_kind: str) -> None:
    if store_kind == "memory":
        pytest.skip("the memory store keeps every entry in the tail: nothing is read")
    with BrokerThread(make_store_factory(store_kind, tmp_path), config=BrokerConfig(window=10)).start() as thread:
        with Client(thread.port) as c:
            publish(c, "long", 2600)  # 2.6 store reads: the next is asked for halfway through each
            c.subscribe("/stream/long", x_stream_offset="first")
            assert read(c, 2600) == [(i, f"m{i}") for i in range(2600)]
            c.expect_nothing()


def test_retention_by_bytes_drops_whole_segments(tmp_path: Path, store_kind: str) -> None:
    make = make_store_factory(store_kind, tmp_path)
    with BrokerThread(make, config=BrokerConfig(stream_segment=10)).start() as thread:
        with Client(thread.port) as c:
            c.request("SEND", {"destination": "/control/declare/stream/r", "max-bytes": "250"})
            publish(c, "r", 95, size=10)  # 950 bytes in segments of 100
            got = offsets(c, "r")
            # Retention runs as a segment starts (at 90): segments go while the stream is over
            # 250 bytes, and never the newest one.
            assert got["first-offset"] == 70 and got["next-offset"] == 95
            c.subscribe("/stream/r", x_stream_offset="first")
            assert read(c, 25)[0] == (70, "m70")
            c.expect_nothing()
    if store_kind == "sqlite":
        db = sqlite3.connect(tmp_path / "broker.db")
        assert db.execute("SELECT MIN(position), COUNT(*) FROM stream_messages").fetchone() == (70, 25)
        db.close()
        with BrokerThread(make, config=BrokerConfig(stream_segment=10)).start() as thread:
            with Client(thread.port) as c:
                publish(c, "r", 10, start=95, size=10)  # the declaration and marks came back
                assert offsets(c, "r")["first-offset"] == 80


def test_retention_by_age_needs_no_new_message(make_broker) -> None:
    thread = make_broker(config=BrokerConfig(stream_segment=5))
    with Client(thread.port) as c:
        c.request("SEND", {"destination": "/control/declare/stream/old", "max-age": "1"})
        publish(c, "old", 12)
        assert offsets(c, "old")["first-offset"] == 0
        wait_until(lambda: offsets(c, "old")["first-offset"] == 10, "old segments dropped", timeout=5)


def test_exchange_partitions_keyed_sends_over_streams(broker: BrokerThread) -> None:
    with Client(broker.port) as c:
        c.request("SEND", {"destination": "/control/declare/exchange/events"})
        for p in range(4):
            c.request("SEND", {"destination": "/control/bind/exchange/events", "queue": f"/stream/e{p}"})
        listing = c.request("SEND", {"destination": "/control/list-bindings/exchange/events"})
        assert [listing[f"binding-{i}-queue"] for i in range(4)] == [f"/stream/e{p}" for p in range(4)]
        for i in range(400):
            c.send_to(f"/exchange/events/key{i % 50}", f"v{i}", receipt=False)
        c.sync()
        counts = [offsets(c, f"e{p}")["count"] for p in range(4)]
        assert sum(counts) == 400 and all(counts)
        # One key always lands in the same partition.
        c.subscribe("/stream/e0", x_stream_offset="first")
        bodies = [int(m.body[1:]) % 50 for m in c.messages(counts[0])]
        assert len(set(bodies)) * 8 == counts[0]


def test_purge_and_delete_through_control_survive_a_restart(tmp_path: Path, store_kind: str) -> None:
    make = make_store_factory(store_kind, tmp_path)
    with BrokerThread(make, config=BrokerConfig(stream_segment=4)).start() as thread:
        with Client(thread.port) as c:
            c.request("SEND", {"destination": "/control/declare/stream/keep", "max-bytes": "1000"})
            publish(c, "keep", 10)
            sub = c.subscribe("/stream/keep", x_stream_offset="first")
            assert len(read(c, 10)) == 10
            c.request("SEND", {"destination": "/control/purge/stream/keep"})
            assert offsets(c, "keep") == {"first-offset": 10, "last-offset": 9, "next-offset": 10, "count": 0}
            publish(c, "keep", 2, start=10)  # offsets go on; the subscriber gets only the new entries
            assert read(c, 2) == [(10, "m10"), (11, "m11")]
            with Client(thread.port) as other:  # a subscribed stream is not deleted
                other.frame("SEND", {"destination": "/control/delete/stream/keep"})
                assert "subscriber" in other.expect_error()["message"]
            c.unsubscribe(sub)
            c.request("SEND", {"destination": "/control/declare/exchange/ex"})
            c.request("SEND", {"destination": "/control/bind/exchange/ex", "queue": "/stream/gone"})
            publish(c, "gone", 5)
            c.request("SEND", {"destination": "/control/delete/stream/gone"})
            assert offsets(c, "gone")["next-offset"] == 0
            assert c.request("SEND", {"destination": "/control/list-bindings/exchange/ex"})["num-bindings"] == "0"
            c.request("SEND", {"destination": "/control/purge/stream/never"})  # no such stream: nothing to do
            c.request("SEND", {"destination": "/control/delete/stream/never"})
    if store_kind == "memory":
        return
    for expected in ({"first-offset": 10, "last-offset": 11, "next-offset": 12, "count": 2},
                     {"first-offset": 12, "last-offset": 11, "next-offset": 12, "count": 0}):
        with BrokerThread(make, config=BrokerConfig(stream_segment=4)).start() as thread:
            with Client(thread.port) as c:
                assert offsets(c, "keep") == expected
                assert offsets(c, "gone")["next-offset"] == 0
                c.request("SEND", {"destination": "/control/purge/stream/keep"})  # seen by the next restart
    with BrokerThread(make, config=BrokerConfig(stream_segment=4)).start() as thread:
        with Client(thread.port) as c:
            publish(c, "keep", 1, start=12)
            c.subscribe("/stream/keep", x_stream_offset="first")
            assert read(c, 1) == [(12, "m12")]


@pytest.mark.parametrize(
    ("destination", "headers", "problem"),
    [
        ("SUBSCRIBE", {"destination": "/stream/x", "id": "1", "x-stream-offset": "soon"}, "x-stream-offset"),
        ("SUBSCRIBE", {"destination": "/stream/x", "id": "1", "x-stream-offset": "timestamp=x"}, "timestamp"),
        ("SUBSCRIBE", {"destination": "/stream/x", "id": "1", "x-stream-end": "-1"}, "x-stream-end"),
        ("SUBSCRIBE", {"destination": "/stream/x", "id": "1", "x-stream-end": "later"}, "x-stream-end"),
        ("SEND", {"destination": "/control/declare/stream/x", "max-age": "-1"}, "max-age"),
        ("SEND", {"destination": "/control/declare/stream/x", "max-bytes": "lots"}, "max-bytes"),
        ("SEND", {"destination": "/control/bind/exchange/none", "queue": "/stream/x"}, "no exchange"),
    ],
)
def test_bad_stream_input_is_an_error(memory_broker: BrokerThread, destination: str, headers: dict[str, str],
                                      problem: str) -> None:
    with Client(memory_broker.port) as c:
        c.frame(destination, headers)
        error = c.expect_error()
        assert problem in error["message"]
    with Client(memory_broker.port) as c:  # the broker lives on
        publish(c, "x", 1)


def produce(c: Client, stream: str, producer: str, seq: int, body: str) -> bool:
    """An idempotent append; whether it was new (its RECEIPT does not say ``duplicate``)."""
    receipt = c.request("SEND", {"destination": f"/stream/{stream}", "x-producer-id": producer,
                                 "x-producer-seq": str(seq)}, body.encode())
    return receipt.headers.get("duplicate") != "true"


def test_an_idempotent_producer_appends_each_number_once_across_restarts(tmp_path: Path, store_kind: str) -> None:
    make = make_store_factory(store_kind, tmp_path)
    with BrokerThread(make).start() as thread, Client(thread.port) as c:
        assert [produce(c, "ids", "p", seq, f"m{seq}") for seq in (0, 1, 1, 0, 2)] == [True, True, False, False, True]
        assert produce(c, "ids", "q", 1, "q1")  # another producer has its own numbers
        publish(c, "ids", 1, start=9)  # plain appends are not checked
        assert offsets(c, "ids")["count"] == 5
        receipt = c.request("SEND", {"destination": "/control/stream-offsets/stream/ids"})
        assert receipt["duplicates"] == "2"
    if store_kind == "memory":
        return
    with BrokerThread(make).start() as thread, Client(thread.port) as c:  # the positions were stored
        assert [produce(c, "ids", "p", seq, f"m{seq}") for seq in (2, 1, 3)] == [False, False, True]
        assert not produce(c, "ids", "q", 1, "q1")
        c.subscribe("/stream/ids", x_stream_offset="first")
        assert read(c, 6) == [(0, "m0"), (1, "m1"), (2, "m2"), (3, "q1"), (4, "m9"), (5, "m3")]
        c.expect_nothing()
        c.request("SEND", {"destination": "/control/delete/stream/other"})
        assert produce(c, "other", "p", 0, "new")  # positions are per stream


def test_a_deleted_stream_forgets_its_producers(tmp_path: Path, store_kind: str) -> None:
    make = make_store_factory(store_kind, tmp_path)
    with BrokerThread(make).start() as thread, Client(thread.port) as c:
        assert produce(c, "d", "p", 5, "a")
        c.request("SEND", {"destination": "/control/delete/stream/d"})
        assert produce(c, "d", "p", 5, "b")
    if store_kind != "memory":
        with BrokerThread(make).start() as thread, Client(thread.port) as c:
            assert not produce(c, "d", "p", 5, "c")
            assert offsets(c, "d")["count"] == 1


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        ({"x-producer-id": "p"}, "x-producer-seq"),
        ({"x-producer-seq": "1"}, "x-producer-id"),
        ({"x-producer-id": "p", "x-producer-seq": "-1"}, "x-producer-seq"),
        ({"x-producer-id": "p", "x-producer-seq": "one"}, "x-producer-seq"),
        ({"x-producer-id": "p", "x-producer-seq": "1" * 19}, "x-producer-seq"),
        ({"x-producer-id": "p" * 201, "x-producer-seq": "1"}, "x-producer-id"),
        ({"x-producer-id": "", "x-producer-seq": "1"}, "x-producer-id"),
    ],
)
def test_bad_producer_headers_are_an_error(memory_broker: BrokerThread, headers: dict[str, str], problem: str) -> None:
    with Client(memory_broker.port) as c:
        c.frame("SEND", {"destination": "/stream/x", **headers})
        assert problem in c.expect_error()["message"]
    with Client(memory_broker.port) as c:  # nothing was appended, and the broker lives on
        assert offsets(c, "x")["count"] == 0
