"""``PostgresBackend`` directly, on the test PostgreSQL server: what a caller sees, not the SQL.

Each test gets a fresh database.  Several backends on one database stand for several brokers:
commit groups are all or nothing, ``load_ready`` claims a message for one broker at a time
(also when two brokers page one queue at the same moment), a broker whose lease lapsed loses its
claims to the next renewal (what it had out for delivery counts a redelivery), a clean close frees
them at once, sequence blocks never overlap, and definitions are seen by every broker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pytest

from stompmq.storage.base import UNNUMBERED, StoredMessage, StoreError
from stompmq.storage.groups import (
    DelayedRow,
    GroupRows,
    InsertRow,
)
from stompmq.storage.records import BindingRecord, ExchangeRecord
from stompmq.storage.rows import DropBinding, DropExchange, Release, SaveBinding, SaveExchange, SaveQueue, SaveVhost

from ..support.stores import NO_PSYCOPG, TEST_LEASE, postgres_server
from ..support.waiting import pace, wait_until
from .test_backend import group, row

psycopg = pytest.importorskip("psycopg", reason=NO_PSYCOPG)

from stompmq.storage.pg_backend import PostgresBackend  # noqa: E402  (it imports psycopg)

pytestmark = pytest.mark.postgres

#: Seconds a broker's lease lasts in the lapse tests: short, so they wait little.
SHORT_LEASE = 1.0
#: Seconds a wall-clock wait may take before the test fails (generous: the machine may be busy).
DEADLINE = 30.0


@pytest.fixture
def url() -> str:
    return postgres_server().new_database()


@contextmanager
def opened(url: str, lease: float = TEST_LEASE) -> Iterator[PostgresBackend]:
    """A backend (a broker) on the database, open for the block and closed after it."""
    backend = PostgresBackend(url, lease=lease)
    try:
        backend.open()
        yield backend
    finally:
        backend.close()


def seqs(messages: Sequence[StoredMessage]) -> list[int]:
    return [m.seq for m in messages]


def rows(first: int, last: int, queue: str = "q") -> list[InsertRow]:
    return [row(seq, queue) for seq in range(first, last + 1)]


def held(last_seq: int, inserts: list[InsertRow]) -> GroupRows:
    """A group inserting ``inserts``, every one held by the committing broker (claimed for it)."""
    rows_group = group(last_seq, inserts=inserts)
    rows_group.held = frozenset(r[0] for r in inserts)
    return rows_group


def wait_for(check: Callable[[], object], what: str) -> None:
    """``wait_until`` with this module's generous deadline."""
    wait_until(check, what, timeout=DEADLINE)


def lease_lapsed(observer: PostgresBackend, broker: PostgresBackend) -> bool:
    """``broker``'s lease has run out as ``observer`` reads it: on the database's clock, which
    judges leases (so a test waits for this, not for its own clock to pass the lease)."""
    return not any(lease.live for lease in observer.brokers()[0] if lease.id == broker.broker_id)


# -- commit groups ----------------------------------------------------------------------------


def test_a_group_is_stored_and_read_back_in_delivery_order(url: str) -> None:
    urgent: InsertRow = (2, "q", 9, {"h": "2"}, b"urgent", False, 5.0, 0, 1_700_000_000_002, None)
    with opened(url) as backend:
        backend.commit(group(3, inserts=[row(1), urgent, row(3, "other")]))
        ready = backend.load_ready("q", None, 10)
        assert seqs(ready) == [2, 1]  # priority first, then age
        first = ready[0]
        assert (first.priority, first.headers, first.body, first.ack_timeout) == (9, {"h": "2"}, b"urgent", 5.0)
        assert (backend.count("q"), backend.count("other"), backend.queue_size("q")) == (2, 1, (2, 10))
        assert backend.queue_exists("other") and not backend.queue_exists("never")
        assert backend.queue_names("") == ["other", "q"]
        backend.commit(group(3, updates=[(True, 0, 9, 2)], deletes=[(1,)]))  # 2 out for delivery, 1 acked
        assert (backend.count("q"), backend.count_unacked("q")) == (1, 1)
        assert backend.load_ready("q", None, 10) == []  # out for delivery is not ready
    with opened(url) as other:  # what one broker committed, another reads
        assert (other.count("q"), other.count_unacked("q"), other.count("other")) == (1, 1, 1)


