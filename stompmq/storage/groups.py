"""What a commit group carries from the group-commit engine to a database backend.

Theory of operation
-------------------
The engine (:mod:`stompmq.storage.groupcommit`) coalesces the broker's writes on
the trio thread and hands a backend one :class:`GroupRows` per commit.  These
records are the whole vocabulary between the two, so they say nothing about any
particular database: a group is plain, immutable-by-convention data that the
database thread may read while the broker goes on mutating its own
``StoredMessage`` objects.

Every name here is a store key (``vhost_names.vhost_space`` + the name): the default
vhost's names as they are, another vhost's prefixed with it; backends split them.

Message rows are tuples, not objects, because a group may hold tens of thousands
of them and tuples are the cheapest thing to build on the trio thread and the
shape DB-API ``executemany`` and COPY both take directly.  Their field order is
part of the contract and is spelled out on each alias.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stompmq.storage.base import StoredMessage, StoreRejected, StreamState
from stompmq.storage.rows import Row


# -- structural operations: rare, kept in the order the broker issued them ------------------
# The stored facts (``Store.write``'s rows) are in storage/rows.py; a group also carries the topic
# messages of a shared store, which are never stored.
@dataclass(frozen=True, slots=True)
class TopicMessage:
    """A topic message for the other brokers sharing the database (never stored)."""

    topic: str
    headers: dict[str, str]
    body: bytes


#: ``DropVhost``'s statements, in order, each with the vhost's name as its one parameter (``?``;
#: PostgreSQL's driver writes ``%s``).  Queue rows stay (the backends cache their ids), bare.
DROP_VHOST_SQL = (
    "DELETE FROM messages WHERE queue_id IN (SELECT id FROM queues WHERE vhost = ?)",
    "DELETE FROM delayed_messages WHERE queue_id IN (SELECT id FROM queues WHERE vhost = ?)",
    "UPDATE queues SET options = NULL WHERE vhost = ?",
    "DELETE FROM bindings WHERE vhost = ?",
    "DELETE FROM exchanges WHERE vhost = ?",
    "DELETE FROM vhosts WHERE name = ?",
)

StructuralOp = Row | TopicMessage

# -- the group commit's write buffer: per seq, the kind of operation and the broker's message --
INSERT, UPDATE, DELETE = 0, 1, 2

PendingOp = tuple[int, StoredMessage]

# -- message rows: one per message, at most one row per seq in a group ------------------------
# (seq, queue, priority, headers, body, delivered, ack_timeout, redeliveries, timestamp, expires)
InsertRow = tuple[int, str, int, dict[str, str], bytes, bool, float | None, int, int, int | None]
# (seq, queue, priority, headers, body, ack_timeout, timestamp, expires, deliver_at): a delayed
# message, stored apart (``delayed_messages``) until it is due; never updated.
DelayedRow = tuple[int, str, int, dict[str, str], bytes, float | None, int, int | None, int]
# (delivered, redeliveries, priority, seq): SET delivered, redeliveries, priority WHERE seq.
UpdateRow = tuple[bool, int, int, int]
# (seq,)
DeleteRow = tuple[int]
# (stream, offset, seq, priority, timestamp, headers, body, bytes_before, producer): appended, never
# changed.  On a shared store ``offset`` is ``UNNUMBERED`` and the backend numbers the rows (offset,
# bytes_before, timestamp kept non-decreasing) from the stream's counter row.  ``producer`` is an
# idempotent append's (producer id, seq) (``StreamMessage.producer``), else None.
StreamRow = tuple[str, int, int, int, int, dict[str, str], bytes, int, tuple[str, int] | None]
# (stream, group, committed offset or None to forget the group): one row per (stream, group).
GroupOffsetRow = tuple[str, str, int | None]
#: The lists of a group that hold its rows, in the order a backend applies them: any prefix of
#: a group's rows, taken in this order, is a group a backend can commit on its own.
ROW_LISTS = ("structural", "deletes", "delayed_deletes", "updates", "inserts", "delayed", "stream_rows",
             "group_offsets")


@dataclass(slots=True)
class GroupRows:
    """One commit group, already coalesced, with the mutable fields copied.

    How a backend must apply it (one transaction; ``structural`` first, in order, then
    ``deletes``, ``updates``, ``inserts``, ``stream_rows``) is the contract of ``Backend.commit``
    (:mod:`stompmq.storage.backend`).
    """

    structural: list[StructuralOp]
    inserts: list[InsertRow]
    updates: list[UpdateRow]
    deletes: list[DeleteRow]
    last_seq: int  # highest seq the broker ever handed to the store so far
    #: seqs of the rows (inserted or updated here) this broker holds in memory; None unless
    #: the store is shared by several brokers (only then do claims matter)
    held: frozenset[int] | None = None
    #: the lease epoch the engine held those rows under when the group was taken (a shared
    #: store's): a backend writes them claimed under it, so a group taken before the engine
    #: learned that its lease lapsed claims nothing under the new epoch
    claims_epoch: int | None = None
    stream_rows: list[StreamRow] = field(default_factory=list)  # in offset order per stream
    delayed: list[DelayedRow] = field(default_factory=list)  # inserted with the inserts
    delayed_deletes: list[DeleteRow] = field(default_factory=list)  # deleted with the deletes
    #: inserts that are promoted delayed messages (a shared store's): copy seq -> delayed seq; a
    #: copy whose delayed row this broker's fenced delete did not remove is not inserted
    promotions: dict[int, int] = field(default_factory=dict)
    #: seqs of rows freed because no selector of this broker matched them (a shared store's
    #: ``Store.pass_over``): their news names each one
    passed: frozenset[int] = frozenset()
    #: consumer groups' committed offsets, written last (the stream row may be made by this group)
    group_offsets: list[GroupOffsetRow] = field(default_factory=list)
    #: filled in by a shared store's backend: each stream the group changed, as committed
    #: (None: deleted); the engine hears of them before the group's ticket is released
    stream_states: dict[str, StreamState | None] = field(default_factory=dict)
    #: filled in by the group commit when the database refused some rows (``StoreRejected``):
    #: each refused row, the name of the list it was in, and the error; the rest committed
    rejected: list[tuple[str, Any, StoreRejected]] = field(default_factory=list)
