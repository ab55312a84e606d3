"""Ack deadlines for long work, in the engine's time: ``/control/extend-ack`` moves a delivery's
deadline, and an ACK or NACK that comes after its deadline requeued the message is answered in
its RECEIPT (``ack-late:true``), never with an ERROR that would close the connection."""

from __future__ import annotations

import pytest

from stompmq.broker import Broker, ClientError
from stompmq.broker.session import EXPIRED_KEPT, Session
from stompmq.protocol import Frame
from stompmq.storage.memory import MemoryStore

from .fakes import FakeOutbox


def frame(command: str, **headers: str) -> Frame:
    return Frame(command, {k.replace("_", "-"): v for k, v in headers.items()}, b"")


def worker(broker: Broker, name: str, ack_timeout: str = "30", prefetch: str = "10") -> tuple[Session, FakeOutbox]:
    outbox = FakeOutbox()
    session = broker.open_session(name, "1.2", outbox)
    broker.handle(session, frame("SUBSCRIBE", id="s", destination="/queue/q", ack="client-individual",
                                 ack_timeout=ack_timeout, prefetch=prefetch))
    return session, outbox


def at(broker: Broker, now: float) -> None:
    broker.advance(now, 0.0)
    broker.run_due()


def started(count: int = 1, ack_timeout: str = "30") -> tuple[Broker, Session, FakeOutbox, list[str]]:
    """A broker at t=100 whose worker holds ``count`` deliveries of /queue/q, due at 130."""
    broker = Broker(MemoryStore())
    broker.advance(100.0, 0.0)
    session, outbox = worker(broker, "slow", ack_timeout)
    for i in range(count):
        broker.handle(session, Frame("SEND", {"destination": "/queue/q"}, b"task %d" % i))
    return broker, session, outbox, [m.headers["ack"] for m in outbox.take("MESSAGE")]


def extend(broker: Broker, session: Session, outbox: FakeOutbox, ids: str, seconds: str) -> dict[str, str]:
    broker.handle(session, frame("SEND", destination="/control/extend-ack", id=ids, ack_timeout=seconds,
                                 receipt="x"))
    (receipt,) = outbox.take("RECEIPT")
    return receipt.headers


def test_extending_moves_the_deadline_to_now_plus_the_new_timeout() -> None:
    broker, slow, out, (ack,) = started()
    other, out_other = worker(broker, "other")
    at(broker, 120.0)
    assert extend(broker, slow, out, ack, "30") == {"receipt-id": "x", "extended": "1"}
    assert broker.next_deadline() == 150.0
    at(broker, 149.9)
    assert out_other.take("MESSAGE") == []
    at(broker, 150.0)
    (again,) = out_other.take("MESSAGE")
    assert again.headers["redelivered"] == "true"


def test_a_worker_that_keeps_extending_keeps_its_delivery_past_many_timeouts() -> None:
    broker, slow, out, (ack,) = started()
    _, out_other = worker(broker, "other")
    for now in range(110, 400, 20):  # three times more than the 30 s timeout, renewed every 20 s
        at(broker, float(now))
        assert extend(broker, slow, out, ack, "30")["extended"] == "1"
    broker.handle(slow, frame("ACK", id=ack, receipt="done"))
    assert [r.headers for r in out.take("RECEIPT")] == [{"receipt-id": "done"}]
    at(broker, 1000.0)
    assert out_other.take("MESSAGE") == [] and broker.queues["q"].size == 0


def test_an_extension_of_zero_seconds_removes_the_deadline() -> None:
    broker, slow, out, (ack,) = started()
    extend(broker, slow, out, ack, "0")
    assert broker.next_deadline() == float("inf")


def test_one_extension_names_several_deliveries_and_says_which_are_not_held() -> None:
    broker, slow, out, acks = started(3)
    broker.handle(slow, frame("ACK", id=acks[0]))
    assert extend(broker, slow, out, ",".join(acks + ["nope"]), "60") == {
        "receipt-id": "x", "extended": "2", "not-unacked": f"{acks[0]},nope"}
    assert broker.next_deadline() == 160.0


def test_extending_a_delivery_whose_deadline_passed_says_it_is_late() -> None:
    broker, slow, out, (ack,) = started()
    at(broker, 130.0)  # requeued, and redelivered to the same worker under a new ack id
    (again,) = out.take("MESSAGE")
    assert extend(broker, slow, out, f"{ack},{again.headers['ack']}", "30") == {
        "receipt-id": "x", "extended": "1", "ack-late": ack}