def test_a_failed_group_stores_none_of_its_rows_and_the_next_one_goes_through(url: str) -> None:
    with opened(url) as backend:
        with pytest.raises(StoreError):
            backend.commit(group(2, structural=[SaveExchange(ExchangeRecord("e", "consistent-hash"))],
                                 inserts=[row(1), row(2, "nul\x00")]))  # text holds no NUL
        assert backend.count("q") == 0
        assert backend.definitions()[1] == []
        backend.commit(group(3, inserts=[row(3)]))
        assert seqs(backend.load_ready("q", None, 10)) == [3]


# -- claims -----------------------------------------------------------------------------------


def test_load_ready_claims_a_message_for_one_broker_until_it_lets_go(url: str) -> None:
    with opened(url) as a, opened(url) as b:
        a.commit(group(6, inserts=rows(1, 6)))
        assert seqs(a.load_ready("q", None, 4)) == [1, 2, 3, 4]
        assert seqs(b.load_ready("q", None, 10)) == [5, 6]  # the rest, never what a holds
        assert b.load_ready("q", None, 10) != [] and a.load_ready("q", (-4, 4), 10) == []
        a.commit(group(6, structural=[Release("q")]))  # a holds nothing of q in memory any more
        assert seqs(b.load_ready("q", None, 10)) == [1, 2, 3, 4, 5, 6]


def test_freed_rows_are_announced_with_the_first_of_them(url: str) -> None:
    """The notification of free rows names the lowest order key among them: another broker
    claiming on demand reads the queue again from there, not from its start."""
    with opened(url) as a, psycopg.connect(url, autocommit=True) as listener:
        listener.execute("LISTEN stompmq")
        a.commit(held(3, rows(1, 3)))  # claimed by a: no news
        a.commit(group(7, inserts=rows(6, 7) + [row(5)]))  # free
        a.commit(group(7, updates=[(False, 0, 4, 3), (False, 0, 4, 2)]))  # given back
        payloads = [n.payload for n in listener.notifies(timeout=DEADLINE, stop_after=2)]
    assert payloads == [f"q:{a.broker_id}:-4.5:q", f"q:{a.broker_id}:-4.2:q"]


def test_two_brokers_paging_one_queue_at_once_never_take_the_same_message(url: str) -> None:
    total = 600
    with opened(url) as a, opened(url) as b:
        a.commit(group(total, inserts=rows(1, total)))
        taken: dict[str, list[int]] = {"a": [], "b": []}
        start = threading.Barrier(2)

        def page(name: str, backend: PostgresBackend) -> None:
            after: tuple[int, int] | None = None
            start.wait()
            while True:
                page = backend.load_ready("q", after, 7)
                if not page:
                    return
                taken[name] += seqs(page)
                after = page[-1].order_key

        threads = [threading.Thread(target=page, args=item) for item in (("a", a), ("b", b))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DEADLINE)
        assert not any(thread.is_alive() for thread in threads)
        assert not set(taken["a"]) & set(taken["b"])
        assert sorted(taken["a"] + taken["b"]) == list(range(1, total + 1))


def test_a_lapsed_lease_frees_the_brokers_claims_at_the_next_renewal(url: str) -> None:
    with opened(url) as survivor:
        gone = PostgresBackend(url, lease=SHORT_LEASE)
        gone.open()
        # Held by the broker that dies: 1 and 2 out for delivery, 3 in its ready window.
        gone.commit(held(3, [row(1, delivered=True), row(2, delivered=True), row(3)]))
        assert survivor.count_unacked("q") == 2
        # It stops renewing (a kill -9): once its lease lapsed, the survivor's renewal frees it all
        # (while the lease lasts, claims hold: test_renewing_keeps_a_live_brokers_claims).
        freed: list[StoredMessage] = []

        def renewed_and_freed() -> bool:
            survivor.renew({})
            freed[:] = survivor.load_ready("q", None, 10)  # what it claimed before comes again
            return len(freed) == 3

        wait_for(renewed_and_freed, "the lapsed broker's messages")
        # Every row a dead broker held counts a redelivery: it may have delivered 3 within its last
        # flush interval, before the mark reached the database (a clean close below is exact).
        assert [(m.seq, m.redeliveries) for m in freed] == [(1, 1), (2, 1), (3, 1)]
        assert survivor.count_unacked("q") == 0
        gone.close()


