"""The SQLite file before the first statement of the store: its directory, its lock, the
connection with its PRAGMAs, the integrity check, and an open error explained in one line.

Why these settings: one file, WAL journal, ``synchronous = FULL`` (a commit is one fsync of the
WAL, and an outside ``sqlite3`` reader does not hold up the broker's commits); an exclusive
``flock`` on ``PATH.lock`` for the broker's lifetime, since SQLite's own locks only serialise
transactions and do not stop a second broker from using the same file.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3

from stompmq.storage.base import StoreError

# ``PRAGMA quick_check`` reads every page of the file: seconds for a backlog of millions of
# messages, all before the first delivery.  A file up to this size is checked whole at open (well
# under a second); a larger one only has its header and schema read, and a damaged page fails the
# read or commit that meets it with a store error (``PRAGMA integrity_check`` in the sqlite3
# shell checks it whole, off the start-up path).
CHECK_WHOLE_BYTES = 64 * 1024**2
# Page cache of the connection, in KiB: keeps the paging index and recent pages hot while
# bounding RSS (the broker must hold 1M queued messages under 150 MB).
CACHE_SIZE_KIB = 16 * 1024
# After open, wait this long for a lock held by an outside reader (sqlite3 shell, backup)
# instead of failing a whole commit group; open itself uses 0 to fail fast.
BUSY_TIMEOUT_MS = 2000
# Debian's SQLite is built with SECURE_DELETE on: every deleted row's pages are zeroed and written
# again, so a 64 KiB message inserted and deleted cost its body's bytes twice in the WAL (and 150 us
# of CPU per delete commit).  FAST still zeroes deleted cells on the b-tree pages a delete writes
# anyway, but not freed overflow pages: a deleted body may linger in free pages until reused.
SECURE_DELETE = "FAST"
# Truncate the WAL file back to this size after a checkpoint so a burst does not pin disk space.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024


def check_paths(path: str) -> None:
    """Make the file's directory; refuse a path the broker could not use, saying why."""
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create directory {directory}: {exc.strerror}") from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StoreError(f"cannot use {path}: directory {directory} is not writable")
    if os.path.isdir(path):
        raise StoreError(f"cannot use {path}: it is a directory")
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        raise StoreError(f"cannot use {path}: the file is not writable")

def lock(path: str) -> int:
    """An exclusive flock on PATH.lock, held by the returned descriptor (for the broker's
    lifetime: closing it releases the lock), with the holder's pid in the file."""
    lock_path = path + ".lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot create lock file {lock_path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StoreError(
            f"{path} is locked by another process (pid {holder}):"
            " is another broker running on it?"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd

def connect(path: str, max_page_count: int | None) -> sqlite3.Connection:
    """The broker's connection: the file checked (``quick_check``), WAL, ``synchronous = FULL``
    and the PRAGMAs above."""
    try:
        # timeout=0: an outside process holding the database fails the open at once.
        conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path}: {exc}") from exc
    try:
        problems = quick_check(conn, path)
        if problems != ["ok"]:
            # One row may hold many lines ("*** in database main ***\nPage 8: ..."): the
            # message must stay one line for the operator and for ERROR headers.
            lines = [
                line.strip()
                for problem in problems
                for line in str(problem).splitlines()
                if line.strip() and not line.startswith("***")
            ]
            raise StoreError(f"{path} is corrupt (quick_check: {'; '.join(lines[:3])})")
        conn.execute("PRAGMA journal_mode = WAL").fetchall()
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute(f"PRAGMA cache_size = -{CACHE_SIZE_KIB}")
        conn.execute(f"PRAGMA secure_delete = {SECURE_DELETE}").fetchall()
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}").fetchall()
        if max_page_count is not None:
            conn.execute(f"PRAGMA max_page_count = {int(max_page_count)}").fetchall()
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}").fetchall()
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(explain_open_error(path, exc)) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def quick_check(conn: sqlite3.Connection, path: str) -> list[str]:
    """``PRAGMA quick_check``'s problems (["ok"]: none) for a file up to CHECK_WHOLE_BYTES;
    for a larger one, reading the schema ("not a database" raises)."""
    if not os.path.exists(path) or os.path.getsize(path) <= CHECK_WHOLE_BYTES:
        return [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
    conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    return ["ok"]


def explain_open_error(path: str, exc: sqlite3.Error) -> str:
    text = str(exc)
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return f"{path} is not a SQLite database or is corrupt ({text})"
    if "locked" in text or "busy" in text:
        return f"{path} is locked by another process ({text})"
    if "readonly" in text or "read-only" in text:
        return f"cannot use {path}: the file is not writable ({text})"
    return f"cannot open {path}: {text}"
