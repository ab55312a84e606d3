"""RECEIPTs released in order, each only once the store has committed what its frame wrote.

A receipt is queued behind the store ticket that covers every write buffered
when its frame was handled (``Store.sync_ticket``); the store's commit callback
releases, per session, every receipt whose ticket has committed, in the order
the frames arrived.  A ``/control`` answer that must read the store first takes
its place in the same line with an "unanswered" ticket, so it never overtakes
an earlier receipt nor lets a later one overtake it.  When a commit fails, the
sessions waiting on it get an ERROR instead (through ``Session.fail``).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import trio

from ..protocol import Frame, encode_frame, escape
from ..storage.base import Store, StoreError
from .session import Session

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
        self.nursery: trio.Nursery | None = None  # set by the broker's run(); hosts late answers
        store.on_commit = self.committed
        store.on_commit_failed = self.failed

    def send(self, session: Session, receipt_id: str, headers: Headers | None = None) -> None:
        """Answer ``receipt_id`` once everything buffered so far is committed."""
        data = receipt_frame(receipt_id, headers, session.version)
        ticket = self.store.sync_ticket()
        if ticket <= self.store.committed and not session.pending_receipts:
            session.outbox.write(data)
        else:
            session.pending_receipts.append([ticket, receipt_id, data])
            self._waiting[session] = None

    def send_later(
        self, session: Session, receipt_id: str | None, answer: Callable[[], Awaitable[Headers]]
    ) -> None:
        """Run ``answer`` (it reads the store); its headers go into the receipt, in order."""
        entry: list = [UNANSWERED, receipt_id, b""]
        if receipt_id is not None:
            session.pending_receipts.append(entry)
            self._waiting[session] = None
        assert self.nursery is not None, "the broker is not running"

        async def complete() -> None:
            try:
                headers = await answer()
            except StoreError as e:
                if not session.closed:
                    session.fail(f"store error: {e}", receipt_id)
                return
            if receipt_id is not None:
                entry[2] = receipt_frame(receipt_id, headers, session.version)
                entry[0] = self.store.sync_ticket()
                self.committed(self.store.committed)

        self.nursery.start_soon(complete)

    def committed(self, ticket: int) -> None:
        for session in list(self._waiting):
            pending = session.pending_receipts
            while pending and pending[0][0] <= ticket:
                session.outbox.write(pending.popleft()[2])
            if not pending:
                del self._waiting[session]

    def failed(self, ticket: int, error: StoreError) -> None:
        for session in list(self._waiting):
            pending = session.pending_receipts
            if pending and pending[0][0] <= ticket:
                receipt_id = pending[0][1]
                del self._waiting[session]
                pending.clear()
                session.fail(f"could not store: {error}", receipt_id)

    def forget(self, session: Session) -> None:
        session.pending_receipts.clear()
        self._waiting.pop(session, None)