def test_a_claim_read_never_ends_a_lease_only_a_sweep_does(url: str) -> None:
    """A lapsed broker's rows stay its own until a sweep ends its lease (and frees them): a claim
    read never judges a lease, so a broker whose row is still there has lost nothing."""
    with opened(url, lease=SHORT_LEASE) as taker:
        gone = PostgresBackend(url, lease=SHORT_LEASE)
        gone.open()
        gone.commit(held(2, [row(1), row(2)]))
        wait_for(lambda: lease_lapsed(taker, gone), "the lease to lapse")
        assert taker.load_ready("q", None, 10) == []  # lapsed, but nobody swept
        taker.sweep()
        assert [(m.seq, m.redeliveries) for m in taker.load_ready("q", None, 10)] == [(1, 1), (2, 1)]
        gone.close()


def test_a_broker_whose_session_ended_is_swept_at_once_whatever_its_lease(url: str) -> None:
    """A crashed broker's database session ends, and its lock with it: the next sweep frees its
    claims at once, long before its lease would lapse (each counts a redelivery)."""
    with opened(url, lease=60) as survivor:
        crashed = PostgresBackend(url, lease=60)
        crashed.open()
        crashed.commit(held(2, [row(1, delivered=True), row(2)]))
        survivor.sweep()
        assert survivor.load_ready("q", None, 10) == []  # alive: its session holds its lock
        assert crashed._conn is not None
        crashed._conn.close()  # as a kill -9 does: no clean close, the session just ends
        wait_for(lambda: survivor.sweep() is None and len(survivor.load_ready("q", None, 10)) == 2,
                 "the crashed broker's claims")
        assert survivor.count_unacked("q") == 0


def test_what_departed_brokers_counted_stays_stored(url: str) -> None:
    """The cluster's totals are cumulative across restarts: a swept broker's counters (as of its
    last renewal) and a cleanly stopped one's (as of its stop) are added to the stored totals."""
    with opened(url, lease=60) as survivor:
        crashed = PostgresBackend(url, lease=60)
        crashed.open()
        crashed.renew({"published": 5, "acked": 1})
        assert crashed._conn is not None
        crashed._conn.close()
        wait_for(lambda: survivor.sweep() is None and len(survivor.brokers()[0]) == 1, "the sweep")
        stopped = PostgresBackend(url, lease=60)
        stopped.open()
        stopped.renew({"published": 1})
        stopped.final_counters = {"published": 2, "acked": 2}
        stopped.close()
        assert survivor.brokers()[1] == {"published": 7, "acked": 3}


def test_a_broker_that_renews_late_keeps_its_epoch_when_nobody_could_sweep_it(url: str) -> None:
    """A renewal late past the lease (a database outage) keeps the epoch and the claims if no
    broker ended the lease meanwhile: a sweeper judges leases only once it has itself been
    connected for a lease, so one back from the same outage does not end the others'."""
    late = PostgresBackend(url, lease=SHORT_LEASE)
    late.open()
    try:
        late.commit(held(1, [row(1)]))
        epoch = late.epoch
        with opened(url, lease=SHORT_LEASE) as observer:
            wait_for(lambda: lease_lapsed(observer, late), "the late broker's lease to lapse")
        with opened(url, lease=SHORT_LEASE) as back:  # just (re)connected: judges no lease yet
            back.sweep()
            assert back.load_ready("q", None, 10) == []
            late.renew({})
            assert late.epoch == epoch
            # Lapsed again a lease after a renewal made after ``back`` registered: so ``back``
            # has been connected a lease, and now judges leases.
            wait_for(lambda: lease_lapsed(back, late), "the late broker's lease to lapse again")
            late.renew({})
            back.sweep()  # connected a lease now, but the lease runs again
            assert back.load_ready("q", None, 10) == []
    finally:
        late.close()


def test_a_group_taken_under_an_epoch_that_ended_claims_nothing(url: str) -> None:
    """A broker whose lease lapsed while a group was being taken renews under a new epoch; the
    group, taken when the engine still held its rows under the old one, leaves them free for
    every broker (what was out for delivery with a redelivery), not claimed for the new epoch."""
    with opened(url, lease=SHORT_LEASE) as other:
        lapsed = PostgresBackend(url, lease=SHORT_LEASE)
        lapsed.open()
        old = lapsed.epoch
        wait_for(lambda: lease_lapsed(other, lapsed), "the lease to lapse")
        other.sweep()  # another broker ended the lapsed lease
        lapsed.renew({})  # so the renewal holds a new epoch
        assert lapsed.epoch != old
        stale = held(2, [row(1, delivered=True), row(2)])
        stale.claims_epoch = old
        lapsed.commit(stale)
        current = held(3, [row(3)])
        current.claims_epoch = lapsed.epoch
        lapsed.commit(current)
        assert [(m.seq, m.redeliveries) for m in other.load_ready("q", None, 10)] == [(1, 1), (2, 0)]
        lapsed.close()


