"""Streams on a PostgreSQL database that several brokers share: appends numbered in the commit.

Theory of operation
-------------------
Two brokers appending to one stream cannot both number entries in their engines (they would
hand out the same offsets), so on PostgreSQL an append reaches the database unnumbered and the
commit numbers it.  Each stream's row in ``streams`` is its counter (migration 0008):
``next_offset``, ``end_bytes`` (for the entries' ``bytes_before``), ``last_ts`` (timestamps
stay non-decreasing) and ``first_offset`` (the first retained offset).

* **Order and finality.**  A group that touches streams locks their rows first (``SELECT ...
  FOR NO KEY UPDATE``, in id order, so two groups never wait for each other in a cycle), numbers
  its entries from the locked values and writes the new values back; the lock is held to the
  commit.  A second broker's group on the same stream waits for that commit before it reads the
  counter, so offsets are dense, unique and committed in offset order: every offset below a
  committed ``next_offset`` is final and visible (PostgreSQL makes a transaction visible before
  it releases its locks), and a reader can never skip a gap that fills later.
* **News.**  The commit reports each changed stream's state (``StreamState``) in
  ``GroupRows.stream_states`` for this broker's engine, and notifies ``s:BROKER:KEY`` for the
  others; their listener reads the row (``state``) and hands the state on.  The bodies are read
  from the table by whoever needs them.  ``states`` (every stream) is the slow poll's fallback
  for a lost notification.
* **Retention and deletion** lock the same row: a trim moves ``first_offset`` (never past
  ``next_offset``: ``TRIM_ALL`` purges to the end) and deletes the offset range below it; a
  delete drops the row, so a later append makes a new row (a new id) numbered from 0.

The cursor passed in is the backend's, inside its commit transaction (writes) or not (reads).
"""

from __future__ import annotations

from typing import Any

import psycopg

from stompmq.storage import jsontext, recovery
from stompmq.storage.base import StreamMessage, StreamRecord, StreamState, producer_positions
from stompmq.storage.groups import GroupOffsetRow, GroupRows, StreamRow, StructuralOp
from stompmq.storage.rows import DropStream, SaveStream, TrimStream
from stompmq.vhost_names import split_key, vhost_space

_dumps, _loads = jsontext.dumps, jsontext.loads
_headers, _headers_text = jsontext.headers, jsontext.headers_text

#: The LISTEN/NOTIFY channel (pg_sql.CHANNEL: one channel for every kind of news).
CHANNEL = "stompmq"
STATE_COLUMNS = "id, first_offset, next_offset, end_bytes, last_ts, options"
COPY_SQL = (
    "COPY stream_messages (stream_id, position, seq, priority, timestamp, headers, body, bytes_before)"
    " FROM STDIN (FORMAT BINARY)"
)
COPY_TYPES = ["int4", "int8", "int8", "int4", "int8", "text", "bytea", "int8"]
READ_SQL = (
    "SELECT position, seq, priority, timestamp, headers, body, bytes_before FROM stream_messages"
    " WHERE stream_id = %s AND position >= %s ORDER BY position LIMIT %s"
)
PRODUCERS_SQL = "SELECT producer, seq FROM stream_producers WHERE stream_id = %s AND producer = ANY(%s)"
PRODUCER_UPSERT_SQL = (
    "INSERT INTO stream_producers (stream_id, producer, seq) VALUES (%s, %s, %s)"
    " ON CONFLICT (stream_id, producer) DO UPDATE SET seq = EXCLUDED.seq"
)
GROUP_UPSERT_SQL = (
    "INSERT INTO stream_groups (stream_id, name, committed) VALUES (%s, %s, %s)"
    " ON CONFLICT (stream_id, name) DO UPDATE SET committed = EXCLUDED.committed"
)
SAVE_SQL = (
    "UPDATE streams SET first_offset = %s, next_offset = %s, end_bytes = %s, last_ts = %s, options = %s"
    " WHERE id = %s"
)


class Counter:
    """A stream's row, locked for the commit in progress, as the commit changes it."""

    __slots__ = ("id", "first", "next", "end_bytes", "last_ts", "options", "changed")

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.id, self.first, self.next, self.end_bytes, self.last_ts, options = row
        self.options: dict[str, str] = _loads(options)
        self.changed = False

    def state(self) -> StreamState:
        return StreamState(self.id, self.first, self.next, self.end_bytes, self.last_ts, self.options)


def _state(row: tuple[Any, ...]) -> StreamState:
    stream_id, first, nxt, end_bytes, last_ts, options = row
    return StreamState(stream_id, first, nxt, end_bytes, last_ts, _loads(options))


