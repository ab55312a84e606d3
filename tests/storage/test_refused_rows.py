"""A row the database refuses never stops the others (storage/groupcommit.py).

Values that slipped past the engine's range checks (docs/limits.md) are handed to a
``SQLiteStore`` on a real file through the Store interface: an ``expires`` or ``deliver_at``
past 64 bits (SQLite's driver raises OverflowError binding it).  The group they travel in must
commit everything else, report the refused messages before its ticket, log once, and leave
the store accepting writes; what is on disk is read through a separate sqlite3 connection.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from stompmq.storage.base import StoredMessage, StoreEvents, StoreRejected
from stompmq.storage.sqlite import SQLiteStore

from .test_sqlite_store import NEVER, committed, msg, serving, until

HUGE = 2**70


class Events(StoreEvents):
    """The order of what the store reports: ("rejected", seqs) and ("committed", ticket)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    def committed(self, ticket: int) -> None:
        self.log.append(("committed", ticket))

    def rejected(self, messages: list[StoredMessage], error: StoreRejected) -> None:
        self.log.append(("rejected", sorted(m.seq for m in messages)))


def on_disk(path: Path) -> set[int]:
    conn = sqlite3.connect(path)
    try:
        return {seq for (seq,) in conn.execute("SELECT seq FROM messages UNION SELECT seq FROM delayed_messages")}
    finally:
        conn.close()


@pytest.mark.parametrize("bad", [[7], [1, 200], [3, 4, 5, 150, 151]])
async def test_the_refused_rows_are_left_out_and_the_rest_commits(tmp_path: Path, bad: list[int],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(str(path), flush_interval=NEVER)
    events = Events()
    store.bind(events)
    async with serving(store):
        for seq in range(1, 201):
            if seq not in bad:
                store.insert(msg(seq))
            elif seq % 2:
                store.insert(msg(seq, expires=HUGE))
            else:
                store.insert(msg(seq, deliver_at=HUGE))  # a delayed message
        with caplog.at_level(logging.ERROR, logger="stompmq.storage.refusals"):
            ticket = store.sync_ticket()
            await committed(store, ticket)
        assert on_disk(path) == set(range(1, 201)) - set(bad)
        assert events.log == [("rejected", bad), ("committed", ticket)]
        refused = [r for r in caplog.records if "refused" in r.getMessage()]
        assert len(refused) == 1, "logged once per group"
        assert f"refused {len(bad)} of the 200 operations" in refused[0].getMessage()
        assert not store.health().unavailable and store.health().outages == 0
        # the store carries on: the next group commits as usual
        store.insert(msg(500))
        await committed(store, store.sync_ticket())
        assert 500 in on_disk(path)
        assert events.log[-1] == ("committed", ticket + 1)


async def test_a_refused_update_is_left_out_and_the_others_commit(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(str(path), flush_interval=NEVER)
    events = Events()
    store.bind(events)
    async with serving(store):
        messages = [msg(seq) for seq in range(1, 11)]
        for m in messages:
            store.insert(m)
        await committed(store, store.sync_ticket())
        messages[2].redeliveries = HUGE  # an update of a stored row with a value past 64 bits
        store.update(messages[2])
        store.delete(messages[5])
        store.insert(msg(11))
        ticket = store.sync_ticket()
        await committed(store, ticket)
        assert on_disk(path) == set(range(1, 12)) - {6}
        assert events.log[-1] == ("committed", ticket)  # no message to answer for: only logged


async def test_an_outage_is_still_retried_and_says_unavailable(tmp_path: Path) -> None:
    """Not every failure is a refusal: a disk error keeps the group pending (and /readyz not ready)."""
    path = tmp_path / "s.db"
    store = SQLiteStore(str(path), flush_interval=NEVER)
    async with serving(store):
        store.insert(msg(1))
        await committed(store, store.sync_ticket())
        conn = sqlite3.connect(path, timeout=0)
        conn.execute("BEGIN EXCLUSIVE")  # the writer cannot take the lock: a transient failure
        try:
            store.insert(msg(2))
            ticket = store.sync_ticket()
            await until(lambda: store.health().unavailable, "the store reported unavailable")
            assert store.committed < ticket
        finally:
            conn.rollback()
            conn.close()
        await committed(store, ticket)
        assert not store.health().unavailable
        assert on_disk(path) == {1, 2}


@pytest.mark.postgres
async def test_postgres_leaves_out_the_refused_rows_too() -> None:
    from stompmq.storage.postgres import PostgresStore

    from ..support.stores import postgres_server

    store = PostgresStore(postgres_server().new_database(), flush_interval=NEVER)
    events = Events()
    store.bind(events)
    async with serving(store):
        first = 10_000_000  # seqs of our own: this test hands rows straight to the store
        for i in range(20):
            store.insert(msg(first + i, expires=HUGE if i in (3, 11) else None))
        ticket = store.sync_ticket()
        await committed(store, ticket)
        assert events.log == [("rejected", [first + 3, first + 11]), ("committed", ticket)]
        assert await store.count("q") == 18
        assert not store.health().unavailable
