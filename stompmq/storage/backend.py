"""The backend protocol: what a SQL database must provide to sit under the group-commit engine.

Theory of operation
-------------------
Everything that makes a store fast and safe for the broker (coalescing, tickets,
one group in flight, retry of a failed group, reads behind pending writes) lives
once, in :class:`stompmq.storage.groupcommit.GroupCommitStore`.  A database
plugs in by writing one class with the blocking methods below and nothing else:
``SQLiteBackend`` today; a PostgreSQL backend would hold one psycopg 3
connection and ``COPY`` the inserts in binary.

Every method is called on ONE dedicated thread
(:class:`stompmq.storage.thread.DatabaseThread`), one call at a time, in the
order the engine submitted them: ``open`` first, ``close`` last.  So a backend
keeps a single connection and needs no locking of its own, and a read submitted
after a commit sees that commit.  A backend never sees the broker's
``StoredMessage`` objects on the way in: a group carries copies
(:mod:`stompmq.storage.groups`).

Errors: a method that cannot do its job raises :class:`StoreError` with a
one-line message for an operator (it ends up in an ERROR frame or on stderr).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from stompmq.storage.ages import QueueAges
from stompmq.storage.base import QueueCount, Recovery, StoredMessage, StreamMessage, StreamState
from stompmq.storage.groups import GroupRows
from stompmq.storage.header_filter import HeaderFilter

#: SQL for ``Backend.queue_page`` (placeholders ``vhost``/``after``/``limit`` are the backend's to adapt):
#: it walks the unique index on queues.name and counts each listed queue through
#: ix_messages_queue_order, so a page costs its own queues, never the whole table.  A queue
#: row without messages or a declaration is left out: such a queue was deleted, or is known
#: only to a broker that uses it (which lists it itself).
QUEUE_PAGE_SQL = """
SELECT q.name,
       (SELECT COUNT(*) FROM messages m WHERE m.queue_id = q.id),
       (SELECT COUNT(*) FROM messages m WHERE m.queue_id = q.id AND m.delivered = {true}),
       (SELECT MIN(m.timestamp) FROM messages m WHERE m.queue_id = q.id AND m.delivered = {false}),
       (SELECT MIN(m.timestamp) FROM messages m WHERE m.queue_id = q.id AND m.delivered = {true})
FROM queues q WHERE q.vhost = {vhost} AND q.name > {after}
  AND (q.options IS NOT NULL OR EXISTS (SELECT 1 FROM messages m WHERE m.queue_id = q.id))
