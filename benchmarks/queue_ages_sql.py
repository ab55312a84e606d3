"""What a queue's ages cost the store: storage/ages.py's statements against the count a scrape
already makes, on one SQLite queue of 200,000 messages (two priorities, 500 delivered).

    python benchmarks/queue_ages_sql.py
"""

from __future__ import annotations

import os
import random
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine  # noqa: E402

from stompmq.storage.ages import QUEUE_AGES_SQL, QUEUE_UNACKED_AGE_SQL  # noqa: E402
from stompmq.storage.schema import metadata  # noqa: E402

PATH = "/tmp/stompmq-queue-ages.db"
MESSAGES = 200_000


def timed(conn: sqlite3.Connection, sql: str, params: object, runs: int = 20) -> tuple[float, object]:
    start = time.perf_counter()
    for _ in range(runs):
        row = conn.execute(sql, params).fetchone()  # type: ignore[arg-type]
    return (time.perf_counter() - start) / runs * 1000, row


def main() -> None:
    if os.path.exists(PATH):
        os.remove(PATH)
    metadata.create_all(create_engine("sqlite:///" + PATH))
    conn = sqlite3.connect(PATH)
    conn.execute("INSERT INTO queues (id, vhost, name) VALUES (1, '/', 'big')")
    conn.executemany(
        "INSERT INTO messages (seq, queue_id, priority, headers, body, delivered, ack_timeout, redeliveries, timestamp)"
        " VALUES (?, 1, ?, '{}', ?, ?, NULL, 0, ?)",
        ((i, random.choice((4, 4, 4, 7)), b"x" * 100, int(i < 500), 1_000_000 + i) for i in range(MESSAGES)))
    conn.commit()
    conn.execute("ANALYZE")
    params = {"id": 1}
    ready = QUEUE_AGES_SQL.format(id=":id", false="0")
    unacked = QUEUE_UNACKED_AGE_SQL.format(id=":id", true="1", indexed=" INDEXED BY ix_messages_delivered")
    count = "SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0) FROM messages WHERE queue_id = :id"
    for name, sql in (("oldest ready", ready), ("oldest unacked", unacked), ("count and bytes", count)):
        ms, row = timed(conn, sql, params)
        print(f"{name:16} {ms:8.3f} ms  {row}")
    os.remove(PATH)


if __name__ == "__main__":
    main()
