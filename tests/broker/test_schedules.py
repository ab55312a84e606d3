"""Scheduled messages (AMQ_SCHEDULED_PERIOD/REPEAT/CRON, Artemis' absolute times) in virtual time.

The engine runs without an event loop on a durable store in a dict (test_lifecycle's helpers):
each firing is checked at the instant it is due and just before it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

import pytest

from stompmq.broker import ClientError
from stompmq.broker.control import Deferred
from stompmq.broker.schedule_listing import CANCELLED, MISSING, MOVED
from stompmq.broker.send_headers import SCHEDULE_ID, SCHEDULE_LEFT
from stompmq.protocol import Frame

from .fakes import FakeOutbox, complete
from .test_lifecycle import T0, WALL, at, bodies, run, send, started, subscribe

T = TypeVar("T")


def messages(out: FakeOutbox) -> list[Frame]:
    return out.take("MESSAGE")


def delayed_rows(store: object) -> list[dict[str, str]]:
    return [m.headers for m, _, _ in store.rows.values() if m.deliver_at is not None]  # type: ignore[attr-defined]


def test_delay_period_repeat_gives_one_plus_repeat_copies_at_their_times() -> None:
    """DELAY:1000 PERIOD:500 REPEAT:3: four copies, at 1.0, 1.5, 2.0 and 2.5 s, none before."""
    broker, store = started()
    out = subscribe(broker, "q")
    send(broker, "q", "tick", AMQ_SCHEDULED_DELAY="1000", AMQ_SCHEDULED_PERIOD="500", AMQ_SCHEDULED_REPEAT="3")
    got: list[float] = []
    for due in (1.0, 1.5, 2.0, 2.5):
        run(broker, T0 + due - 0.001)
        assert messages(out) == []
        run(broker, T0 + due)
        frames = messages(out)
        assert [f.body for f in frames] == [b"tick"]
        got.append(due)
        headers = frames[0].headers
        assert "AMQ_SCHEDULED_PERIOD" not in headers and SCHEDULE_LEFT not in headers
        assert headers[SCHEDULE_ID]
    run(broker, T0 + 60)
    assert messages(out) == []
    assert got == [1.0, 1.5, 2.0, 2.5]
    assert delayed_rows(store) == []  # the schedule is over: no row left


def test_every_copy_is_a_new_message_with_the_schedules_id() -> None:
    broker, _ = started()
    out = subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_PERIOD="100", AMQ_SCHEDULED_REPEAT="2")
    frames = []
    for step in range(10):
        run(broker, T0 + 0.1 * step)
        frames += messages(out)
    assert len(frames) == 3  # no delay: the first at once, then two more
    assert len({f.headers["message-id"] for f in frames}) == 3
    assert len({f.headers[SCHEDULE_ID] for f in frames}) == 1


def test_the_firings_state_is_stored_in_the_row_before_each_firing() -> None:
    """What a crash would leave: one row, its count lowered at each firing."""
    broker, store = started()
    subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_DELAY="1000", AMQ_SCHEDULED_PERIOD="500", AMQ_SCHEDULED_REPEAT="2")
    assert [h[SCHEDULE_LEFT] for h in delayed_rows(store)] == ["2"]
    run(broker, T0 + 1.0)
    assert [h[SCHEDULE_LEFT] for h in delayed_rows(store)] == ["1"]
    run(broker, T0 + 1.5)
    assert [h[SCHEDULE_LEFT] for h in delayed_rows(store)] == ["0"]
    run(broker, T0 + 2.0)
    assert delayed_rows(store) == []


def test_repeat_for_ever_goes_on_without_drift() -> None:
    broker, store = started()
    out = subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="-1")
    count = 0
    for second in range(100):
        run(broker, T0 + second + 0.0005)  # each deadline seen half a millisecond late
        count += len(messages(out))
        assert count == second + 1
    due = [m.deliver_at for m, _, _ in store.rows.values() if m.deliver_at is not None]
    assert due == [int((WALL + T0 + 100) * 1000)]  # as planned, not from when each one ran


def test_a_firing_found_late_goes_at_once_and_the_next_a_period_after() -> None:
    """The broker was 'down' for 10 s: the overdue firing is made once, not ten times."""
    broker, _ = started()
    out = subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="5")
    run(broker, T0)
    assert len(messages(out)) == 1
    run(broker, T0 + 10.0)
    assert len(messages(out)) == 1
    run(broker, T0 + 10.999)
    assert messages(out) == []
    run(broker, T0 + 11.0)
    assert len(messages(out)) == 1


def test_an_absolute_time_starts_the_schedule() -> None:
    broker, _ = started()
    out = subscribe(broker, "q")
    first = int((WALL + T0 + 3) * 1000)
    send(broker, "q", "x", _AMQ_SCHED_DELIVERY=str(first), AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="1")
    send(broker, "q", "y", AMQ_SCHEDULED_TIME=str(first + 500))
    run(broker, T0 + 2.999)
    assert bodies(out) == []
    run(broker, T0 + 3.0)
    assert bodies(out) == ["x"]
    run(broker, T0 + 3.5)
    assert bodies(out) == ["y"]
    run(broker, T0 + 4.0)
    assert bodies(out) == ["x"]


def test_cron_fires_at_each_minute_it_names() -> None:
    broker, _ = started()
    out = subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_CRON="*/5 * * * *", AMQ_SCHEDULED_DELAY="30000")  # delay: ignored
    now_s = WALL + T0
    first = (int(now_s) // 300 + 1) * 300  # the next multiple of 5 minutes (every zone's offset is of 15)
    run(broker, first - WALL - 0.001)
    assert bodies(out) == []
    for k in range(3):
        run(broker, first + 300 * k - WALL)
        assert bodies(out) == ["x"]
        run(broker, first + 300 * k + 299 - WALL)
        assert bodies(out) == []


def test_cron_with_repeat_sends_a_series_from_delay_after_each_minute() -> None:
    """ActiveMQ's example: at every cron minute, 1 + REPEAT copies, DELAY after it, PERIOD apart."""
    broker, _ = started()
    out = subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_CRON="* * * * *", AMQ_SCHEDULED_DELAY="1000",
         AMQ_SCHEDULED_PERIOD="2000", AMQ_SCHEDULED_REPEAT="2")
    minute = (int(WALL + T0) // 60 + 1) * 60
    times = []
    for offset in range(0, 130):
        run(broker, minute + offset - WALL)
        times += [offset] * len(messages(out))
    assert times == [1, 3, 5, 61, 63, 65, 121, 123, 125]


@pytest.mark.parametrize(("headers", "named"), [
    ({"AMQ_SCHEDULED_PERIOD": "-5", "AMQ_SCHEDULED_REPEAT": "2"}, "AMQ_SCHEDULED_PERIOD"),
    ({"AMQ_SCHEDULED_PERIOD": "1" + "0" * 16}, "AMQ_SCHEDULED_PERIOD"),
    ({"AMQ_SCHEDULED_REPEAT": "-2", "AMQ_SCHEDULED_PERIOD": "5"}, "AMQ_SCHEDULED_REPEAT"),
    ({"AMQ_SCHEDULED_REPEAT": "2147483648", "AMQ_SCHEDULED_PERIOD": "5"}, "AMQ_SCHEDULED_REPEAT"),
    ({"AMQ_SCHEDULED_REPEAT": "many", "AMQ_SCHEDULED_PERIOD": "5"}, "AMQ_SCHEDULED_REPEAT"),
    ({"AMQ_SCHEDULED_REPEAT": "-1"}, "AMQ_SCHEDULED_PERIOD"),  # for ever needs a period
    ({"AMQ_SCHEDULED_REPEAT": "3", "AMQ_SCHEDULED_PERIOD": "0"}, "AMQ_SCHEDULED_PERIOD"),  # so does any repeat
    ({"AMQ_SCHEDULED_CRON": "* * * *"}, "AMQ_SCHEDULED_CRON"),
    ({"AMQ_SCHEDULED_CRON": "61 * * * *"}, "AMQ_SCHEDULED_CRON"),
    ({"AMQ_SCHEDULED_CRON": "0 0 30 2 *"}, "AMQ_SCHEDULED_CRON"),  # never fires
    ({"AMQ_SCHEDULED_CRON": "* * * * *", "AMQ_SCHEDULED_REPEAT": "-1", "AMQ_SCHEDULED_PERIOD": "5"},
     "AMQ_SCHEDULED_REPEAT"),
    ({"AMQ_SCHEDULED_TIME": "soon", "AMQ_SCHEDULED_REPEAT": "1", "AMQ_SCHEDULED_PERIOD": "5"}, "AMQ_SCHEDULED_TIME"),
    ({"_AMQ_SCHED_DELIVERY": "1" + "0" * 16}, "_AMQ_SCHED_DELIVERY"),
])
def test_a_value_out_of_range_is_an_error_naming_the_header(headers: dict[str, str], named: str) -> None:
    broker, store = started()
    with pytest.raises(ClientError, match=named):
        send(broker, "q", "x", **headers)
    assert not store.rows


def test_a_sender_cannot_forge_the_schedules_own_headers() -> None:
    """x-schedule-left on a plain delayed SEND would make it recur: the broker drops it."""
    broker, _ = started()
    out = subscribe(broker, "q")
    send(broker, "q", "x", delay="1000", **{SCHEDULE_LEFT: "5", SCHEDULE_ID: "7"})
    run(broker, T0 + 10)
    frames = messages(out)
    assert len(frames) == 1
    assert SCHEDULE_LEFT not in frames[0].headers and SCHEDULE_ID not in frames[0].headers


def test_an_expiry_ends_a_schedule() -> None:
    broker, store = started()
    out = subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="-1", ttl="3500")
    for second in range(10):
        run(broker, T0 + second)
    assert len(messages(out)) == 4  # at 0, 1, 2 and 3 s; the one due at 4 s is past its expiry
    assert delayed_rows(store) == []


