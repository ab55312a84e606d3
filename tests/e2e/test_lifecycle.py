"""Message lifecycle end to end, on every store: expiry, delayed delivery, bounded queues.

Expiries and delays are kept short (100-600 ms) and no test asserts on elapsed time: a test
waits (with a generous deadline) for what must happen, and checks with a short quiet period
only that something must *not* happen.
"""

from __future__ import annotations

import json
import time

import pytest

from stompmq.broker import BrokerConfig

from ..support.broker_process import BrokerProcess
from ..support.broker_thread import restarting
from ..support.stompclient import BrokerError, Client, control
from ..support.stores import TEST_LEASE, postgres_server
from ..support.waiting import wait_past, wait_until


def count(c: Client, queue: str) -> int:
    return int(control(c, f"count-msgs/queue/{queue}")["num-messages"])


def now_ms() -> int:
    return int(time.time() * 1000)


def bodies(frames) -> list[str]:
    return [f.body.decode() for f in frames]


# ---------------------------------------------------------------------------- expiry


def test_expired_messages_are_never_delivered(broker):
    with Client(broker.port) as c:
        c.send_to("/queue/e1", "short", headers={"ttl": "100"})
        c.send_to("/queue/e1", "past", headers={"expires": str(now_ms() - 1)})
        c.send_to("/queue/e1", "never", headers={"expires": "0"})  # JMS: 0 = never expires
        c.send_to("/queue/e1", "long", headers={"ttl": "600000"})
        wait_past(now_ms() + 100, "the 100 ms ttl")
        c.subscribe("/queue/e1")
        got = c.messages(2)
        assert bodies(got) == ["never", "long"]
        assert "expires" not in got[0].headers
        assert abs(int(got[1]["expires"]) - (now_ms() + 600_000)) < 60_000
        c.expect_nothing()


def test_the_sooner_of_ttl_and_expires_wins(broker):
    with Client(broker.port) as c:
        c.send_to("/queue/e2", "x", headers={"ttl": "100", "expires": str(now_ms() + 600_000)})
        wait_past(now_ms() + 100, "the 100 ms ttl")
        c.subscribe("/queue/e2")
        c.expect_nothing(0.2)


def test_queue_message_ttl_dead_letters_when_declared(broker):
    with Client(broker.port) as c:
        control(c, "declare/queue/e3", **{"message-ttl": "100", "dead-letter": "true"})
        c.send_to("/queue/e3", "old", headers={"keep": "me"})
        wait_past(now_ms() + 100, "the queue's 100 ms ttl")
        c.subscribe("/queue/e3")
        c.expect_nothing(0.1)
        c.subscribe("/queue/DLQ.e3")
        dead = c.message()
        assert (dead.body, dead["dead-letter-reason"], dead["original-destination"], dead["keep"]) == (
            b"old", "expired", "/queue/e3", "me",
        )


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_expired_messages_deep_in_a_queue_are_swept_from_the_store(broker):
    """Nobody consumes the queue: the sweep finds its expired messages through the index."""
    with Client(broker.port) as c:
        for i in range(30):
            c.send_to("/queue/e4", str(i), headers={"ttl": "50"}, receipt=False)
        c.send_to("/queue/e4", "stays")
        wait_until(lambda: count(c, "e4") == 1, "the sweep removed the expired messages")
        assert broker.call(lambda: broker.broker.queue_stats["e4"].expired) == 30
        c.subscribe("/queue/e4")
        assert c.message().body == b"stays"


def test_expired_messages_are_dropped_at_the_head_while_subscribed(broker):
    with Client(broker.port) as c:
        sub = c.subscribe("/queue/e5", ack="client-individual", prefetch="1")
        c.send_to("/queue/e5", "first")
        first = c.message()
        c.send_to("/queue/e5", "expires", headers={"ttl": "100"})
        c.send_to("/queue/e5", "last")
        wait_past(now_ms() + 100, "the 100 ms ttl")
        c.ack(first)
        assert c.message().body == b"last"
        c.unsubscribe(sub)


# ---------------------------------------------------------------------------- delays


@pytest.mark.parametrize("header", ["delay", "AMQ_SCHEDULED_DELAY", "deliver-at"])
def test_delayed_message_is_ready_when_due(broker, header):
    """Over the wire, one-sided: it comes after the undelayed one and no sooner than due (the
    engine's timing is asserted in virtual time in tests/broker/test_lifecycle.py)."""
    with Client(broker.port) as c:
        c.subscribe("/queue/d1")
        sent = time.monotonic()
        value = "400" if header != "deliver-at" else str(now_ms() + 400)
        c.send_to("/queue/d1", "later", headers={header: value})
        c.send_to("/queue/d1", "now")
        assert c.message().body == b"now"
        assert c.message(timeout=10).body == b"later"
        assert time.monotonic() - sent >= 0.39  # deliver-at is in whole milliseconds


