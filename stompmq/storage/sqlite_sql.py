"""The SQL of the SQLite backend: its statements, and the batched inserts and run deletes a
commit group's message rows go through (storage/sqlite.py runs them).

The statements are SQLite's dialect of ``schema.py``'s tables; a statement in a commit is a
few ``executemany`` calls, never one per row in Python where SQLite takes many rows at once:
``INSERT_ROWS`` rows to one INSERT, a run of consecutive seqs in one DELETE.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from itertools import chain
from typing import Any

from stompmq.storage.header_filter import HeaderFilter

# An insert as its SQL parameters: InsertRow with the queue id and the headers as JSON, for
# INSERT_SQL (with an ack timeout or an expiry) or INSERT_PLAIN_SQL (neither: nearly every message).
InsertParams = tuple[int, int, int, str, bytes | bytearray, int, float | None, int, int, int | None]
InsertPlainParams = tuple[int, int, int, str, bytes | bytearray, int, int, int]
# A delayed insert as its SQL parameters: DelayedRow with the queue id and the headers as JSON.
DelayedParams = tuple[int, int, int, str, bytes, float | None, int, int | None, int]

INSERT_SQL = (
    "INSERT OR REPLACE INTO messages (seq, queue_id, priority, headers, body, delivered,"
    " ack_timeout, redeliveries, timestamp, expires) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_PLAIN_SQL = (
    "INSERT OR REPLACE INTO messages (seq, queue_id, priority, headers, body, delivered,"
    " redeliveries, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
# sqlite3 binds int, float, str and bytearray directly but looks every other parameter up in its
# adapter registry first (bytes, bool, None: ~0.5-0.8 us each, a third of a small row's insert),
# so inserts bind bodies up to this size as a bytearray copy, ``delivered`` as an int, and leave
# a NULL ack timeout and expiry out of the statement.
BLOB_COPY_BELOW = 8192
DELAYED_INSERT_SQL = (
    "INSERT OR REPLACE INTO delayed_messages (seq, queue_id, priority, headers, body, ack_timeout,"
    " timestamp, expires, deliver_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
DELAYED_DELETE_SQL = "DELETE FROM delayed_messages WHERE seq = ?"
# A range scan of ix_delayed_messages_deliver_at from the key after which the broker has them all.
DUE_COLUMNS = "d.seq, q.name, d.priority, d.headers, d.body, d.timestamp, d.ack_timeout, d.expires, d.deliver_at"
# Only the asking vhost's rows (``q.vhost``): each vhost's engine pages its own delayed messages.
DUE_FIRST_SQL = (
    f"SELECT {DUE_COLUMNS} FROM delayed_messages d JOIN queues q ON q.id = d.queue_id"
    " WHERE q.vhost = ? ORDER BY d.deliver_at, d.seq LIMIT ?"
)
DUE_AFTER_SQL = (
    f"SELECT {DUE_COLUMNS} FROM delayed_messages d JOIN queues q ON q.id = d.queue_id"
    " WHERE q.vhost = ? AND (d.deliver_at, d.seq) > (?, ?) ORDER BY d.deliver_at, d.seq LIMIT ?"
)
# A range scan of the partial ix_messages_expires (expires, seq) after a key.
EXPIRED_SQL = (
    "SELECT m.seq, q.name, m.priority, m.headers, m.body, m.timestamp, m.ack_timeout, m.redeliveries, m.expires"
    " FROM messages m JOIN queues q ON q.id = m.queue_id"
    " WHERE m.expires IS NOT NULL AND (m.expires, m.seq) > (?, ?) AND m.expires < ? AND m.delivered = 0"
    " AND q.vhost = ?"
    " ORDER BY m.expires, m.seq LIMIT ?"
)
# Over every vhost (a MIN over the expiry index, no join): another vhost's earlier expiry only wakes
# the asking engine once more, early.
NEXT_EXPIRY_SQL = "SELECT MIN(expires) FROM messages WHERE expires IS NOT NULL AND expires >= ?"
# Start-up makes the rows out for delivery at a crash ready again: a walk of the partial
# ix_messages_delivered (those rows only), not a scan of the backlog.
REQUEUE_DELIVERED_SQL = "UPDATE messages SET delivered = 0, redeliveries = redeliveries + 1 WHERE delivered = 1"
# Parameters in the order of groups.UpdateRow.
UPDATE_SQL = "UPDATE messages SET delivered = ?, redeliveries = ?, priority = ? WHERE seq = ?"
DELETE_SQL = "DELETE FROM messages WHERE seq = ?"
# A policy's message-ttl given to the messages waiting (groups.CapExpiry): (ttl, queue id, ttl).
CAP_EXPIRY_SQL = (
    "UPDATE messages SET expires = timestamp + ? WHERE queue_id = ? AND (expires IS NULL OR expires > timestamp + ?)"
)
# Acknowledgements mostly settle runs of consecutive seqs: one statement deletes a run (1.1 against
# 2.2 us per row, 200,000 rows of 100 bytes).
DELETE_RUN_SQL = "DELETE FROM messages WHERE seq BETWEEN ? AND ?"
# Rows per multi-row INSERT: a statement of one row costs about as much again as the row (2.9
# against 1.4 us per 100-byte row, 200,000 rows); 64 rows of at most ten parameters stay below
# the oldest SQLite limit on bound parameters (999).
INSERT_ROWS = 64
READY_COLUMNS = "seq, priority, headers, body, timestamp, ack_timeout, redeliveries, expires"
# Three range scans of ix_messages_queue_order, none needs a sort: from the start,
# the rest of the key's priority, then the lower priorities.
_READY_FIRST = (
    f"SELECT {READY_COLUMNS} FROM messages WHERE queue_id = ? AND delivered = 0{{}}"
    " ORDER BY priority DESC, seq LIMIT ?"
)
_READY_SAME_PRIORITY = (
    f"SELECT {READY_COLUMNS} FROM messages WHERE queue_id = ? AND priority = ? AND seq > ?"
    " AND delivered = 0{} ORDER BY seq LIMIT ?"
)
_READY_LOWER_PRIORITY = (
    f"SELECT {READY_COLUMNS} FROM messages WHERE queue_id = ? AND priority < ?"
    " AND delivered = 0{} ORDER BY priority DESC, seq LIMIT ?"
)
READY_FIRST_SQL, READY_SAME_PRIORITY_SQL, READY_LOWER_PRIORITY_SQL = (
    sql.format("") for sql in (_READY_FIRST, _READY_SAME_PRIORITY, _READY_LOWER_PRIORITY))
#: The three reads above with a header filter, by filter (a queue's subscribers change seldom).
_FILTERED: dict[HeaderFilter, tuple[str, str, str, tuple[str, ...]]] = {}
_FILTERED_MAX = 256


def filtered_ready_sql(matching: HeaderFilter) -> tuple[str, str, str, tuple[str, ...]]:
    """The three ready reads leaving out the rows that match no term of ``matching`` but those
    with an expiry (header_filter.py), and the filter's parameters, which follow the key's.

    A header is read with ``json_extract`` (NULL when absent), in the scan of the queue's index:
    about 0.2 us a row, a sixth of reading and decoding it in the broker."""
    known = _FILTERED.get(matching)
    if known is not None:
        return known
    terms, params = [], []
    for term in matching:
        tests = []
        for match in term:
            params.append(f'$."{match.name}"')
            if match.values is None:
                tests.append("json_extract(headers, ?) IS NOT NULL")
            else:
                tests.append(f"json_extract(headers, ?) IN ({', '.join('?' * len(match.values))})")
                params += sorted(match.values)
        terms.append("(" + " AND ".join(tests) + ")")
    condition = f" AND ({' OR '.join(terms)} OR expires IS NOT NULL)"
    made = (_READY_FIRST.format(condition), _READY_SAME_PRIORITY.format(condition),
            _READY_LOWER_PRIORITY.format(condition), tuple(params))
    if len(_FILTERED) >= _FILTERED_MAX:
        _FILTERED.clear()
    _FILTERED[matching] = made
    return made


#: A producer's position only moves up (a group has one row per producer and stream).
PRODUCER_UPSERT_SQL = (
    "INSERT INTO stream_producers (stream_id, producer, seq) VALUES (?, ?, ?)"
    " ON CONFLICT (stream_id, producer) DO UPDATE SET seq = excluded.seq WHERE excluded.seq > stream_producers.seq"
)
GROUP_UPSERT_SQL = (
    "INSERT INTO stream_groups (stream_id, name, committed) VALUES (?, ?, ?)"
    " ON CONFLICT (stream_id, name) DO UPDATE SET committed = excluded.committed"
)
STREAM_INSERT_SQL = (
    "INSERT OR REPLACE INTO stream_messages (stream_id, position, seq, priority, timestamp, headers,"
    " body, bytes_before) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
STREAM_READ_SQL = (
    "SELECT position, seq, priority, timestamp, headers, body, bytes_before FROM stream_messages"
    " WHERE stream_id = ? AND position >= ? ORDER BY position LIMIT ?"
)


def _many_rows(sql: str, rows: int) -> str:
    """``sql`` (an INSERT of one row of parameters) inserting ``rows`` rows."""
    values = sql[sql.rindex("(") :]
    return sql + (", " + values) * (rows - 1)


_BATCHED = {sql: _many_rows(sql, INSERT_ROWS) for sql in (INSERT_SQL, INSERT_PLAIN_SQL)}


def insert_rows(conn: sqlite3.Connection, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``rows`` INSERT_ROWS to a statement, the rest one by one (one SQL text each, so
    the statement cache keeps them prepared)."""
    whole = len(rows) - len(rows) % INSERT_ROWS
    batched = _BATCHED[sql]
    for start in range(0, whole, INSERT_ROWS):
        conn.execute(batched, list(chain.from_iterable(rows[start : start + INSERT_ROWS])))
    if whole < len(rows):
        conn.executemany(sql, rows[whole:])


def delete_rows(conn: sqlite3.Connection, deletes: Sequence[tuple[int]]) -> None:
    """Delete the rows of these seqs, each run of consecutive seqs in one statement."""
    seqs = sorted(seq for (seq,) in deletes)  # distinct: a group holds one operation per seq
    singles: list[tuple[int]] = []
    runs: list[tuple[int, int]] = []
    start = end = seqs[0]
    for seq in seqs[1:] + [-1]:  # -1 continues no run: it closes the last one
        if seq == end + 1:
            end = seq
            continue
        if end > start:
            runs.append((start, end))
        else:
            singles.append((start,))
        start = end = seq
    if runs:
        conn.executemany(DELETE_RUN_SQL, runs)
    if singles:
        conn.executemany(DELETE_SQL, singles)
