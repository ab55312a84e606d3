"""Every row type of ``Store.write`` on every store, in the default vhost and through a vhost's view.

One table: each row type with the rows and messages written before it and what a reopened store
shows of it afterwards (the memory store recovers its declarations while it lives and keeps no
message, so a row about messages changes nothing there).  A test that the table names every
row type keeps a new stored fact from going in untested; the view's runs check that
``VhostStore`` puts its prefix on every row type's keys, and none on a broker-wide fact.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from stompmq.storage.base import (
    UNNUMBERED,
    Recovery,
    Store,
    StoredMessage,
    StreamMessage,
)
from stompmq.storage.records import BindingRecord, ExchangeRecord, QueueRecord
from stompmq.storage.rows import (
    ROW_TYPES,
    CapExpiry,
    DropBinding,
    DropExchange,
    DropStream,
    DropVhost,
    MetaFact,
    Purge,
    Release,
    Row,
    SaveBinding,
    SaveExchange,
    SavePolicy,
    SaveQueue,
    SaveShovel,
    SaveStream,
    SaveVhost,
    TrimStream,
)
from stompmq.storage.vhosts import VhostStore, split_recovery
from stompmq.vhost_names import DEFAULT_VHOST

from ..support.stores import STORES, make_store_factory
from .test_lifecycle_store import T, opened

EX = ExchangeRecord("ex", "direct", {"on-missing": "drop"})
BOUND = BindingRecord("ex", "q", 1, "k")
OTHER = BindingRecord("ex", "r", 1, "k")
SHOVEL = {"from": "stomp://h/queue/a", "to": "stomp://h/queue/b", "prefetch": 5}
POLICY = {"pattern": "^q", "apply-to": "queues", "definition": {"max-length": 3}, "vhost": "/"}


@dataclass(frozen=True)
class Seen:
    """What a reopened store shows: its recovery (``full``), the vhost's part of it under the
    vhost's names (``part``) and the vhost's view of the store (``store``)."""

    full: Recovery
    part: Recovery
    store: Store


async def _messages(store: Store) -> int:
    return await store.count("q")


async def _expired(store: Store) -> list[int | None]:
    rows, _ = await store.load_expired(T + 10_000, None, 10)
    return [m.expires for m in rows]


@dataclass(frozen=True)
class Case:
    row: Row
    shown: Callable[[Seen], object | Awaitable[object]]
    expected: object
    before: list[Row] = field(default_factory=list)
    messages: int = 0  # ready messages of "q" written before (T, never expiring)
    entries: int = 0  # entries of stream "s" written before
    volatile: object = None  # what the memory store shows instead, if it differs


CASES = {
    "SaveExchange": Case(SaveExchange(EX), lambda s: s.part.exchanges, [EX]),
    "DropExchange": Case(DropExchange("ex"), lambda s: (s.part.exchanges, s.part.bindings), ([], []),
                         [SaveExchange(EX), SaveBinding(BOUND)]),
    "SaveBinding": Case(SaveBinding(BOUND), lambda s: s.part.bindings, [BOUND], [SaveExchange(EX)]),
    "DropBinding": Case(DropBinding("ex", "q", "k"), lambda s: s.part.bindings, [OTHER],
                        [SaveExchange(EX), SaveBinding(BOUND), SaveBinding(OTHER)]),
    "SaveStream": Case(SaveStream("s", {"max-length": "5"}), lambda s: [(r.name, r.options) for r in s.part.streams],
                       [("s", {"max-length": "5"})]),
    "TrimStream": Case(TrimStream("s", 2), lambda s: [(r.name, r.first, r.next) for r in s.part.streams],
                       [("s", 2, 3)], [SaveStream("s", {})], entries=3, volatile=[("s", 0, 0)]),
    "DropStream": Case(DropStream("s"), lambda s: s.part.streams, [], [SaveStream("s", {})], entries=2),
    "SaveVhost": Case(SaveVhost("w"), lambda s: "w" in s.full.vhosts, True),
    "DropVhost": Case(DropVhost("w"), lambda s: "w" in s.full.vhosts, False, [SaveVhost("w")]),
    "SaveQueue": Case(SaveQueue("q", {"max-length": "3"}), lambda s: s.part.queues,
                      [QueueRecord("q", {"max-length": "3"})]),
    "SaveQueue(None)": Case(SaveQueue("q", None), lambda s: s.part.queues, [], [SaveQueue("q", {"max-length": "3"})]),
    "SaveShovel": Case(SaveShovel("sh", SHOVEL), lambda s: s.full.facts(SaveShovel), {"sh": SHOVEL}),
    "SaveShovel(None)": Case(SaveShovel("sh", None), lambda s: s.full.facts(SaveShovel), {}, [SaveShovel("sh", SHOVEL)]),
    "SavePolicy": Case(SavePolicy("p", POLICY), lambda s: s.full.facts(SavePolicy), {"p": POLICY}),
    "SavePolicy(None)": Case(SavePolicy("p", None), lambda s: s.full.facts(SavePolicy), {}, [SavePolicy("p", POLICY)]),
    "Purge": Case(Purge("q"), lambda s: _messages(s.store), 0, messages=2),
    "CapExpiry": Case(CapExpiry("q", 1000), lambda s: _expired(s.store), [T + 1000], messages=1, volatile=[]),
    "Release": Case(Release("q"), lambda s: _messages(s.store), 1, messages=1, volatile=0),
}


def test_the_table_has_every_row_type() -> None:
    assert {type(case.row) for case in CASES.values()} == set(ROW_TYPES)


@pytest.fixture(params=STORES)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    return make_store_factory(str(request.param), tmp_path)


def _view(store: Store, vhost: str, recovery: Recovery) -> Store:
    return store if vhost == DEFAULT_VHOST else VhostStore(store, vhost, split_recovery(recovery)[vhost])


def _seen(store: Store, vhost: str, recovery: Recovery) -> Seen:
    part = split_recovery(recovery)[vhost]
    return Seen(recovery, part, _view(store, vhost, recovery))


async def _write_before(store: Store, case: Case) -> None:
    for row in case.before:
        store.write(row)
    start, _ = store.seq_block(0)
    for seq in range(start, start + case.messages):
        store.insert(StoredMessage(seq, "q", 4, {}, b"m", T))
    for offset in range(case.entries):
        seq = start + case.messages + offset
        store.append_stream(StreamMessage(seq, "s", 4, {}, b"e", T, UNNUMBERED if store.shared else offset, offset))
    await store.queue_exists("q")  # a read: behind everything buffered, so the row meets it on disk


@pytest.mark.parametrize("vhost", [DEFAULT_VHOST, "v"])
@pytest.mark.parametrize("name", sorted(CASES))
async def test_each_row_type_is_stored_and_recovered(make_store: Callable[[], Store], name: str, vhost: str) -> None:
    case = CASES[name]
    async with opened(make_store) as (base, recovery):
        if vhost != DEFAULT_VHOST:
            base.write(SaveVhost(vhost))
            recovery.vhosts.append(vhost)
        store = _view(base, vhost, recovery)
        await _write_before(store, case)
        store.write(case.row)
        if not base.durable:  # the memory store recovers while it lives
            shown = case.shown(_seen(base, vhost, await base.open()))
            if isinstance(shown, Awaitable):
                shown = await shown
            assert shown == (case.expected if case.volatile is None else case.volatile)
            return
    async with opened(make_store) as (base, recovery):
        shown = case.shown(_seen(base, vhost, recovery))
        if isinstance(shown, Awaitable):
            shown = await shown
        assert shown == case.expected


@dataclass(frozen=True, slots=True)
class SaveNote(MetaFact):
    """A broker-wide fact defined here alone: no store, backend or migration knows it."""

    PREFIX: ClassVar[str] = "note/"


async def test_a_fact_needs_only_its_row_type(make_store: Callable[[], Store]) -> None:
    """The worked example of docs/decisions/one-write-verb.md: every store keeps a new
    ``MetaFact`` kind and hands it back at open, through a vhost's view as well (no keys)."""
    async with opened(make_store) as (base, recovery):
        assert recovery.facts(SaveNote) == {}
        base.write(SaveVhost("v"))
        recovery.vhosts.append("v")
        view = _view(base, "v", recovery)
        view.write(SaveNote("b", {"text": "two"}))
        base.write(SaveNote("a", {"text": "one"}))
        base.write(SaveNote("c", {"text": "gone"}))
        base.write(SaveNote("c", None))
        await base.queue_exists("q")
        if not base.durable:
            assert (await base.open()).facts(SaveNote) == {"a": {"text": "one"}, "b": {"text": "two"}}
            return
    async with opened(make_store) as (base, recovery):
        assert recovery.facts(SaveNote) == {"a": {"text": "one"}, "b": {"text": "two"}}
        assert recovery.facts(SaveShovel) == {}