def test_a_paused_broker_cannot_promote_a_delayed_message_another_took_over(url: str) -> None:
    """A delayed row is fenced as a ready one: once the lease of the broker holding it lapsed and
    another broker claimed it, the first one, back from a pause and not yet renewed, neither claims
    it again nor deletes it (its promotion), nor stores its promoted copy, in the same group or,
    held back a flush, a later one: only the taker promotes it."""
    due: list[DelayedRow] = [(seq, "q", 4, {}, b"later", None, 1_700_000_000_000, None, 1_700_000_000_000)
                             for seq in (1, 3)]
    with opened(url) as taker:
        paused = PostgresBackend(url, lease=SHORT_LEASE)
        paused.open()
        delayed = group(3)
        delayed.delayed, delayed.held = due, frozenset([1, 3])
        paused.commit(delayed)
        assert taker.load_due(None, 10, "/") == []  # held by a live broker

        def lapsed_and_taken() -> bool:
            taker.renew({})  # frees the rows of brokers whose lease lapsed
            return seqs(taker.load_due(None, 10, "/")) == [1, 3]

        wait_for(lapsed_and_taken, "the paused broker's delayed messages")
        assert paused.load_due(None, 10, "/") == []
        promoted = group(5)  # its promotions, taken before the pause
        promoted.delayed_deletes = [(1,), (3,)]
        promoted.inserts, promoted.promotions = [row(2), row(5)], {5: 1}  # a new SEND, 1's copy
        paused.commit(promoted)
        assert seqs(taker.load_due(None, 10, "/")) == [1, 3]  # still there, still the taker's
        held_back = group(6)
        held_back.inserts, held_back.promotions = [row(6)], {6: 3}  # 3's copy, held back a flush
        paused.commit(held_back)
        assert seqs(taker.load_ready("q", None, 10)) == [2]  # no copy of the taker's delayed messages
        paused.close()


def test_a_paused_broker_cannot_store_the_next_row_of_a_schedule_another_took_over(url: str) -> None:
    """A schedule's firing deletes its row and inserts the next one, linked as a promoted copy
    is: a paused broker whose row another broker took over must not store a second schedule."""
    due: list[DelayedRow] = [(1, "q", 4, {"x-schedule-left": "3"}, b"tick", None, 1_700_000_000_000, None,
                              1_700_000_000_000)]
    with opened(url) as taker:
        paused = PostgresBackend(url, lease=SHORT_LEASE)
        paused.open()
        delayed = group(1)
        delayed.delayed, delayed.held = due, frozenset([1])
        paused.commit(delayed)

        def lapsed_and_taken() -> bool:
            taker.renew({})
            return seqs(taker.load_due(None, 10, "/")) == [1]

        wait_for(lapsed_and_taken, "the paused broker's schedule")
        firing = group(3)
        firing.delayed_deletes = [(1,)]
        firing.inserts = [row(2)]  # the copy
        firing.delayed = [(3, "q", 4, {"x-schedule-left": "2"}, b"tick", None, 1_700_000_000_000, None,
                           1_700_000_001_000)]  # the next row
        firing.promotions = {2: 1, 3: 1}
        paused.commit(firing)
        assert seqs(taker.browse_due(None, 10, "/")) == [1]  # one schedule, the taker's
        assert taker.load_ready("q", None, 10) == []
        paused.close()


def test_the_schedule_listing_sees_every_brokers_rows_and_claims_none(url: str) -> None:
    rows_due: list[DelayedRow] = [(seq, "q", 4, {}, b"later", None, 1_700_000_000_000, None, 1_700_000_000_000 + seq)
                                  for seq in (1, 2, 3)]
    with opened(url) as holder, opened(url) as other:
        mine = group(3)
        mine.delayed, mine.held = rows_due[:2], frozenset([1, 2])
        holder.commit(mine)
        free = group(3)
        free.delayed = rows_due[2:]
        holder.commit(free)
        assert seqs(other.browse_due(None, 10, "/")) == [1, 2, 3]
        assert seqs(other.browse_due((1_700_000_000_001, 1), 10, "/")) == [2, 3]
        assert [m.held for m in other.browse_due(None, 10, "/")] == [False, False, False]
        assert seqs(other.load_due(None, 10, "/")) == [3]  # the free one is still free to claim


