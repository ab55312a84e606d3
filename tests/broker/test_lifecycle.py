"""The lifecycle deadlines in virtual time: delayed messages, the expiry sweep, bounded counts.

The engine runs with no event loop: the test gives it the time (``advance``), runs what is
due (``run_due``) and performs its store reads (``run_reads``) on a durable store in a dict.
"""

from __future__ import annotations

import pytest

from stompmq.broker import Broker, BrokerConfig, ClientError, expiry
from stompmq.broker.dispatch import settling_soon
from stompmq.protocol import Frame
from stompmq.storage.base import Recovery, StoredMessage

from .fakes import DictStore, FakeOutbox, run_reads

WALL = 1_700_000_000.0  # seconds: the wall clock at time 0
NOW = 500.0  # the monotonic clock at the same moment
T0 = 1.0  # when started() brokers are ready


def started(window: int = 10_000) -> tuple[Broker, DictStore]:
    """A broker on an empty durable store, past its start (its first sweep for expired
    messages left by a previous run is due a second after it starts): at ``T0``."""
    store = DictStore()
    broker = Broker(store, BrokerConfig(window=window))
    at(broker, T0 - 1.0)
    broker.recover(Recovery(0, [], []), [])
    run(broker, T0)
    assert broker.next_deadline() == float("inf")
    return broker, store


def at(broker: Broker, seconds: float) -> None:
    """Move both clocks to ``seconds`` after the start."""
    broker.advance(NOW + seconds, WALL + seconds)


def run(broker: Broker, seconds: float) -> None:
    """Move to ``seconds`` after the start and do everything due then (reads included)."""
    at(broker, seconds)
    broker.run_due()
    while run_reads(broker):
        broker.run_due()


def subscribe(broker: Broker, queue: str) -> FakeOutbox:
    outbox = FakeOutbox()
    session = broker.open_session(queue, "1.2", outbox)
    broker.handle(session, Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/" + queue}))
    return outbox


def send(broker: Broker, queue: str, body: str, **headers: str) -> None:
    session = broker.sessions.get("producer") or broker.open_session("producer", "1.2", FakeOutbox())
    broker.handle(session, Frame("SEND", {"destination": "/queue/" + queue, **headers}, body.encode()))


def bodies(outbox: FakeOutbox) -> list[str]:
    return [f.body.decode() for f in outbox.take("MESSAGE")]


# ---------------------------------------------------------------------------- delayed delivery


def test_a_delayed_message_is_due_at_its_deadline_and_not_before() -> None:
    broker, _ = started()
    out = subscribe(broker, "q")
    send(broker, "q", "later", delay="5000")
    assert broker.next_deadline() == NOW + T0 + 5.0
    run(broker, T0 + 4.999)
    assert bodies(out) == []
    run(broker, T0 + 5.0)
    assert bodies(out) == ["later"]


def test_an_earlier_delayed_message_rearms_the_deadline() -> None:
    broker, _ = started()
    out = subscribe(broker, "q")
    send(broker, "q", "b", delay="5000")
    send(broker, "q", "a", delay="1000")
    assert broker.next_deadline() == NOW + T0 + 1.0
    run(broker, T0 + 1.0)
    assert bodies(out) == ["a"]
    assert broker.next_deadline() == NOW + T0 + 5.0


def test_only_the_earliest_delayed_messages_are_in_memory() -> None:
    """A window of 4: 20 delayed messages cost memory for at most 4; paging brings the rest
    in as the earliest are promoted, and all arrive in due order."""
    broker, store = started(window=4)
    delayed = broker.dispatcher.delayed
    out = subscribe(broker, "q")
    for i in reversed(range(20)):  # the latest first: every later SEND moves the boundary back
        send(broker, "q", str(i), **{"deliver-at": str(int(WALL * 1000) + 2000 + 100 * i)})
        assert len(delayed) <= 4
    got: list[str] = []
    for step in range(40):
        run(broker, 2.0 + 0.1 * step)
        assert len(delayed) <= 4
        got += bodies(out)
    assert got == [str(i) for i in range(20)]
    assert delayed.page_reads > 3
    assert not [m for m, _, _ in store.rows.values() if m.deliver_at is not None]


def test_a_delayed_send_during_a_page_read_is_not_lost() -> None:
    """A SEND beyond the boundary while a page read is in flight may commit after the read
    looked: the page must stop before it, or the boundary would step over it for good."""
    broker, store = started(window=8)
    out = subscribe(broker, "q")
    base = int(WALL * 1000) + 2000
    for i in range(12):  # the 9th overflows the schedule: m0..m5 stay, the boundary is m5
        send(broker, "q", f"m{i}", **{"deliver-at": str(base + 100 * i)})
    run(broker, 2.0)
    at(broker, 2.1)
    broker.run_due()  # m1 is due: 4 left in memory, a page read is queued
    send(broker, "q", "late", **{"deliver-at": str(base + 650)})  # beyond the boundary
    late = broker.dispatcher.clock.seq
    row = store.rows.pop(late)  # the read runs before this insert commits
    run_reads(broker)
    store.rows[late] = row
    got = bodies(out)
    for step in range(30):
        run(broker, 2.2 + 0.1 * step)
        got += bodies(out)
    assert got == ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "late", "m7", "m8", "m9", "m10", "m11"]


