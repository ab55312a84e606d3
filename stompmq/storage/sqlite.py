"""The durable SQLite store: the group-commit engine over one SQLite file.

Theory of operation
-------------------
Everything about buffering, tickets and retries is the engine's
(:mod:`stompmq.storage.groupcommit`); this module holds only what is SQLite's,
in :class:`SQLiteBackend`, which runs on the engine's database thread and
blocks: the open sequence (directory, file lock, integrity check, PRAGMAs,
migrations, crash recovery), the group commit, and the paging reads.  Opening the
file (lock, PRAGMAs, check) is ``storage/sqlite_file.py``; the statements are
``storage/sqlite_sql.py``.

* One file, WAL journal, ``synchronous = FULL``: a commit is one fsync of the
  WAL, and an outside ``sqlite3`` reader does not hold up the broker's commits.
* An exclusive ``flock`` on ``PATH.lock`` for the broker's lifetime: SQLite's own
  locks only serialise transactions, they do not stop a second broker from
  using the same file; the lock file also names the holder's pid for the operator.
* The commit trusts its input: the engine has already coalesced operations per
  message and copied the mutable fields, so a group is a few ``executemany``
  calls in one ``BEGIN IMMEDIATE`` transaction, in the order ``Backend.commit``
  prescribes.
* Queue names live once, in ``queues``; messages carry a queue id.  The ids are
  cached, and a queue row created by a group that then fails is forgotten with
  the rolled-back group.
* Names arrive as store keys (``storage.base``: the vhost's prefix and the name) and are
  split into the ``vhost`` and ``name`` columns; caches are keyed by the store key.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator

from stompmq.storage import jsontext, recovery
from stompmq.storage.ages import NO_AGES, QUEUE_AGES_SQL, QUEUE_UNACKED_AGE_SQL, QueueAges
from stompmq.storage.backend import QUEUE_PAGE_SQL
from stompmq.storage.base import (
    REFUSED_VALUES,
    CommitInDoubt,
    QueueCount,
    Recovery,
    StoredMessage,
    StoreError,
    StoreRejected,
    StreamMessage,
    StreamRecord,
    producer_positions,
)
from stompmq.storage.groupcommit import FLUSH_INTERVAL, MAX_BACKLOG_BYTES, MAX_GROUP, GroupCommitStore
from stompmq.storage.groups import (
    DROP_VHOST_SQL,
    DelayedRow,
    GroupOffsetRow,
    GroupRows,
    InsertRow,
    StreamRow,
    StructuralOp,
    TopicMessage,
)
from stompmq.storage.header_filter import HeaderFilter
from stompmq.storage.migrate import VERSION_SQL, is_current, upgrade_to_head
from stompmq.storage.rows import (
    CapExpiry,
    DropBinding,
    DropExchange,
    DropStream,
    DropVhost,
    MetaFact,
    Purge,
    Release,
    SaveBinding,
    SaveExchange,
    SaveQueue,
    SaveStream,
    SaveVhost,
    TrimStream,
)
from stompmq.storage.sqlite_file import BUSY_TIMEOUT_MS, check_paths, connect, lock
from stompmq.storage.sqlite_sql import (
    BLOB_COPY_BELOW,
    CAP_EXPIRY_SQL,
    DELAYED_DELETE_SQL,
    DELAYED_INSERT_SQL,
    DUE_AFTER_SQL,
    DUE_FIRST_SQL,
    EXPIRED_SQL,
    GROUP_UPSERT_SQL,
    INSERT_PLAIN_SQL,
    INSERT_SQL,
    NEXT_EXPIRY_SQL,
    PRODUCER_UPSERT_SQL,
    READY_FIRST_SQL,
    READY_LOWER_PRIORITY_SQL,
    READY_SAME_PRIORITY_SQL,
    REQUEUE_DELIVERED_SQL,
    STREAM_INSERT_SQL,
    STREAM_READ_SQL,
    UPDATE_SQL,
    DelayedParams,
    InsertParams,
    InsertPlainParams,
    delete_rows,
    filtered_ready_sql,
    insert_rows,
)
from stompmq.vhost_names import split_key, vhost_space

# The reader thread's page cache: page reads scan rows just written (mostly in the OS cache), so
# it only keeps the paging index's upper pages, and RSS stays bounded.
READER_CACHE_SIZE_KIB = 2 * 1024
# Queue name -> id cache bound: millions of queues must not mean millions of cached entries.
QUEUE_ID_CACHE_MAX = 100_000
# Name of the high-water mark row in broker_meta.
LAST_SEQ = "last_seq"

_dumps, _loads = jsontext.dumps, jsontext.loads
_headers, _headers_text = jsontext.headers, jsontext.headers_text

#: What a commit catches, and among it what the rows caused (StoreRejected), not the disk.
_COMMIT_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, CommitInDoubt, *REFUSED_VALUES)
_REFUSED: tuple[type[Exception], ...] = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError,
                                         *REFUSED_VALUES)


class SQLiteBackend:
    """The SQLite file as seen from the database thread; every method blocks (see ``Backend``)."""

    def __init__(self, path: str, max_page_count: int | None = None) -> None:
        self.path = os.path.abspath(path)
        self._max_page_count = max_page_count
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._queue_ids: dict[str, int] = {}
        self._reader: sqlite3.Connection | None = None  # the reader thread's (read_ready)
        self._reader_queue_ids: dict[str, int] = {}  # its own cache: the two threads share no dict
        self._stream_ids: dict[str, int] = {}  # every stream: streams are few
        self._stored_last_seq = 0

    @property
    def name(self) -> str:
        return self.path

    # -- open / close ------------------------------------------------------------------------
    def open(self) -> Recovery:
        """Check, lock, migrate and recover the database; raise StoreError saying what is wrong."""
        check_paths(self.path)
        self._lock_fd = lock(self.path)
        self._conn = connect(self.path, self._max_page_count)
        if not is_current(self._stored_revisions(self._conn)):
            try:
                upgrade_to_head(f"sqlite:///{self.path}")
            except Exception as exc:
                raise StoreError(f"cannot migrate {self.path}: {_one_line(exc)}") from exc
        return self._recover()

    @staticmethod
    def _stored_revisions(conn: sqlite3.Connection) -> list[str]:
        """The schema revisions alembic recorded; none if it cannot say (alembic then decides)."""
        try:
            return [row[0] for row in conn.execute(VERSION_SQL)]
        except sqlite3.Error:  # no such table: a new file
            return []

    def close(self) -> None:
        """Close the connection and release the file lock; safe after a failed open."""
        try:
            if self._conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("PRAGMA optimize")
                self._conn.close()
        finally:
            self._conn = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None

    def _recover(self) -> Recovery:
        conn = self._connection()
        try:
            with _transaction(conn):
                # At-least-once: whatever was out for delivery at the crash is ready again.
                conn.execute(REQUEUE_DELIVERED_SQL)
            (max_seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM messages").fetchone()
            row = conn.execute(
                "SELECT value FROM broker_meta WHERE name = ?", (LAST_SEQ,)
            ).fetchone()
            self._stored_last_seq = int(row[0]) if row else 0
            vhosts, exchanges, bindings = recovery.definitions(conn)
            streams = self._recover_streams(conn)
            queues = recovery.queues(conn)
            meta = recovery.meta_facts(conn)
            (max_delayed,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM delayed_messages").fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot recover {self.path}: {exc}") from exc
        return Recovery(
            max(max_seq, max_delayed, self._stored_last_seq), exchanges, bindings, streams, vhosts, queues, meta,
        )

    def _recover_streams(self, conn: sqlite3.Connection) -> list[StreamRecord]:
        """Each stream's options and retained offsets: two ends of its key range, no scan."""
        records = []
        producers, groups = recovery.stream_positions(conn)
        rows = conn.execute("SELECT id, vhost, name, options FROM streams ORDER BY vhost, name").fetchall()
        for stream_id, vhost, bare, options in rows:
            name = vhost_space(vhost) + bare
            self._stream_ids[name] = stream_id
            (first,) = conn.execute(
                "SELECT MIN(position) FROM stream_messages WHERE stream_id = ?", (stream_id,)
            ).fetchone()
            (last,) = conn.execute(
                "SELECT MAX(position) FROM stream_messages WHERE stream_id = ?", (stream_id,)
            ).fetchone()
            empty = first is None
            records.append(StreamRecord(name, _loads(options), 0 if empty else first, 0 if empty else last + 1,
                                        producers=producers.get(stream_id, {}), groups=groups.get(stream_id, {})))
        return records

    # -- writes ------------------------------------------------------------------------------
    def commit(self, group: GroupRows) -> None:
        """Apply one group in one transaction, in the order of ``Backend.commit``; on failure
        roll it back entirely."""
        conn = self._connection()
        created: list[str] = []
        try:
            with _transaction(conn):
                for op in group.structural:
                    self._apply(conn, op, created)
                if group.deletes:
                    delete_rows(conn, group.deletes)
                if group.delayed_deletes:
                    conn.executemany(DELAYED_DELETE_SQL, group.delayed_deletes)
                if group.updates:
                    conn.executemany(UPDATE_SQL, group.updates)
                if group.inserts:
                    full, plain = self._insert_params(conn, group.inserts, created)
                    if plain:
                        insert_rows(conn, INSERT_PLAIN_SQL, plain)
                    if full:
                        insert_rows(conn, INSERT_SQL, full)
                if group.delayed:
                    conn.executemany(DELAYED_INSERT_SQL, self._delayed_params(conn, group.delayed, created))
                if group.stream_rows:
                    conn.executemany(STREAM_INSERT_SQL, self._stream_params(conn, group.stream_rows, created))
                    positions = producer_positions((row[0], row[8]) for row in group.stream_rows)
                    if positions:
                        conn.executemany(PRODUCER_UPSERT_SQL, [
                            (self._stream_ids[name], producer, seq) for (name, producer), seq in positions.items()
                        ])
                if group.group_offsets:
                    self._save_groups(conn, group.group_offsets, created)
                if group.last_seq > self._stored_last_seq:
                    conn.execute(
                        "INSERT INTO broker_meta (name, value) VALUES (?, ?)"
                        " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        (LAST_SEQ, str(group.last_seq)),
                    )
        except _COMMIT_ERRORS as exc:
            for name in created:  # those queue and stream rows were rolled back with the group
                self._queue_ids.pop(name, None)
                self._stream_ids.pop(name, None)
            if isinstance(exc, CommitInDoubt):  # the retry settles it: every write here is idempotent
                raise CommitInDoubt(f"commit to {self.path} may have failed: {exc}") from exc
            if isinstance(exc, _REFUSED):
                # the rows, not the disk: the same rows would fail again (groupcommit isolates them)
                raise StoreRejected(f"{self.path} refused a value: {exc!r}") from exc
            raise StoreError(f"commit to {self.path} failed: {exc}") from exc
        self._stored_last_seq = max(self._stored_last_seq, group.last_seq)

    def _apply(self, conn: sqlite3.Connection, op: StructuralOp, created: list[str]) -> None:
        match op:
            case Purge(queue=name):
                queue_id = self._find_queue(conn, name)
                if queue_id is not None:
                    conn.execute("DELETE FROM messages WHERE queue_id = ?", (queue_id,))
            case SaveExchange(exchange=ex):
                conn.execute(
                    "INSERT OR REPLACE INTO exchanges (vhost, name, type, options) VALUES (?, ?, ?, ?)",
                    (*split_key(ex.name), ex.type, _dumps(ex.options)),
                )
            case DropExchange(name=name):
                conn.execute("DELETE FROM bindings WHERE vhost = ? AND exchange = ?", split_key(name))
                conn.execute("DELETE FROM exchanges WHERE vhost = ? AND name = ?", split_key(name))
            case SaveBinding(binding=b):
                conn.execute(
                    "INSERT OR REPLACE INTO bindings (vhost, exchange, queue, weight, routing_key)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (*split_key(b.exchange), split_key(b.queue)[1], b.weight, b.routing_key),
                )
            case DropBinding(exchange=exchange, queue=name, routing_key=key):
                conn.execute(
                    "DELETE FROM bindings WHERE vhost = ? AND exchange = ? AND queue = ? AND routing_key = ?",
                    (*split_key(exchange), split_key(name)[1], key),
                )
            case SaveVhost(name=name):
                conn.execute("INSERT OR IGNORE INTO vhosts (name) VALUES (?)", (name,))
            case Release() | TopicMessage():
                pass  # one broker per SQLite file: nobody else claims rows or hears topics
            case SaveQueue(name=name, options=options):
                queue_id = self._make_queue(conn, name, created)
                conn.execute(
                    "UPDATE queues SET options = ? WHERE id = ?",
                    (None if options is None else _dumps(options), queue_id),
                )
            case MetaFact():
                name, value = op.meta
                if value is None:
                    conn.execute("DELETE FROM broker_meta WHERE name = ?", (name,))
                else:
                    conn.execute("INSERT OR REPLACE INTO broker_meta (name, value) VALUES (?, ?)", (name, _dumps(value)))
            case DropVhost(name=name):
                for statement in DROP_VHOST_SQL:
                    conn.execute(statement, (name,))
            case CapExpiry(queue=name, ttl=ttl):
                queue_id = self._find_queue(conn, name)
                if queue_id is not None:
                    conn.execute(CAP_EXPIRY_SQL, (ttl, queue_id, ttl))
            case SaveStream(name=name, options=options):
                stream_id = self._make_stream(conn, name, created)
                conn.execute("UPDATE streams SET options = ? WHERE id = ?", (_dumps(options), stream_id))
            case DropStream(name=name):
                row = conn.execute("SELECT id FROM streams WHERE vhost = ? AND name = ?", split_key(name)).fetchone()
                if row is not None:
                    conn.execute("DELETE FROM stream_messages WHERE stream_id = ?", (row[0],))
                    conn.execute("DELETE FROM stream_producers WHERE stream_id = ?", (row[0],))
                    conn.execute("DELETE FROM stream_groups WHERE stream_id = ?", (row[0],))
                    conn.execute("DELETE FROM streams WHERE id = ?", (row[0],))
                self._stream_ids.pop(name, None)
            case TrimStream(name=name, before=before):
                trimmed = self._stream_ids.get(name)
                if trimmed is not None:
                    conn.execute(
                        "DELETE FROM stream_messages WHERE stream_id = ? AND position < ?", (trimmed, before)
                    )
            case _:
                raise TypeError(f"not a structural operation: {op!r}")

    def _insert_params(
        self, conn: sqlite3.Connection, rows: list[InsertRow], created: list[str]
    ) -> tuple[list[InsertParams], list[InsertPlainParams]]:
        """The parameters of the rows with an ack timeout or an expiry, and of those with neither."""
        ids = {name: self._make_queue(conn, name, created) for name in {row[1] for row in rows}}
        full: list[InsertParams] = []
        plain: list[InsertPlainParams] = []
        for seq, name, prio, hdrs, body, dlv, ack, redel, ts, exp in rows:
            text = _headers_text(hdrs)
            blob = bytearray(body) if len(body) < BLOB_COPY_BELOW else body
            if ack is None and exp is None:
                plain.append((seq, ids[name], prio, text, blob, int(dlv), redel, ts))
            else:
                full.append((seq, ids[name], prio, text, blob, int(dlv), ack, redel, ts, exp))
        return full, plain

    def _delayed_params(
        self, conn: sqlite3.Connection, rows: list[DelayedRow], created: list[str]
    ) -> list[DelayedParams]:
        ids = {name: self._make_queue(conn, name, created) for name in {row[1] for row in rows}}
        return [
            (seq, ids[name], prio, _headers_text(hdrs), body, ack, ts, exp, due)
            for seq, name, prio, hdrs, body, ack, ts, exp, due in rows
        ]

    def _stream_params(
        self, conn: sqlite3.Connection, rows: list[StreamRow], created: list[str]
    ) -> list[tuple[int, int, int, int, int, str, bytes, int]]:
        ids = {name: self._make_stream(conn, name, created) for name in {row[0] for row in rows}}
        return [
            (ids[name], offset, seq, prio, ts, _headers_text(hdrs), body, before)
            for name, offset, seq, prio, ts, hdrs, body, before, _ in rows
        ]

    def _save_groups(self, conn: sqlite3.Connection, rows: list[GroupOffsetRow], created: list[str]) -> None:
        """Write consumer groups' committed offsets (None: forget the group)."""
        ids = {name: self._make_stream(conn, name, created) for name in {row[0] for row in rows}}
        conn.executemany(GROUP_UPSERT_SQL, [(ids[s], g, c) for s, g, c in rows if c is not None])
        conn.executemany("DELETE FROM stream_groups WHERE stream_id = ? AND name = ?",
                         [(ids[s], g) for s, g, c in rows if c is None])

    def _make_stream(self, conn: sqlite3.Connection, name: str, created: list[str]) -> int:
        """The id of stream ``name``, making its row (and noting it in ``created``) if missing."""
        stream_id = self._stream_ids.get(name)
        if stream_id is None:  # also after a rolled-back DropStream forgot a row that is back
            row = conn.execute("SELECT id FROM streams WHERE vhost = ? AND name = ?", split_key(name)).fetchone()
            if row is not None:
                self._stream_ids[name] = stream_id = int(row[0])
                return stream_id
            new_id = conn.execute(
                "INSERT INTO streams (vhost, name, options) VALUES (?, ?, '{}')", split_key(name)
            ).lastrowid
            assert new_id is not None
            created.append(name)
            self._stream_ids[name] = stream_id = new_id
        return stream_id

    def _find_queue(self, conn: sqlite3.Connection, name: str, cache: dict[str, int] | None = None) -> int | None:
        """The id of queue ``name``, None if it has no row (``cache``: the reader thread's own)."""
        ids = self._queue_ids if cache is None else cache
        queue_id = ids.get(name)
        if queue_id is None:
            row = conn.execute("SELECT id FROM queues WHERE vhost = ? AND name = ?", split_key(name)).fetchone()
            if row is None:
                return None
            queue_id = _remember(ids, name, int(row[0]))
        return queue_id

    def _make_queue(self, conn: sqlite3.Connection, name: str, created: list[str]) -> int:
        """The id of queue ``name``, making its row (and noting it in ``created``) if missing."""
        queue_id = self._find_queue(conn, name)
        if queue_id is None:
            new_id = conn.execute("INSERT INTO queues (vhost, name) VALUES (?, ?)", split_key(name)).lastrowid
            assert new_id is not None
            created.append(name)
            queue_id = _remember(self._queue_ids, name, new_id)
        return queue_id


    # -- reads -------------------------------------------------------------------------------
    def load_ready(
        self, queue: str, after: tuple[int, int] | None, limit: int, matching: HeaderFilter | None = None
    ) -> list[StoredMessage]:
        with self._reading() as conn:
            return self._ready(conn, self._queue_ids, queue, after, limit, matching)

    def read_ready(
        self, queue: str, after: tuple[int, int] | None, limit: int, hidden: frozenset[int],
        matching: HeaderFilter | None = None,
    ) -> tuple[list[StoredMessage], bool]:
        """See ``ConcurrentReads``: on the reader's own connection, in one read transaction (one
        snapshot), refilling past the hidden rows."""
        conn = self._reader
        try:
            if conn is None:
                conn = self._reader = self._connect_reader()
            conn.execute("BEGIN")
            try:
                rows: list[StoredMessage] = []
                more = limit > 0
                while more and len(rows) < limit:
                    want = limit - len(rows)
                    batch = self._ready(conn, self._reader_queue_ids, queue, after, want, matching)
                    more = len(batch) == want
                    rows += [m for m in batch if m.seq not in hidden]
                    if batch:
                        after = batch[-1].order_key
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read {self.path}: {exc}") from exc
        return rows, more

    def _connect_reader(self) -> sqlite3.Connection:
        """The reader thread's connection: WAL lets it read while the database thread commits."""
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.execute(f"PRAGMA cache_size = -{READER_CACHE_SIZE_KIB}")
        except BaseException:
            conn.close()
            raise
        return conn

    def close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._reader_queue_ids.clear()

    def _ready(
        self, conn: sqlite3.Connection, ids: dict[str, int], queue: str, after: tuple[int, int] | None, limit: int,
        matching: HeaderFilter | None = None,
    ) -> list[StoredMessage]:
        queue_id = self._find_queue(conn, queue, ids)
        if queue_id is None or limit <= 0:
            return []
        params: tuple[str, ...] = ()
        first_sql, same_sql, lower_sql = READY_FIRST_SQL, READY_SAME_PRIORITY_SQL, READY_LOWER_PRIORITY_SQL
        if matching is not None:
            first_sql, same_sql, lower_sql, params = filtered_ready_sql(matching)
        if after is None:
            rows = conn.execute(first_sql, (queue_id, *params, limit)).fetchall()
        else:
            priority, seq = -after[0], after[1]
            rows = conn.execute(same_sql, (queue_id, priority, seq, *params, limit)).fetchall()
            if len(rows) < limit:
                rows += conn.execute(lower_sql, (queue_id, priority, *params, limit - len(rows))).fetchall()
        vhost, name = split_key(queue)
        space = vhost_space(vhost)
        # Every argument positional (delivered, expires, deliver_at, space): keywords cost 0.2 us a row.
        return [
            StoredMessage(seq, name, prio, _headers(hdrs), body, ts, ack, redel, False, exp, None, space)
            for seq, prio, hdrs, body, ts, ack, redel, exp in rows
        ]

    def load_due(self, after: tuple[int, int] | None, limit: int, vhost: str) -> list[StoredMessage]:
        if limit <= 0:
            return []
        with self._reading() as conn:
            if after is None:
                rows = conn.execute(DUE_FIRST_SQL, (vhost, limit)).fetchall()
            else:
                rows = conn.execute(DUE_AFTER_SQL, (vhost, after[0], after[1], limit)).fetchall()
        space = vhost_space(vhost)
        return [
            StoredMessage(seq, name, prio, _headers(hdrs), body, ts, ack,
                          space=space, expires=exp, deliver_at=due)
            for seq, name, prio, hdrs, body, ts, ack, exp, due in rows
        ]

    def load_expired(
        self, now_ms: int, after: tuple[int, int] | None, limit: int, vhost: str
    ) -> tuple[list[StoredMessage], int | None]:
        start = after if after is not None else (-1, -1)
        with self._reading() as conn:
            rows = conn.execute(EXPIRED_SQL, (start[0], start[1], now_ms, vhost, limit)).fetchall()
            (next_expiry,) = conn.execute(NEXT_EXPIRY_SQL, (now_ms,)).fetchone()
        space = vhost_space(vhost)
        return [
            StoredMessage(seq, name, prio, _headers(hdrs), body, ts, ack, redel,
                          space=space, expires=exp)
            for seq, name, prio, hdrs, body, ts, ack, redel, exp in rows
        ], next_expiry

    def queue_size(self, queue: str) -> tuple[int, int]:
        with self._reading() as conn:
            queue_id = self._find_queue(conn, queue)
            if queue_id is None:
                return 0, 0
            count, size = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0) FROM messages WHERE queue_id = ?", (queue_id,)
            ).fetchone()
        return int(count), int(size)

    def read_stream(self, name: str, start: int, limit: int) -> list[StreamMessage]:
        stream_id = self._stream_ids.get(name)
        if stream_id is None or limit <= 0:
            return []
        with self._reading() as conn:
            rows = conn.execute(STREAM_READ_SQL, (stream_id, start, limit)).fetchall()
        bare = split_key(name)[1]
        return [
            StreamMessage(seq, bare, prio, _headers(hdrs), body, ts, offset, before)
            for offset, seq, prio, ts, hdrs, body, before in rows
        ]

    def stream_state(self, name: str) -> None:
        """One broker: its engine numbers the entries and knows the state."""
        return None

    def stream_groups(self, name: str) -> None:
        """One broker: its engine commits the groups and knows them."""
        return None

    def count(self, queue: str) -> int:
        return self._count(queue, "SELECT COUNT(*) FROM messages WHERE queue_id = ?")

    def queue_ages(self, queue: str) -> QueueAges:
        with self._reading() as conn:
            queue_id = self._find_queue(conn, queue)
            if queue_id is None:
                return NO_AGES
            params = {"id": queue_id}
            (ready,) = conn.execute(QUEUE_AGES_SQL.format(id=":id", false="0"), params).fetchone()
            (unacked,) = conn.execute(  # the partial index of delivered rows: what consumers hold
                QUEUE_UNACKED_AGE_SQL.format(id=":id", true="1", indexed=" INDEXED BY ix_messages_delivered"),
                params).fetchone()
        return ready, unacked

    def count_unacked(self, queue: str) -> int:
        return self._count(queue, "SELECT COUNT(*) FROM messages WHERE queue_id = ? AND delivered = 1")

    def _count(self, queue: str, query: str) -> int:
        with self._reading() as conn:
            queue_id = self._find_queue(conn, queue)
            if queue_id is None:
                return 0
            (n,) = conn.execute(query, (queue_id,)).fetchone()
        return int(n)

    def queue_names(self, prefix: str) -> list[str]:
        vhost, start = split_key(prefix)
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT name FROM queues WHERE vhost = ? AND substr(name, 1, ?) = ?", (vhost, len(start), start)
            ).fetchall()
        return [vhost_space(vhost) + name for (name,) in rows]

    def queue_exists(self, name: str) -> bool:
        with self._reading() as conn:
            return self._find_queue(conn, name) is not None

    def queue_page(self, after: str, limit: int) -> list[QueueCount]:
        vhost, name = split_key(after)
        query = QUEUE_PAGE_SQL.format(true="1", false="0", vhost="?", after="?", limit="?")
        with self._reading() as conn:
            rows = conn.execute(query, (vhost, name, limit)).fetchall()
        space = vhost_space(vhost)
        return [QueueCount(space + name, *counts) for name, *counts in rows]

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The connection, for a read whose SQLite errors become one StoreError."""
        conn = self._connection()
        try:
            yield conn
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read {self.path}: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self.path} is not open")
        return self._conn


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error (the connection is in autocommit).

    A COMMIT that fails for want of space wrote no commit record: certainly not committed.  Any
    other error of the COMMIT itself (an I/O error, a failed fsync) may leave the transaction's
    WAL frames on disk for the next open to replay: CommitInDoubt."""
    conn.execute("BEGIN IMMEDIATE")
    committing = False
    try:
        yield
        committing = True
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        if committing and isinstance(exc, sqlite3.Error) and exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_FULL:
            raise CommitInDoubt(str(exc)) from exc
        raise


def _remember(ids: dict[str, int], name: str, queue_id: int) -> int:
    if len(ids) >= QUEUE_ID_CACHE_MAX:
        ids.clear()
    ids[name] = queue_id
    return queue_id


def _one_line(exc: Exception) -> str:
    """The first line of an error: SQLAlchemy appends the SQL and a link on later lines."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class SQLiteStore(GroupCommitStore):
    """A durable store in one SQLite file (WAL, synchronous=FULL) with group commit."""

    def __init__(
        self,
        path: str,
        *,
        flush_interval: float = FLUSH_INTERVAL,
        max_group: int = MAX_GROUP,
        max_backlog_bytes: int = MAX_BACKLOG_BYTES,
        max_page_count: int | None = None,
    ) -> None:
        super().__init__(
            SQLiteBackend(path, max_page_count),
            flush_interval=flush_interval,
            max_group=max_group,
            max_backlog_bytes=max_backlog_bytes,
        )
        self.path = path

    def disk_bytes(self) -> int:
        """The database file and its write-ahead log (two stat calls: cheap enough per scrape)."""
        total = 0
        for name in (self.path, self.path + "-wal"):
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(name).st_size
        return total
