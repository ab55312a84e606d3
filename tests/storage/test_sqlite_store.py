"""SQLiteStore (the group-commit engine on SQLiteBackend) against real files, a real database
thread and a separate sqlite3 reader.

What the disk holds is always checked through an independent ``sqlite3``
connection, never through the store itself, so "committed" means "a second
process would see it".  Tests that must hold or fail a commit at a chosen moment
run the engine on a real ``SQLiteBackend`` wrapped in ``ControlledBackend``.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stompmq.storage import sqlite_file
from stompmq.storage.base import (
    MESSAGE_OVERHEAD,
    CommitInDoubt,
    Recovery,
    StoredMessage,
    StoreError,
    StoreEvents,
)
from stompmq.storage.groupcommit import RETRY_BACKOFF, GroupCommitStore
from stompmq.storage.groupreads import READ_THROUGH_BYTES_PER_OP, READ_THROUGH_OPS
from stompmq.storage.groups import GroupRows
from stompmq.storage.header_filter import HeaderFilter
from stompmq.storage.memory import MemoryStore
from stompmq.storage.records import BindingRecord, ExchangeRecord
from stompmq.storage.rows import DropBinding, DropExchange, DropStream, Purge, SaveBinding, SaveExchange
from stompmq.storage.sqlite import SQLiteBackend, SQLiteStore
from stompmq.storage.sqlite_sql import REQUEUE_DELIVERED_SQL

from ..support.stores import Reports
from ..support.unwritable import immutable
from ..support.waiting import committed, until

# Long enough that nothing is flushed by the timer during a test that means to flush by hand.
NEVER = 3600.0
# Real seconds a ControlledBackend waits for a commit or for release(): a failing test must
# end, not hang on a held group (time may be frozen by a MockClock, so this is thread-side).
GATE_TIMEOUT = 10.0


class Commits(StoreEvents):
    """Records what the store reports, checking each report against the file at that moment."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.ok: list[int] = []
        self.failed: list[tuple[int, StoreError]] = []
        self.on_disk_at_commit: list[set[int]] = []
        self.hold: set[int] = set()  # the seqs the engine's rule would hold back at a timed flush
        self.asked: list[list[int]] = []  # per timed group, the inserts its rule was asked about
        self._next = trio.Event()
        store.bind(self)

    def hold_back(self) -> Callable[[StoredMessage], bool]:
        asked: list[int] = []
        self.asked.append(asked)

        def keep(msg: StoredMessage) -> bool:
            asked.append(msg.seq)
            return msg.seq in self.hold

        return keep

    def committed(self, ticket: int) -> None:
        self.ok.append(ticket)
        self.on_disk_at_commit.append(seqs_on_disk(self.store.path))
        self._next.set()
        self._next = trio.Event()

    async def wait(self, count: int) -> None:
        """Until ``count`` commits were reported (woken by them: works with time frozen)."""
        with trio.fail_after(10):
            while len(self.ok) < count:
                await self._next.wait()

    def commit_failed(self, ticket: int, error: StoreError) -> None:
        self.failed.append((ticket, error))


def msg(
    seq: int, queue: str = "q", priority: int = 4, body: bytes = b"body", **kw: Any
) -> StoredMessage:
    return StoredMessage(seq, queue, priority, {"h": str(seq)}, body, 1_700_000_000_000 + seq, **kw)


def rows_on_disk(path: str) -> dict[int, tuple[Any, ...]]:
    """seq -> (queue, priority, delivered, redeliveries, headers, body), read from outside."""
    conn = sqlite3.connect(path)
    try:
        return {
            seq: tuple(rest)
            for seq, *rest in conn.execute(
                "SELECT m.seq, q.name, m.priority, m.delivered, m.redeliveries, m.headers, m.body"
                " FROM messages m JOIN queues q ON q.id = m.queue_id"
            )
        }
    finally:
        conn.close()


def seqs_on_disk(path: str) -> set[int]:
    return set(rows_on_disk(path))


@asynccontextmanager
async def serving(store: GroupCommitStore) -> AsyncIterator[None]:
    """``store`` open with its commit loop running; closed (flushing) on exit."""
    await store.open()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.run)
            yield
            nursery.cancel_scope.cancel()
    finally:
        await store.close()


@asynccontextmanager
async def running(path: Path | str, **kw: Any) -> AsyncIterator[SQLiteStore]:
    """An open SQLiteStore with its commit loop running; closed (flushing) on exit."""
    store = SQLiteStore(str(path), **kw)
    async with serving(store):
        yield store