@pytest.mark.parametrize("headers, complaint", [
    ({"ack-timeout": "30"}, "needs an id header"),
    ({"id": "1"}, "needs an ack-timeout header"),
    ({"id": "1", "ack-timeout": "soon"}, "must be a number of seconds"),
    ({"id": "1", "ack-timeout": "-1"}, "from 0 to"),
])
def test_a_malformed_extension_is_an_error(headers: dict[str, str], complaint: str) -> None:
    broker, slow, _, _ = started()
    with pytest.raises(ClientError, match=complaint):
        broker.handle(slow, Frame("SEND", {"destination": "/control/extend-ack", **headers}, b""))


def test_a_late_ack_is_answered_in_its_receipt_and_the_worker_keeps_its_other_deliveries() -> None:
    broker, slow, out, (first, second) = started(2)
    _, out_other = worker(broker, "other")
    extend(broker, slow, out, second, "300")  # the one it works on now
    at(broker, 130.0)
    (redelivered,) = out_other.take("MESSAGE")
    assert redelivered.body == b"task 0"
    broker.handle(slow, frame("ACK", id=first, receipt="late"))  # no ClientError: the session lives
    assert [r.headers for r in out.take("RECEIPT")] == [{"receipt-id": "late", "ack-late": "true"}]
    assert not slow.closed and second in slow.deliveries
    broker.handle(slow, frame("ACK", id=second, receipt="ok"))
    assert [r.headers for r in out.take("RECEIPT")] == [{"receipt-id": "ok"}]
    assert broker.queues["q"].stats.acked == 1  # the late ACK settled nothing


def test_a_late_ack_in_a_run_of_acks_keeps_the_receipts_in_order() -> None:
    broker, slow, out, acks = started(3)
    extend(broker, slow, out, f"{acks[0]},{acks[2]}", "300")
    at(broker, 130.0)
    out.take("MESSAGE")  # acks[1] came back under a new id
    broker.handle_frames(slow, [frame("ACK", id=a, receipt=f"r{i}") for i, a in enumerate(acks)])
    assert [r.headers for r in out.take("RECEIPT")] == [
        {"receipt-id": "r0"}, {"receipt-id": "r1", "ack-late": "true"}, {"receipt-id": "r2"}]
    assert broker.queues["q"].stats.acked == 2


def test_a_late_nack_is_answered_and_requeues_nothing_twice() -> None:
    broker, slow, out, (ack,) = started()
    at(broker, 130.0)
    out.take("MESSAGE")
    broker.handle(slow, frame("NACK", id=ack, receipt="n"))
    assert [r.headers for r in out.take("RECEIPT")] == [{"receipt-id": "n", "ack-late": "true"}]
    assert broker.queues["q"].stats.redelivered == 1  # by the timeout only


def test_a_transaction_whose_ack_became_late_still_commits() -> None:
    broker, slow, out, (ack,) = started()
    broker.handle(slow, frame("BEGIN", transaction="t"))
    broker.handle(slow, frame("ACK", id=ack, transaction="t"))
    broker.handle(slow, frame("SEND", destination="/queue/done", transaction="t"))
    at(broker, 130.0)
    broker.handle(slow, frame("COMMIT", transaction="t", receipt="c"))
    assert [r.headers for r in out.take("RECEIPT")] == [{"receipt-id": "c"}]
    assert broker.queues["done"].size == 1


def test_an_ack_naming_nothing_ever_delivered_is_still_an_error() -> None:
    broker, slow, _, _ = started()
    with pytest.raises(ClientError, match="no unacked message with ack id '99'"):
        broker.handle(slow, frame("ACK", id="99"))


def test_a_session_remembers_a_bounded_number_of_expired_ids() -> None:
    broker = Broker(MemoryStore())
    broker.advance(100.0, 0.0)
    slow, out = worker(broker, "slow", prefetch=str(EXPIRED_KEPT + 1))
    for _ in range(EXPIRED_KEPT + 1):
        broker.handle(slow, Frame("SEND", {"destination": "/queue/q"}, b""))
    acks = [m.headers["ack"] for m in out.take("MESSAGE")]
    at(broker, 130.0)
    assert slow.expired is not None and len(slow.expired) == EXPIRED_KEPT
    broker.handle(slow, frame("ACK", id=acks[1], receipt="r"))
    assert out.take("RECEIPT")[0].headers["ack-late"] == "true"
    with pytest.raises(ClientError, match="no unacked message"):
        broker.handle(slow, frame("ACK", id=acks[0]))  # the oldest was forgotten
