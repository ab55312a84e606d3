"""The ACK/NACK frames of one socket read are applied in one engine call
(``Broker.handle_frames``), with their store deletes in one call and each subscription pumped
once.  What a client sees must not change: every frame of a run acts as it would alone, the
RECEIPTs come in order, and a bad frame fails the connection with its own receipt after the
frames before it took effect.  Each run below is sent in one write (the broker reads it in one
``receive_some`` when it can, but the outcome must not depend on how the bytes are cut).
Real broker, real sockets, every store; restarts check what reached the store.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support.broker_thread import restarting
from ..support.rawclient import RawFrame
from ..support.stompclient import Client
from ..support.stores import STORES


def frame_bytes(command: str, headers: dict[str, str]) -> bytes:
    return (command + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items()) + "\n\0").encode()


def acks(c: Client, msgs: list[RawFrame], command: str = "ACK", receipts: str | None = None, **extra: str) -> bytes:
    """One ACK (or NACK) frame per message, in the session's version; ``receipts``: a prefix
    for a receipt on each (``prefix0``, ``prefix1``, ...)."""
    data = b""
    for i, msg in enumerate(msgs):
        headers = {**c.ack_headers(msg), **extra}
        if receipts is not None:
            headers["receipt"] = f"{receipts}{i}"
        data += frame_bytes(command, headers)
    return data


def fill(c: Client, queue: str, n: int) -> None:
    for i in range(n):
        c.send_to(queue, f"m{i}", receipt=i == n - 1)


def remaining(port: int, queue: str) -> list[tuple[bytes, str]]:
    """What a fresh client-individual subscriber gets, (body, redelivered), until it is quiet."""
    with Client(port) as c:
        c.subscribe(queue, ack="client-individual")
        got = []
        while True:
            try:
                msg = c.message(timeout=0.5)
            except TimeoutError:
                return got
            got.append((msg.body, msg["redelivered"]))
            c.ack(msg, receipt=False)


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_a_run_of_acks_settles_each_frees_room_and_answers_in_order(broker, version):
    with Client(broker.port, version) as c:
        c.subscribe("/queue/run", ack="client-individual", prefetch="5")
        fill(c, "/queue/run", 10)
        first = c.messages(5)
        c.send(acks(c, first, receipts="r"))
        frames = [c.next() for _ in range(10)]
        assert [f["receipt-id"] for f in frames if f.command == "RECEIPT"] == [f"r{i}" for i in range(5)]
        second = [f for f in frames if f.command == "MESSAGE"]
        assert [m.body for m in first + second] == [f"m{i}".encode() for i in range(10)]
        c.send(acks(c, second))
        c.expect_nothing()
        c.disconnect()
    assert remaining(broker.port, "/queue/run") == []


def test_a_cumulative_ack_in_a_run(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/cumulative", ack="client", prefetch="10")
        fill(c, "/queue/cumulative", 6)
        msgs = c.messages(6)
        c.send(acks(c, [msgs[1], msgs[3]], receipts="r"))  # m0-m1, then m2-m3
        assert [c.next()["receipt-id"] for _ in range(2)] == ["r0", "r1"]
        c.disconnect()
    assert remaining(broker.port, "/queue/cumulative") == [(b"m4", "true"), (b"m5", "true")]


def test_nacks_and_transactional_acks_among_acks_keep_their_meaning_and_order(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/mixed", ack="client-individual", prefetch="10")
        fill(c, "/queue/mixed", 6)
        m = c.messages(6)
        c.request("BEGIN", {"transaction": "t"})
        c.send(
            acks(c, [m[0]], receipts="ack")
            + acks(c, [m[1]], "NACK", receipts="discard", requeue="false")
            + acks(c, [m[2]], receipts="held", transaction="t")
            + acks(c, [m[3]], "NACK", receipts="requeue")
            + acks(c, [m[4]], receipts="last")
        )
        receipts = [c.wait_receipt(r)["receipt-id"] for r in ("ack0", "discard0", "requeue0", "last0")]
        assert receipts == ["ack0", "discard0", "requeue0", "last0"]
        again = c.message()  # the NACKed m3 comes back to its only subscriber
        assert (again.body, again["redelivered"]) == (b"m3", "true")
        assert c.no_frame(0.2)  # the transactional ACK's RECEIPT waits for the transaction's end
        c.frame("ABORT", {"transaction": "t", "receipt": "abort"})
        assert [c.next()["receipt-id"] for _ in range(2)] == ["held0", "abort"]
        c.ack(again)
        c.disconnect()
    # m0, m4 acked, m1 discarded, m3 acked after its redelivery; the aborted ACK left m2 unacked
    assert remaining(broker.port, "/queue/mixed") == [(b"m2", "true"), (b"m5", "true")]


# (version, the bad frame, the ERROR's message): each follows a good ACK in the same write
BAD_IN_A_RUN = [
    ("1.2", {"id": "nope"}, "no unacked message with ack id 'nope'"),
    ("1.2", {"message-id": "1"}, "ACK/NACK without id header"),
    ("1.2", {"transaction": "nope", "id": "ACK_OF_M1"}, "no transaction 'nope' in progress"),
    ("1.1", {"subscription": "s"}, "ACK/NACK without message-id header"),
    ("1.1", {"message-id": "999", "subscription": "s"}, "no unacked message with ack id '999'"),
    ("1.0", {}, "ACK/NACK without message-id header"),
]


@pytest.mark.parametrize("version, bad, error", BAD_IN_A_RUN, ids=[e for _, _, e in BAD_IN_A_RUN])
def test_a_bad_ack_in_a_run_fails_with_its_receipt_after_the_acks_before_it(broker, version, bad, error):
    with Client(broker.port, version) as c:
        c.subscribe("/queue/bad", "s", ack="client-individual")
        fill(c, "/queue/bad", 3)
        m = c.messages(3)
        if bad.get("id") == "ACK_OF_M1":
            bad = {**bad, "id": m[1]["ack"]}
        c.send(acks(c, [m[0]]) + frame_bytes("ACK", {**bad, "receipt": "bad"}) + acks(c, [m[2]]))
        reply = c.expect_error()
        assert (reply["message"], reply.headers.get("receipt-id")) == (error, "bad")
    # m0 was acked before the bad frame; m2's ACK came after it and was never applied
    assert remaining(broker.port, "/queue/bad") == [(b"m1", "true"), (b"m2", "true")]


@pytest.mark.parametrize(
    "version, headers, error",
    [
        ("1.2", {"id": "ID", "requeue": "maybe"}, "requeue must be true or false, not 'maybe'"),
        ("1.2", {"id": "nope"}, "no unacked message with ack id 'nope'"),
    ],
)
def test_a_bad_nack_in_a_run(broker, version, headers, error):
    with Client(broker.port, version) as c:
        c.subscribe("/queue/badnack", "s", ack="client-individual")
        fill(c, "/queue/badnack", 2)
        m = c.messages(2)
        named = {k: (m[1]["ack" if version == "1.2" else "message-id"] if v == "ID" else v) for k, v in headers.items()}
        c.send(acks(c, [m[0]]) + frame_bytes("NACK", {**named, "receipt": "bad"}))
        reply = c.expect_error()
        assert (reply["message"], reply.headers.get("receipt-id")) == (error, "bad")
    assert remaining(broker.port, "/queue/badnack") == [(b"m1", "true")]


def test_a_run_of_acks_split_across_reads_acts_the_same(broker):
    """The same run sent a few bytes at a time: the broker sees it in many reads."""
    with Client(broker.port) as c:
        c.subscribe("/queue/split", ack="client-individual", prefetch="20")
        fill(c, "/queue/split", 20)
        msgs = c.messages(20)
        data = acks(c, msgs[:19], receipts="r")
        for i in range(0, len(data), 7):
            c.send(data[i : i + 7])
        assert [c.next()["receipt-id"] for _ in range(19)] == [f"r{i}" for i in range(19)]
        c.disconnect()
    assert remaining(broker.port, "/queue/split") == [(b"m19", "true")]


@pytest.mark.parametrize("store_kind", [s for s in STORES if s != "memory"])
def test_acked_in_a_run_stays_acked_and_unacked_comes_back_after_a_restart(store_kind: str, tmp_path: Path):
    """The run's deletes reach the store (a receipted ACK is committed before its RECEIPT), and
    what was receipted and not acked is still there after a restart."""
    with restarting(store_kind, tmp_path) as start:
        broker = start()
        with Client(broker.port) as c:
            c.subscribe("/queue/durable", ack="client-individual", prefetch="100")
            for i in range(50):
                c.send_to("/queue/durable", f"m{i}")  # receipted: on disk
            msgs = c.messages(50)
            c.send(acks(c, msgs[:40:2], receipts="r"))  # every other one of the first 40
            for i in range(20):
                c.wait_receipt(f"r{i}")
        broker = start()
        got = remaining(broker.port, "/queue/durable")
    expected = [f"m{i}".encode() for i in range(1, 40, 2)] + [f"m{i}".encode() for i in range(40, 50)]
    assert [body for body, _ in got] == expected
