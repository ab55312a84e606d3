"""The group-commit engine through a store outage, in virtual time: failed groups retried until
one commits, the outage logged once each way and counted, and ``withdraw`` giving up only an
insert certainly not on disk (never one in flight, nor one whose commit's outcome was lost)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
import trio.testing

from stompmq.storage.groupcommit import RETRY_BACKOFF, GroupCommitStore
from stompmq.storage.groups import GroupRows

from ..support.stores import Reports
from .test_sqlite_store import NEVER, ControlledBackend, committed, msg, seqs_on_disk, serving, until


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def outage_lines(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    messages = [r.getMessage() for r in caplog.records if r.name == "stompmq.storage.outage"]
    return (sum("is unavailable" in m for m in messages), sum("is available again" in m for m in messages))


async def test_failed_groups_are_retried_until_one_commits_and_the_outage_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    caplog.set_level(logging.WARNING)
    backend = ControlledBackend(tmp_path / "s.db")
    store = GroupCommitStore(backend, flush_interval=NEVER)
    failed: list[int] = []
    store.bind(Reports(commit_failed=lambda ticket, error: failed.append(ticket)))
    async with serving(store):
        backend.failures = 20
        store.insert(msg(1))
        ticket = store.sync_ticket()
        start = trio.current_time()
        await committed(store, ticket)
        assert len(failed) == 20 and seqs_on_disk(backend.sqlite.path) == {1}
        assert store.health().outages == 1
        # From the first failure to the success: 20 back-offs (and the virtual time the waits
        # on the database thread took).
        assert 20 * RETRY_BACKOFF <= store.health().outage_seconds <= trio.current_time() - start
        assert outage_lines(caplog) == (1, 1)
        backend.failures = 3  # a second outage counts again
        store.insert(msg(2))
        await committed(store, store.sync_ticket())
        assert store.health().outages == 2 and outage_lines(caplog) == (2, 2)


async def test_withdraw_takes_back_only_an_insert_certainly_not_on_disk(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    backend = ControlledBackend(tmp_path / "s.db")
    store = GroupCommitStore(backend, flush_interval=NEVER)
    path = backend.sqlite.path
    failed: list[int] = []
    store.bind(Reports(commit_failed=lambda ticket, error: failed.append(ticket)))

    async def failure(n: int) -> None:
        await until(lambda: len(failed) >= n, f"{n} failed commits")

    async with serving(store):
        fresh = msg(1)
        store.insert(fresh)
        assert store.withdraw(fresh)  # buffered, never tried
        assert not store.withdraw(fresh)  # gone already

        flying = msg(2)
        store.insert(flying)
        backend.hold = True
        store.sync_ticket()
        await backend.entered()
        assert not store.withdraw(flying)  # in flight: it may commit
        backend.hold, backend.failures = False, 1
        backend.release()
        await failure(1)
        assert store.withdraw(flying)  # its group failed: certainly not on disk
        assert store.backlog() == 0

        doubtful, later = msg(3), msg(4)
        store.insert(doubtful)
        store.insert(later)
        backend.doubts = 1  # committed, but the answer is lost
        backend.failures = 0
        ticket = store.sync_ticket()
        await failure(2)
        assert not store.withdraw(doubtful)  # may be on disk (it is)
        store.delete(later)  # acked meanwhile: the row may be there, so the delete must stay
        await committed(store, ticket)
        assert seqs_on_disk(path) == {3}
        assert store.withdraw(msg(5)) is False  # never buffered
    assert seqs_on_disk(path) == {3}


async def test_a_failed_group_whose_messages_were_acked_meanwhile_still_commits_its_ticket(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Its inserts and the newer deletes cancel out, leaving nothing to write: its ticket must
    still commit, or the receipts waiting on it wait forever."""
    backend = ControlledBackend(tmp_path / "s.db")
    store = GroupCommitStore(backend, flush_interval=NEVER)
    async with serving(store):
        consumed = msg(1)
        store.insert(consumed)
        backend.hold, backend.failures = True, 1
        ticket = store.sync_ticket()
        await backend.entered()
        store.delete(consumed)  # acked while its insert is being committed
        backend.hold = False
        backend.release()
        await committed(store, ticket)
        assert store.backlog() == 0 and seqs_on_disk(backend.sqlite.path) == set()


class Recording(ControlledBackend):
    """Records each group's promotions (copy seq -> delayed seq) as the backend is asked."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.promotions: list[dict[int, int]] = []

    def commit(self, group: GroupRows) -> None:
        self.promotions.append(dict(group.promotions))
        super().commit(group)


async def test_a_promoted_copy_carries_its_delayed_row_to_the_group_that_inserts_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """On a shared store a promoted copy is inserted only if its delayed row's delete took effect
    (the backend checks): the link goes with the copy's insert, again in a failed group's retry,
    and is forgotten with an insert its delete cancelled (no link kept for ever)."""
    backend = Recording(tmp_path / "s.db")
    store = GroupCommitStore(backend, flush_interval=NEVER)
    store.shared = True
    store.bind(Reports())
    async with serving(store):
        store.promoted(1, 2)
        store.insert(msg(2))
        backend.failures = 1
        await committed(store, store.sync_ticket())
        assert backend.promotions == [{2: 1}, {2: 1}]  # the failed group, then its retry
        store.promoted(3, 4)
        copy = msg(4)
        store.insert(copy)
        store.delete(copy)  # consumed before any commit: nothing to insert, nothing to link
        store.insert(msg(5))
        await committed(store, store.sync_ticket())
        assert backend.promotions[2:] == [{}]
        assert store._promotions == {}  # no link kept for a copy that will never be inserted