def test_delayed_messages_arrive_in_due_order_then_priority(broker):
    with Client(broker.port) as c:
        # Due times 0.5 s apart: the broker computes each from the SEND's arrival, and on a
        # loaded machine SENDs written back to back can arrive a few hundred ms apart.
        for body, delay, prio in [("c", 1200, 4), ("a", 200, 4), ("b", 700, 4), ("low", 1700, 1), ("high", 1700, 9)]:
            c.send_to("/queue/d2", body, headers={"delay": str(delay), "priority": str(prio)})
        # all due: waiting in the queue, by (priority, due time, sequence)
        wait_until(lambda: count(c, "d2") == 5, "every delayed message due", timeout=10)
        c.subscribe("/queue/d2")
        assert bodies(c.messages(5)) == ["high", "a", "b", "c", "low"]


def test_delayed_message_that_expires_first_is_never_delivered(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/d3")
        c.send_to("/queue/d3", "late", headers={"delay": "300", "ttl": "100"})
        c.expect_nothing(0.6)


def test_a_queue_ttl_runs_from_when_a_delayed_message_is_due(broker):
    with Client(broker.port) as c:
        control(c, "declare/queue/d6", **{"message-ttl": "200"})
        c.subscribe("/queue/d6")
        c.send_to("/queue/d6", "delayed past the queue's ttl", headers={"delay": "400"})
        msg = c.message(timeout=5)
        assert int(msg["expires"]) - int(msg["timestamp"]) == 200


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_delayed_messages_survive_a_restart(store_kind, tmp_path):
    with restarting(store_kind, tmp_path) as start:
        with Client(start().port) as c:
            c.send_to("/queue/d4", "soon", headers={"delay": "300"})
            c.send_to("/queue/d4", "later", headers={"delay": "1500"})
        with Client(start().port) as c:
            c.subscribe("/queue/d4")
            assert bodies(c.messages(2, timeout=10)) == ["soon", "later"]
            c.expect_nothing()


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_delayed_messages_due_while_the_broker_was_down_reach_the_first_subscriber(store_kind, stop, tmp_path):
    """Due while no broker ran: the restarted broker promotes them at start, so a subscriber
    that comes first gets them (nothing else, such as a count-msgs, has to touch the queue)."""
    database = postgres_server().new_database() if store_kind == "postgres" else tmp_path / "broker.db"
    lease = ("--lease", str(TEST_LEASE))
    with BrokerProcess(database, *lease).start() as first, Client(first.port) as c:
        for queue in ("dd1", "dd2"):
            c.send_to(f"/queue/{queue}", queue, headers={"delay": "200"})
        c.send_to("/queue/dd1", "not yet", headers={"delay": "600000"})
        due = now_ms() + 200
        first.kill9() if stop == "sigkill" else first.terminate()
    wait_past(due, "both delays")
    with BrokerProcess(database, *lease).start() as second, Client(second.port) as c:
        for queue in ("dd1", "dd2"):
            c.subscribe(f"/queue/{queue}")
        got = {m.body for m in c.messages(2, timeout=10 + 3 * TEST_LEASE)}  # a killed broker's claims lapse
        assert got == {b"dd1", b"dd2"}
        c.expect_nothing(0.2)


def test_many_delayed_messages_page_through_a_small_schedule(make_broker, store_kind):
    """More delayed messages than the window: the schedule holds the earliest, pages the rest."""
    broker = make_broker(config=BrokerConfig(window=8))
    with Client(broker.port) as c:
        base = now_ms() + 300
        for i in reversed(range(40)):
            c.send_to("/queue/d5", str(i), headers={"deliver-at": str(base + 10 * i)}, receipt=False)
        c.sync()
        if store_kind != "memory":
            assert broker.call(lambda: len(broker.broker.dispatcher.delayed)) <= 8
        c.subscribe("/queue/d5")
        assert bodies(c.messages(40, timeout=10)) == [str(i) for i in range(40)]


# ---------------------------------------------------------------------------- bounded queues


def test_drop_head_keeps_the_newest(broker):
    with Client(broker.port) as c:
        control(c, "declare/queue/b1", **{"max-length": "3"})
        for i in range(6):
            c.send_to("/queue/b1", str(i))
        wait_until(lambda: count(c, "b1") == 3, "the queue is back within max-length")
        c.subscribe("/queue/b1")
        assert bodies(c.messages(3)) == ["3", "4", "5"]
        c.expect_nothing()
        assert broker.call(lambda: broker.broker.queue_stats["b1"].dropped) == 3


def test_drop_head_dead_letters_when_declared(broker):
    with Client(broker.port) as c:
        control(c, "declare/queue/b2", **{"max-length-bytes": "10", "dead-letter": "true"})
        for body in ["aaaa", "bbbb", "cccc"]:
            c.send_to("/queue/b2", body)
        c.subscribe("/queue/DLQ.b2")
        dead = c.message()
        assert (dead.body, dead["dead-letter-reason"]) == (b"aaaa", "maxlen")
        c.subscribe("/queue/b2")
        assert bodies(c.messages(2)) == ["bbbb", "cccc"]


def test_reject_publish_refuses_the_send_and_stores_nothing(broker):
    with Client(broker.port) as c:
        control(c, "declare/queue/b3", **{"max-length": "2", "overflow": "reject-publish"})
        c.send_to("/queue/b3", "1")
        c.send_to("/queue/b3", "2")
        c.frame("SEND", {"destination": "/queue/b3", "receipt": "r-full"}, b"3")
        error = c.next()
        assert error.command == "ERROR"
        assert error["receipt-id"] == "r-full"
        assert "max-length" in error["message"] and "b3" in error["message"]
        c.assert_closed()
    with Client(broker.port) as c:
        assert count(c, "b3") == 2
        c.subscribe("/queue/b3", ack="client-individual")
        first = c.message()
        c.ack(first)
        c.send_to("/queue/b3", "3")  # room again
        assert bodies([c.message(), c.message()]) == ["2", "3"]


def test_max_queue_bytes_guards_every_queue(make_broker):
    broker = make_broker(config=BrokerConfig(max_queue_bytes=100))
    with Client(broker.port) as c:
        c.send_to("/queue/b4", b"x" * 60)
        with pytest.raises(BrokerError, match="max-length-bytes 100"):
            c.send_to("/queue/b4", b"y" * 60)


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_a_declared_policy_survives_a_restart(store_kind, tmp_path):
    with restarting(store_kind, tmp_path) as start:
        with Client(start().port) as c:
            control(c, "declare/queue/b5", **{"max-length": "2", "overflow": "reject-publish"})
            c.send_to("/queue/b5", "1")
            c.send_to("/queue/b5", "2")
        with Client(start().port) as c, pytest.raises(BrokerError, match="is full"):
            c.send_to("/queue/b5", "3")  # the count was read from the store


def test_definitions_file_declares_a_policy(make_broker, tmp_path):
    path = tmp_path / "defs.json"
    path.write_text(json.dumps({"queues": [{"name": "b6", "max-length": 1, "overflow": "reject-publish"}]}))
    broker = make_broker(config=BrokerConfig(definitions=str(path)))
    with Client(broker.port) as c:
        c.send_to("/queue/b6", "1")
        with pytest.raises(BrokerError, match="is full"):
            c.send_to("/queue/b6", "2")


def test_deleting_a_queue_forgets_its_policy(broker):
    with Client(broker.port) as c:
        control(c, "declare/queue/b7", **{"max-length": "1", "overflow": "reject-publish"})
        c.send_to("/queue/b7", "1")
        control(c, "delete/queue/b7")
        c.send_to("/queue/b7", "1")
        c.send_to("/queue/b7", "2")  # accepted: no max-length of 1 any more
        assert count(c, "b7") == 2  # and both kept: nothing dropped at the head either
        c.subscribe("/queue/b7")
        assert bodies(c.messages(2)) == ["1", "2"]


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("destination", "header", "value"),
    [
        ("/queue/x", "ttl", "abc"),
        ("/queue/x", "ttl", "-5"),
        ("/queue/x", "expires", "1.5"),
        ("/queue/x", "delay", "-5"),
        ("/queue/x", "delay", "soon"),
        ("/queue/x", "deliver-at", " 5"),
        ("/queue/x", "AMQ_SCHEDULED_DELAY", "+5"),
        ("/control/declare/queue/x", "overflow", "drop-tail"),
        ("/control/declare/queue/x", "max-length", "-1"),
        ("/control/declare/queue/x", "max-length-bytes", "1e6"),
        ("/control/declare/queue/x", "message-ttl", "abc"),
        ("/control/declare/queue/x", "dead-letter", "yes"),
    ],
)
def test_bad_lifecycle_headers_get_an_error_naming_the_header(memory_broker, destination, header, value):
    with Client(memory_broker.port) as c:
        c.frame("SEND", {"destination": destination, header: value, "receipt": "r1"}, b"")
        error = c.next()
        assert error.command == "ERROR"
        assert error["receipt-id"] == "r1"
        assert error["message"].startswith(header)
        assert repr(value) in error["message"]