ORDER BY q.name LIMIT {limit}
"""


class Backend(Protocol):
    """A database as the group-commit engine's thread sees it; every method blocks."""

    @property
    def name(self) -> str:
        """The database as an operator knows it (a file path, a DSN without its password):
        used in error messages and in the name of the database thread."""

    def open(self) -> Recovery:
        """Connect, check, migrate to the newest schema, and recover.

        Recovery makes every message stored as delivered ready again with one more
        redelivery (at-least-once after a crash), and returns the highest seq ever
        stored (the larger of the stored ``last_seq`` and the highest stored seq),
        the exchanges sorted by name and the bindings sorted by (exchange, queue, routing_key),
        and the streams sorted by name (``StreamRecord``: options, the lowest stored offset as
        ``first`` and the highest plus one as ``next``, both from the offset index, never a
        scan; a declared stream without entries has first = next = 0).
        """

    def commit(self, group: GroupRows) -> None:
        """Apply ``group`` in ONE transaction: all of it or, on any failure, none of it
        (roll back and raise StoreError; the engine keeps the operations and retries them in
        a later group, merged under newer ones).

        The order inside the transaction is part of the contract:

        1. ``group.structural`` first, in the order given (purges, exchange and binding
           changes).  The engine relies on it: a ``Purge`` row drops every older pending
           operation of the queue's messages, so each message row left in a group was issued
           *after* the group's purges and must survive them.  ``Broker.purge_queue`` counts on
           exactly that when it writes its deliveries in flight back as inserts right after
           the purge.  ``SaveStream`` inserts or replaces a stream's options; ``TrimStream``
           deletes its entries with offset < ``before`` (a range delete on the offset index).
        2. then ``deletes`` (and ``delayed_deletes``, rows of ``delayed_messages``), ``updates``,
           ``inserts`` (and ``delayed``), ``stream_rows`` (appended, in order;
           an entry never changes once written; a shared database numbers them from the
           stream's counter row, holding its lock to the commit, and reports the states of the
           streams it changed in ``group.stream_states``).  A seq appears at most once in a group,
           so these never conflict; deletes go first so the space they free serves the inserts.
           An insert replaces a stored row of the same seq.  Then ``group_offsets`` (a consumer
           group's committed offset replaces the stored one; None deletes the group's row).

        Finally store ``group.last_seq`` when it is higher than the one stored, so ``open``
        recovers it even after every message up to it is gone (seqs are never reused).
        """

    def load_ready(
        self, queue: str, after: tuple[int, int] | None, limit: int, matching: HeaderFilter | None = None
    ) -> Sequence[StoredMessage]:
        """Up to ``limit`` messages of ``queue`` not delivered, in (priority desc, seq asc)
        order, strictly after the order key ``after`` (None: from the start), perhaps only those
        ``matching`` (see ``Store.load_ready``); fresh ``StoredMessage`` objects."""

    def load_due(self, after: tuple[int, int] | None, limit: int, vhost: str) -> Sequence[StoredMessage]:
        """See ``Store.load_due``: ``vhost``'s delayed messages by (deliver_at, seq) after ``after``."""

    def load_expired(
        self, now_ms: int, after: tuple[int, int] | None, limit: int, vhost: str
    ) -> tuple[Sequence[StoredMessage], int | None]:
        """See ``Store.load_expired``: ``vhost``'s ready messages with ``expires < now_ms`` by
        (expires, seq) after ``after``, and the earliest expiry not reached yet (any vhost's)."""

    def queue_size(self, queue: str) -> tuple[int, int]:
        """Messages stored for ``queue`` (ready and delivered) and the sum of their body sizes."""

    def read_stream(self, name: str, start: int, limit: int) -> Sequence[StreamMessage]:
        """Up to ``limit`` entries of stream ``name`` with offset >= ``start``, in offset
        order, as fresh ``StreamMessage`` objects (a range scan of the offset index)."""

    def stream_state(self, name: str) -> StreamState | None:
        """A shared database's committed state of stream ``name`` (``Store.stream_state``); a
        backend for one broker returns None."""

    def stream_groups(self, name: str) -> dict[str, int] | None:
        """A shared database's consumer groups of stream ``name`` (``Store.stream_groups``); a
        backend for one broker returns None."""

    def count(self, queue: str) -> int:
        """Messages stored for ``queue``, ready and delivered alike."""

    def count_unacked(self, queue: str) -> int:
        """Messages of ``queue`` stored as delivered (out for delivery, not acked)."""

    def queue_ages(self, queue: str) -> QueueAges:
        """The timestamps of ``queue``'s oldest ready and oldest delivered message (ages.py)."""

    def queue_names(self, prefix: str) -> list[str]:
        """Names of the queues the database knows that start with ``prefix``."""

    def queue_exists(self, name: str) -> bool:
        """Does queue ``name`` have a row (it was used once and not forgotten)?"""

    def queue_page(self, after: str, limit: int) -> list[QueueCount]:
        """See ``Store.queue_page`` (``QUEUE_PAGE_SQL`` is the query)."""

    def close(self) -> None:
        """Release the connection and any lock.  Called exactly once, last, also after a
        failed open (then with only part of the database open, or none of it)."""


@runtime_checkable
class ConcurrentReads(Protocol):
    """A backend whose page reads may run on a second thread and connection, beside its commits.

    ``read_ready`` runs on the store's reader thread (one call at a time), never waits for a
    commit in progress on the database thread and sees some committed state: the group-commit
    engine lays every operation not known to be on the disk over it (``GroupCommitStore``
    ``_read_through``).  ``close_reader`` runs last on that thread.
    """

    def read_ready(
        self, queue: str, after: tuple[int, int] | None, limit: int, hidden: frozenset[int],
        matching: HeaderFilter | None = None,
    ) -> tuple[list[StoredMessage], bool]:
        """Like ``load_ready`` but leaving out the rows whose seq is in ``hidden`` (the engine
        has newer news of them) and still returning ``limit`` rows if the disk has them, all
        from one snapshot; and whether the disk may hold more after the last row returned."""

    def close_reader(self) -> None:
        """Close what ``read_ready`` opened (on the reader thread, after its last call)."""