def test_a_schedule_survives_a_restart_from_its_row() -> None:
    """A new engine on the same store (what kill -9 leaves) goes on where the row says."""
    from stompmq.broker import Broker, BrokerConfig
    from stompmq.storage.base import Recovery

    broker, store = started()
    subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_DELAY="1000", AMQ_SCHEDULED_PERIOD="500", AMQ_SCHEDULED_REPEAT="3")
    run(broker, T0 + 1.0)  # the first copy; 3 left
    again = Broker(store, BrokerConfig(window=10_000))
    at(again, T0 + 1.2)
    again.recover(Recovery(broker.dispatcher.clock.seq, [], []), [])
    out = subscribe(again, "q")
    got = len([m for m in messages(out) if m.body == b"x"])  # the first copy, still in its queue
    for step in range(40):
        run(again, T0 + 1.2 + 0.1 * step)
        got += len(messages(out))
    assert got == 4
    assert datetime.fromtimestamp(WALL)  # (the wall clock the helpers use)


# ------------------------------------------------------------------------- listing and cancelling


def resolve(broker: object, deferred: Deferred[T]) -> T:
    """A management call as the API makes it: the store read, then the answer."""
    return deferred.answer(complete(deferred.fetch(broker.store)))  # type: ignore[attr-defined]