class ControlledBackend:
    """A real SQLiteBackend whose commits a test can hold at a gate and make fail, both on the
    database thread before the commit touches the file."""

    def __init__(self, path: Path | str) -> None:
        self.sqlite = SQLiteBackend(str(path))
        self.failures = 0  # so many next commits raise StoreError("injected failure")
        self.doubts = 0  # so many next commits commit, then raise CommitInDoubt (the answer lost)
        self.hold = False  # commits wait at the gate until release()
        self._entered = threading.Semaphore(0)
        self._gate = threading.Semaphore(0)

    @property
    def name(self) -> str:
        return self.sqlite.name

    def commit(self, group: GroupRows) -> None:
        if self.hold:
            self._entered.release()
            if not self._gate.acquire(timeout=GATE_TIMEOUT):
                raise StoreError("held too long: the test failed before release()")
        if self.failures:
            self.failures -= 1
            raise StoreError("injected failure")
        self.sqlite.commit(group)
        if self.doubts:
            self.doubts -= 1
            raise CommitInDoubt("injected: connection lost during COMMIT")

    async def entered(self) -> None:
        """Wait until a held commit is at the gate (its group is in flight)."""
        assert await trio.to_thread.run_sync(self._entered.acquire, True, GATE_TIMEOUT), "no commit"

    def release(self) -> None:
        self._gate.release()

    def open(self) -> Recovery:
        return self.sqlite.open()

    def load_ready(self, queue: str, after: tuple[int, int] | None, limit: int,
                   matching: HeaderFilter | None = None) -> list[StoredMessage]:
        return self.sqlite.load_ready(queue, after, limit, matching)

    def read_ready(
        self, queue: str, after: tuple[int, int] | None, limit: int, hidden: frozenset[int],
        matching: HeaderFilter | None = None,
    ) -> tuple[list[StoredMessage], bool]:
        return self.sqlite.read_ready(queue, after, limit, hidden, matching)

    def close_reader(self) -> None:
        self.sqlite.close_reader()

    def count(self, queue: str) -> int:
        return self.sqlite.count(queue)

    def queue_names(self, prefix: str) -> list[str]:
        return self.sqlite.queue_names(prefix)

    def close(self) -> None:
        self.sqlite.close()

    def __getattr__(self, name: str) -> Any:
        """The rest of the backend (what a whole broker reads) is the SQLite one's."""
        return getattr(self.sqlite, name)


# -- coalescing ---------------------------------------------------------------------------------
def file_bytes(path: str) -> bytes:
    """The database and its WAL, raw: what did reach the disk, deleted cells included."""
    return b"".join(Path(path + suffix).read_bytes() for suffix in ("", "-wal"))