def test_a_clean_close_frees_the_claims_at_once(url: str) -> None:
    with opened(url) as survivor:
        with opened(url) as leaving:
            leaving.commit(held(2, [row(1, delivered=True), row(2)]))
            assert survivor.load_ready("q", None, 10) == []
        assert [(m.seq, m.redeliveries) for m in survivor.load_ready("q", None, 10)] == [(1, 1), (2, 0)]


def test_renewing_keeps_a_live_brokers_claims(url: str) -> None:
    """Renewed every 0.2 s for two leases, the claim holds.  Asserted only where the check came
    within a lease of the renewal before it: a machine that stalls longer lets the lease lapse,
    as it should, and then the run proves nothing (skipped, not failed)."""
    with opened(url) as holder, opened(url) as other:
        holder.commit(held(1, [row(1)]))
        start = time.monotonic()
        while time.monotonic() - start < 2 * TEST_LEASE:
            renewed = time.monotonic()
            holder.renew({})
            taken = other.load_ready("q", None, 10)
            if time.monotonic() - renewed >= TEST_LEASE:
                pytest.skip("the machine stalled longer than a lease between a renewal and the check")
            assert taken == []
            pace(0.2)  # the renewal period under test: a workload's timing, nothing to wait for


# -- sequence numbers and definitions ---------------------------------------------------------


def test_seq_blocks_never_overlap_between_brokers_or_within_one(url: str) -> None:
    with opened(url) as a, opened(url) as b:
        blocks = [a.seq_block(), b.seq_block(), a.seq_block(), b.seq_block()]
    assert all(start < end for start, end in blocks)
    ordered = sorted(blocks)
    assert all(left[1] <= right[0] for left, right in zip(ordered, ordered[1:]))


def test_definitions_are_shared_and_recovered(url: str) -> None:
    hashed = ExchangeRecord("orders", "consistent-hash", {"hash-header": "k"})
    with opened(url) as a, opened(url) as b:
        a.commit(group(0, structural=[
            SaveVhost("dev"),
            SaveExchange(hashed),
            SaveExchange(ExchangeRecord("old", "consistent-hash")),
            SaveBinding(BindingRecord("orders", "q1", 2)),
            SaveBinding(BindingRecord("orders", "q2", 1)),
            SaveBinding(BindingRecord("old", "q1", 1)),
            DropExchange("old"),  # takes its binding along
            DropBinding("orders", "q2"),
            SaveQueue("jobs", {"x-max-length": "10"}),
        ]))
        vhosts, exchanges, bindings, _ = b.definitions()
        assert (vhosts, exchanges, bindings) == (["/", "dev"], [hashed], [BindingRecord("orders", "q1", 2)])
    backend = PostgresBackend(url, lease=TEST_LEASE)
    try:
        recovery = backend.open()
    finally:
        backend.close()
    assert (recovery.vhosts, recovery.exchanges, recovery.bindings) == (["/", "dev"], [hashed],
                                                                        [BindingRecord("orders", "q1", 2)])
    assert [(q.name, q.options) for q in recovery.queues] == [("jobs", {"x-max-length": "10"})]


def test_a_producers_repeat_through_another_broker_is_dropped_in_the_commit(url: str) -> None:
    """Neither broker's engine knows what the other appended: the commit checks the stored
    position, under the stream's row lock."""

    def append(seq: int, body: bytes) -> GroupRows:
        return GroupRows([], [], [], [], 10, stream_rows=[("s", UNNUMBERED, seq, 4, 0, {}, body, 0, ("p", seq))])

    with opened(url) as one, opened(url) as two:
        one.commit(append(1, b"a"))
        two.commit(append(1, b"again"))
        two.commit(append(2, b"b"))
        one.commit(append(2, b"again"))
        assert [e.body for e in one.read_stream("s", 0, 10)] == [b"a", b"b"]
        state = two.stream_state("s")
        assert state is not None and state.next == 2
    backend = PostgresBackend(url, lease=TEST_LEASE)
    try:
        assert [r.producers for r in backend.open().streams] == [{"p": 2}]  # what a restart recovers
    finally:
        backend.close()
