"""``stompmq backup DEST``: a consistent copy of a live SQLite store.

SQLite's online backup API copies the database inside one read transaction
(``pages=-1``: all pages in one step), so the copy is the database as of one
commit: every message whose RECEIPT was sent before the backup began is in it.
The store runs in WAL mode, so the broker keeps committing meanwhile (readers
do not block its writer), and the broker's own flock is on ``PATH.lock``, which
a reader does not need.  The copy is written next to DEST and renamed into
place, so DEST is never a half-written file.  PostgreSQL stores are backed up
with PostgreSQL's own tools (pg_dump, base backups).
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

from .config import load_config

SQLITE_PREFIX = "sqlite:///"


def backup_sqlite(source: str, dest: str) -> None:
    """Copy the SQLite database at ``source`` to ``dest`` consistently, even while it is in use."""
    if not Path(source).is_file():
        raise OSError(f"no SQLite store at {source}")
    tmp = dest + ".partial"
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        src.execute("PRAGMA busy_timeout = 10000")
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst, pages=-1)
            dst.execute("PRAGMA journal_mode = DELETE")  # a single self-contained file
        finally:
            dst.close()
    finally:
        src.close()
    os.replace(tmp, dest)


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: stompmq backup DEST [--store URL | --data-dir DIR | --config FILE]", file=sys.stderr)
        return 2
    dest, config = argv[0], load_config(argv[1:])
    url = config.store_url
    if not url.startswith(SQLITE_PREFIX):
        print(f"stompmq backup: only SQLite stores ({config.store_shown} is not one); back up PostgreSQL "
              "with pg_dump", file=sys.stderr)
        return 2
    source = url[len(SQLITE_PREFIX):]
    try:
        backup_sqlite(source, dest)
    except (OSError, sqlite3.Error) as e:
        print(f"stompmq backup: {e}", file=sys.stderr)
        return 2
    print(f"backed up {Path(source).resolve()} to {Path(dest).resolve()}")
    return 0
