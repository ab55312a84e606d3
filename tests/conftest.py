"""Shared fixtures: a real broker on a free loopback port, once per store kind.

The behavioural suite runs on every store: memory, sqlite and postgres (a throw-away server
that tests/support/postgres_server.py starts once per session; tests on it carry the ``postgres``
marker, so ``-m "not postgres"`` skips them where no PostgreSQL can be installed).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings
from stompmq.storage.base import Store
from stompmq.storage.memory import MemoryStore

from .support.broker_thread import BrokerThread
from .support.rawclient import close_left_open
from .support.stores import STORES, make_store_factory, stop_postgres_server

# Broker subprocesses run side by side: none takes the default management port.
os.environ.setdefault("STOMPMQ_HTTP_PORT", "0")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_postgres_server()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("store_kind") == "postgres":
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    """The test clients a test left open are closed when it ends (so a test needs no ``with``
    for every client it drops)."""
    yield
    close_left_open()


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def broker(store_kind: str, tmp_path: Path) -> Iterator[BrokerThread]:
    """A started broker (per test, per store kind)."""
    with BrokerThread(make_store_factory(store_kind, tmp_path)).start() as thread:
        yield thread


@pytest.fixture
def memory_broker() -> Iterator[BrokerThread]:
    """A broker on the memory store, for protocol-level tests that do not depend on storage."""
    with BrokerThread(MemoryStore).start() as thread:
        yield thread


@contextmanager
def _brokers(store_for: Callable[[int], Callable[[], Store]]) -> Iterator[Callable[..., BrokerThread]]:
    """``make(settings=..., config=...)`` starts a broker on ``store_for(n)`` (n = brokers so far);
    every broker started is stopped at the end."""
    started: list[BrokerThread] = []

    def make(settings: ServerSettings | None = None, config: BrokerConfig | None = None) -> BrokerThread:
        thread = BrokerThread(
            store_for(len(started)), settings=settings or ServerSettings(port=0), config=config or BrokerConfig()
        )
        started.append(thread.start())
        return thread

    try:
        yield make
    finally:
        for thread in started:
            thread.stop()


@pytest.fixture
def make_broker(store_kind: str, tmp_path: Path) -> Iterator[Callable[..., BrokerThread]]:
    """Start brokers with custom ServerSettings/BrokerConfig on the parametrised store.

    ``make_broker(settings=..., config=...)``; each call gets its own database
    directory, and every broker started is stopped at teardown.
    """

    def store_for(n: int) -> Callable[[], Store]:
        directory = tmp_path / f"broker{n}"
        directory.mkdir()
        return make_store_factory(store_kind, directory)

    with _brokers(store_for) as make:
        yield make


@pytest.fixture
def make_memory_broker() -> Iterator[Callable[..., BrokerThread]]:
    """Like ``make_broker`` but always on the memory store (protocol-level tests)."""
    with _brokers(lambda n: MemoryStore) as make:
        yield make
