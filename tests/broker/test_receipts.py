"""Receipts: released in frame order once their ticket commits; a failed commit fails the session."""

from __future__ import annotations

from stompmq.broker.receipts import Receipts
from stompmq.broker.session import Session
from stompmq.storage.base import StoreError

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
        self.on_commit(self.done)


def session() -> tuple[Session, FakeOutbox]:
    outbox = FakeOutbox()
    return Session("s", "1.2", outbox), outbox


def ids(outbox: FakeOutbox) -> list[str]:
    return [f.headers["receipt-id"] for f in outbox.take("RECEIPT")]


def test_a_receipt_waits_for_its_commit() -> None:
    store = TicketStore()
    receipts = Receipts(store)
    s, outbox = session()
    receipts.send(s, "a")
    assert ids(outbox) == []
    store.commit()
    assert ids(outbox) == ["a"]


def test_a_receipt_with_nothing_to_wait_for_goes_at_once() -> None:
    store = TicketStore()
    store.commit()
    receipts = Receipts(store)
    s, outbox = session()
    store.next = store.done  # nothing buffered
    receipts.send(s, "a")
    assert ids(outbox) == ["a"]


def test_a_reserved_receipt_holds_back_the_later_ones() -> None:
    store = TicketStore()
    receipts = Receipts(store)
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


def test_a_failed_commit_fails_the_waiting_session_with_its_receipt_id() -> None:
    store = TicketStore()
    receipts = Receipts(store)
    s, outbox = session()
    failures: list[tuple[str, str | None]] = []
    s.fail = lambda message, receipt_id: failures.append((message, receipt_id))
    receipts.send(s, "r1")
    store.on_commit_failed(store.next, StoreError("disk full"))
    assert failures == [("could not store: disk full", "r1")]
    assert not s.pending_receipts
