"""What a SQLite store file holds, read through an outside connection (as another process
would see it), for the crash and bad-condition tests."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path


def stored(db: Path, queue: str) -> list[tuple[dict[str, str], int, int]]:
    """(headers, delivered, redeliveries) of every message of ``queue`` on disk, by seq."""
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        rows = conn.execute(
            "SELECT m.headers, m.delivered, m.redeliveries FROM messages m"
            " JOIN queues q ON q.id = m.queue_id WHERE q.name = ? ORDER BY m.seq",
            (queue,),
        ).fetchall()
    finally:
        conn.close()
    return [(json.loads(h), int(d), int(r)) for h, d, r in rows]


def stored_headers(db: Path, queue: str) -> list[dict[str, str]]:
    """User headers of every message of ``queue`` on disk, by seq."""
    return [headers for headers, _, _ in stored(db, queue)]