def test_the_listing_shows_every_schedule_next_first_with_what_is_left() -> None:
    broker, _ = started()
    send(broker, "a", "x", AMQ_SCHEDULED_DELAY="5000", AMQ_SCHEDULED_PERIOD="500", AMQ_SCHEDULED_REPEAT="3")
    send(broker, "b", "yy", delay="2000")
    send(broker, "c", "z", AMQ_SCHEDULED_CRON="0 * * * *")
    page = resolve(broker, broker.schedules.page(None, 10))
    assert [(r.queue, r.remaining, r.period, r.cron, r.body_bytes) for r in page.rows][:2] == [
        ("b", 1, 0, None, 2), ("a", 4, 500, None, 1)]
    assert (page.rows[2].queue, page.rows[2].remaining, page.rows[2].cron) == ("c", None, "0 * * * *")
    now_ms = int((WALL + T0) * 1000)
    assert [r.next_at - now_ms for r in page.rows[:2]] == [2000, 5000]
    assert page.after is None
    run(broker, T0 + 5.0)
    (first, second) = resolve(broker, broker.schedules.page(None, 10)).rows[:2]
    assert (first.queue, first.remaining, first.next_at - now_ms) == ("a", 3, 5500)  # the same id, one less
    assert first.id == page.rows[1].id


