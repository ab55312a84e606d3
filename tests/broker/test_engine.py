"""The engine on its own: frames in, frames out, no event loop, no socket, time given by the test."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stompmq.broker import Broker, BrokerConfig, ClientError
from stompmq.protocol import Frame
from stompmq.storage.memory import MemoryStore

from .fakes import DictStore, FakeOutbox, run_reads


def connect(broker: Broker, name: str = "s1", version: str = "1.2") -> tuple[object, FakeOutbox]:
    outbox = FakeOutbox()
    return broker.open_session(name, version, outbox), outbox


def frame(command: str, **headers: str) -> Frame:
    return Frame(command, {k.replace("_", "-"): v for k, v in headers.items()}, b"")


def send(broker: Broker, session: object, destination: str, body: bytes = b"x", **headers: str) -> None:
    broker.handle(session, Frame("SEND", {"destination": destination, **headers}, body))  # type: ignore[arg-type]


def test_the_engine_imports_no_trio() -> None:
    code = "import sys, stompmq.broker; sys.exit('trio' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_send_and_receive() -> None:
    broker = Broker(MemoryStore())
    broker.advance(0.0, 1_700_000_000.5)
    session, outbox = connect(broker)
    broker.handle(session, frame("SUBSCRIBE", id="s", destination="/queue/q"))  # type: ignore[arg-type]
    send(broker, session, "/queue/q", b"hello", colour="blue")
    (msg,) = outbox.take("MESSAGE")
    assert msg.body == b"hello"
    assert msg.headers["colour"] == "blue"
    assert msg.headers["timestamp"] == "1700000000500"  # the wall time the runtime gave
    assert msg.headers["subscription"] == "s"


def test_ack_timeout_redelivers_at_its_deadline_and_not_before() -> None:
    broker = Broker(MemoryStore())
    broker.advance(100.0, 0.0)
    a, out_a = connect(broker, "a")
    b, out_b = connect(broker, "b")
    broker.handle(a, frame("SUBSCRIBE", id="1", destination="/queue/q", ack="client-individual",
                           ack_timeout="30"))  # type: ignore[arg-type]
    send(broker, a, "/queue/q")
    assert len(out_a.take("MESSAGE")) == 1
    broker.handle(b, frame("SUBSCRIBE", id="1", destination="/queue/q", ack="client-individual"))  # type: ignore[arg-type]
    assert broker.next_deadline() == 130.0
    broker.advance(129.9, 0.0)
    broker.run_due()
    assert out_b.take("MESSAGE") == []
    broker.advance(130.0, 0.0)
    broker.run_due()
    (again,) = out_b.take("MESSAGE")
    assert again.headers["redelivered"] == "true"


def test_ack_cancels_the_deadline() -> None:
    broker = Broker(MemoryStore(), BrokerConfig(ack_timeout=3600))
    session, outbox = connect(broker)
    broker.handle(session, frame("SUBSCRIBE", id="1", destination="/queue/q", ack="client-individual"))  # type: ignore[arg-type]
    for _ in range(3):
        send(broker, session, "/queue/q")
    for msg in outbox.take("MESSAGE"):
        broker.handle(session, frame("ACK", id=msg.headers["ack"]))  # type: ignore[arg-type]
    assert len(broker.deadlines) == 0
    assert broker.next_deadline() == float("inf")


def test_closing_a_session_cancels_its_deadlines_and_requeues() -> None:
    broker = Broker(MemoryStore(), BrokerConfig(ack_timeout=60))
    session, _ = connect(broker, "a")
    broker.handle(session, frame("SUBSCRIBE", id="1", destination="/queue/q", ack="client"))  # type: ignore[arg-type]
    send(broker, session, "/queue/q")
    broker.close_session(session)  # type: ignore[arg-type]
    assert len(broker.deadlines) == 0
    assert broker.queues["q"].size == 1


def test_a_hundred_thousand_acked_deliveries_leave_no_timers_behind() -> None:
    """100,000 deliveries with ack-timeout:3600, each acked: what remains is O(unacked) = 0, and
    the cancelled timers were compacted away (50 times the bound below without compaction).
    (The RSS figure of a million is in benchmarks/memory.py --scenario ack-timeouts.)"""
    broker = Broker(MemoryStore())
    session, outbox = connect(broker)
    broker.handle(session, frame("SUBSCRIBE", id="1", destination="/queue/q", ack="client-individual",
                                 ack_timeout="3600", prefetch="1000"))  # type: ignore[arg-type]
    for _ in range(100):
        for _ in range(1000):
            send(broker, session, "/queue/q")
        for msg in outbox.take("MESSAGE"):
            broker.handle(session, frame("ACK", id=msg.headers["ack"]))  # type: ignore[arg-type]
    assert len(broker.deadlines) == 0
    assert len(broker.deadlines._heap) < 2048


def test_pages_come_from_the_store_in_order() -> None:
    store = DictStore()
    broker = Broker(store, BrokerConfig(window=4))
    session, outbox = connect(broker)
    for i in range(10):
        send(broker, session, "/queue/q", str(i).encode(), priority="9" if i == 7 else "4")
    broker.handle(session, frame("SUBSCRIBE", id="1", destination="/queue/q", ack="client-individual",
                                 prefetch="100"))  # type: ignore[arg-type]
    assert outbox.take("MESSAGE") == []  # the queue is in the store only: a page is needed
    while run_reads(broker):
        pass
    bodies = [m.body for m in outbox.take("MESSAGE")]
    assert bodies == [b"7", b"0", b"1", b"2", b"3", b"4", b"5", b"6", b"8", b"9"]


def test_control_count_is_answered_after_the_read_in_receipt_order() -> None:
    store = DictStore()
    broker = Broker(store)
    session, outbox = connect(broker)
    send(broker, session, "/queue/q")
    send(broker, session, "/queue/q")
    send(broker, session, "/control/count-msgs/queue/q", receipt="count")
    send(broker, session, "/queue/q", receipt="after")
    assert outbox.take("RECEIPT") == []  # "after" waits behind the unanswered count
    run_reads(broker)
    count, after = outbox.take("RECEIPT")
    # the count is read when the runtime performs it, so it sees the SEND that followed it
    assert (count.headers["receipt-id"], count.headers["num-messages"]) == ("count", "3")
    assert after.headers["receipt-id"] == "after"


def test_a_bad_frame_is_a_client_error_and_changes_nothing() -> None:
    broker = Broker(MemoryStore())
    session, _ = connect(broker)
    with pytest.raises(ClientError, match="priority"):
        send(broker, session, "/queue/q", priority="high")
    assert "q" not in broker.queues


def test_auto_ack_deliveries_settle_when_written_and_come_back_when_not() -> None:
    """An auto-ack delivery is deleted once its bytes reach the socket; what is still in the
    outbox when the session closes goes back to the queue, in order, marked redelivered."""
    store = DictStore()
    broker = Broker(store)
    a, out_a = connect(broker, "a")
    broker.handle(a, frame("SUBSCRIBE", id="1", destination="/queue/q"))  # type: ignore[arg-type]
    run_reads(broker)  # the (empty) first page
    ends = []
    for i in range(5):
        send(broker, a, "/queue/q", str(i).encode())
        ends.append(out_a.queued)
    assert [m.body for m in out_a.take("MESSAGE")] == [b"0", b"1", b"2", b"3", b"4"]
    broker.written(a, ends[1] + 3)  # two frames and the start of the third reached the socket
    assert sorted(store.rows) == [3, 4, 5]
    assert broker.queues["q"].inflight.keys() == {3, 4, 5}
    broker.close_session(a)  # type: ignore[arg-type]
    assert "q" not in broker.queues  # nobody left: the requeued messages wait in the store
    b, out_b = connect(broker, "b")
    broker.handle(b, frame("SUBSCRIBE", id="1", destination="/queue/q"))  # type: ignore[arg-type]
    while run_reads(broker):
        pass
    again = out_b.take("MESSAGE")
    assert [m.body for m in again] == [b"2", b"3", b"4"]
    assert {m.headers["redelivered"] for m in again} == {"true"}


def test_auto_ack_deliveries_in_the_outbox_go_to_the_next_subscriber_with_a_memory_store() -> None:
    broker = Broker(MemoryStore())
    a, out_a = connect(broker, "a")
    b, out_b = connect(broker, "b")
    broker.handle(a, frame("SUBSCRIBE", id="1", destination="/queue/q"))  # type: ignore[arg-type]
    for i in range(3):
        send(broker, a, "/queue/q", str(i).encode())
    broker.handle(b, frame("SUBSCRIBE", id="1", destination="/queue/q"))  # type: ignore[arg-type]
    broker.handle(b, frame("UNSUBSCRIBE", id="1"))  # type: ignore[arg-type]
    broker.handle(a, frame("UNSUBSCRIBE", id="1"))  # type: ignore[arg-type]
    assert broker.queues["q"].inflight  # unsubscribed, but the frames are still in a's outbox
    broker.handle(b, frame("SUBSCRIBE", id="2", destination="/queue/q"))  # type: ignore[arg-type]
    broker.close_session(a)  # type: ignore[arg-type]
    assert [m.body for m in out_b.take("MESSAGE")] == [b"0", b"1", b"2"]
    assert [msg.seq for _, _, msg in b.unsent] == [1, 2, 3]  # type: ignore[attr-defined]  # now b's


def test_an_exchange_subscription_takes_its_unsent_deliveries_with_its_queue() -> None:
    store = DictStore()
    broker = Broker(store)
    a, out_a = connect(broker, "a")
    send(broker, a, "/control/declare/exchange/x", type="consistent-hash")
    broker.handle(a, frame("SUBSCRIBE", id="1", destination="/exchange/x/1"))  # type: ignore[arg-type]
    run_reads(broker)
    send(broker, a, "/exchange/x/k")
    assert len(out_a.take("MESSAGE")) == 1
    broker.handle(a, frame("UNSUBSCRIBE", id="1"))  # type: ignore[arg-type]
    assert not a.unsent  # type: ignore[attr-defined]
    broker.close_session(a)  # type: ignore[arg-type]
    assert store.rows == {} and broker.queues == {}


def test_a_transactions_send_through_a_consistent_hash_exchange_reaches_its_bound_stream() -> None:
    """The exchange picks at the COMMIT's check (its plan); a stream it picks gets the entry,
    not a queue named after the stream."""
    broker = Broker(MemoryStore())
    session, outbox = connect(broker)
    send(broker, session, "/control/declare/exchange/x", type="consistent-hash")
    send(broker, session, "/control/bind/exchange/x", queue="/stream/log")
    broker.handle(session, frame("BEGIN", transaction="t"))  # type: ignore[arg-type]
    send(broker, session, "/exchange/x/k", b"in-tx", transaction="t")
    broker.handle(session, frame("COMMIT", transaction="t"))  # type: ignore[arg-type]
    broker.handle(session, frame("SUBSCRIBE", id="r", destination="/stream/log", x_stream_offset="first"))  # type: ignore[arg-type]
    assert [m.body for m in outbox.take("MESSAGE")] == [b"in-tx"]
    assert "/stream/log" not in broker.queue_stats


def test_an_idempotent_producers_repeat_is_not_appended_and_its_receipt_says_so() -> None:
    broker = Broker(MemoryStore())
    session, outbox = connect(broker)
    for seq, receipt in (("1", "a"), ("1", "b"), ("0", "c"), ("2", "d")):
        send(broker, session, "/stream/s", b"e" + seq.encode(),
             **{"x-producer-id": "p", "x-producer-seq": seq, "receipt": receipt})
    receipts = {f.headers["receipt-id"]: f.headers.get("duplicate") for f in outbox.take("RECEIPT")}
    assert receipts == {"a": None, "b": "true", "c": "true", "d": None}
    broker.handle(session, frame("SUBSCRIBE", id="r", destination="/stream/s", x_stream_offset="first"))  # type: ignore[arg-type]
    messages = outbox.take("MESSAGE")
    assert [m.body for m in messages] == [b"e1", b"e2"]
    assert not any("x-producer-id" in m.headers or "x-producer-seq" in m.headers for m in messages)  # not stored