async def test_insert_then_delete_never_reaches_the_file(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        acked, kept = msg(1, body=b"ACKED-BEFORE-FLUSH" * 8), msg(2, body=b"KEPT-MESSAGE" * 8)
        store.insert(acked)
        store.insert(kept)
        store.delete(acked)
        assert store.backlog() == 1
        await committed(store, store.sync_ticket())
        assert seqs_on_disk(store.path) == {2}
        assert store.backlog() == 0
        raw = file_bytes(store.path)
        assert b"KEPT-MESSAGE" in raw
        assert b"ACKED-BEFORE-FLUSH" not in raw


async def test_insert_then_update_is_one_insert_with_the_new_fields(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        m = msg(1)
        store.insert(m)
        m.delivered, m.redeliveries, m.priority = True, 3, 9
        store.update(m)
        assert store.backlog() == 1
        await committed(store, store.sync_ticket())
        assert rows_on_disk(store.path)[1][:4] == ("q", 9, 1, 3)


async def test_update_then_delete_is_a_delete(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        m = msg(1)
        store.insert(m)
        await committed(store, store.sync_ticket())
        m.delivered = True
        store.update(m)
        store.delete(m)
        assert store.backlog() == 1
        await committed(store, store.sync_ticket())
        assert seqs_on_disk(store.path) == set()


async def test_fields_are_copied_when_the_batch_is_taken(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        m = msg(1)
        store.insert(m)
        ticket = store.sync_ticket()
        await trio.testing.wait_all_tasks_blocked()  # the commit loop has taken the batch
        m.delivered, m.redeliveries = True, 7  # later, without update(): not this group's business
        await committed(store, ticket)
        assert rows_on_disk(store.path)[1][2:4] == (0, 0)


# -- group commit -------------------------------------------------------------------------------
async def test_receipted_inserts_in_one_tick_share_a_group(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        commits = Commits(store)
        tickets = []
        for seq in range(1, 101):
            store.insert(msg(seq))
            tickets.append(store.sync_ticket())
        assert tickets == sorted(tickets)
        await committed(store, tickets[-1])
        assert len(commits.ok) <= 2
        assert commits.ok == sorted(commits.ok)
        assert len(seqs_on_disk(store.path)) == 100


async def test_a_promised_ticket_commits_when_its_writes_cancel_out(tmp_path: Path) -> None:
    """A receipt waits on the ticket of an insert that is then acked before its flush: with
    nothing left to write the ticket still commits, at once, not at some unrelated later write."""
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        commits = Commits(store)
        store.insert(msg(1))
        ticket = store.sync_ticket()
        store.delete(msg(1))
        await committed(store, ticket)
        assert commits.ok == [ticket]
        assert seqs_on_disk(store.path) == set()


async def test_writes_during_a_commit_form_the_next_group(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        commits = Commits(store)
        store.insert(msg(1))
        first = store.sync_ticket()
        await trio.testing.wait_all_tasks_blocked()  # group `first` is in flight
        assert store.sync_ticket() == first  # nothing new: the group in flight covers it all
        store.insert(msg(2))
        second = store.sync_ticket()
        assert second == first + 1
        assert store.backlog() == 2  # one in flight, one pending
        await committed(store, second)
        assert commits.ok == [first, second]
        assert commits.on_disk_at_commit == [{1}, {1, 2}]
        assert store.sync_ticket() == second  # idle: the last committed ticket


async def test_flush_interval_commits_without_a_ticket(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=0.02) as store:
        store.insert(msg(1))
        await committed(store, 1)
        assert seqs_on_disk(store.path) == {1}


async def test_a_timed_flush_holds_back_what_the_engine_names_once(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """A timed flush takes the engine's rule once (``StoreEvents.hold_back``) and leaves out the
    inserts it names: those wait one more interval, and settled by then they never reach the
    disk; still pending, they commit with the next flush, alone if need be, without being asked
    about again."""
    flush = 0.05
    async with running(tmp_path / "s.db", flush_interval=flush) as store:
        commits = Commits(store)
        commits.hold = {1, 2, 4}  # (out for delivery, or in a consumer's window)
        acked = msg(1, body=b"ACKED-IN-TIME" * 8)
        for m in (acked, msg(2), msg(3)):
            store.insert(m)
        mock_clock.jump(flush)
        await commits.wait(1)
        assert commits.on_disk_at_commit == [{3}]  # only the message the engine did not name
        assert commits.asked == [[1, 2, 3]]
        assert store.backlog() == 2
        store.delete_all([acked])  # settled within the interval: the insert is cancelled
        mock_clock.jump(flush)
        await commits.wait(2)
        assert commits.on_disk_at_commit[1] == {2, 3}  # held back once only
        assert b"ACKED-IN-TIME" not in file_bytes(store.path)

        store.insert(msg(4))  # nothing else pending: no group at the first flush
        mock_clock.jump(flush)
        await trio.testing.wait_all_tasks_blocked()
        assert len(commits.ok) == 2 and store.backlog() == 1
        mock_clock.jump(flush)
        await commits.wait(3)
        assert commits.on_disk_at_commit[2] == {2, 3, 4}
        assert commits.asked == [[1, 2, 3], [], [4], []]


async def test_delete_all_cancels_pending_inserts_and_deletes_stored_rows(tmp_path: Path) -> None:
    """A read's worth of ACKs in one call: an insert still buffered is dropped (its bytes leave
    the budget), a stored row is deleted, an update pending for it becomes the delete."""
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        stored = msg(1)
        store.insert(stored)
        await committed(store, store.sync_ticket())
        buffered = msg(2, body=b"NEVER-STORED" * 8)
        store.insert(buffered)
        stored.delivered = True
        store.update(stored)
        store.update(buffered)  # a pending insert already carries its fields: nothing more
        assert store.backlog() == 2
        store.delete_all([buffered, stored])
        assert store.backlog() == 1 and store.backlog_bytes() == 0
        await committed(store, store.sync_ticket())
        assert seqs_on_disk(store.path) == set()
        assert b"NEVER-STORED" not in file_bytes(store.path)


async def test_a_ticket_or_a_read_holds_nothing_back(tmp_path: Path) -> None:
    """A receipt promises the disk, and a read must see every write: neither waits for a delivery."""
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        commits = Commits(store)
        commits.hold = {1, 2}
        store.insert(msg(1, delivered=True))
        await committed(store, store.sync_ticket())
        assert seqs_on_disk(store.path) == {1}
        store.insert(msg(2, delivered=True))
        assert await store.count("q") == 2
        assert seqs_on_disk(store.path) == {1, 2}
        assert commits.asked == []


async def test_max_group_commits_without_waiting_for_the_interval(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER, max_group=10) as store:
        for seq in range(1, 11):
            store.insert(msg(seq))
        await committed(store, 1)
        assert len(seqs_on_disk(store.path)) == 10


async def test_close_commits_everything_pending(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"), flush_interval=NEVER)
    await store.open()
    store.insert(msg(1))
    store.write(SaveExchange(ExchangeRecord("ex", "consistent-hash")))
    await store.close()  # run() never ran
    assert seqs_on_disk(store.path) == {1}
    await store.close()  # twice is fine


# -- reads --------------------------------------------------------------------------------------
async def test_load_ready_orders_by_priority_then_seq_and_pages_after_a_key(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        messages = [msg(seq, priority=seq * 7 % 10) for seq in range(1, 41)]
        for m in messages:
            store.insert(m)
        store.insert(msg(100, queue="other", priority=9))
        delivered = messages[5]
        delivered.delivered = True
        store.update(delivered)  # delivered: never paged in
        expected = sorted((m for m in messages if not m.delivered), key=lambda m: m.order_key)

        # Unflushed writes are visible: they are laid over what the read finds on the disk.
        page = await store.load_ready("q", None, 1000)
        assert [m.seq for m in page] == [m.seq for m in expected]

        paged: list[StoredMessage] = []
        after = None
        while chunk := await store.load_ready("q", after, 3):
            assert len(chunk) <= 3
            paged += chunk
            after = chunk[-1].order_key
        assert [m.seq for m in paged] == [m.seq for m in expected]
        first = paged[0]
        original = next(m for m in messages if m.seq == first.seq)
        assert (first.queue, first.priority, first.headers, first.body, first.timestamp) == (
            "q", original.priority, original.headers, original.body, original.timestamp
        )
        assert not first.delivered
        assert await store.load_ready("missing", None, 10) == []


async def test_a_page_read_takes_buffered_messages_from_memory_and_commits_nothing(
    tmp_path: Path,
) -> None:
    """A page read no longer commits the batch first: buffered messages come from memory, as the
    very objects the broker made, and one settled before its flush never reaches the file."""
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        stored = [msg(seq, body=b"x" * 65536) for seq in range(1, 6)]
        for m in stored[:2]:
            store.insert(m)
        await committed(store, store.sync_ticket())
        for m in stored[2:]:
            store.insert(m)
        page = await store.load_ready("q", None, 4)
        assert [m.seq for m in page] == [1, 2, 3, 4]
        assert page[2] is stored[2] and page[3] is stored[3]
        assert page[0] is not stored[0]  # read from the file
        assert seqs_on_disk(store.path) == {1, 2}
        for m in page:
            store.delete(m)
        assert [m.seq for m in await store.load_ready("q", (-4, 4), 10)] == [5]
    assert seqs_on_disk(str(tmp_path / "s.db")) == {5}


async def test_buffered_deletes_updates_and_deliveries_hide_rows_and_pages_stay_full(
    tmp_path: Path,
) -> None:
    """Rows the buffer knows newer news of are left out, and the read refills past them, so a page
    is ``limit`` long while the disk has more and short only at the end of the queue."""
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        stored = [msg(seq) for seq in range(1, 13)]
        for m in stored:
            store.insert(m)
        await committed(store, store.sync_ticket())
        for m in stored[1:4]:
            store.delete(m)  # 2, 3, 4 gone
        stored[4].delivered = True
        store.update(stored[4])  # 5 delivered
        stored[5].delivered = True  # 6 in flight (auto-ack: no update, the flag alone)
        store.insert(stored[5])
        store.insert(urgent := msg(20, priority=9))  # buffered, first by priority
        page = await store.load_ready("q", None, 5)
        assert [m.seq for m in page] == [20, 1, 7, 8, 9]
        rest = await store.load_ready("q", page[-1].order_key, 5)
        assert [m.seq for m in rest] == [10, 11, 12]
        assert urgent in page
        assert seqs_on_disk(store.path) == set(range(1, 13))  # nothing was committed to read


async def test_a_page_read_does_not_wait_for_a_commit_in_progress(tmp_path: Path) -> None:
    """The read runs on its own connection beside the database thread: a slow commit (a large
    group's fsync) does not delay it, and the group's writes are laid over what it finds."""
    backend = ControlledBackend(tmp_path / "s.db")
    store = GroupCommitStore(backend, flush_interval=NEVER)
    async with serving(store):
        store.insert(msg(1))
        await committed(store, store.sync_ticket())
        backend.hold = True
        store.insert(msg(2))
        store.delete(first := (await store.load_ready("q", None, 1))[0])
        assert first.seq == 1
        ticket = store.sync_ticket()
        await backend.entered()  # the group (insert 2, delete 1) waits at the gate
        store.insert(msg(3))
        with trio.fail_after(5):
            page = await store.load_ready("q", None, 10)
        assert [m.seq for m in page] == [2, 3]
        assert store.committed < ticket
        backend.hold = False
        backend.release()
        await committed(store, ticket)


async def test_a_page_read_behind_a_large_buffer_commits_it_first(tmp_path: Path) -> None:
    """Laying the buffer over the disk scans it on the engine's thread: past READ_THROUGH_OPS
    operations (many small messages, whose commit is quick) the read waits behind the batch."""
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        count = READ_THROUGH_OPS + 2 * 10 + 1
        for seq in range(1, count + 1):
            store.insert(msg(seq))
        page = await store.load_ready("q", None, 10)
        assert [m.seq for m in page] == list(range(1, 11))
        assert seqs_on_disk(store.path) == set(range(1, count + 1))


async def test_a_page_read_reads_through_a_buffer_of_large_messages_however_long(tmp_path: Path) -> None:
    """Past READ_THROUGH_OPS operations a buffer of large bodies (slow to commit, quick to scan
    per byte) is still laid over the disk rather than committed first."""
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        count = READ_THROUGH_OPS + 2 * 10 + 1
        for seq in range(1, count + 1):
            store.insert(msg(seq, body=b"x" * READ_THROUGH_BYTES_PER_OP))
        page = await store.load_ready("q", None, 10)
        assert [m.seq for m in page] == list(range(1, 11))
        assert seqs_on_disk(store.path) == set()


async def test_count_includes_delivered_and_sees_pending_writes(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        for seq in range(1, 6):
            store.insert(msg(seq))
        store.insert(msg(6, queue="other"))
        m = msg(7)
        m.delivered = True
        store.insert(m)
        assert await store.count("q") == 6
        store.delete(msg(1))
        assert await store.count("q") == 5
        assert await store.count("other") == 1
        assert await store.count("missing") == 0


# -- restart ------------------------------------------------------------------------------------
async def test_restart_recovers_unacked_messages_exchanges_bindings_and_last_seq(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with running(path, flush_interval=NEVER) as store:
        for seq in range(1, 6):
            store.insert(msg(seq))
        out = msg(3)
        out.delivered = True
        store.update(out)
        store.write(SaveExchange(ExchangeRecord("ex", "consistent-hash", {"hash-header": "k"})))
        store.write(SaveExchange(ExchangeRecord("gone", "consistent-hash")))
        store.write(SaveBinding(BindingRecord("ex", "a", 10)))
        store.write(SaveBinding(BindingRecord("ex", "b", 20)))
        store.write(SaveBinding(BindingRecord("ex", "b", 30)))  # replaces
        store.write(SaveBinding(BindingRecord("gone", "a", 1)))
        store.write(DropExchange("gone"))  # takes its bindings along
        store.insert(msg(7))
        store.delete(msg(7))  # acked before any flush: never on disk, yet seq 7 was used
        store.delete(msg(5))

    store = SQLiteStore(str(path))
    try:
        recovery = await store.open()
        assert recovery.last_seq == 7
        assert recovery.exchanges == [ExchangeRecord("ex", "consistent-hash", {"hash-header": "k"})]
        assert recovery.bindings == [BindingRecord("ex", "a", 10), BindingRecord("ex", "b", 30)]
        ready = await store.load_ready("q", None, 100)
        assert [m.seq for m in ready] == [1, 2, 3, 4]
        assert {m.seq: m.redeliveries for m in ready} == {1: 0, 2: 0, 3: 1, 4: 0}
        store.write(DropBinding("ex", "a"))
    finally:
        await store.close()
    assert rows_on_disk(str(path))[3][2:4] == (0, 1)

    store = SQLiteStore(str(path))
    try:
        recovery = await store.open()
        assert recovery.bindings == [BindingRecord("ex", "b", 30)]
        assert (await store.load_ready("q", None, 100))[2].redeliveries == 1  # not counted twice
    finally:
        await store.close()


async def test_restart_requeues_only_the_delivered_rows_through_their_index(tmp_path: Path) -> None:
    """Recovery walks ix_messages_delivered, not the backlog; the index follows every way a row
    becomes delivered or ready again (insert, update, requeue, ack)."""
    path = tmp_path / "s.db"
    async with running(path, flush_interval=NEVER) as store:
        for seq in range(1, 7):
            store.insert(msg(seq, delivered=seq == 1))  # 1: delivered before its first commit
        await committed(store, store.sync_ticket())
        updates = [msg(2, delivered=True), msg(3, delivered=True), msg(4, delivered=True)]
        for m in updates:
            store.update(m)
        await committed(store, store.sync_ticket())
        store.update(msg(3, delivered=False, redeliveries=1))  # NACKed: ready again
        store.delete(msg(4))  # acked
        await committed(store, store.sync_ticket())
    conn = sqlite3.connect(path)
    try:
        plan = " ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {REQUEUE_DELIVERED_SQL}"))
        assert "ix_messages_delivered" in plan
        indexed = [seq for (seq,) in conn.execute("SELECT seq FROM messages INDEXED BY ix_messages_delivered"
                                                  " WHERE delivered = 1 ORDER BY seq")]
        assert indexed == [1, 2]
    finally:
        conn.close()
    store = SQLiteStore(str(path))
    try:
        await store.open()
        ready = await store.load_ready("q", None, 10)
        assert [(m.seq, m.redeliveries) for m in ready] == [(1, 1), (2, 1), (3, 1), (5, 0), (6, 0)]
    finally:
        await store.close()
    assert {seq: row[2] for seq, row in rows_on_disk(str(path)).items()} == {1: 0, 2: 0, 3: 0, 5: 0, 6: 0}


async def test_open_checks_only_the_schema_of_a_large_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """quick_check would read every page of a large backlog before the first delivery."""
    monkeypatch.setattr(sqlite_file, "CHECK_WHOLE_BYTES", 0)
    path = tmp_path / "s.db"
    async with running(path) as store:
        store.insert(msg(1))
    checks: list[str] = []
    conn = sqlite3.connect(path)
    conn.set_trace_callback(checks.append)
    assert sqlite_file.quick_check(conn, str(path)) == ["ok"]
    conn.close()
    assert not any("quick_check" in sql for sql in checks)
    async with running(path) as store:
        assert [m.seq for m in await store.load_ready("q", None, 10)] == [1]
    path.write_bytes(b"this is certainly not sqlite\n" * 400)
    await expect_open_error(path, "not a SQLite database or is corrupt")


# -- purge --------------------------------------------------------------------------------------
async def test_purge_cancels_pending_inserts_and_deletes_stored_ones(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        store.insert(msg(1))
        store.insert(msg(2, queue="other"))
        await committed(store, store.sync_ticket())
        store.insert(msg(3))
        store.write(Purge("q"))
        assert store.backlog() == 1  # msg 3 is gone from the batch, the purge is in
        store.insert(msg(4))  # after the purge: survives it
        await committed(store, store.sync_ticket())
        assert seqs_on_disk(store.path) == {2, 4}


# The contract of Backend.commit that Broker.purge_queue relies on: a group runs its purges
# before its message rows, because every message operation left in a group after a purge was
# issued after that purge.
async def test_purge_then_insert_in_one_batch_survives_the_commit_and_a_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with running(path, flush_interval=NEVER) as store:
        in_flight = msg(1)
        store.insert(in_flight)
        store.insert(msg(2))
        await committed(store, store.sync_ticket())
        in_flight.delivered = True
        store.update(in_flight)
        store.write(Purge("q"))
        store.insert(in_flight)  # written back after the purge, as Broker.purge_queue does
        store.insert(msg(3))  # a SEND after the purge
        assert store.backlog() == 3  # one batch: the purge and two inserts
        await committed(store, store.sync_ticket())
        assert seqs_on_disk(store.path) == {1, 3}
        assert rows_on_disk(store.path)[1][2] == 1  # still out for delivery
    store = SQLiteStore(str(path))
    try:
        await store.open()
        ready = await store.load_ready("q", None, 10)
        assert [(m.seq, m.redeliveries) for m in ready] == [(1, 1), (3, 0)]
    finally:
        await store.close()


async def test_insert_then_purge_before_the_flush_stores_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with running(path, flush_interval=NEVER) as store:
        store.insert(msg(1, body=b"PURGED-BEFORE-FLUSH" * 8))
        store.write(Purge("q"))
        assert store.backlog() == 1  # the purge alone
        await committed(store, store.sync_ticket())
        assert seqs_on_disk(store.path) == set()
        assert b"PURGED-BEFORE-FLUSH" not in file_bytes(store.path)
    store = SQLiteStore(str(path))
    try:
        await store.open()
        assert await store.count("q") == 0
    finally:
        await store.close()


async def test_failed_group_merged_back_under_a_newer_purge_is_not_resurrected(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    backend = ControlledBackend(path)
    store = GroupCommitStore(backend, flush_interval=NEVER)
    failed: list[int] = []
    store.bind(Reports(commit_failed=lambda ticket, error: failed.append(ticket)))
    async with serving(store):
        stored = msg(1)
        store.insert(stored)
        await committed(store, store.sync_ticket())
        stored.delivered = True
        store.update(stored)
        store.insert(msg(2))
        store.insert(msg(3, queue="other"))
        backend.hold, backend.failures = True, 1
        ticket = store.sync_ticket()
        await backend.entered()  # the group (update 1, insert 2, insert 3) is in flight
        store.write(Purge("q"))  # newer than the group: its ops on q must not come back after it
        store.insert(msg(4))  # after the purge: survives it
        backend.hold = False
        backend.release()
        await committed(store, store.sync_ticket())
        assert failed == [ticket]
        assert seqs_on_disk(str(path)) == {3, 4}
    store = SQLiteStore(str(path))
    try:
        await store.open()
        assert [m.seq for m in await store.load_ready("q", None, 10)] == [4]
        assert [m.seq for m in await store.load_ready("other", None, 10)] == [3]
    finally:
        await store.close()


# -- full disk ----------------------------------------------------------------------------------
async def test_full_disk_reports_failure_keeps_the_ops_and_retries(tmp_path: Path) -> None:
    big = b"x" * 2000  # two rows per 4 KiB page
    async with running(tmp_path / "s.db", flush_interval=NEVER, max_page_count=100) as store:
        commits = Commits(store)
        first = [msg(seq, body=big) for seq in range(1, 81)]
        for m in first:
            store.insert(m)
        await committed(store, store.sync_ticket())
        before = seqs_on_disk(store.path)

        for seq in range(100, 220):  # 60 more pages: over the limit
            store.insert(msg(seq, body=big))
        # A queue first seen in the failing group: its row is rolled back with the group.
        store.insert(msg(220, queue="fresh"))
        failed_ticket = store.sync_ticket()
        await until(lambda: commits.failed, "a failed commit")
        ticket, error = commits.failed[0]
        assert ticket == failed_ticket
        assert "full" in str(error)
        assert store.committed < failed_ticket
        assert seqs_on_disk(store.path) == before  # rolled back as a whole
        assert store.backlog() >= 121  # kept for a retry

        for m in first:  # free space: the deletes run before the retried inserts
            store.delete(m)
        retry = store.sync_ticket()
        await committed(store, retry)
        assert seqs_on_disk(store.path) == set(range(100, 221))
        assert rows_on_disk(store.path)[220][0] == "fresh"
        # Every commit reported was on disk when reported, and none after the failure
        # claimed more than the file held.
        assert failed_ticket not in commits.ok
        assert commits.on_disk_at_commit[0] == before


# -- back-pressure ------------------------------------------------------------------------------
async def test_wait_for_room_returns_at_once_when_below(tmp_path: Path) -> None:
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        store.insert(msg(1))
        with trio.testing.assert_no_checkpoints():
            await store.wait_for_room()
    with trio.testing.assert_no_checkpoints():
        await MemoryStore().wait_for_room()


async def test_wait_for_room_wakes_when_groups_finish_without_polling(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """Time stands still here (it moves only when the test jumps it), so what wakes the waiter
    can only be a group finishing, never a timer; a failed group wakes it too, to re-check."""
    backend = ControlledBackend(tmp_path / "s.db")
    store = GroupCommitStore(backend, flush_interval=NEVER, max_backlog=3)
    failed, group_committed = trio.Event(), trio.Event()
    store.bind(Reports(lambda ticket: group_committed.set(), lambda ticket, error: failed.set()))
    backlog_at_return: list[int] = []

    async def waiter() -> None:
        await store.wait_for_room()
        backlog_at_return.append(store.backlog())

    async with serving(store), trio.open_nursery() as nursery:
        for seq in range(1, 4):
            store.insert(msg(seq))
        backend.hold, backend.failures = True, 1
        store.sync_ticket()
        await backend.entered()  # group 1 (seqs 1-3) is in flight
        store.insert(msg(4))
        store.insert(msg(5))
        assert store.backlog() == 5
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert backlog_at_return == []

        backend.release()  # group 1 fails: its ops are pending again
        await failed.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert backlog_at_return == []
        assert store.backlog() == 5

        mock_clock.jump(RETRY_BACKOFF)  # the retry: group 2 takes all five
        await backend.entered()
        store.insert(msg(6))  # waits for the next group
        backend.hold = False
        backend.release()
        await group_committed.wait()  # group 2
        await trio.testing.wait_all_tasks_blocked()  # a sleeping waiter would still sleep
        assert backlog_at_return == [1]  # seq 6 is still pending: below 3 is enough
    assert seqs_on_disk(backend.name) == {1, 2, 3, 4, 5, 6}


async def test_unflushed_bytes_bound_the_backlog_and_start_groups_early(tmp_path: Path) -> None:
    """Memory for writes not yet on disk is bounded in bytes, not only in operations."""
    backend = ControlledBackend(tmp_path / "s.db")
    body = b"x" * (64 * 1024)
    store = GroupCommitStore(backend, flush_interval=NEVER, max_backlog_bytes=4 * len(body))
    committed_groups: list[int] = []
    store.bind(Reports(committed_groups.append))
    async with serving(store):
        backend.hold = True
        store.insert(msg(1, body=body))  # a quarter of the budget: a group starts without a ticket
        await backend.entered()
        assert store.backlog_bytes() == len(body) + MESSAGE_OVERHEAD
        for seq in range(2, 5):
            store.insert(msg(seq, body=body))
        store.delete(msg(4, body=body))  # never reaches the disk, and stops counting
        assert store.backlog_bytes() == 3 * (len(body) + MESSAGE_OVERHEAD)
        store.insert(msg(5, body=body))
        store.insert(msg(6, body=body))
        assert store.backlog() == 5
        with trio.move_on_after(1) as waited:  # 5 x 64 KiB and more > 256 KiB: full
            await store.wait_for_room()
        assert waited.cancelled_caught
        backend.hold = False
        backend.release()
        await store.wait_for_room()
        assert committed_groups
    assert seqs_on_disk(backend.name) == {1, 2, 3, 5, 6}


# -- open failures ------------------------------------------------------------------------------
async def expect_open_error(path: Path | str, *fragments: str) -> StoreError:
    store = SQLiteStore(str(path))
    with pytest.raises(StoreError) as info:
        await store.open()
    await store.close()  # safe after a failed open
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    return info.value


async def test_open_fails_when_the_directory_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    await expect_open_error(tmp_path / "file" / "s.db", "cannot create directory")


async def test_open_fails_on_an_unwritable_directory(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    with immutable(directory):
        await expect_open_error(directory / "s.db", "directory", "is not writable")


async def test_open_fails_on_an_unwritable_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with running(path):
        pass
    with immutable(path):
        await expect_open_error(path, "the file is not writable")


async def test_open_fails_when_another_store_holds_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with running(path):
        await expect_open_error(path, "locked by another process", str(os.getpid()))
    async with running(path):  # released at close
        pass


async def test_open_fails_on_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"this is certainly not sqlite\n" * 400)
    await expect_open_error(path, "not a SQLite database or is corrupt")


async def test_open_fails_on_a_corrupt_database(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with running(path, flush_interval=NEVER) as store:
        for seq in range(1, 500):
            store.insert(msg(seq, body=b"y" * 500))
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 10 * page
    data[3 * page : 10 * page] = os.urandom(7 * page)  # trash b-tree pages, keep the header
    path.write_bytes(bytes(data))
    await expect_open_error(path, str(path))
    error = await expect_open_error(path)
    assert "corrupt" in str(error)


# -- the whole contract, against a model ----------------------------------------------------------
ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.sampled_from(["a", "b"]), st.integers(0, 9)),
        st.tuples(st.just("update"), st.integers(0, 1000), st.integers(0, 9)),
        st.tuples(st.just("delete"), st.integers(0, 1000)),
        st.tuples(st.just("purge"), st.sampled_from(["a", "b"])),
        st.tuples(st.just("sync")),
        st.tuples(st.just("wait")),
        st.tuples(st.just("read"), st.sampled_from(["a", "b"])),
        st.tuples(st.just("fail")),
    ),
    max_size=60,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
async def test_store_matches_a_model(script: list[tuple[Any, ...]]) -> None:
    """Random writes, flushes, failed groups and reads: reads and the final file equal a model.

    A "fail" step makes the next group the database thread runs fail before it touches the file,
    so the failed operations must be merged back under the newer ones and retried.
    """
    model: dict[int, StoredMessage] = {}
    next_seq = 1
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "s.db")
        backend = ControlledBackend(path)
        store = GroupCommitStore(backend, flush_interval=NEVER)
        async with serving(store):
            for op in script:
                live = sorted(model)
                if op[0] == "insert":
                    m = msg(next_seq, queue=op[1], priority=op[2])
                    next_seq += 1
                    model[m.seq] = m
                    store.insert(m)
                elif op[0] == "update" and live:
                    m = model[live[op[1] % len(live)]]
                    m.delivered = not m.delivered
                    m.redeliveries += 1
                    m.priority = op[2]
                    store.update(m)
                elif op[0] == "delete" and live:
                    store.delete(model.pop(live[op[1] % len(live)]))
                elif op[0] == "purge":
                    model = {s: m for s, m in model.items() if m.queue != op[1]}
                    store.write(Purge(op[1]))
                elif op[0] == "sync":
                    store.sync_ticket()
                elif op[0] == "wait":
                    await committed(store, store.sync_ticket())
                elif op[0] == "read":
                    ready = sorted(
                        (m for m in model.values() if m.queue == op[1] and not m.delivered),
                        key=lambda m: m.order_key,
                    )
                    paged: list[StoredMessage] = []
                    try:
                        page = await store.load_ready(op[1], None, 1000)
                        stored = await store.count(op[1])
                        while chunk := await store.load_ready(op[1], paged[-1].order_key if paged else None, 2):
                            paged += chunk
                    except StoreError as error:
                        assert "injected failure" in str(error)
                        continue
                    assert [m.seq for m in page] == [m.seq for m in ready]
                    assert stored == sum(m.queue == op[1] for m in model.values())
                    assert [m.seq for m in paged] == [m.seq for m in ready]
                elif op[0] == "fail":
                    backend.failures += 1
            backend.failures = 0
        on_disk = rows_on_disk(path)
        assert {
            seq: (m.queue, m.priority, int(m.delivered), m.redeliveries) for seq, m in model.items()
        } == {seq: row[:4] for seq, row in on_disk.items()}



async def test_group_offsets_coalesce_to_one_row_per_group_and_are_recovered(tmp_path: Path) -> None:
    """A thousand ACKs between two flushes are one write per consumer group; forgetting a group
    deletes its row, deleting a stream its groups (a commit buffered after the delete stays)."""
    async with running(tmp_path / "s.db", flush_interval=NEVER) as store:
        for offset in range(1, 1001):
            store.save_stream_group("s", "g", offset)
        store.save_stream_group("s", "h", 5)
        store.save_stream_group("s", "gone", 7)
        store.save_stream_group("other", "g", 3)
        store.save_stream_group("dropped", "g", 3)
        assert store.backlog() == 5
        await committed(store, store.sync_ticket())
        store.save_stream_group("s", "gone", None)
        store.save_stream_group("dropped", "g", 4)
        store.write(DropStream("dropped"))
        store.write(DropStream("other"))
        store.save_stream_group("other", "g", 9)
    store = SQLiteStore(str(tmp_path / "s.db"))
    recovery = await store.open()
    await store.close()
    assert {record.name: record.groups for record in recovery.streams} == {"s": {"g": 1000, "h": 5},
                                                                          "other": {"g": 9}}
