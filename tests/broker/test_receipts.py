"""Receipts: released in frame order once their ticket commits; a failed commit keeps them
waiting, and only a SEND that waited --store-timeout and whose message could be withdrawn is
answered ERROR."""

from __future__ import annotations

from stompmq.broker.receipts import Receipts
from stompmq.broker.session import Session
from stompmq.broker.timers import Deadlines
from stompmq.storage.base import StoredMessage, StoreError

from ..support.stores import Reports
from .fakes import DictStore, FakeOutbox


class TicketStore(DictStore):
    """Tickets advance only when the test commits them."""

    def __init__(self) -> None:
        super().__init__()
        self.next = 1
        self.done = 0

    @property
    def committed(self) -> int:
        return self.done

    def sync_ticket(self) -> int:
        return self.next

    def commit(self) -> None:
        self.done = self.next
        self.next += 1
        self.events.committed(self.done)


def make(store: TicketStore, timeout: float = 30.0, withdrawable: bool = True) -> tuple[Receipts, Deadlines,
                                                                                      list[StoredMessage]]:
    """Receipts over ``store`` with a clock the test moves and a record of what was withdrawn."""
    clock = Deadlines()
    withdrawn: list[StoredMessage] = []

    def withdraw(msg: StoredMessage) -> bool:
        if withdrawable:
            withdrawn.append(msg)
        return withdrawable

    receipts = Receipts(store, clock, withdraw, timeout)
    store.bind(Reports(receipts.committed, receipts.failed))  # as the runtime forwards them
    return receipts, clock, withdrawn


def message(seq: int) -> StoredMessage:
    return StoredMessage(seq, "q", 4, {}, b"x", 0)


def session() -> tuple[Session, FakeOutbox]:
    outbox = FakeOutbox()
    return Session("s", "1.2", outbox), outbox


def ids(outbox: FakeOutbox) -> list[str]:
    return [f.headers["receipt-id"] for f in outbox.take("RECEIPT")]


def test_a_receipt_waits_for_its_commit() -> None:
    store = TicketStore()
    receipts, _, _ = make(store)
    s, outbox = session()
    receipts.send(s, "a")
    assert ids(outbox) == []
    store.commit()
    assert ids(outbox) == ["a"]


def test_a_receipt_with_nothing_to_wait_for_goes_at_once() -> None:
    store = TicketStore()
    store.commit()
    receipts, _, _ = make(store)
    s, outbox = session()
    store.next = store.done  # nothing buffered
    receipts.send(s, "a")
    assert ids(outbox) == ["a"]


def test_a_reserved_receipt_holds_back_the_later_ones() -> None:
    store = TicketStore()
    receipts, _, _ = make(store)
    s, outbox = session()
    entry = receipts.reserve(s, "count")
    receipts.send(s, "later")
    store.commit()
    assert ids(outbox) == []
    receipts.answer(s, entry, {"num-messages": "3"})
    store.commit()
    frames = outbox.take("RECEIPT")
    assert [f.headers["receipt-id"] for f in frames] == ["count", "later"]
    assert frames[0].headers["num-messages"] == "3"


def failures_of(s: Session) -> list[tuple[str, str | None]]:
    failures: list[tuple[str, str | None]] = []
    s.fail = lambda text, receipt_id: failures.append((text, receipt_id))
    return failures


def test_a_failed_commit_keeps_the_receipts_waiting_until_a_retry_commits() -> None:
    store = TicketStore()
    receipts, clock, withdrawn = make(store)
    s, outbox = session()
    failures = failures_of(s)
    receipts.send(s, "r1", None, message(1))
    receipts.send(s, "r2", None, message(2))
    for _ in range(100):  # 29.7 s of failed attempts: within --store-timeout
        clock.now += 0.297
        store.events.commit_failed(store.next, StoreError("connection refused"))
    assert failures == [] and withdrawn == [] and ids(outbox) == []
    store.commit()  # the retry
    assert ids(outbox) == ["r1", "r2"]


def test_a_send_that_waited_the_store_timeout_is_withdrawn_and_answered_error() -> None:
    store = TicketStore()
    receipts, clock, withdrawn = make(store, timeout=5.0)
    s, outbox = session()
    failures = failures_of(s)
    first, second = message(1), message(2)
    receipts.send(s, "r1", None, first)
    clock.now = 1.0
    receipts.send(s, "r2", None, second)
    clock.now = 4.9
    store.events.commit_failed(store.next, StoreError("disk full"))
    assert failures == []
    clock.now = 5.0
    store.events.commit_failed(store.next, StoreError("disk full"))
    assert withdrawn == [first]  # the one that waited 5 s, in the same step as the ERROR
    ((text, receipt_id),) = failures
    assert receipt_id == "r1" and text.startswith("could not store: disk full") and "not stored" in text
    assert not s.pending_receipts and ids(outbox) == []


def test_a_message_that_cannot_be_withdrawn_keeps_its_receipt_waiting() -> None:
    """Delivered already, or its commit's outcome unknown: an ERROR could be a lie."""
    store = TicketStore()
    receipts, clock, withdrawn = make(store, timeout=0.0, withdrawable=False)
    s, outbox = session()
    failures = failures_of(s)
    receipts.send(s, "r1", None, message(1))
    receipts.send(s, "ack")  # not a SEND: nothing to withdraw
    clock.now = 100.0
    store.events.commit_failed(store.next, StoreError("disk full"))
    assert failures == []
    store.commit()
    assert ids(outbox) == ["r1", "ack"]
