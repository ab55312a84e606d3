"""The reads of the group-commit store: behind the writes buffered before them, or beside them.

Theory of operation
-------------------
A read runs on the database thread behind the pending batch (handed over as a group first), so
it sees every write buffered before it; if that group fails, the read raises StoreError rather
than answer without those writes (a pager would step over the missing messages).  Page reads
(``load_ready``) are the exception when the backend offers ``ConcurrentReads`` (SQLite) and the
store is not shared: they run at once on a second thread and connection, beside the commits,
with every write not known to be on the disk laid over what they find (``_read_through``), as
long as that scan of the buffer is cheaper than waiting for its commit.  ``GroupReads`` is a
part of ``GroupCommitStore`` (storage/groupcommit.py), which owns the buffer these reads look at.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple

from stompmq.storage.ages import QueueAges
from stompmq.storage.backend import Backend, ConcurrentReads
from stompmq.storage.base import (
    QueueCount,
    Store,
    StoredMessage,
    StoreError,
    StreamMessage,
    StreamState,
    by_order,
)
from stompmq.storage.commit_group import CommitGroup
from stompmq.storage.groups import (
    DELETE,
    PendingOp,
    StructuralOp,
)
from stompmq.storage.header_filter import HeaderFilter
from stompmq.storage.outage import Outage
from stompmq.storage.rows import Purge
from stompmq.storage.thread import DatabaseThread
from stompmq.vhost_names import DEFAULT_VHOST, split_key, vhost_space

# A page read lays the buffer over the disk only while the buffer (and the group in flight) holds
# at most this many operations plus two per message asked for, or at least this many bytes of
# inserted messages per operation: the overlay is a scan of the buffer on the engine's thread,
# which must stay small per message paged, and waiting behind the batch costs little when it is
# many small rows (quick to commit) and much when it is large bodies (a 64 KiB row spans 16
# overflow pages; 64 MiB of backlog is only ~1,000 operations).
READ_THROUGH_OPS = 1024
READ_THROUGH_BYTES_PER_OP = 4096

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class GroupReads(Store):
    """``GroupCommitStore``'s reads; the store holds the buffer, the group in flight, the
    threads and the outage they report to."""

    _backend: Backend
    _reader: tuple[DatabaseThread, ConcurrentReads] | None
    _thread: DatabaseThread | None
    _pending: dict[int, PendingOp]
    _structural: list[StructuralOp]
    _inflight: CommitGroup | None
    _pending_bytes: int
    _inflight_bytes: int
    _outage: Outage

    if TYPE_CHECKING:  # the store's, declared for the type checker
        async def _wait_idle(self) -> None: ...
        def _has_pending(self) -> bool: ...
        def _submit_group(self) -> CommitGroup: ...
        async def _await_group(self, group: CommitGroup) -> StoreError | None: ...

    async def load_ready(
        self, queue: str, after: tuple[int, int] | None, limit: int, matching: HeaderFilter | None = None
    ) -> Sequence[StoredMessage]:
        if self._reader is None or not self._worth_reading_through(limit) or self._purging(queue):
            # A purge empties the disk view in a way the buffer cannot replay: read behind it.
            return await self._read(self._backend.load_ready, queue, after, limit, matching)
        try:
            page = await self._read_through(*self._reader, queue, after, limit, matching)
        except StoreError as e:
            self._outage.failed(e)
            raise
        self._outage.succeeded()
        return page

    def _worth_reading_through(self, limit: int) -> bool:
        """Is laying the buffer over the disk cheaper than waiting for its commit?  The overlay
        scans every buffered operation on the engine's thread; the wait grows with the bytes to
        write.  So: a small buffer, or one of large messages (see READ_THROUGH_OPS)."""
        ops = len(self._pending) + (len(self._inflight.ops) if self._inflight is not None else 0)
        return (ops <= READ_THROUGH_OPS + 2 * limit
                or self._pending_bytes + self._inflight_bytes >= ops * READ_THROUGH_BYTES_PER_OP)

    def _purging(self, queue: str) -> bool:
        """A purge of ``queue`` is buffered or being committed."""
        structural = self._structural if self._inflight is None else self._inflight.structural + self._structural
        return any(isinstance(op, Purge) and op.queue == queue for op in structural)

    async def _read_through(
        self, reader: DatabaseThread, backend: ConcurrentReads, queue: str, after: tuple[int, int] | None,
        limit: int, matching: HeaderFilter | None,
    ) -> list[StoredMessage]:
        """A page of ``queue`` read beside the commits, with the writes not yet on disk laid over it.

        Why: a page read behind the pending batch waited for the group in flight and then for
        that batch's commit, and when a queue's backlog outruns its window the batch is mostly
        the queue's own newest messages: with 64 KiB bodies every page waited ~120 ms of fsync
        and the consumer got one window per commit (docs/architecture.md, "Performance
        design").  Here the read runs at once on the reader thread's own
        connection (``ConcurrentReads``) and sees some committed state, and every operation not
        known to be on the disk, in the group in flight and in the buffer, as it is at this
        instant (no await before the submission), wins over it: a buffered insert comes from
        memory (settled before its flush, it never touches the disk), a buffered delete, update
        or delivery hides its row.  The backend refills past the hidden rows, so a page
        shorter than ``limit`` still proves the queue exhausted.  What the read may see that
        the snapshot did not (writes after it) is what a read behind the batch could miss too:
        the window's ``late`` key covers it.  ``matching`` filters the disk's rows only: the
        buffered ones are few, and the broker's selectors sift them anyway.
        """
        overlay: dict[int, PendingOp] = {}
        vhost, name = split_key(queue)
        space = vhost_space(vhost)
        if self._inflight is not None:
            _ops_of(self._inflight.ops, space, name, overlay)
        _ops_of(self._pending, space, name, overlay)
        buffered = [m for kind, m in overlay.values() if kind != DELETE and not m.delivered]
        if after is not None:
            buffered = [m for m in buffered if m.order_key > after]
        rows, more = await reader.call(backend.read_ready, queue, after, limit, frozenset(overlay), matching)
        if not buffered:
            return rows
        if more and rows:  # the disk may hold rows after its last one: nothing beyond it yet
            last = rows[-1].order_key
            buffered = [m for m in buffered if m.order_key < last]
        page = rows + buffered
        page.sort(key=by_order)
        del page[limit:]
        return page

    async def count(self, queue: str) -> int:
        return await self._read(self._backend.count, queue)

    async def load_due(
        self, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> Sequence[StoredMessage]:
        return await self._read(self._backend.load_due, after, limit, vhost)

    async def load_expired(
        self, now_ms: int, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> tuple[Sequence[StoredMessage], int | None]:
        return await self._read(self._backend.load_expired, now_ms, after, limit, vhost)

    async def queue_size(self, queue: str, snapshot: Callable[[], T]) -> tuple[int, int, T]:
        taken: list[T] = []
        count, size = await self._read(self._backend.queue_size, queue, before=lambda: taken.append(snapshot()))
        return count, size, taken[0]

    async def count_unacked(self, queue: str) -> int:
        return await self._read(self._backend.count_unacked, queue)

    async def queue_ages(self, queue: str) -> QueueAges:
        return await self._read(self._backend.queue_ages, queue)

    async def read_stream(self, name: str, start: int, limit: int) -> Sequence[StreamMessage]:
        return await self._read(self._backend.read_stream, name, start, limit)

    async def stream_state(self, name: str) -> StreamState | None:
        return await self._read(self._backend.stream_state, name)

    async def stream_groups(self, name: str) -> dict[str, int] | None:
        return await self._read(self._backend.stream_groups, name)

    async def queue_names(self, prefix: str) -> list[str]:
        return await self._read(self._backend.queue_names, prefix)

    async def queue_exists(self, name: str) -> bool:
        return await self._read(self._backend.queue_exists, name)

    async def queue_page(self, after: str, limit: int, snapshot: Callable[[], T]) -> tuple[list[QueueCount], T]:
        taken: list[T] = []
        rows = await self._read(self._backend.queue_page, after, limit, before=lambda: taken.append(snapshot()))
        return rows, taken[0]

    async def _read(self, fn: Callable[[*Ts], T], *args: *Ts, before: Callable[[], None] | None = None) -> T:
        """Run a read on the database thread behind every write buffered so far.

        A read that cannot see them (their group failed) raises instead of answering
        from a disk that lacks them: a pager would step over the missing messages.
        ``before`` is called at the instant the read's view is fixed: with no await between it
        and the submission, every write buffered before it is seen and none after it.
        """
        thread = self._thread
        if thread is None:
            raise StoreError(f"{self._backend.name} is not open")
        await self._wait_idle()  # a failed group in flight is pending again afterwards
        if before is not None:
            before()
        if not self._has_pending():
            read = thread.submit(fn, *args)
        else:
            group = self._submit_group()
            read = thread.submit(fn, *args)  # FIFO: right behind the group
            error = await self._await_group(group)
            if error is not None:
                raise StoreError(f"read refused until buffered writes commit: {error}")
        try:
            result = await read.result()
        except StoreError as e:
            self._outage.failed(e)
            raise
        self._outage.succeeded()
        return result


def _ops_of(ops: dict[int, PendingOp], space: str, name: str, into: dict[int, PendingOp]) -> None:
    """Copy into ``into`` the operations of queue ``name``'s messages (not delayed ones) in the
    vhost of key prefix ``space``."""
    for seq, op in ops.items():
        m = op[1]
        if m.queue == name and m.space == space and m.deliver_at is None:
            into[seq] = op
