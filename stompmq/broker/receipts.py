"""RECEIPTs released in order, each only once the store has committed what its frame wrote.

A receipt is queued behind the store ticket that covers every write buffered
when its frame was handled (``Store.sync_ticket``); the store's commit callback
releases, per session, every receipt whose ticket has committed, in the order
the frames arrived.  A ``/control`` answer that must read the store first takes
its place in the same line with an "unanswered" ticket (``reserve``), so it
never overtakes an earlier receipt nor lets a later one overtake it; the
runtime performs the read and ``answer`` fills it in.  When a commit fails, the
sessions waiting on it get an ERROR instead (through ``Session.fail``).
"""

from __future__ import annotations

import sys

from ..protocol import Frame, encode_frame, escape
from ..storage.base import Store, StoreError
from .session import PendingReceipt, Session

#: Ticket of a receipt whose answer is still being computed (it waits for everything).
UNANSWERED = sys.maxsize

Headers = dict[str, str]


def receipt_frame(receipt_id: str, headers: Headers | None, version: str) -> bytes:
    if not headers:
        return b"RECEIPT\nreceipt-id:%s\n\n\x00" % escape(receipt_id, version).encode()
    return encode_frame(Frame("RECEIPT", {"receipt-id": receipt_id, **headers}), version)


class Receipts:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._waiting: dict[Session, None] = {}  # sessions with receipts queued
        store.on_commit = self.committed
        store.on_commit_failed = self.failed

    def send(self, session: Session, receipt_id: str, headers: Headers | None = None) -> None:
        """Answer ``receipt_id`` once everything buffered so far is committed."""
        data = receipt_frame(receipt_id, headers, session.version)
        ticket = self.store.sync_ticket()
        if ticket <= self.store.committed and not session.pending_receipts:
            session.outbox.write(data)
        else:
            session.pending_receipts.append(PendingReceipt(ticket, receipt_id, data))
            self._waiting[session] = None

    def reserve(self, session: Session, receipt_id: str) -> PendingReceipt:
        """Hold ``receipt_id``'s place in line until ``answer`` gives its headers."""
        entry = PendingReceipt(UNANSWERED, receipt_id, b"")
        session.pending_receipts.append(entry)
        self._waiting[session] = None
        return entry

    def answer(self, session: Session, entry: PendingReceipt, headers: Headers) -> None:
        """The reserved receipt's headers are known: release it after what was buffered by now."""
        if session.closed or entry.receipt_id is None:
            return
        entry.data = receipt_frame(entry.receipt_id, headers, session.version)
        entry.ticket = self.store.sync_ticket()
        self.committed(self.store.committed)

    def committed(self, ticket: int) -> None:
        for session in list(self._waiting):
            pending = session.pending_receipts
            while pending and pending[0].ticket <= ticket:
                session.outbox.write(pending.popleft().data)
            if not pending:
                del self._waiting[session]

    def failed(self, ticket: int, error: StoreError) -> None:
        for session in list(self._waiting):
            pending = session.pending_receipts
            if pending and pending[0].ticket <= ticket:
                receipt_id = pending[0].receipt_id
                del self._waiting[session]
                pending.clear()
                session.fail(f"could not store: {error}", receipt_id)

    def forget(self, session: Session) -> None:
        session.pending_receipts.clear()
        self._waiting.pop(session, None)