def test_the_listing_pages() -> None:
    broker, _ = started()
    for i in range(7):
        send(broker, "q", str(i), delay=str(1000 + i))
    seen: list[str] = []
    after = None
    while True:
        page = resolve(broker, broker.schedules.page(after, 3))
        seen += [r.id for r in page.rows]
        if page.after is None:
            break
        after = page.after
    assert len(seen) == 7 == len(set(seen))


def test_a_cancelled_schedule_fires_no_more() -> None:
    broker, store = started()
    out = subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="-1")
    run(broker, T0 + 1.0)
    assert len(messages(out)) == 2
    (row,) = resolve(broker, broker.schedules.page(None, 10)).rows
    assert resolve(broker, broker.schedules.cancel(row.id))[0] == CANCELLED
    run(broker, T0 + 30.0)
    assert messages(out) == []
    assert delayed_rows(store) == []
    assert resolve(broker, broker.schedules.cancel(row.id))[0] == MISSING


def test_a_schedule_only_in_the_store_is_cancelled_even_with_a_page_read_in_flight() -> None:
    """A window of 4: the 6th schedule is in the store only; the page read asked for before the
    cancel's delete must not bring it back."""
    broker, _ = started(window=4)
    out = subscribe(broker, "q")
    for i in range(8):
        send(broker, "q", str(i), delay=str(1000 + 100 * i))
    sixth = resolve(broker, broker.schedules.page(None, 10)).rows[5]
    at(broker, T0 + 1.25)
    broker.run_due()  # two promoted: a page read is queued, not yet done
    while (read := broker.take_read()) is not None and read.done.func.__name__ != "_loaded":  # type: ignore[attr-defined]
        read.done(complete(read.fetch(broker.store)))  # (the queue's own page)
    assert read is not None and broker.dispatcher.delayed.loading
    rows = complete(read.fetch(broker.store))  # the read runs before the cancel's delete...
    assert sixth.id in [str(m.seq) for m in rows]
    assert resolve(broker, broker.schedules.cancel(sixth.id)) == (CANCELLED, "q")
    read.done(rows)  # ...and is answered after it
    got = bodies(out)
    for step in range(30):
        run(broker, T0 + 1.3 + 0.1 * step)
        got += bodies(out)
    assert got == ["0", "1", "2", "3", "4", "6", "7"]


def test_a_cancel_racing_a_firing_says_so() -> None:
    broker, _ = started()
    subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="-1")
    (row,) = resolve(broker, broker.schedules.page(None, 10)).rows
    deferred = broker.schedules.cancel(row.id)
    found = complete(deferred.fetch(broker.store))
    run(broker, T0 + 0.0)  # it fires before the answer: its next row has another seq
    assert deferred.answer(found)[0] == MOVED
    assert resolve(broker, broker.schedules.cancel(row.id))[0] == CANCELLED


def test_a_store_that_keeps_nothing_lists_and_cancels_from_memory() -> None:
    from stompmq.broker import Broker, BrokerConfig
    from stompmq.storage.base import Recovery
    from stompmq.storage.memory import MemoryStore

    broker = Broker(MemoryStore(), BrokerConfig())
    at(broker, T0)
    broker.recover(Recovery(0, [], []), [])
    out = subscribe(broker, "q")
    send(broker, "q", "x", AMQ_SCHEDULED_DELAY="1000", AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="5")
    (row,) = resolve(broker, broker.schedules.page(None, 10)).rows
    assert row.remaining == 6
    assert resolve(broker, broker.schedules.cancel(row.id))[0] == CANCELLED
    for second in range(10):
        run(broker, T0 + second)
    assert messages(out) == []