class SharedStreams:
    """The stream rows of one backend's connection: ids, numbering, states."""

    def __init__(self, broker_id: str) -> None:
        self.broker_id = broker_id
        self._ids: dict[str, int] = {}  # every stream: streams are few

    def forget(self) -> None:
        """A transaction rolled back (or the connection is new): cached ids may name no row."""
        self._ids.clear()

    def find(self, cur: psycopg.Cursor[Any], name: str) -> int | None:
        """The id of stream ``name`` if it exists."""
        stream_id = self._ids.get(name)
        if stream_id is None:
            row = cur.execute("SELECT id FROM streams WHERE vhost = %s AND name = %s", split_key(name)).fetchone()
            if row is not None:
                stream_id = self._ids[name] = int(row[0])
        return stream_id

    def _make(self, cur: psycopg.Cursor[Any], name: str) -> int:
        """The id of stream ``name``, making its row if it is missing (another broker may make it
        at the same moment: the unique name decides)."""
        stream_id = self.find(cur, name)
        if stream_id is None:
            cur.execute(
                "INSERT INTO streams (vhost, name, options) VALUES (%s, %s, '{}') ON CONFLICT (vhost, name) DO NOTHING",
                split_key(name),
            )
            stream_id = self.find(cur, name)
            assert stream_id is not None
        return stream_id

    # -- the commit ----------------------------------------------------------------------------
    def lock(self, cur: psycopg.Cursor[Any], group: GroupRows) -> dict[str, Counter | None]:
        """Lock the rows of every stream ``group`` touches, in id order, and read their counters
        (streams appended to or declared are made first).  Empty when it touches none."""
        made = {row[0] for row in group.stream_rows}
        named = set(made)
        for op in group.structural:
            if isinstance(op, SaveStream | TrimStream | DropStream):
                named.add(op.name)
                if isinstance(op, SaveStream):
                    made.add(op.name)
        counters: dict[str, Counter | None] = {}
        for _ in range(2):  # a second round if a cached id named a row deleted meanwhile
            wanted = {name: self._make(cur, name) if name in made else self.find(cur, name)
                      for name in sorted(named - counters.keys())}
            ids = {stream_id: name for name, stream_id in wanted.items() if stream_id is not None}
            rows = cur.execute(
                f"SELECT {STATE_COLUMNS} FROM streams WHERE id = ANY(%s) ORDER BY id FOR NO KEY UPDATE",  # noqa: S608
                (list(ids),),
            ).fetchall()
            for row in rows:
                counters[ids[row[0]]] = Counter(row)
            missing = [name for name in ids.values() if name not in counters]
            if not missing:
                break
            for name in missing:
                self._ids.pop(name, None)
        return counters

    def apply(self, cur: psycopg.Cursor[Any], op: StructuralOp, counters: dict[str, Counter | None]) -> None:
        """A structural stream operation (``SaveStream``, ``TrimStream``, ``DropStream``)."""
        name = op.name if isinstance(op, SaveStream | TrimStream | DropStream) else ""
        counter = counters.get(name)
        if isinstance(op, SaveStream):
            if counter is None:
                counter = counters[name] = self._new_counter(cur, name)
            counter.options = dict(op.options)
            counter.changed = True
        elif isinstance(op, TrimStream):
            before = min(op.before, counter.next) if counter is not None else 0
            if counter is not None and before > counter.first:
                cur.execute("DELETE FROM stream_messages WHERE stream_id = %s AND position < %s", (counter.id, before))
                counter.first = before
                counter.changed = True
        elif isinstance(op, DropStream) and counter is not None:
            cur.execute("DELETE FROM stream_messages WHERE stream_id = %s", (counter.id,))
            cur.execute("DELETE FROM stream_producers WHERE stream_id = %s", (counter.id,))
            cur.execute("DELETE FROM stream_groups WHERE stream_id = %s", (counter.id,))
            cur.execute("DELETE FROM streams WHERE id = %s", (counter.id,))
            self._ids.pop(name, None)
            counters[name] = None

    def _new_counter(self, cur: psycopg.Cursor[Any], name: str) -> Counter:
        """The counter of a stream made in this transaction (after a delete in the same group):
        the new row is this transaction's, so it needs no lock of its own."""
        stream_id = self._make(cur, name)
        row = cur.execute(f"SELECT {STATE_COLUMNS} FROM streams WHERE id = %s FOR NO KEY UPDATE",  # noqa: S608
                          (stream_id,)).fetchone()
        assert row is not None
        counter = Counter(row)
        counter.changed = True
        return counter

    def append(self, cur: psycopg.Cursor[Any], rows: list[StreamRow], counters: dict[str, Counter | None]) -> None:
        """Number ``rows`` (in order) from their streams' counters and copy them in."""
        ready: dict[str, Counter] = {}
        for name in {row[0] for row in rows}:  # made before the COPY: no other statement during it
            ready[name] = counters.get(name) or self._new_counter(cur, name)
        counters.update(ready)
        positions = producer_positions((row[0], row[8]) for row in rows)
        if positions:
            rows = self._new_appends(cur, rows, positions, ready)
        with cur.copy(COPY_SQL) as copy:
            copy.set_types(COPY_TYPES)
            for name, _, seq, prio, ts, hdrs, body, _, _ in rows:
                counter = ready[name]
                offset = counter.next
                ts = max(ts, counter.last_ts)
                copy.write_row((counter.id, offset, seq, prio, ts, _headers_text(hdrs), body,
                                counter.end_bytes))
                counter.next = offset + 1
                counter.end_bytes += len(body)
                counter.last_ts = ts
                counter.changed = True

    def _new_appends(self, cur: psycopg.Cursor[Any], rows: list[StreamRow], positions: dict[tuple[str, str], int],
                     ready: dict[str, Counter]) -> list[StreamRow]:
        """``rows`` without the appends at or below their producer's stored position (another
        broker's, or this one's before a restart, may have them), and write the new positions.
        The stream rows are locked: no other commit moves these positions meanwhile."""
        stored: dict[tuple[str, str], int] = {}
        for name in {name for name, _ in positions}:
            producers = [producer for stream, producer in positions if stream == name]
            for producer, seq in cur.execute(PRODUCERS_SQL, (ready[name].id, producers)).fetchall():
                stored[name, producer] = seq
        kept = []
        for row in rows:
            if row[8] is not None:
                key, seq = (row[0], row[8][0]), row[8][1]
                if seq <= stored.get(key, -1):
                    continue
                stored[key] = seq
            kept.append(row)
        cur.executemany(PRODUCER_UPSERT_SQL, [
            (ready[name].id, producer, seq) for (name, producer), seq in stored.items() if (name, producer) in positions
        ])
        return kept

    def save_groups(self, cur: psycopg.Cursor[Any], rows: list[GroupOffsetRow]) -> None:
        """Write consumer groups' committed offsets (None: forget the group), in key order so
        two brokers committing the same groups never deadlock; the last commit wins."""
        keyed = sorted((self._make(cur, name), group, committed) for name, group, committed in rows)
        cur.executemany(GROUP_UPSERT_SQL, [row for row in keyed if row[2] is not None])
        cur.executemany("DELETE FROM stream_groups WHERE stream_id = %s AND name = %s",
                        [(stream_id, group) for stream_id, group, committed in keyed if committed is None])

    def finish(self, cur: psycopg.Cursor[Any], counters: dict[str, Counter | None], group: GroupRows) -> None:
        """Write the changed counters back, tell the other brokers, report the states in ``group``."""
        states = group.stream_states
        for name, counter in counters.items():
            if counter is not None and not counter.changed:
                continue
            if counter is not None:
                cur.execute(SAVE_SQL, (counter.first, counter.next, counter.end_bytes, counter.last_ts,
                                       _dumps(counter.options), counter.id))
            states[name] = None if counter is None else counter.state()
            cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"s:{self.broker_id}:{name}"))

    # -- reads ---------------------------------------------------------------------------------
    def state(self, cur: psycopg.Cursor[Any], name: str) -> StreamState | None:
        row = cur.execute(
            f"SELECT {STATE_COLUMNS} FROM streams WHERE vhost = %s AND name = %s",  # noqa: S608
            split_key(name),
        ).fetchone()
        return None if row is None else _state(row)

    def groups(self, cur: psycopg.Cursor[Any], name: str) -> dict[str, int]:
        """Stream ``name``'s consumer groups and their committed offsets."""
        stream_id = self.find(cur, name)
        if stream_id is None:
            return {}
        return dict(cur.execute("SELECT name, committed FROM stream_groups WHERE stream_id = %s",
                                (stream_id,)).fetchall())

    def states(self, cur: psycopg.Cursor[Any]) -> list[tuple[str, StreamState]]:
        """Every stream's state (the poll's fallback for a lost notification)."""
        rows = cur.execute(f"SELECT vhost, name, {STATE_COLUMNS} FROM streams").fetchall()  # noqa: S608
        return [(vhost_space(vhost) + name, _state(rest)) for vhost, name, *rest in rows]

    def recover(self, cur: psycopg.Cursor[Any]) -> list[StreamRecord]:
        """Each stream's options and retained offsets, from its counter row."""
        rows = cur.execute(
            "SELECT vhost, name, id, first_offset, next_offset, options FROM streams ORDER BY vhost, name"
        ).fetchall()
        producers, groups = recovery.stream_positions(cur)
        records = []
        for vhost, bare, stream_id, first, nxt, options in rows:
            name = vhost_space(vhost) + bare
            self._ids[name] = stream_id
            records.append(StreamRecord(name, _loads(options), first, nxt, stream_id, producers.get(stream_id, {}),
                                        groups.get(stream_id, {})))
        return records

    def read(self, cur: psycopg.Cursor[Any], name: str, start: int, limit: int) -> list[StreamMessage]:
        stream_id = self.find(cur, name)
        if stream_id is None or limit <= 0:
            return []
        rows = cur.execute(READ_SQL, (stream_id, start, limit)).fetchall()
        bare = split_key(name)[1]
        return [
            StreamMessage(seq, bare, prio, _headers(hdrs), bytes(body), ts, offset, before)
            for offset, seq, prio, ts, hdrs, body, before in rows
        ]
