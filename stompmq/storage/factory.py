"""Pick a store implementation from a store URL."""

from __future__ import annotations

from .base import Store, StoreError
from .memory import MemoryStore

SQLITE_PREFIX = "sqlite:///"


def open_store(url: str, *, flush_interval: float = 0.05, max_unflushed_bytes: int = 64 * 1024 * 1024) -> Store:
    """``memory`` or ``sqlite:///PATH`` (relative or absolute PATH)."""
    if url == "memory":
        return MemoryStore()
    if url.startswith(SQLITE_PREFIX):
        from .sqlite import SQLiteStore

        return SQLiteStore(
            url[len(SQLITE_PREFIX) :], flush_interval=flush_interval, max_backlog_bytes=max_unflushed_bytes
        )
    raise StoreError(f"unsupported store URL {url!r}: use 'memory' or 'sqlite:///PATH'")
