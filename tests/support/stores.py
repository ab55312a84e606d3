"""The stores a test broker runs on: memory, a SQLite file, or a database of the session's
throw-away PostgreSQL server (started once, on first use; tests/conftest.py stops it)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.storage.base import Store, StoreError, StoreEvents
from stompmq.storage.memory import MemoryStore

from .postgres_server import PostgresServer

STORES = ["memory", "sqlite", "postgres"]
#: Why a PostgreSQL test is skipped where psycopg (the ``postgres`` extra) is not installed.
NO_PSYCOPG = "psycopg is not installed: pip install -e '.[postgres]' for the PostgreSQL tests"
#: Seconds a dead broker's claims last in tests (the default, 10 s, would only slow them).
TEST_LEASE = 3.0

_postgres: PostgresServer | None = None


def postgres_server() -> PostgresServer:
    """The session's PostgreSQL server, started on first use (stopped at the session's end).

    Without psycopg (the ``postgres`` extra; the ``dev`` extra alone leaves it out) the test that
    asked is skipped, saying so."""
    global _postgres
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip(NO_PSYCOPG)
    if _postgres is None:
        _postgres = PostgresServer().start()
    return _postgres


def stop_postgres_server() -> None:
    """Stop the session's PostgreSQL server if a test started it."""
    global _postgres
    if _postgres is not None:
        _postgres.stop()
        _postgres = None


def make_store_factory(kind: str, tmp_path: Path) -> Callable[[], Store]:
    """Stores of one kind on one database: each call opens the same data again (a restart)."""
    if kind == "memory":
        return MemoryStore
    if kind == "postgres":
        url = postgres_server().new_database()  # skips the test without psycopg

        from stompmq.storage.postgres import PostgresStore

        def make_postgres() -> Store:
            return PostgresStore(url, flush_interval=0.01, lease=TEST_LEASE)

        return make_postgres
    from stompmq.storage.sqlite import SQLiteStore

    def make() -> Store:
        return SQLiteStore(str(tmp_path / "broker.db"), flush_interval=0.01)

    return make


class Reports(StoreEvents):
    """A store's commit reports handed to the given functions (a test of the store alone)."""

    def __init__(
        self,
        committed: Callable[[int], object] | None = None,
        commit_failed: Callable[[int, StoreError], object] | None = None,
    ) -> None:
        self._committed = committed
        self._failed = commit_failed

    def committed(self, ticket: int) -> None:
        if self._committed is not None:
            self._committed(ticket)

    def commit_failed(self, ticket: int, error: StoreError) -> None:
        if self._failed is not None:
            self._failed(ticket, error)
