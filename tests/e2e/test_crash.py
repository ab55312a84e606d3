"""Durability end to end: the broker in a subprocess, killed with SIGKILL or stopped by a signal.

The contract under test:

* a RECEIPT for a SEND to a queue is sent only after the message is committed; an ACK with a
  receipt is committed before its RECEIPT;
* SENDs without receipt are write-behind: committed within ``--flush-interval``, and a message
  acked before its flush never touches the disk;
* SIGTERM/SIGINT commit everything before the exit (code 0);
* at start every delivered-but-unacked message is ready again, marked redelivered.

What is on disk is read with a separate ``sqlite3`` connection (WAL is readable by another
connection), never through the broker.  The kill moments are random; the seed is printed and
can be replayed with ``STOMPMQ_CRASH_SEED=<seed>``.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..support.broker_process import BrokerProcess, Peer
from ..support.on_disk import stored, stored_headers
from ..support.rawclient import RawClient
from ..support.waiting import pace, wait_until

#: Errors a client sees when the broker process dies under it.
GONE = (EOFError, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


# ------------------------------------------------------------------------------------- helpers
def queue_rows(db: Path) -> set[str]:
    """Names in the ``queues`` table: a queue gets its row with the first message written to it."""
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        return {name for (name,) in conn.execute("SELECT name FROM queues")}
    finally:
        conn.close()


def first_page_loaded(peer: Peer, queue: str) -> None:
    """Return once the page load that a first SUBSCRIBE starts has been merged.

    While that load runs, a new message is left in the store and read back with the next page
    (so it cannot overtake older stored ones); that read commits it early.  A write-behind test
    waits for the load first: the store runs reads in order, so a /control count asked after
    the SUBSCRIBE's RECEIPT is answered after the page, and the page is merged by then.
    """
    assert peer.count(queue) == 0


def drain(peer: Peer, queue: str, sub_id: str = "drain") -> list:
    """Count ``queue`` through /control, consume exactly that many with auto ack, check empty."""
    expected = peer.count(queue)
    peer.request("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": sub_id, "ack": "auto"})
    messages = [peer.message(timeout=10) for _ in range(expected)]
    assert peer.count(queue) == 0
    assert peer.no_frame(0.05)
    return messages


# ------------------------------------------------------------------------------ kill -9 rounds
QUEUE = "crash"
ROUNDS = 8
SEND_WINDOW = 50  # receipted SENDs outstanding per producer
PREFETCH = 20
HOLD = 10  # the consumer keeps this many deliveries unacked, so a crash always finds some
#: Every KEEP-th delivery is never acked in its round: a later receipted ACK proves its delivery
#: committed, so it must come back redelivered. (The HOLD window alone does not guarantee one:
#: on a loaded machine every ACK after the last receipt seen may commit while the RECEIPTs, already
#: sent, are discarded with the connection's reset.) Few enough to stay within PREFETCH.
KEEP = 150


@dataclass
class Round:
    number: int
    sent: list[str] = field(default_factory=list)
    receipted: set[str] = field(default_factory=set)
    # Every MESSAGE in arrival order: (uid, redelivered header, redelivery-count, body ok)
    received: list[tuple[str, str, int, bool]] = field(default_factory=list)
    ack_sent: set[str] = field(default_factory=set)
    ack_receipted: set[str] = field(default_factory=set)
    # received[:durable] are known to have their delivery committed: an ACK with a receipt sent
    # after they arrived was answered, and that RECEIPT covers everything buffered before it.
    durable: int = 0
    problems: list[str] = field(default_factory=list)


def body_of(uid: str) -> bytes:
    return f"{uid}:".encode() + uid.encode() * 20


def produce(port: int, rnd: Round, stop: threading.Event) -> None:
    """Receipted SENDs with up to SEND_WINDOW outstanding, until the broker dies."""
    try:
        peer = RawClient(port)
        peer.connect()
        outstanding = 0
        i = 0
        while not stop.is_set():
            while outstanding < SEND_WINDOW:
                uid = f"r{rnd.number}-{i}"
                i += 1
                rnd.sent.append(uid)
                peer.frame("SEND", {"destination": f"/queue/{QUEUE}", "receipt": uid, "uid": uid}, body_of(uid))
                outstanding += 1
            frame = peer.recv()
            if frame.command != "RECEIPT":
                rnd.problems.append(f"producer got {frame}")
                return
            rnd.receipted.add(frame["receipt-id"])
            outstanding -= 1
    except GONE:
        pass
    except Exception as e:  # a timeout while the broker lives, a refused connect ...
        rnd.problems.append(f"producer: {e!r}")


def consume(port: int, rnd: Round, stop: threading.Event) -> None:
    """client-individual, every ACK with a receipt, HOLD deliveries (and every KEEP-th) kept unacked;
    until the broker dies."""
    try:
        peer = RawClient(port)
        peer.connect()
        peer.frame(
            "SUBSCRIBE",
            {"destination": f"/queue/{QUEUE}", "id": "c", "ack": "client-individual", "prefetch": str(PREFETCH)},
        )
        held: list[tuple[str, str]] = []  # (uid, ack id), oldest first
        acks: dict[str, tuple[str, int]] = {}  # receipt id -> (uid, len(received) when sent)
        while not stop.is_set():
            frame = peer.recv()
            if frame.command == "MESSAGE":
                uid = frame["uid"]
                rnd.received.append(
                    (uid, frame["redelivered"], int(frame["redelivery-count"]), frame.body == body_of(uid))
                )
                if len(rnd.received) % KEEP:
                    held.append((uid, frame["ack"]))
                while len(held) > HOLD:
                    uid, ack_id = held.pop(0)
                    rid = f"ack-{rnd.number}-{len(rnd.received)}-{uid}"
                    acks[rid] = (uid, len(rnd.received))
                    rnd.ack_sent.add(uid)
                    peer.frame("ACK", {"id": ack_id, "receipt": rid})
            elif frame.command == "RECEIPT":
                uid, upto = acks.pop(frame["receipt-id"])
                rnd.ack_receipted.add(uid)
                rnd.durable = max(rnd.durable, upto)
            else:
                rnd.problems.append(f"consumer got {frame}")
                return
    except GONE:
        pass
    except Exception as e:
        rnd.problems.append(f"consumer: {e!r}")


def test_kill9_rounds_lose_no_receipted_message(tmp_path: Path) -> None:
    seed = int(os.environ.get("STOMPMQ_CRASH_SEED") or random.SystemRandom().randrange(2**32))
    print(f"kill -9 test seed: {seed} (replay with STOMPMQ_CRASH_SEED={seed})")
    rng = random.Random(seed)
    db = tmp_path / "crash.db"
    rounds: list[Round] = []
    for number in range(ROUNDS):
        rnd = Round(number)
        rounds.append(rnd)
        stop = threading.Event()
        with BrokerProcess(db) as broker:
            broker.start()
            threads = [
                threading.Thread(target=fn, args=(broker.port, rnd, stop), daemon=True)
                for fn in (produce, consume)
            ]
            for t in threads:
                t.start()
            pace(rng.uniform(0.1, 0.8))  # the seeded moment of the kill
            assert broker.kill9() == -signal.SIGKILL, broker.stderr
            for t in threads:
                t.join(10)
            stop.set()
            assert not any(t.is_alive() for t in threads), f"a client hung (seed {seed})"
            assert "Traceback" not in broker.stderr, broker.stderr
        assert not rnd.problems, f"round {number} (seed {seed}): {rnd.problems}"

    # Restart once more and take everything that is left.
    with BrokerProcess(db) as broker:
        broker.start()
        with Peer(broker.port) as peer:
            final = drain(peer, QUEUE)
        assert broker.terminate() == 0, broker.stderr
    left = [(m["uid"], m["redelivered"], int(m["redelivery-count"]), m.body == body_of(m["uid"])) for m in final]

    for r in rounds:
        print(
            f"round {r.number}: sent {len(r.sent)} receipted {len(r.receipted)} delivered"
            f" {len(r.received)} ack receipted {len(r.ack_receipted)} durable deliveries {r.durable}"
        )
    print(f"left after the last crash: {len(left)}")
    where = f"(seed {seed})"
    sent = {uid for r in rounds for uid in r.sent}
    receipted = {uid for r in rounds for uid in r.receipted}
    ack_sent = {uid for r in rounds for uid in r.ack_sent}
    left_uids = [uid for uid, *_ in left]
    assert receipted and any(r.ack_receipted for r in rounds), f"nothing happened {where}"
    assert len(left_uids) == len(set(left_uids)), f"a message is stored twice {where}"
    assert set(left_uids) <= sent, f"unknown messages came back {where}"

    # Every receipted SEND was delivered and acked at some point, or is still there.
    lost = receipted - ack_sent - set(left_uids)
    assert not lost, f"{len(lost)} receipted messages lost, e.g. {sorted(lost)[:5]} {where}"

    # Deliveries of each round, then the final drain, in order: what comes back when.
    deliveries = [r.received for r in rounds] + [left]
    checked_redeliveries = 0
    for index, rnd in enumerate(rounds):
        later = [d for batch in deliveries[index + 1 :] for d in batch]
        later_uids = {d[0] for d in later}
        in_round = [uid for uid, *_ in rnd.received]
        assert len(in_round) == len(set(in_round)), f"round {index}: delivered twice without a crash {where}"
        assert all(ok for *_, ok in rnd.received), f"round {index}: a body was damaged {where}"
        # An ACK that got its RECEIPT is on disk: that message never comes back.
        back = rnd.ack_receipted & later_uids
        assert not back, f"round {index}: acked with receipt but redelivered: {sorted(back)[:5]} {where}"
        # A delivery known to be committed, and not acked with a receipt, comes back redelivered.
        durable = {uid for uid, *_ in rnd.received[: rnd.durable]} - rnd.ack_receipted
        for uid, redelivered, count, _ in later:
            if uid in durable:
                checked_redeliveries += 1
                assert redelivered == "true" and count >= 1, (
                    f"round {index}: {uid} was delivered before the crash but came back with"
                    f" redelivered:{redelivered} redelivery-count:{count} {where}"
                )
    print(f"redeliveries checked: {checked_redeliveries}")
    assert checked_redeliveries, f"no delivered-unacked message was ever checked {where}"


# ------------------------------------------------------------------------------------- signals
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_commits_everything_before_exit(tmp_path: Path, sig: int) -> None:
    db = tmp_path / "signal.db"
    receipted, unreceipted, acked, kept = 10, 2000, 30, 20
    # A flush interval far longer than the test: only the shutdown can write the SENDs below.
    with BrokerProcess(db, "--flush-interval", "600") as broker:
        broker.start()
        with Peer(broker.port) as producer:
            for i in range(receipted):
                producer.request("SEND", {"destination": "/queue/sig", "n": f"r{i}"}, b"with receipt")
            for i in range(acked + kept):
                producer.request("SEND", {"destination": "/queue/sig-acked", "n": str(i)}, b"to ack")

        consumer = Peer(broker.port)
        consumer.request(
            "SUBSCRIBE",
            {"destination": "/queue/sig-acked", "id": "s", "ack": "client-individual", "prefetch": "100"},
        )
        messages = [consumer.message() for _ in range(acked + kept)]
        for msg in messages[:acked]:
            consumer.frame("ACK", {"id": msg["ack"]})  # acks without receipt: write-behind too
        consumer.sync_without_commit()  # the ACKs were handled; the others go back at the close

        # Sent last: a store read (a page of a queue) would commit everything buffered before it.
        producer = Peer(broker.port)
        for i in range(unreceipted):
            producer.frame("SEND", {"destination": "/queue/sig", "n": f"w{i}"}, b"write-behind %d" % i)
        producer.sync_without_commit()  # every SEND above was handled, nothing asked for a commit

        # Precondition: the write-behind SENDs are not on disk yet, so the signal must write them.
        assert len(stored(db, "sig")) == receipted
        code = broker.terminate(sig)
        assert code == 0, broker.stderr
        assert "Traceback" not in broker.stderr, broker.stderr

    on_disk = stored(db, "sig")
    assert sorted(h["n"] for h, _, _ in on_disk) == sorted(
        [f"r{i}" for i in range(receipted)] + [f"w{i}" for i in range(unreceipted)]
    )
    left = stored(db, "sig-acked")
    assert sorted(int(h["n"]) for h, _, _ in left) == list(range(acked, acked + kept))
    assert all(delivered == 0 and redeliveries == 1 for _, delivered, redeliveries in left)

    with BrokerProcess(db) as broker:
        broker.start()
        with Peer(broker.port) as peer:
            assert peer.count("sig") == receipted + unreceipted
            got = drain(peer, "sig", "a")
            assert [m["n"] for m in got] == [f"r{i}" for i in range(receipted)] + [
                f"w{i}" for i in range(unreceipted)
            ]
            assert all(m.body == b"write-behind %d" % i for i, m in enumerate(got[receipted:]))
            back = drain(peer, "sig-acked", "b")
            assert [int(m["n"]) for m in back] == list(range(acked, acked + kept))
            assert all(m["redelivered"] == "true" for m in back)
        assert broker.terminate(sig) == 0, broker.stderr


# -------------------------------------------------------------------------------- write-behind
def test_write_behind_acked_before_flush_never_touches_disk(tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    with BrokerProcess(db) as broker:  # default --flush-interval (50 ms)
        broker.start()
        consumer = Peer(broker.port)
        consumer.request("SUBSCRIBE", {"destination": "/queue/wb-auto", "id": "a", "ack": "auto"})
        first_page_loaded(consumer, "wb-auto")
        producer = Peer(broker.port)
        producer.frame("SEND", {"destination": "/queue/wb-auto"}, b"acked at once")
        assert consumer.message().body == b"acked at once"
        # Nobody listens on this one: it is written within the flush interval, with no receipt
        # and no shutdown to force it.
        producer.frame("SEND", {"destination": "/queue/wb-parked", "uid": "p"}, b"parked")
        wait_until(lambda: len(stored(db, "wb-parked")) == 1, "the write-behind message on disk", 10)
        assert stored(db, "wb-parked")[0][0] == {"uid": "p", "amq-msg-type": "text"}  # no content-length
        assert broker.terminate() == 0, broker.stderr
    # A queue's row is written with its first message and never deleted: no row, no write ever.
    assert "wb-auto" not in queue_rows(db)
    assert stored(db, "wb-auto") == []
    assert len(stored(db, "wb-parked")) == 1


def test_write_behind_client_ack_before_flush_never_touches_disk(tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    with BrokerProcess(db, "--flush-interval", "600") as broker:
        broker.start()
        consumer = Peer(broker.port)
        consumer.request("SUBSCRIBE", {"destination": "/queue/wb-acked", "id": "c", "ack": "client-individual"})
        first_page_loaded(consumer, "wb-acked")
        producer = Peer(broker.port)
        producer.frame("SEND", {"destination": "/queue/wb-acked"}, b"acked before the flush")
        producer.frame("SEND", {"destination": "/queue/wb-kept"}, b"kept")
        producer.sync_without_commit()
        msg = consumer.message()
        assert msg.body == b"acked before the flush"
        consumer.frame("ACK", {"id": msg["ack"]})
        consumer.sync_without_commit()
        assert stored(db, "wb-kept") == []  # precondition: nothing was flushed yet
        assert broker.terminate() == 0, broker.stderr
    assert "wb-acked" not in queue_rows(db)
    assert stored_headers(db, "wb-kept") == [{"amq-msg-type": "text"}]  # sent without content-length


# ---------------------------------------------------------------------------- restart recovery
def test_delivered_unacked_message_comes_back_redelivered_after_kill9(tmp_path: Path) -> None:
    db = tmp_path / "recover.db"
    with BrokerProcess(db) as broker:
        broker.start()
        with Peer(broker.port) as producer:
            producer.request("SEND", {"destination": "/queue/rec", "uid": "m1"}, b"payload")
        consumer = Peer(broker.port)
        consumer.request("SUBSCRIBE", {"destination": "/queue/rec", "id": "c", "ack": "client-individual"})
        msg = consumer.message()
        assert msg["uid"] == "m1" and msg["redelivered"] == "false"
        # The delivered mark is write-behind: wait until it is on disk (no receipt asked for it).
        wait_until(lambda: [d for _, d, _ in stored(db, "rec")] == [1], "the delivered mark on disk", 10)
        assert broker.kill9() == -signal.SIGKILL
        consumer.close()

    with BrokerProcess(db) as broker:
        broker.start()
        consumer = Peer(broker.port)
        consumer.request("SUBSCRIBE", {"destination": "/queue/rec", "id": "c", "ack": "client-individual"})
        msg = consumer.message()
        assert msg["uid"] == "m1" and msg.body == b"payload"
        assert msg["redelivered"] == "true" and int(msg["redelivery-count"]) >= 1, msg
        consumer.request("ACK", {"id": msg["ack"]})  # committed before its RECEIPT
        assert broker.kill9() == -signal.SIGKILL
        consumer.close()

    assert stored(db, "rec") == []
    with BrokerProcess(db) as broker:
        broker.start()
        with Peer(broker.port) as peer:
            assert peer.count("rec") == 0
        assert broker.terminate() == 0, broker.stderr
