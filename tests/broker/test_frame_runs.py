"""``Broker.handle_frames``: the frames of one socket read in one call, with the same effects,
in the same order, as ``Broker.handle`` applying them one by one."""

from __future__ import annotations

import pytest

from stompmq.broker import Broker, BrokerConfig, ClientError
from stompmq.broker.session import Session
from stompmq.protocol import Frame
from stompmq.storage.memory import MemoryStore

from .fakes import DictStore, FakeOutbox, run_reads


def frame(command: str, body: bytes = b"", **headers: str) -> Frame:
    return Frame(command, {k.replace("_", "-"): v for k, v in headers.items()}, body)


def seen(outbox: FakeOutbox) -> list[tuple[str, str]]:
    """What the session was sent: (command, its body or receipt id), in order."""
    return [
        (f.command, f.body.decode() if f.command == "MESSAGE" else f.headers.get("receipt-id", ""))
        for f in outbox.take()
    ]


def mixed_read() -> list[Frame]:
    """SENDs (two with receipts), a plain ACK run, a NACK, a transaction, an UNSUBSCRIBE."""
    return [
        frame("SEND", b"1", destination="/queue/q"),
        frame("SEND", b"2", destination="/queue/q", receipt="r-send"),
        frame("ACK", id="1"),
        frame("ACK", id="2", receipt="r-ack"),
        frame("SEND", b"3", destination="/queue/q"),
        frame("NACK", id="3", receipt="r-nack"),
        frame("BEGIN", transaction="t"),
        frame("SEND", b"4", destination="/queue/q", transaction="t", receipt="r-held"),
        frame("COMMIT", transaction="t", receipt="r-commit"),
        frame("SEND", b"5", destination="/queue/other", priority="9", receipt="r-other"),
        frame("UNSUBSCRIBE", id="s", receipt="r-unsub"),
    ]


def consumer(store_factory: type = MemoryStore) -> tuple[Broker, Session, FakeOutbox]:
    broker = Broker(store_factory())
    outbox = FakeOutbox()
    session = broker.open_session("s", "1.2", outbox)
    broker.handle(session, frame("SUBSCRIBE", id="s", destination="/queue/q", ack="client-individual"))
    run_reads(broker)  # a durable store's queue starts with a page read
    return broker, session, outbox


def test_a_read_in_one_call_does_what_its_frames_do_one_by_one() -> None:
    outcomes = []
    for batched in (True, False):
        broker, session, outbox = consumer()
        if batched:
            broker.handle_frames(session, mixed_read())
        else:
            for one in mixed_read():
                broker.handle(session, one)
        outcomes.append((seen(outbox), {name: stats.published for name, stats in broker.queue_stats.items()}))
    assert outcomes[0] == outcomes[1]
    sent, published = outcomes[0]
    assert [r for c, r in sent if c == "RECEIPT"] == [
        "r-send", "r-ack", "r-nack", "r-held", "r-commit", "r-other", "r-unsub"
    ]
    assert published == {"q": 4, "other": 1}


def test_a_bad_frame_fails_with_its_receipt_after_the_frames_before_it() -> None:
    broker, session, outbox = consumer()
    read = [
        frame("SEND", b"1", destination="/queue/q", receipt="a"),
        frame("SEND", b"2", destination="/topic/t.*", receipt="bad"),  # no SEND to a wildcard
        frame("SEND", b"3", destination="/queue/q", receipt="c"),
    ]
    with pytest.raises(ClientError, match="wildcard") as failure:
        broker.handle_frames(session, read)
    assert failure.value.receipt_id == "bad"
    assert seen(outbox) == [("MESSAGE", "1"), ("RECEIPT", "a")]
    assert broker.queue_stats["q"].published == 1  # the frame after the bad one did nothing


def test_an_unknown_ack_id_fails_after_the_acks_before_it_took_effect() -> None:
    broker, session, outbox = consumer(DictStore)
    broker.handle_frames(session, [frame("SEND", str(i).encode(), destination="/queue/q") for i in range(3)])
    outbox.take()
    with pytest.raises(ClientError, match="no unacked message") as failure:
        broker.handle_frames(session, [frame("ACK", id="1", receipt="ok"), frame("ACK", id="9", receipt="bad")])
    assert failure.value.receipt_id == "bad"
    assert seen(outbox) == [("RECEIPT", "ok")]
    assert sorted(m.body for m, _, _ in broker.store.rows.values()) == [b"1", b"2"]  # type: ignore[attr-defined]


def test_frames_after_one_that_waits_for_the_store_wait_behind_it_in_order() -> None:
    """``/amq/queue/NAME`` of a queue the broker has not seen asks the store whether it exists;
    the rest of the read waits for the answer, then goes in order."""
    broker, session, outbox = consumer(DictStore)
    broker.handle_frames(session, [
        frame("SEND", b"1", destination="/queue/q"),
        frame("SEND", b"2", destination="/amq/queue/elsewhere", receipt="unknown"),
        frame("SEND", b"3", destination="/queue/q", receipt="after"),
    ])
    assert seen(outbox) == [("MESSAGE", "1")]
    broker.handle_frames(session, [frame("SEND", b"4", destination="/queue/q", receipt="next read")])
    assert seen(outbox) == []  # a later read queues behind them too
    failures: list[tuple[str, str | None]] = []
    session.fail = lambda message, receipt: failures.append((message, receipt))
    run_reads(broker)  # DictStore knows no queue "elsewhere": the waiting frame fails the session
    assert failures and failures[0][1] == "unknown"
    assert broker.queue_stats["q"].published == 1


def test_a_session_failed_during_a_read_takes_nothing_more_from_it() -> None:
    broker, session, outbox = consumer()
    read = [frame("SEND", b"1", destination="/queue/q"), frame("SEND", b"2", destination="/queue/q")]

    def fail_on_delivery(data: bytes, write=outbox.write) -> None:  # type: ignore[no-untyped-def]
        write(data)
        broker.close_session(session)  # as the connection does when its session fails

    outbox.write = fail_on_delivery  # type: ignore[method-assign]
    broker.handle_frames(session, read)
    assert broker.queue_stats["q"].published == 1


def test_producers_of_backed_up_queues_are_paced_once_per_read() -> None:
    broker = Broker(DictStore(), BrokerConfig(window=10, queue_pace_timeout=5.0))
    outbox = FakeOutbox()
    consuming = broker.open_session("c", "1.2", outbox)
    broker.handle(consuming, frame("SUBSCRIBE", id="s", destination="/queue/q", ack="client-individual",
                                   prefetch="1"))
    producer = broker.open_session("p", "1.2", FakeOutbox())
    broker.handle_frames(producer, [frame("SEND", b"x", destination="/queue/q") for _ in range(12)]
                         + [frame("BEGIN", transaction="t")])
    assert producer.paced == {broker.queues["q"]}
