"""The group-commit engine: a coalescing write buffer on the trio thread, group commits on a
database thread, over any SQL backend.

Theory of operation
-------------------
* The broker must never wait on the disk per message, so ``insert``/``update``/
  ``delete`` only touch ``_pending``, a dict keyed by seq.  Keying by seq is what
  makes coalescing free: insert + delete of a message acked before its flush
  removes the entry (the message never touches the disk), insert + update stays
  one insert, update + delete becomes a delete.  The entry keeps a reference to
  the broker's ``StoredMessage``; its mutable fields (``delivered``,
  ``redeliveries``, ``priority``) are copied into plain tuples when the batch
  is taken, so a group commits the state of that moment and the database thread
  never reads objects the broker keeps mutating.
* Structural rows (``write``: purges, exchange and binding changes) are rare and kept in order in
  ``_structural``.  A purge drops the pending operations of its queue's
  messages, so every message operation left in a batch was issued after the
  batch's purges: that is why a backend runs the structural operations first
  (the contract of ``Backend.commit``), and why ``Dispatcher.purge`` may write
  its deliveries in flight back right after a purge.
* Group commit: the commit loop in ``run()`` keeps at most ONE group in
  flight.  While it commits (one fsync), new writes pile up in ``_pending`` and
  form the next group, so a thousand receipted SENDs share one fsync.  A group
  is taken at once when ``sync_ticket()`` asked for it or ``max_group`` is
  reached, otherwise ``flush_interval`` after the first buffered write.  One
  group at a time also keeps failure simple: a failed group's operations are
  merged back under the newer pending ones and retried by the next group
  (after ``RETRY_BACKOFF``), and no later group ever ran on top of it.  A purge
  among the newer operations wins over the failed group's operations on that
  queue, which are dropped, not resurrected.
* A store outage (a full disk, PostgreSQL restarting) is a run of failed groups:
  the receipts waiting on them wait on (broker/receipts.py), the merged-back
  writes count against the backlog bounds, so producers are held back, and
  ``storage/outage.py`` logs the outage once each way.  A group whose commit's
  outcome was lost with the connection (``CommitInDoubt``) is merged back too,
  but its inserts stay *in doubt* until a commit succeeds: the retry writes them
  again (backends accept a row already there), a newer delete no longer cancels
  one (the row may be on disk), and ``withdraw`` refuses them.  ``withdraw``
  drops a buffered insert certainly not on disk (never tried, or its group
  failed for sure), on the trio thread and so in the same step as the
  decision to answer ERROR: no commit can take it afterwards.
* A group the database refuses for what it carries (``StoreRejected``) commits without the rows
  refused, which are reported (``storage/refusals.py``).
* Stream entries are append-only: they never coalesce, so they wait in a plain
  list (``_stream_appends``) and travel with the group as ``stream_rows``.  A
  trim (retention) drops the pending entries it covers, like a purge, so the
  rows left in a group all survive its structural operations.  On a shared store the
  entries are unnumbered (``UNNUMBERED`` sorts after every offset, so only a purge's
  ``TRIM_ALL`` drops them) and the backend numbers them in the commit; the states of the
  streams a group changed (``GroupRows.stream_states``) go to ``events.stream_changed`` before
  the group's ``events.committed``, so a RECEIPT released by it finds the engine knowing the new offsets.
* Consumer groups' committed offsets (``save_stream_group``: one per stream ACK of a
  group's subscriber) coalesce in ``_group_offsets`` keyed by (stream, group), the newest
  wins, and travel as ``group_offsets``: a thousand ACKs between two flushes are one row.
  A failed group's offsets go back under the newer ones; a stream's delete drops its own.
* Tickets are group numbers.  ``events.committed(t)`` means every group up to ``t``
  is on disk (a failed group's operations travel in a later one); groups
  commit in order, so tickets do.
* Memory is bounded twice: by operations (``max_backlog``) and by the bytes of
  the messages inserted and not yet on disk (``max_backlog_bytes``, counting
  ``len(body) + MESSAGE_OVERHEAD``), pending and in flight together.  Past
  either bound ``wait_for_room`` holds the server's readers (producers stop
  being read, receipts stay in order behind their tickets; a reader is held
  between reads, so the read that filled the budget goes past it: up to 256 KiB,
  ``server/transport.py``), and a batch of
  ``max_backlog_bytes / 4`` starts a group at once, so big messages never wait
  for the flush interval while the budget fills.
* Messages about to be consumed wait one flush: a group taken by the flush
  timer (no receipt waits for it, nothing is full) leaves out, once, the
  inserts the engine's rule names (engine policy, broker/dispatch.py
  ``settling_soon``, handed over by ``StoreEvents.hold_back`` once per such
  group): of messages delivered and not yet settled (a client-ack delivery not
  yet acked, an auto-ack one whose bytes have not reached the socket) and of
  messages waiting in a subscribed queue's ready window (a client-ack consumer
  behind its prefetch gets them next).  Most settle within the next interval,
  and their delete cancels the insert, so the message never touches the disk;
  the rest commit with the next group, within two flush intervals.  Without
  it a message that takes longer than the time left to the next flush costs a
  row insert and a row delete (measured: auto-ack, settled at the socket,
  committed ~50 % of its messages that way; client-individual with prefetch
  1000, ~17 % through the ready window).  A message nobody here holds (a
  queue without subscribers, beyond a window's boundary) commits at the first
  flush.  Groups asked for by a ticket, a read, a full batch or ``close`` hold
  nothing back.
* Every group that finishes, committed or failed, sets one ``trio.Event``:
  ``wait_for_room`` and the wait for the group in flight sleep on it, so
  nothing here polls.
* Reads run behind the pending batch, or beside it for SQLite's page reads
  (``storage/groupreads.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar, TypeVarTuple, overload

import trio

from stompmq.storage.backend import Backend, ConcurrentReads
from stompmq.storage.base import (
    MESSAGE_OVERHEAD,
    CommitInDoubt,
    Recovery,
    StoredMessage,
    StoreError,
    StoreHealth,
    StreamMessage,
)
from stompmq.storage.commit_group import CommitGroup
from stompmq.storage.groupreads import GroupReads
from stompmq.storage.groups import (
    DELETE,
    INSERT,
    UPDATE,
    DelayedRow,
    DeleteRow,
    GroupRows,
    InsertRow,
    PendingOp,
    StreamRow,
    StructuralOp,
    TopicMessage,
    UpdateRow,
)
from stompmq.storage.outage import Outage
from stompmq.storage.refusals import commit_isolating, report_rejected
from stompmq.storage.rows import CapExpiry, DropStream, DropVhost, Purge, Release, Row, TrimStream
from stompmq.storage.thread import DatabaseThread
from stompmq.vhost_names import vhost_space

# Longest a buffered write waits for its group when nobody asks for a ticket: bounds what a
# crash loses of unreceipted SENDs while letting bursts share one fsync.
FLUSH_INTERVAL = 0.05
# Pending message operations that start a group without waiting for the interval: a full
# batch gains nothing by waiting, and a shorter transaction lets a read queued behind it through.
MAX_GROUP = 10_000
# Message operations buffered or in flight before the server stops reading its clients.
MAX_BACKLOG = 200_000
# Bytes of inserted messages buffered or in flight before the server stops reading its clients:
# without it 40,000 SENDs of 64 KiB took 2.5 GB while the disk fell behind.
MAX_BACKLOG_BYTES = 64 * 1024 * 1024
# After a failed group, wait this long before the next try: a full disk is not fixed in a loop.
RETRY_BACKOFF = 0.1

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class GroupCommitStore(GroupReads):
    """A durable store: group commits of coalesced writes to ``backend`` on its own thread."""

    def __init__(
        self,
        backend: Backend,
        *,
        flush_interval: float = FLUSH_INTERVAL,
        max_group: int = MAX_GROUP,
        max_backlog: int = MAX_BACKLOG,
        max_backlog_bytes: int = MAX_BACKLOG_BYTES,
    ) -> None:
        super().__init__()
        self._backend = backend
        self._flush_interval = flush_interval
        self._max_group = max_group
        self._max_backlog = max_backlog
        self._max_backlog_bytes = max_backlog_bytes
        self._max_group_bytes = max(1, max_backlog_bytes // 4)
        self._pending_bytes = 0  # of the inserts in _pending (an over-estimate, never under)
        self._inflight_bytes = 0  # of the inserts in the group in flight
        self._thread: DatabaseThread | None = None
        # Page reads beside the commits: their thread and the backend's reads (ConcurrentReads).
        self._reader: tuple[DatabaseThread, ConcurrentReads] | None = None
        self._closed = False
        self._pending: dict[int, PendingOp] = {}
        self._structural: list[StructuralOp] = []
        self._stream_appends: list[StreamMessage] = []
        self._group_offsets: dict[tuple[str, str], int | None] = {}
        self._pending_since = 0.0  # trio time of the first write of the current batch
        self._urgent = False  # commit the batch without waiting for the interval
        self._kick = trio.Event()  # wakes the commit loop
        #: The commit loop's sleep while it sleeps (its deadline: the flush due, inf: none).
        self._sleep: trio.CancelScope | None = None
        self._inflight: CommitGroup | None = None
        self._group_finished = trio.Event()  # set (and replaced) each time a group finishes
        self._held_back: frozenset[int] = frozenset()  # seqs left out of the last timed group (once only)
        self._passed: set[int] = set()  # seqs freed with news naming each one (pass_over)
        self._promotions: dict[int, int] = {}  # copy seq -> delayed seq, until the copy's insert is taken
        self._committed = 0
        self._next_ticket = 1
        self._last_seq = 0
        # Seqs of inserts whose commit is in doubt (CommitInDoubt): never withdrawn, until a
        # commit carrying them again succeeds.
        self._in_doubt: set[int] = set()
        self._outage = Outage(backend.name)

    # -- lifecycle ---------------------------------------------------------------------------
    async def open(self) -> Recovery:
        backend = self._backend
        if self._thread is not None:
            raise StoreError(f"{backend.name} is already open")
        thread = DatabaseThread(
            f"stompmq-db {backend.name}", backend.close, trio.lowlevel.current_trio_token()
        )
        self._thread, self._closed = thread, False
        thread.start()
        try:
            recovery = await thread.call(backend.open)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._stop_thread()
            raise
        self._last_seq = recovery.last_seq
        if isinstance(backend, ConcurrentReads) and not self.shared:
            reader = DatabaseThread(
                f"stompmq-reader {backend.name}", backend.close_reader, trio.lowlevel.current_trio_token()
            )
            reader.start()
            self._reader = (reader, backend)
        return recovery

    async def run(self) -> None:
        while True:
            await self._wait_for_work()
            await self._wait_idle()
            if self._closed:
                return  # close() committed the last batch; writes after it are a caller bug
            if self._has_pending():
                group = self._submit_group(hold_back=not self._urgent)
                if group is None:
                    continue  # only messages about to be consumed: they wait for the next flush
                if await self._await_group(group) is not None:
                    await trio.sleep(RETRY_BACKOFF)
            elif self._urgent:
                self._commit_nothing()

    def _commit_nothing(self) -> None:
        """A ticket was promised but its writes cancelled out (an insert acked before its
        flush): with nothing in flight it is committed already, so say so, or its receipts
        would wait for some unrelated later write."""
        self._urgent = False
        self._committed = self._next_ticket
        self._next_ticket += 1
        self.events.committed(self._committed)

    async def close(self) -> None:
        if self._thread is None:
            return
        self._closed = True
        try:
            while self._has_pending() or self._inflight is not None:
                await self._wait_idle()
                if self._has_pending() and await self._await_group(self._submit_group()) is not None:
                    raise StoreError(
                        f"{self.backlog()} operations could not be committed to"
                        f" {self._backend.name} at shutdown"
                    )
        finally:
            with trio.CancelScope(shield=True):
                await self._stop_thread()

    async def _stop_thread(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:  # first: the database thread's close releases the file
            await reader[0].stop()
        thread, self._thread = self._thread, None
        if thread is not None:
            await thread.stop()

    # -- buffered writes ---------------------------------------------------------------------
    def insert(self, msg: StoredMessage) -> None:
        seq = msg.seq
        pending = self._pending  # (update's steps, spelled out: once per message published)
        if not pending and not self._has_pending():
            self._batch_started()
        pending[seq] = (INSERT, msg)
        if len(pending) >= self._max_group and not self._urgent:
            self._hurry()
        if seq > self._last_seq:
            self._last_seq = seq
        self._pending_bytes += len(msg.body) + MESSAGE_OVERHEAD
        if self._pending_bytes >= self._max_group_bytes and not self._urgent:
            self._hurry()

    def update(self, msg: StoredMessage) -> None:
        entry = self._pending.get(msg.seq)
        if entry is not None and entry[1] is msg:
            return  # a pending insert or update of it copies its fields when the batch is taken
        pending = self._pending
        if not pending and not self._has_pending():  # (the first test settles most calls)
            self._batch_started()
        pending[msg.seq] = (UPDATE if entry is None else entry[0], msg)
        if len(pending) >= self._max_group and not self._urgent:
            self._hurry()

    def pass_over(self, msg: StoredMessage) -> None:
        self._passed.add(msg.seq)  # (cleared at every group: one not in it is news of the usual kind)
        self.update(msg)

    def delete(self, msg: StoredMessage) -> None:
        self.delete_all((msg,))

    def delete_all(self, messages: Sequence[StoredMessage]) -> None:
        pending = self._pending
        if not self._has_pending():
            self._batch_started()
        freed = 0
        in_doubt = self._in_doubt  # (empty but after a commit whose outcome was lost)
        for msg in messages:
            seq = msg.seq
            entry = pending.get(seq)
            if entry is not None and entry[0] == INSERT and seq not in in_doubt:
                del pending[seq]  # never reached the disk: nothing to do there
                freed += len(msg.body) + MESSAGE_OVERHEAD
            else:
                pending[seq] = (DELETE, msg)
        self._pending_bytes -= freed
        if len(pending) >= self._max_group and not self._urgent:
            self._hurry()

    def promoted(self, delayed: int, copy: int) -> None:
        if self.shared:
            self._promotions[copy] = delayed

    def write(self, row: Row) -> None:
        """Buffer ``row`` in order with the other structural rows; first, what it does to the
        writes buffered before it (a purge or a drop makes its messages' older operations moot,
        so every message operation left in a batch was issued after the batch's rows)."""
        match row:
            case Purge(queue=queue):
                self._pending = {seq: op for seq, op in self._pending.items() if op[1].space + op[1].queue != queue}
                self._pending_bytes = _insert_bytes(self._pending)
            case DropVhost(name=name):
                space = vhost_space(name)
                self._pending = {seq: op for seq, op in self._pending.items() if op[1].space != space}
                self._pending_bytes = _insert_bytes(self._pending)
            case CapExpiry(queue=queue, ttl=ttl):
                for _, msg in self._pending.values():  # inserts not taken yet copy the message's fields
                    if msg.space + msg.queue == queue:
                        cap = msg.timestamp + ttl
                        if msg.expires is None or msg.expires > cap:
                            msg.expires = cap
            case TrimStream(name=name, before=before):
                self._stream_appends = _untrimmed(self._stream_appends, name, before)
            case DropStream(name=name):
                self._stream_appends = [m for m in self._stream_appends if m.space + m.queue != name]
                self._group_offsets = {key: v for key, v in self._group_offsets.items() if key[0] != name}
            case Release() if not self.shared:
                return  # a store of one broker claims no rows, so it has none to free
        self._add_structural(row)

    def publish_topic(self, topic: str, headers: dict[str, str], body: bytes) -> None:
        if self.shared:
            self._add_structural(TopicMessage(topic, headers, body))
            self._hurry()  # a topic message is for now, not for the next flush

    def append_stream(self, msg: StreamMessage) -> None:
        if not self._has_pending():
            self._batch_started()
        appends = self._stream_appends
        appends.append(msg)
        if len(appends) + len(self._pending) >= self._max_group and not self._urgent:
            self._hurry()

    def save_stream_group(self, name: str, group: str, committed: int | None) -> None:
        if not self._has_pending():
            self._batch_started()
        self._group_offsets[name, group] = committed

    def _add_structural(self, op: StructuralOp) -> None:
        if not self._has_pending():
            self._batch_started()
        self._structural.append(op)

    def _batch_started(self) -> None:
        """The commit loop is not woken: a loop asleep to an earlier flush deadline wakes by then
        and sleeps on to this batch's, one asleep with nothing to do sleeps to this batch's
        deadline instead.  At low rates, where each message empties the buffer (write-behind: its
        delete follows in the same step) and the next refills it, a wake-up per message was most
        of what the commit loop cost."""
        self._pending_since = now = trio.current_time()
        sleep = self._sleep
        if sleep is None:  # awake: it looks at the buffer before it sleeps again
            self._kick.set()
        elif sleep.deadline == math.inf:
            sleep.deadline = now + self._flush_interval

    def _hurry(self) -> None:
        self._urgent = True
        self._kick.set()

    def _has_pending(self) -> bool:
        return bool(self._pending or self._structural or self._stream_appends or self._group_offsets)

    # -- durability --------------------------------------------------------------------------
    @property
    def committed(self) -> int:
        return self._committed

    def sync_ticket(self) -> int:
        if self._has_pending():
            self._hurry()
            return self._next_ticket
        if self._inflight is not None:
            return self._inflight.ticket
        return self._committed

    def backlog(self) -> int:
        """Operations buffered and not yet committed (``StoreHealth.backlog``; ``full`` weighs it)."""
        inflight = len(self._inflight) if self._inflight is not None else 0
        return (len(self._pending) + len(self._structural) + len(self._stream_appends) + len(self._group_offsets)
                + inflight)

    def backlog_bytes(self) -> int:
        """Bytes of inserted messages not yet on disk (pending and in flight)."""
        return self._pending_bytes + self._inflight_bytes

    def full(self) -> bool:
        return self.backlog() >= self._max_backlog or self.backlog_bytes() >= self._max_backlog_bytes

    def withdraw(self, msg: StoredMessage) -> bool:
        """Only a buffered insert outside every group in flight or in doubt is certainly not on
        disk; dropping it here, on the trio thread, cannot race a commit (see Store.withdraw)."""
        seq = msg.seq
        entry = self._pending.get(seq)
        if entry is None or entry[0] != INSERT or entry[1] is not msg or seq in self._in_doubt:
            return False
        del self._pending[seq]
        self._pending_bytes -= len(msg.body) + MESSAGE_OVERHEAD
        return True

    def health(self) -> StoreHealth:
        outage = self._outage
        return StoreHealth(backlog=self.backlog(), outages=outage.count, outage_seconds=outage.seconds(),
                           unavailable=outage.since is not None, disk_bytes=self.disk_bytes())

    def disk_bytes(self) -> int | None:
        """The engine cannot tell how much its backend takes (``SQLiteStore`` knows its file)."""
        return None

    async def wait_for_room(self) -> None:
        while self.full():
            await self._group_finished.wait()

    # -- the commit loop ---------------------------------------------------------------------
    async def _wait_for_work(self) -> None:
        """Return when a batch should be taken: asked for, full, or old enough."""
        while True:
            deadline = math.inf
            if self._urgent:  # asked for (or full); possibly with nothing left to write
                return
            if self._has_pending():
                deadline = self._pending_since + self._flush_interval
                if trio.current_time() >= deadline:
                    return
            self._kick = trio.Event()
            try:
                with trio.move_on_at(deadline) as self._sleep:
                    await self._kick.wait()
            finally:
                self._sleep = None

    async def _wait_idle(self) -> None:
        while self._inflight is not None:
            await self._group_finished.wait()

    @overload
    def _submit_group(self) -> CommitGroup: ...
    @overload
    def _submit_group(self, hold_back: bool) -> CommitGroup | None: ...

    def _submit_group(self, hold_back: bool = False) -> CommitGroup | None:
        """Take the pending batch as the next group and queue it on the database thread.

        With ``hold_back`` (a timed flush) the inserts of messages about to be consumed stay pending,
        once (see the module docstring); None if that leaves nothing to commit.
        """
        assert self._inflight is None and self._thread is not None
        ops, structural, appends = self._pending, self._structural, self._stream_appends
        offsets = self._group_offsets
        kept: dict[int, PendingOp] = {}
        keep = self.events.hold_back() if hold_back else None
        if keep is not None:
            ops, kept = _split_in_flight(ops, self._held_back, keep)
        self._held_back = frozenset(kept)
        if not (ops or structural or appends or offsets):
            self._pending_since = trio.current_time()
            return None
        rows = self._rows(ops, structural, appends)
        if self._passed:
            rows.passed = frozenset(self._passed.intersection(ops))
            self._passed.clear()
        rows.group_offsets = [(name, group, committed) for (name, group), committed in offsets.items()]
        if self._promotions:  # (rare: delayed messages promoted on a shared store)
            promotions = self._promotions
            rows.promotions = {seq: delayed for seq, delayed in promotions.items()
                               if (op := ops.get(seq)) is not None and op[0] == INSERT}
            # an insert taken now, or cancelled by its delete, needs its link no more
            self._promotions = {seq: delayed for seq, delayed in promotions.items() if seq in kept}
        job = self._thread.submit(commit_isolating, self._backend, rows)
        group = self._inflight = CommitGroup(self._next_ticket, ops, structural, appends, offsets, job, rows)
        self._next_ticket += 1
        self._pending, self._structural, self._stream_appends, self._urgent = kept, [], [], False
        self._group_offsets = {}
        kept_bytes = _insert_bytes(kept) if kept else 0
        self._inflight_bytes, self._pending_bytes = self._pending_bytes - kept_bytes, kept_bytes
        if kept:
            self._pending_since = trio.current_time()
        return group

    def _rows(
        self, ops: dict[int, PendingOp], structural: list[StructuralOp], appends: list[StreamMessage]
    ) -> GroupRows:
        """Copy what the backend needs, now: the broker goes on mutating its messages."""
        inserts: list[InsertRow] = []
        updates: list[UpdateRow] = []
        deletes: list[DeleteRow] = []
        delayed: list[DelayedRow] = []
        delayed_deletes: list[DeleteRow] = []
        for seq, (kind, m) in ops.items():
            due = m.deliver_at
            if kind == INSERT:
                if due is None:
                    inserts.append(
                        (seq, m.space + m.queue, m.priority, m.headers, m.body, m.delivered, m.ack_timeout,
                         m.redeliveries, m.timestamp, m.expires)
                    )
                else:
                    delayed.append((seq, m.space + m.queue, m.priority, m.headers, m.body, m.ack_timeout,
                                    m.timestamp, m.expires, due))
            elif kind == UPDATE:
                updates.append((m.delivered, m.redeliveries, m.priority, seq))
            elif due is None:
                deletes.append((seq,))
            else:
                delayed_deletes.append((seq,))
        held = None
        if self.shared:
            held = frozenset(seq for seq, (kind, m) in ops.items() if kind != DELETE and m.held)
        stream_rows: list[StreamRow] = [
            (m.space + m.queue, m.offset, m.seq, m.priority, m.timestamp, m.headers, m.body, m.bytes_before,
             m.producer)
            for m in appends
        ]
        return GroupRows(structural, inserts, updates, deletes, self._last_seq, held, self.claims_epoch(),
                         stream_rows, delayed, delayed_deletes)

    def claims_epoch(self) -> int | None:
        """The lease epoch the engine's claims are held under now; None: a store of one broker,
        which has no leases (a shared store's subclass answers)."""
        return None

    async def _await_group(self, group: CommitGroup) -> StoreError | None:
        """Wait for ``group`` to commit or fail and account for it; return its error, if any."""
        try:
            # Shielded: a group's outcome must be accounted for even if our caller is cancelled.
            with trio.CancelScope(shield=True):
                error = await group.job.wait()
            self._inflight = None
            self._inflight_bytes = 0
            if error is None:
                self._outage.succeeded()
                self._in_doubt.clear()  # the group after a doubtful one carries all of its writes
                self._committed = group.ticket
                if group.rows.rejected:
                    report_rejected(self._backend.name, group.rows, group.ops, len(group), self.events)
                self.events.group_committed(trio.current_time() - group.submitted, len(group))
                for name, state in group.rows.stream_states.items():
                    self.events.stream_changed(name, state)
                self.events.committed(group.ticket)
                return None
            in_doubt = isinstance(error, CommitInDoubt)
            self._merge_back(group, in_doubt)
            if not isinstance(error, StoreError):
                error = StoreError(f"commit to {self._backend.name} failed: {error!r}")
            self._outage.failed(error)
            self.events.commit_failed(group.ticket, error)
            return error
        finally:
            finished, self._group_finished = self._group_finished, trio.Event()
            finished.set()

    def _merge_back(self, group: CommitGroup, in_doubt: bool) -> None:
        """Make a failed group's operations pending again, under the newer ones.  If the group
        is ``in_doubt`` its inserts may be on disk: a newer delete stays (it deletes the row if
        it is there) and the inserts are never withdrawn until a commit settles them."""
        newer = self._pending
        if in_doubt:
            self._in_doubt.update(seq for seq, (kind, _) in group.ops.items() if kind == INSERT)
        purged = {op.queue for op in self._structural if isinstance(op, Purge)}
        merged: dict[int, PendingOp] = {}
        for seq, (kind, msg) in group.ops.items():
            if msg.space + msg.queue in purged:
                continue  # a newer purge deletes it anyway
            later = newer.get(seq)
            if later is None:
                merged[seq] = (kind, msg)
            elif kind == INSERT:
                if later[0] == DELETE:
                    if not in_doubt:
                        del newer[seq]  # the row never reached the disk
                else:
                    newer[seq] = (INSERT, later[1])  # the insert, with the newest fields
        was_empty = not self._has_pending()
        merged.update(newer)
        self._pending = merged
        self._promotions.update(group.rows.promotions)  # retried with the inserts
        appends = group.appends
        for op in self._structural:
            if isinstance(op, TrimStream):  # a newer trim covers the failed group's entries too
                appends = _untrimmed(appends, op.name, op.before)
            elif isinstance(op, DropStream):  # so does a newer delete
                appends = [m for m in appends if m.space + m.queue != op.name]
        self._stream_appends = appends + self._stream_appends
        dropped = {op.name for op in self._structural if isinstance(op, DropStream)}
        self._group_offsets = {
            **{key: v for key, v in group.offsets.items() if key[0] not in dropped}, **self._group_offsets
        }
        self._pending_bytes = _insert_bytes(merged)
        self._structural = group.structural + self._structural
        if was_empty and self._has_pending():
            self._pending_since = trio.current_time()
        # Retry after the back-off, not after the flush interval.  With nothing left to write (the
        # group's messages were acked meanwhile) the commit loop then commits nothing, which keeps
        # the failed ticket's promise: receipts wait for it now instead of failing.
        self._hurry()



def _untrimmed(appends: list[StreamMessage], name: str, before: int) -> list[StreamMessage]:
    """``appends`` without the entries of stream ``name`` below offset ``before``."""
    return [m for m in appends if m.offset >= before or m.space + m.queue != name]


def _split_in_flight(
    ops: dict[int, PendingOp], held_before: frozenset[int], keep: Callable[[StoredMessage], bool]
) -> tuple[dict[int, PendingOp], dict[int, PendingOp]]:
    """``ops`` split into what commits now and the inserts that wait one flush: those the engine's
    rule ``keep`` names (those already held back by the previous group commit now)."""
    now: dict[int, PendingOp] = {}
    kept: dict[int, PendingOp] = {}
    for seq, op in ops.items():
        if op[0] == INSERT and seq not in held_before and keep(op[1]):
            kept[seq] = op
        else:
            now[seq] = op
    return now, kept


def _insert_bytes(ops: dict[int, PendingOp]) -> int:
    """What the inserts among ``ops`` count against ``max_backlog_bytes``."""
    return sum(len(msg.body) + MESSAGE_OVERHEAD for kind, msg in ops.values() if kind == INSERT)