def test_a_copy_a_full_queue_refuses_is_dead_lettered_and_the_schedule_goes_on() -> None:
    broker, store = started()
    session = broker.open_session("admin", "1.2", FakeOutbox())
    broker.handle(session, Frame("SEND", {"destination": "/control/declare/queue/full", "max-length": "1",
                                          "overflow": "reject-publish", "dead-letter": "true"}))
    run(broker, T0)  # (the bounded queue's size is read)
    send(broker, "full", "first")  # the queue is full from now on
    send(broker, "full", "x", AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="1")
    run(broker, T0 + 0.5)
    run(broker, T0 + 1.5)
    dead = [m for m, _, _ in store.rows.values() if m.queue == "DLQ.full"]
    assert [m.body for m in dead] == [b"x", b"x"]
    assert [m.body for m, _, _ in store.rows.values() if m.queue == "full"] == [b"first"]
    assert all(SCHEDULE_LEFT not in m.headers and "AMQ_SCHEDULED_PERIOD" not in m.headers for m in dead)
    assert delayed_rows(store) == []


# ------------------------------------------------------------------------- purging delayed messages


def memory_broker() -> object:
    from stompmq.broker import Broker, BrokerConfig
    from stompmq.storage.base import Recovery
    from stompmq.storage.memory import MemoryStore

    broker = Broker(MemoryStore(), BrokerConfig())
    at(broker, T0)
    broker.recover(Recovery(0, [], []), [])
    return broker


@pytest.mark.parametrize("store", ["durable", "memory"])
def test_a_purge_with_delayed_cancels_the_queues_delayed_messages_too(store: str) -> None:
    """``/control/purge/queue/q`` with ``delayed:true``: q's ready messages, its delayed ones in
    memory and in the store only (a window of 4), and its schedules are gone; another queue's
    stay.  Without the header, delayed messages stay (the purge of ready messages alone)."""
    broker = memory_broker() if store == "memory" else started(window=4)[0]
    send(broker, "q", "ready")
    for i in range(6):
        send(broker, "q", f"q{i}", delay=str(1000 + 100 * i))
        send(broker, "other", f"o{i}", delay=str(1000 + 100 * i))
    send(broker, "q", "tick", AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="-1", AMQ_SCHEDULED_DELAY="500")
    assert broker.administer("purge/queue/q") == {}  # type: ignore[attr-defined]
    assert len(resolve(broker, broker.schedules.page(None, 100)).rows) == 13  # type: ignore[attr-defined]
    answer = resolve(broker, broker.administer("purge/queue/q", {"delayed": "true"}))  # type: ignore[attr-defined]
    assert answer == {"delayed": "7"}
    rows = resolve(broker, broker.schedules.page(None, 100)).rows  # type: ignore[attr-defined]
    assert {r.queue for r in rows} == {"other"} and len(rows) == 6
    q, other = subscribe(broker, "q"), subscribe(broker, "other")
    for step in range(40):
        run(broker, T0 + 0.1 * step)
    assert bodies(q) == []
    assert sorted(bodies(other)) == [f"o{i}" for i in range(6)]


def test_a_purge_with_delayed_takes_what_fell_due_meanwhile() -> None:
    """A delayed message promoted between the walk and its answer is ready by then: the purge
    of the ready messages, which comes after, takes it."""
    broker, _ = started()
    send(broker, "q", "soon", delay="100")
    deferred = broker.administer("purge/queue/q", {"delayed": "true"})
    assert isinstance(deferred, Deferred)
    found = complete(deferred.fetch(broker.store))
    run(broker, T0 + 0.2)  # promoted before the answer
    assert deferred.answer(found) == {"delayed": "0"}
    out = subscribe(broker, "q")
    run(broker, T0 + 1.0)
    assert bodies(out) == []


def test_a_purge_refuses_a_bad_delayed_value() -> None:
    broker, _ = started()
    with pytest.raises(ClientError, match="delayed must be true or false"):
        broker.administer("purge/queue/q", {"delayed": "yes"})
