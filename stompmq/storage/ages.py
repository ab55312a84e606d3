"""How long a queue's messages have waited: its oldest ready and oldest unacked message.

An operator alerts on age, not on counts: a queue of a million messages consumed at pace is
healthy, one message nobody takes for an hour is not.  Both ages are read at scrape or API time
only (the engine does no per-message work for them).  The oldest ready message is found by one
index seek per priority level (``ix_messages_queue_order`` is (queue, priority desc, seq), and
seq follows publish time within a level: the head of each level is its oldest), so the read
costs the same for ten messages or ten million; the oldest unacked one is a MIN over the
queue's delivered rows, at most what its consumers hold (on SQLite through the partial index of
delivered rows, on PostgreSQL the scan ``count_unacked`` makes already)."""

from __future__ import annotations

#: (oldest ready, oldest delivered-unacked): epoch milliseconds of the messages' timestamps,
#: None where there is none.
QueueAges = tuple[int | None, int | None]
NO_AGES: QueueAges = (None, None)
#: SEND priorities run from 0 to 9 (send_headers.send_options), so a queue has at most ten levels.
PRIORITIES = range(10)

#: The oldest ready message of a queue (placeholders ``id``/``false``/``true``, ``indexed`` the
#: backend's to adapt): the heads of its priority levels, then its delivered rows.
QUEUE_AGES_SQL = (
    "SELECT MIN(t) FROM ("
    + " UNION ALL ".join(
        f"SELECT (SELECT m.timestamp FROM messages m WHERE m.queue_id = {{id}} AND m.priority = {p}"
        " AND m.delivered = {false} ORDER BY m.seq LIMIT 1) AS t"
        for p in PRIORITIES)
    + ") AS heads"
)
QUEUE_UNACKED_AGE_SQL = (
    "SELECT MIN(m.timestamp) FROM messages m{indexed} WHERE m.delivered = {true} AND m.queue_id = {id}"
)


def older(a: int | None, b: int | None) -> int | None:
    """The earlier of two timestamps, either of which may be None (none)."""
    if a is None:
        return b
    return a if b is None or a <= b else b
