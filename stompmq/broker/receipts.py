"""RECEIPTs released in order, each only once the store has committed what its frame wrote.

A receipt is queued behind the store ticket that covers every write buffered
when its frame was handled (``Store.sync_ticket``); ``committed``, called by whoever the
store reports to (the runtime: ``StoreEvents.committed``), releases, per session, every receipt whose ticket has committed, in the order
the frames arrived.  A ``/control`` answer that must read the store first takes
its place in the same line with an "unanswered" ticket (``reserve``), so it
never overtakes an earlier receipt nor lets a later one overtake it; the
runtime performs the read and ``answer`` fills it in.

A failed commit answers nothing: the store keeps its writes and retries them, so a receipt
waits through a store outage and comes once its writes are on disk (the producer meanwhile
held back by the store's bounded backlog).  Answering ERROR then would be wrong twice: the
retry stores the message anyway (a client that resends makes a duplicate), and the ERROR
closes the connection, leaving every other SEND of it unanswered.  Only a SEND that has
waited ``store_timeout`` seconds, at a failed attempt, is answered ERROR, and only if its
message can be withdrawn (``Dispatcher.withdraw``: nobody got it and the store drops its
buffered insert, certainly not on disk), in the same step as the decision, so an ERROR-ed
message is never stored nor delivered later.  A message that may be on disk (its commit's
outcome is unknown) or that a consumer already has keeps its receipt waiting.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable

from ..protocol import Frame, encode_frame, escape
from ..storage.base import Store, StoredMessage, StoreError
from .session import PendingReceipt, Session
from .timers import Deadlines

#: Ticket of a receipt whose answer is still being computed (it waits for everything).
UNANSWERED = sys.maxsize

Headers = dict[str, str]


class Held:
    """What a frame's handler returns for a frame that gets no RECEIPT yet: a transaction holds
    it, or it waits for a store read (``Session.waiting``)."""


HELD = Held()


def receipt_frame(receipt_id: str, headers: Headers | None, version: str) -> bytes:
    if not headers:
        return b"RECEIPT\nreceipt-id:%s\n\n\x00" % escape(receipt_id, version).encode()
    return encode_frame(Frame("RECEIPT", {"receipt-id": receipt_id, **headers}), version)


class Receipts:
    def __init__(
        self, store: Store, clock: Deadlines, withdraw: Callable[[StoredMessage], bool], timeout: float
    ) -> None:
        self.store = store
        self._clock = clock  # the engine's time (``now``), set by the runtime
        self._withdraw = withdraw
        self.timeout = timeout  # --store-timeout
        self._waiting: dict[Session, None] = {}  # sessions with receipts queued

    def send(
        self, session: Session, receipt_id: str, headers: Headers | None = None, message: StoredMessage | None = None
    ) -> None:
        """Answer ``receipt_id`` once everything buffered so far is committed; ``message`` is
        the queue message the frame (a SEND) stored, which a store timeout may withdraw."""
        data = receipt_frame(receipt_id, headers, session.version)
        ticket = self.store.sync_ticket()
        if ticket <= self.store.committed and not session.pending_receipts:
            session.outbox.write(data)
        else:
            self._pending(session).append(PendingReceipt(ticket, receipt_id, data, self._clock.now, message))
            self._waiting[session] = None

    def reserve(self, session: Session, receipt_id: str) -> PendingReceipt:
        """Hold ``receipt_id``'s place in line until ``answer`` gives its headers."""
        entry = PendingReceipt(UNANSWERED, receipt_id, b"", self._clock.now)
        self._pending(session).append(entry)
        self._waiting[session] = None
        return entry

    @staticmethod
    def _pending(session: Session) -> deque[PendingReceipt]:
        """The session's receipts waiting for a commit (made at the first one)."""
        pending = session.pending_receipts
        if pending is None:
            session.pending_receipts = pending = deque()
        return pending

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
        """A commit attempt failed (its writes wait for the next): answer ERROR to each session's
        first SEND that waited ``timeout`` and whose message could be withdrawn."""
        overdue = self._clock.now - self.timeout
        for session in list(self._waiting):
            for entry in session.pending_receipts or ():
                if entry.since > overdue:
                    break  # receipts queue in time order
                msg = entry.message
                if msg is not None and self._withdraw(msg):
                    del self._waiting[session]
                    session.pending_receipts = None
                    session.fail(
                        f"could not store: {error} (waited {self.timeout:g} s); the message was"
                        " not stored and will not be delivered", entry.receipt_id,
                    )
                    break

    def rejected(self, messages: list[StoredMessage], error: StoreError) -> None:
        """The store refused these messages' rows (the rest of their group committed): each
        session whose SEND stored one is answered ERROR for it, before its ticket's receipts
        are released, and closes (an ERROR ends a STOMP connection), its later receipts
        unanswered; everybody else's receipts go out as usual."""
        refused = {id(msg) for msg in messages}
        for session in list(self._waiting):
            for entry in session.pending_receipts or ():
                if entry.message is not None and id(entry.message) in refused:
                    del self._waiting[session]
                    session.pending_receipts = None
                    session.fail(f"could not store: {error}; the message was not stored and will not be"
                                 " delivered", entry.receipt_id)
                    break

    def forget(self, session: Session) -> None:
        session.pending_receipts = None
        self._waiting.pop(session, None)
