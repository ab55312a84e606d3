"""Pick a store implementation from a store URL."""

from __future__ import annotations

from .base import Store, StoreError
from .groupcommit import FLUSH_INTERVAL, MAX_BACKLOG_BYTES
from .memory import MemoryStore

SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


def open_store(
    url: str,
    *,
    flush_interval: float = FLUSH_INTERVAL,
    max_unflushed_bytes: int = MAX_BACKLOG_BYTES,
    lease: float = 10.0,
) -> Store:
    """``memory``, ``sqlite:///PATH`` (relative or absolute PATH) or ``postgresql://...``
    (several brokers may share one PostgreSQL database; ``lease`` is how long a dead one's
    messages stay claimed).  ``max_unflushed_bytes`` bounds what waits for a commit."""
    if url == "memory":
        return MemoryStore()
    if url.startswith(SQLITE_PREFIX):
        from .sqlite import SQLiteStore

        return SQLiteStore(
            url[len(SQLITE_PREFIX) :], flush_interval=flush_interval, max_backlog_bytes=max_unflushed_bytes
        )
    if url.startswith(POSTGRES_PREFIXES):
        try:
            from .postgres import PostgresStore
        except ImportError:
            raise StoreError("the PostgreSQL store needs psycopg: pip install 'stompmq[postgres]'") from None
        return PostgresStore(url, flush_interval=flush_interval, max_backlog_bytes=max_unflushed_bytes, lease=lease)
    shown = url.split("@")[-1] if "://" in url else url
    raise StoreError(f"unsupported store URL {shown!r}: use 'memory', 'sqlite:///PATH' or 'postgresql://...'")