def test_delayed_messages_freed_by_another_broker_are_found_again() -> None:
    """On a shared store a dead broker's delayed messages become free, possibly due before this
    broker's boundary: the poll's store_changed("*") rescans the earliest ones."""
    broker, store = started(window=4)
    out = subscribe(broker, "q")
    base = int(WALL * 1000) + 2000
    for i in range(8):
        send(broker, "q", f"m{i}", **{"deliver-at": str(base + 100 * i)})  # the boundary: m2
    for seq, due in ((1001, base + 50), (1002, base + 650)):  # freed by the other broker
        store.insert(StoredMessage(seq, "q", 4, {}, b"freed%d" % seq, 0, deliver_at=due))
    broker.store_changed("*")
    run_reads(broker)
    got: list[str] = []
    for step in range(20):
        run(broker, 2.0 + 0.1 * step)
        got += bodies(out)
    assert got == ["m0", "freed1001", "m1", "m2", "m3", "m4", "m5", "m6", "freed1002", "m7"]


def test_delayed_messages_in_the_store_are_paged_in_at_start() -> None:
    store = DictStore()
    due = int(WALL * 1000) + 2000
    store.insert(StoredMessage(7, "q", 4, {}, b"stored", 0, deliver_at=due))
    broker = Broker(store)
    at(broker, 0.0)
    broker.recover(Recovery(7, [], []), [])
    run_reads(broker)
    assert broker.next_deadline() == NOW + 1.0  # the start's sweep, then the delayed message
    run(broker, 1.0)
    assert broker.next_deadline() == NOW + 2.0
    out = subscribe(broker, "q")
    run(broker, 2.0)
    (msg,) = out.take("MESSAGE")
    assert msg.body == b"stored"
    assert int(msg.headers["message-id"]) > 7  # published anew when due


# ---------------------------------------------------------------------------- expiry sweep


def test_the_sweep_removes_expired_messages_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(expiry, "EXPIRY_BATCH", 4)
    broker, store = started()
    for i in range(10):
        send(broker, "idle", str(i), ttl="100")
    send(broker, "idle", "keep", ttl="60000")
    sweeps = broker.expiry.sweeps
    assert broker.next_deadline() == pytest.approx(NOW + T0 + 1.1)  # a second after the first expiry
    run(broker, T0 + 1.1)
    assert [m.body for m, _, _ in store.rows.values()] == [b"keep"]
    assert broker.expiry.sweeps - sweeps == 3  # 4 + 4 + 2
    assert broker.queue_stats["idle"].expired == 10
    assert broker.next_deadline() == pytest.approx(NOW + T0 + 61.0)  # a second after the next expiry


def test_the_sweep_leaves_messages_in_memory_to_dispatch() -> None:
    broker, store = started()
    session = broker.open_session("c", "1.2", FakeOutbox())
    broker.handle(session, Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "client",
                                               "prefetch": "1"}))
    send(broker, "q", "held", ttl="60000")
    send(broker, "q", "waits", ttl="100")
    run(broker, T0 + 2.0)
    assert broker.expiry.removed == 0
    assert len(store.rows) == 2


def test_expired_messages_go_to_the_dead_letter_queue_when_declared() -> None:
    broker, _ = started()
    broker.administer("declare/queue/q", {"dead-letter": "true"})
    send(broker, "q", "old", ttl="100")
    run(broker, T0 + 1.1)
    out = subscribe(broker, "DLQ.q")
    run(broker, T0 + 1.2)
    (dead,) = out.take("MESSAGE")
    assert (dead.body, dead.headers["dead-letter-reason"]) == (b"old", "expired")


# ---------------------------------------------------------------------------- bounded queues


def test_a_bounded_queue_counts_what_the_store_held_before() -> None:
    store = DictStore()
    for seq in range(1, 4):
        store.insert(StoredMessage(seq, "q", 4, {}, b"old", 0))
    broker = Broker(store)
    at(broker, 0.0)
    broker.recover(Recovery(3, [], []), [])
    broker.administer("declare/queue/q", {"max-length": "4", "overflow": "reject-publish"})
    send(broker, "q", "counted before the store answered")  # the count is corrected, not lost
    run_reads(broker)
    assert broker.dispatcher.bounds.sizes["q"].length == 4
    with pytest.raises(ClientError, match="is full"):
        send(broker, "q", "one too many")


def test_drop_head_logs_once_per_episode(caplog: pytest.LogCaptureFixture) -> None:
    broker, _ = started()
    broker.administer("declare/queue/q", {"max-length": "1"})
    run_reads(broker)
    for i in range(5):
        send(broker, "q", str(i))
        run_reads(broker)
    assert broker.queue_stats["q"].dropped == 4
    assert len([r for r in caplog.records if "dropping its oldest" in r.message]) == 1


# ---------------------------------------------------------------------------- write-behind


def test_a_timed_flush_is_told_to_hold_back_what_this_broker_holds() -> None:
    """``settling_soon``, the engine's rule for a timed flush (storage/groupcommit.py): a message
    out for delivery and one waiting behind the prefetch in its consumer's window are named
    (their ACKs may come before the next flush); one of a queue nobody here consumes is not."""
    broker, store = started()
    consumer = broker.open_session("consumer", "1.2", FakeOutbox())
    broker.handle(consumer, Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/q",
                                                "ack": "client-individual", "prefetch": "1"}))
    run_reads(broker)
    for queue, body in (("q", "out"), ("q", "waiting"), ("nobody", "stored")):
        send(broker, queue, body)
    assert sorted(row[0].body for row in store.rows.values() if settling_soon(row[0])) == [b"out", b"waiting"]
