"""The counts an operator reads (``Broker.list_queues``, ``/control/count-msgs``) against a recount.

Random runs of publish, deliver, ack, nack, ack timeout and message expiry on the engine,
with a memory store and a durable one (paging through a small window), and listings whose
store read finishes some operations before their answer is made, as the management API's
read on the database thread does.  Each answer must be non-negative, and one made with no
operation in between must match what the test itself counts: every message published is
ready, unacked, acked, dropped by a NACK or expired, exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stompmq.broker import Broker, BrokerConfig
from stompmq.broker.control import Deferred, QueueRow
from stompmq.broker.session import Session
from stompmq.protocol import Frame
from stompmq.storage.base import Store
from stompmq.storage.memory import MemoryStore

from .fakes import DictStore, FakeOutbox, complete, run_reads

Op = tuple[Any, ...]

OPS = st.one_of(
    st.tuples(st.just("publish"), st.sampled_from([None, 50, 400])),  # ttl in ms
    st.tuples(st.just("written")),  # the socket took what was written (auto-ack settles)
    st.tuples(st.just("ack"), st.integers(0, 9)),
    st.tuples(st.just("nack"), st.integers(0, 9), st.booleans()),  # requeue?
    st.tuples(st.just("tick"), st.sampled_from([10, 100, 1000])),  # ms of time passing
    st.tuples(st.just("resubscribe")),
    # asked now, read from the store after N operations, answered after M more
    st.tuples(st.sampled_from(["list", "count"]), st.integers(0, 3), st.integers(0, 3)),
)


@dataclass
class Run:
    """The engine, a producer and one consumer, and what the test counted itself."""

    broker: Broker
    ack_mode: str
    prefetch: int
    producer: Session = field(init=False)
    consumer: Session = field(init=False)
    outbox: FakeOutbox = field(init=False)
    now: float = 1_000.0
    published: int = 0
    acked: int = 0
    dropped: int = 0
    outstanding: list[str] = field(default_factory=list)  # ack ids of deliveries not settled yet
    sub_id: int = 0

    def __post_init__(self) -> None:
        self.broker.advance(self.now, self.now)
        self.producer = self.broker.open_session("p", "1.2", FakeOutbox())
        self.outbox = FakeOutbox()
        self.consumer = self.broker.open_session("c", "1.2", self.outbox)
        self.subscribe()

    def subscribe(self) -> None:
        self.sub_id += 1
        self.handle(self.consumer, "SUBSCRIBE", id=str(self.sub_id), destination="/queue/q", ack=self.ack_mode,
                    prefetch=str(self.prefetch), **{"ack-timeout": "0.5"})

    def handle(self, session: Session, command: str, **headers: str) -> None:
        self.broker.handle(session, Frame(command, headers, b"x"))
        self.settle()

    def settle(self) -> None:
        """Let the engine finish its store reads, and note what it delivered."""
        run_reads(self.broker)
        for msg in self.outbox.take("MESSAGE"):
            self.outstanding.append(msg.headers.get("ack", msg.headers["message-id"]))

    def step(self, op: Op) -> None:
        kind = op[0]
        if kind == "publish":
            ttl = {} if op[1] is None else {"ttl": str(op[1])}
            self.handle(self.producer, "SEND", destination="/queue/q", **ttl)
            self.published += 1
        elif kind == "written":
            self.broker.written(self.consumer, self.outbox.queued)
            if self.ack_mode == "auto":
                self.acked += len(self.outstanding)
                self.outstanding.clear()
            self.settle()
        elif kind in ("ack", "nack") and self.ack_mode != "auto" and self.outstanding:
            i = op[1] % len(self.outstanding)
            settled = self.outstanding[: i + 1] if self.ack_mode == "client" else [self.outstanding[i]]
            self.outstanding = [a for a in self.outstanding if a not in settled]
            if kind == "ack":
                self.acked += len(settled)
                self.handle(self.consumer, "ACK", id=settled[-1])
            else:
                requeue = op[2]
                self.dropped += 0 if requeue else len(settled)
                self.handle(self.consumer, "NACK", id=settled[-1], requeue=str(requeue).lower())
        elif kind == "tick":
            self.now += op[1] / 1000
            self.broker.advance(self.now, self.now)
            self.broker.run_due()
            if self.ack_mode != "auto":  # an ack timeout took back the deliveries no more held
                held = set(self.consumer.deliveries)
                self.outstanding = [a for a in self.outstanding if a in held]
            self.settle()
        elif kind == "resubscribe":
            self.handle(self.consumer, "UNSUBSCRIBE", id=str(self.sub_id))
            if self.ack_mode != "auto":  # what it held goes back (auto-ack: settled once written)
                self.outstanding.clear()
            self.subscribe()

    def expired(self) -> int:
        stats = self.broker.queue_stats.get("q")
        return stats.expired if stats is not None else 0


class Asking:
    """A listing or count asked now, whose store read happens at ``read()`` and whose answer is
    made at ``answer()``: the management API's read waits on the database thread meanwhile."""

    def __init__(self, broker: Broker, what: str) -> None:
        self.broker, self.what = broker, what
        self.deferred: Any = broker.list_queues("", 10) if what == "list" else broker.administer("count-msgs/queue/q")
        self.fetched: Any = None

    def read(self) -> None:
        if isinstance(self.deferred, Deferred):
            self.fetched = complete(self.deferred.fetch(self.broker.store))

    def answer(self) -> tuple[int, int]:
        if self.what == "count":
            headers = self.deferred.answer(self.fetched) if isinstance(self.deferred, Deferred) else self.deferred
            return int(headers["num-ready"]), int(headers["num-unacked"])
        rows: list[QueueRow] = self.deferred.answer(self.fetched).rows
        row = next((r for r in rows if r.name == "q"), None)
        return (row.ready, row.unacked) if row is not None else (0, 0)


@settings(max_examples=300, deadline=None)
@given(
    durable=st.booleans(),
    ack_mode=st.sampled_from(["auto", "client", "client-individual"]),
    prefetch=st.integers(1, 5),
    ops=st.lists(OPS, max_size=60),
)
def test_counts_are_never_negative_and_match_a_recount(
    durable: bool, ack_mode: str, prefetch: int, ops: list[Op]
) -> None:
    store: Store = DictStore() if durable else MemoryStore()
    config = BrokerConfig(window=3, queue_pace_timeout=0)  # a window of 3: a durable queue pages
    run = Run(Broker(store, config), ack_mode, prefetch)
    pending: list[tuple[int, int, Asking]] = []  # (operations until its read, until its answer, asked)
    for op in ops:
        if op[0] in ("list", "count"):
            pending.append((op[1], op[1] + op[2], Asking(run.broker, op[0])))
        else:
            run.step(op)
        for to_read, to_answer, asking in pending:
            if to_read == 0:
                asking.read()
            if to_answer == 0:
                ready, unacked = asking.answer()
                assert ready >= 0 and unacked >= 0, (asking.what, ready, unacked)
        pending = [(r - 1, a - 1, asking) for r, a, asking in pending if a > 0]
    for what in ("list", "count"):
        asking = Asking(run.broker, what)
        asking.read()
        ready, unacked = asking.answer()
        assert unacked == len(run.outstanding), what
        accounted = ready + unacked + run.acked + run.dropped + run.expired()
        assert accounted == run.published, (what, ready, unacked, run.acked, run.dropped, run.expired())
