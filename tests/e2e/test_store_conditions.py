"""The SQLite store under bad conditions, and queues larger than memory, end to end.

Start errors go through the real command line in a subprocess: the operator must
get exit code 2 and one line ``stompmq: store error: ...`` within seconds, never
a traceback or a broker that keeps restarting.  A disk that fills up while the
broker runs (SQLite's ``max_page_count``) must give ERROR frames for the SENDs
that could not be stored within ``--store-timeout`` (and never deliver those), and
never a RECEIPT for a message that is not on disk, while other connections keep working.  What is on disk is always read through a
separate ``sqlite3`` connection.

Paging: with a window of 50 messages, a queue of thousands keeps exactly the
(priority desc, seq asc) order whether a message came from memory or from the
store, NACKed messages keep their place, and inactive queues cost no memory.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
from pathlib import Path

from stompmq.broker import BrokerConfig
from stompmq.storage.sqlite import SQLiteStore

from ..support.broker_process import BrokerProcess, Peer, port_open
from ..support.broker_thread import BrokerThread
from ..support.on_disk import stored_headers
from ..support.unwritable import immutable
from ..support.waiting import wait_until

#: A broker that hits a start error must be gone well within this (it should take < 1 s).
START_ERROR_EXIT_TIMEOUT = 20.0


# ------------------------------------------------------------------------------------- helpers
def expect_start_error(db: Path, *words: str) -> str:
    """Run the CLI on ``db``; it must exit 2 at once with one ``store error`` line naming ``words``."""
    broker = BrokerProcess(db)
    try:
        broker.spawn()
        code = broker.wait(START_ERROR_EXIT_TIMEOUT)
        err = broker.stderr
        assert code == 2, f"exit code {code}, stderr:\n{err}"
        assert "Traceback" not in err, err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, f"expected one line, got:\n{err}"
        (line,) = lines
        assert line.startswith("stompmq: store error: "), line
        for word in words:
            assert word in line, line
        assert not port_open(broker.port)
        return line
    finally:
        broker.close()


def make_database(db: Path, messages: int = 3) -> None:
    """A real broker database holding ``messages`` messages of /queue/kept."""
    with BrokerProcess(db) as broker:
        broker.start()
        with Peer(broker.port) as peer:
            for i in range(messages):
                peer.request("SEND", {"destination": "/queue/kept"}, b"x" * 3000 + str(i).encode())
        assert broker.terminate() == 0, broker.stderr


# --------------------------------------------------------------------------------- start errors
def test_start_error_unwritable_database_file(tmp_path: Path) -> None:
    db = tmp_path / "broker.db"
    make_database(db)
    with immutable(db):
        expect_start_error(db, str(db), "not writable")
    assert len(stored_headers(db, "kept")) == 3  # nothing was harmed


def test_start_error_unwritable_directory(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    with immutable(directory):
        expect_start_error(directory / "broker.db", str(directory), "not writable")


def test_start_error_locked_by_another_broker(tmp_path: Path) -> None:
    db = tmp_path / "broker.db"
    with BrokerProcess(db) as first:
        first.start()
        with Peer(first.port) as peer:
            peer.request("SEND", {"destination": "/queue/q"}, b"before")
        expect_start_error(db, "locked")
        # The first broker is untouched by the attempt and still stores messages.
        assert first.running
        with Peer(first.port) as peer:
            peer.request("SEND", {"destination": "/queue/q"}, b"after")
            assert peer.count("q") == 2
        assert first.terminate() == 0, first.stderr
    assert stored_headers(db, "q") == [{"amq-msg-type": "text"}] * 2  # sent without content-length


def test_start_error_database_held_by_an_outside_writer(tmp_path: Path) -> None:
    """Not a broker but, say, an sqlite3 shell in the middle of a write transaction."""
    db = tmp_path / "broker.db"
    make_database(db)
    outside = sqlite3.connect(str(db), isolation_level=None)
    try:
        outside.execute("BEGIN EXCLUSIVE")
        expect_start_error(db, str(db), "locked")
        outside.execute("ROLLBACK")
    finally:
        outside.close()
    assert len(stored_headers(db, "kept")) == 3


def test_start_error_garbage_file(tmp_path: Path) -> None:
    db = tmp_path / "broker.db"
    db.write_bytes(random.Random(1).randbytes(64 * 1024))
    expect_start_error(db, str(db), "not a SQLite database or is corrupt")


def test_start_error_corrupt_pages(tmp_path: Path) -> None:
    """A real database whose b-tree pages were overwritten: quick_check catches it at start."""
    db = tmp_path / "broker.db"
    make_database(db, messages=300)
    with open(db, "r+b") as f:
        f.seek(3 * 4096)
        f.write(random.Random(2).randbytes(5 * 4096))
    expect_start_error(db, str(db), "corrupt")


# ------------------------------------------------------------------------------------ disk full
BODY = 10 * 1024
# Pages of 4 KiB: the empty schema takes a dozen, a 10 KiB message three overflow pages.
MAX_PAGES = 1000
#: --store-timeout of the disk-full test: how long a SEND waits for space before its ERROR.
STORE_TIMEOUT = 0.5


def test_disk_full_errors_the_sends_that_could_not_be_stored(tmp_path: Path) -> None:
    db = tmp_path / "full.db"
    thread = BrokerThread(
        lambda: SQLiteStore(str(db), flush_interval=0.01, max_page_count=MAX_PAGES),
        config=BrokerConfig(store_timeout=STORE_TIMEOUT),
    ).start()
    try:
        port = thread.port
        with Peer(port) as other_producer:  # a small queue stored before the disk fills up
            for i in range(20):
                other_producer.request("SEND", {"destination": "/queue/other", "n": str(i)}, b"o")
        consumer = Peer(port)
        consumer.request(
            "SUBSCRIBE",
            {"destination": "/queue/full", "id": "c", "ack": "client-individual", "prefetch": "10"},
        )
        # Let the queue's first (empty) page load finish, so every message sent below stays
        # in its in-memory window: the consumer can then drain it without reading the store.
        wait_until(lambda: thread.call(lambda: not thread.broker.queues["full"].window.spilled),
                   "the first page of /queue/full", 10, interval=0.005)

        # Receipted SENDs, up to 20 outstanding, until the broker answers ERROR.
        receipted: list[str] = []
        sent: list[str] = []
        outstanding: set[str] = set()
        error = None
        with Peer(port) as producer:
            i = 0
            while error is None:
                while len(outstanding) < 20 and i < 5 * MAX_PAGES:
                    uid = f"m{i}"
                    producer.frame(
                        "SEND",
                        {"destination": "/queue/full", "receipt": uid, "uid": uid},
                        uid.encode().ljust(BODY, b"."),
                    )
                    sent.append(uid)
                    outstanding.add(uid)
                    i += 1
                assert outstanding, "the disk never filled up"
                frame = producer.recv()
                if frame.command == "RECEIPT":
                    outstanding.remove(frame["receipt-id"])
                    receipted.append(frame["receipt-id"])
                else:
                    assert frame.command == "ERROR", frame
                    error = frame
            # ERROR, then the broker closes: no RECEIPT comes after it.
            with contextlib.suppress(ConnectionError):
                while True:
                    try:
                        late = producer.recv(2)
                    except EOFError:
                        break
                    assert late.command != "RECEIPT", f"RECEIPT after the ERROR: {late}"
        assert "could not store" in error["message"], error
        assert error.headers.get("receipt-id") in outstanding, error
        print(f"disk full after {len(receipted)} receipted SENDs of {len(sent)}: {error['message']}")
        assert len(receipted) > 50, "the disk filled up too early to show anything"

        # Every receipted message is on disk (the failed ones may still be pending a retry).
        on_disk = {h["uid"] for h in stored_headers(db, "full")}
        missing = [uid for uid in receipted if uid not in on_disk]
        assert not missing, f"RECEIPT for messages not on disk: {missing[:10]}"

        # Other connections keep working: a new client connects and subscribes (no receipt:
        # a receipt waits for the whole pending batch, which cannot commit while the disk is full).
        late_consumer = Peer(port)
        late_consumer.frame("SUBSCRIBE", {"destination": "/queue/other", "id": "o", "ack": "auto"})

        # The consumer that was there all along drains the full queue (acks without receipt,
        # for the same reason); its deletes free the pages the failed inserts need.
        got: list[str] = []
        while True:
            try:
                msg = consumer.message(timeout=2)
            except TimeoutError:
                break
            got.append(msg["uid"])
            consumer.frame("ACK", {"id": msg["ack"]})
        assert set(receipted) <= set(got), "a receipted message was never delivered"
        assert error["receipt-id"] not in got, "the message answered ERROR was delivered"
        assert set(got) <= set(sent)
        assert len(got) == len(set(got)), "a message was delivered twice"
        consumer.request("SEND", {"destination": "/queue/sync"}, b"")  # commits again: space is back

        others = [late_consumer.message(timeout=10)["n"] for _ in range(20)]
        assert others == [str(i) for i in range(20)]

        # The broker still stores and answers.
        with Peer(port) as fresh:
            fresh.request("SEND", {"destination": "/queue/after"}, b"small")
            assert fresh.count("after") == 1
            assert fresh.count("full") == 0
        consumer.close()
        late_consumer.close()
    finally:
        thread.stop()
    assert stored_headers(db, "full") == []


# --------------------------------------------------------------------------------------- paging
def test_paging_keeps_priority_order_with_nacks_and_new_sends(tmp_path: Path) -> None:
    rng = random.Random(7)
    db = tmp_path / "paging.db"
    thread = BrokerThread(
        lambda: SQLiteStore(str(db), flush_interval=0.01), config=BrokerConfig(window=50)
    ).start()
    try:
        port = thread.port
        ready: set[tuple[int, int]] = set()  # model of the ready messages: (-priority, n)
        n = 0

        def send(peer: Peer, receipt: bool) -> None:
            nonlocal n
            priority = rng.choice((0, 1, 4, 4, 4, 7, 9))
            headers = {"destination": "/queue/big", "priority": str(priority), "n": str(n)}
            if receipt:
                headers["receipt"] = f"s{n}"
            peer.frame("SEND", headers, b"body-%d" % n)
            ready.add((-priority, n))
            n += 1

        with Peer(port) as producer:
            for _ in range(2000):
                send(producer, receipt=False)
            assert producer.count("big") == 2000
        assert thread.call(lambda: len(thread.broker.queues)) == 0

        prefetch = 10
        consumer = Peer(port)
        consumer.request(
            "SUBSCRIBE",
            {"destination": "/queue/big", "id": "s", "ack": "client-individual", "prefetch": str(prefetch)},
        )
        inflight: dict[tuple[int, int], str] = {}  # key -> ack id, in delivery order
        nacked: set[int] = set()
        delivered = 0
        step = 0
        while ready or inflight:
            # The broker delivers min(ready) whenever the consumer has room; only the consumer's
            # own frames change `ready` or the room, so the next MESSAGE is predictable.
            while len(inflight) < prefetch and ready:
                msg = consumer.message(timeout=10)
                key = (-int(msg["priority"]), int(msg["n"]))
                expected = min(ready)
                assert key == expected, f"delivery {delivered}: got {key}, expected {expected}"
                assert msg.body == b"body-%d" % key[1]
                assert msg["redelivered"] == ("true" if key[1] in nacked else "false"), msg
                ready.remove(key)
                inflight[key] = msg["ack"]
                delivered += 1
            step += 1
            if step % 25 == 0 and n < 2600:  # new messages while draining (the consumer is full)
                for _ in range(rng.randint(1, 30)):
                    send(consumer, receipt=False)
            key = next(iter(inflight)) if rng.random() < 0.7 else rng.choice(list(inflight))
            ack_id = inflight.pop(key)
            if rng.random() < 0.1:
                consumer.frame("NACK", {"id": ack_id})
                nacked.add(key[1])
                ready.add(key)
            else:
                consumer.frame("ACK", {"id": ack_id})
        assert n > 2000 and nacked
        assert consumer.count("big") == 0
        consumer.close()
    finally:
        thread.stop()


def test_inactive_queues_cost_no_memory(tmp_path: Path) -> None:
    db = tmp_path / "many.db"
    with BrokerThread(lambda: SQLiteStore(str(db), flush_interval=0.01)).start() as thread:
        queues = 10_000
        with Peer(thread.port) as producer:
            for i in range(queues):
                producer.frame("SEND", {"destination": f"/queue/q{i}"}, b"%d" % i)
            assert producer.count(f"q{queues - 1}") == 1
        assert thread.call(lambda: len(thread.broker.queues)) == 0

        # A queue activated by a subscriber leaves memory again when it goes.
        with Peer(thread.port) as consumer:
            for i in (0, 4321, queues - 1):
                consumer.request("SUBSCRIBE", {"destination": f"/queue/q{i}", "id": f"s{i}", "ack": "client-individual"})
                msg = consumer.message()
                assert msg.body == b"%d" % i
                consumer.request("ACK", {"id": msg["ack"]})
                consumer.request("UNSUBSCRIBE", {"id": f"s{i}"})
            assert thread.call(lambda: len(thread.broker.queues)) == 0
            assert consumer.count("q4321") == 0
            assert consumer.count("q4322") == 1
        assert thread.call(lambda: len(thread.broker.queues)) == 0
    conn = sqlite3.connect(str(db))
    try:
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone() == (queues - 3,)
    finally:
        conn.close()
