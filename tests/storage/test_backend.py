"""The order rules of ``Backend.commit``, checked on each backend directly, without the engine.

The group-commit engine relies on them (see ``stompmq.storage.backend``), so a new backend
(PostgreSQL) joins ``BACKENDS`` and must pass these before it goes under ``GroupCommitStore``.
What a backend stored is read back through the backend itself, after a reopen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stompmq.storage.backend import Backend
from stompmq.storage.base import Recovery
from stompmq.storage.groups import (
    DeleteRow,
    GroupRows,
    InsertRow,
    StreamRow,
    StructuralOp,
    UpdateRow,
)
from stompmq.storage.records import BindingRecord, ExchangeRecord
from stompmq.storage.rows import DropBinding, DropExchange, DropStream, Purge, SaveBinding, SaveExchange
from stompmq.storage.sqlite import SQLiteBackend

# Each backend, made on a database in a given (empty at first) directory.
BACKENDS: dict[str, Callable[[Path], Backend]] = {
    "sqlite": lambda directory: SQLiteBackend(str(directory / "s.db")),
}


@pytest.fixture(params=sorted(BACKENDS))
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Backend]:
    """Makes a closed backend on the test's database (the same database each time)."""
    make = BACKENDS[request.param]
    return lambda: make(tmp_path)


@contextmanager
def opened(make_backend: Callable[[], Backend]) -> Iterator[tuple[Backend, Recovery]]:
    backend = make_backend()
    try:
        yield backend, backend.open()
    finally:
        backend.close()


def row(seq: int, queue: str = "q", delivered: bool = False) -> InsertRow:
    return (seq, queue, 4, {"h": str(seq)}, b"body", delivered, None, 0, 1_700_000_000_000 + seq, None)


def group(
    last_seq: int,
    structural: list[StructuralOp] | None = None,
    inserts: list[InsertRow] | None = None,
    updates: list[UpdateRow] | None = None,
    deletes: list[DeleteRow] | None = None,
) -> GroupRows:
    return GroupRows(structural or [], inserts or [], updates or [], deletes or [], last_seq)


def test_commit_runs_purges_before_the_message_rows_of_its_group(
    make_backend: Callable[[], Backend],
) -> None:
    with opened(make_backend) as (backend, _):
        backend.commit(group(3, inserts=[row(1), row(2), row(3, "other")]))
        # Every message row of a group was issued after the group's purges: a delivery in
        # flight written back (seq 2), a fresh SEND (seq 4), an ack on another queue (seq 3).
        backend.commit(
            group(
                4,
                structural=[Purge("q")],
                inserts=[row(2, delivered=True), row(4)],
                deletes=[(3,)],
            )
        )
        assert [m.seq for m in backend.load_ready("q", None, 10)] == [4]
        assert (backend.count("q"), backend.count("other")) == (2, 0)
    with opened(make_backend) as (backend, recovery):
        assert recovery.last_seq == 4
        ready = backend.load_ready("q", None, 10)
        assert [(m.seq, m.redeliveries) for m in ready] == [(2, 1), (4, 0)]


def test_commit_runs_structural_ops_in_the_order_given(
    make_backend: Callable[[], Backend],
) -> None:
    a = ExchangeRecord("a", "consistent-hash")
    b = ExchangeRecord("b", "consistent-hash", {"hash-header": "k"})
    with opened(make_backend) as (backend, _):
        backend.commit(
            group(
                0,
                structural=[
                    SaveExchange(a),
                    SaveBinding(BindingRecord("a", "q", 1)),
                    DropExchange("a"),  # takes its binding along
                    SaveExchange(b),
                    SaveBinding(BindingRecord("b", "q", 2)),
                    SaveBinding(BindingRecord("b", "r", 2)),
                    SaveBinding(BindingRecord("b", "q", 3)),  # replaces
                    DropBinding("b", "r"),
                ],
            )
        )
    with opened(make_backend) as (_, recovery):
        assert recovery.exchanges == [b]
        assert recovery.bindings == [BindingRecord("b", "q", 3)]


def test_many_inserts_and_runs_of_deletes_keep_exactly_the_rows_left(
    make_backend: Callable[[], Backend],
) -> None:
    # More rows than one multi-row INSERT takes (and a remainder), some with an ack timeout (the
    # other statement); deletes in runs, single seqs, out of order, across both queues.
    inserts = [row(seq, "q" if seq % 3 else "other") for seq in range(1, 301)]
    inserts[10] = (11, "q", 4, {}, b"t", False, 5.0, 0, 1_700_000_000_011, None)
    gone = {*range(5, 140), 150, 152, *range(200, 202), 299, 1}
    with opened(make_backend) as (backend, _):
        backend.commit(group(300, inserts=inserts))
        backend.commit(group(300, deletes=[(seq,) for seq in sorted(gone, key=lambda s: -s % 7)]))
    with opened(make_backend) as (backend, _):
        left = [m.seq for m in backend.load_ready("q", None, 1000)] + [
            m.seq for m in backend.load_ready("other", None, 1000)
        ]
        assert sorted(left) == [seq for seq in range(1, 301) if seq not in gone]
        assert backend.load_ready("q", None, 1)[0].headers == {"h": "2"}


def produced(name: str, offset: int, producer: str, seq: int) -> StreamRow:
    """A stream entry an idempotent producer appended."""
    return (name, offset, 100 + offset, 4, 1_700_000_000_000, {}, b"e", offset, (producer, seq))


def test_a_producers_position_is_stored_with_its_entries_and_recovered(make_backend: Callable[[], Backend]) -> None:
    with opened(make_backend) as (backend, _):
        rows = [produced("s", 0, "p", 3), produced("s", 1, "p", 7), produced("s", 2, "q", 1)]
        plain: StreamRow = ("t", 0, 200, 4, 1_700_000_000_000, {}, b"e", 0, None)
        backend.commit(GroupRows([], [], [], [], 200, stream_rows=[*rows, plain]))
    with opened(make_backend) as (backend, recovery):
        assert {r.name: r.producers for r in recovery.streams} == {"s": {"p": 7, "q": 1}, "t": {}}
        backend.commit(GroupRows([DropStream("s")], [], [], [], 200))
    with opened(make_backend) as (backend, recovery):
        assert [r.name for r in recovery.streams] == ["t"]  # the producers went with their stream
