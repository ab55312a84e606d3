"""Task-queue features end to end, on every store: ack timeouts, redelivery,
dead letters, strict priorities across the in-memory window and the store, and
the ``/control`` queue verbs.

Ack timeouts are kept short (0.2-0.5 s) and no test asserts on elapsed time:
a test waits (with a generous deadline) for what must happen, and checks with
a short quiet period only that something must *not* happen.
"""

from __future__ import annotations

import pytest

from stompmq.broker import BrokerConfig

from ..support.stompclient import BrokerError, Client, control
from ..support.waiting import send_all, wait_sessions, wait_until

TIMEOUT = 0.5  # the ack timeout used where a test waits for an expiry (seconds)


# ---------------------------------------------------------------------------- helpers


def counts(c: Client, queue: str) -> tuple[int, int, int]:
    """(num-messages, num-ready, num-unacked) of a queue."""
    r = control(c, f"count-msgs/queue/{queue}")
    return int(r["num-messages"]), int(r["num-ready"]), int(r["num-unacked"])


def subscribers(c: Client, kind: str, name: str) -> int:
    return int(control(c, f"count-subscribers/{kind}/{name}")["num-subscribers"])


def order_key(prio: int, seq: int) -> tuple[int, int]:
    return (-prio, seq)


# ---------------------------------------------------------------------------- ack timeouts


@pytest.mark.parametrize("source", ["send", "subscribe", "config"])
def test_ack_timeout_moves_message_to_another_subscriber(make_broker, source):
    """The ack timeout comes from SEND, else SUBSCRIBE, else --ack-timeout; on expiry the
    message goes to another subscriber with room, flagged as a redelivery."""
    broker = make_broker(config=BrokerConfig(ack_timeout=TIMEOUT if source == "config" else 0.0))
    sub_headers = {"ack-timeout": str(TIMEOUT)} if source == "subscribe" else {}
    send_headers = {"ack-timeout": str(TIMEOUT)} if source == "send" else {}
    with Client(broker.port) as a, Client(broker.port) as b:
        a.subscribe("/queue/at1", ack="client-individual", **sub_headers)
        send_all(broker.port, "/queue/at1", ["job"], lambda i: send_headers)
        first = a.message()
        assert (first.body, first["redelivered"], first["redelivery-count"]) == (b"job", "false", "0")
        b.subscribe("/queue/at1", ack="client-individual", **sub_headers)
        again = b.message()  # after the timeout: to b, not back to a
        assert again.body == b"job"
        assert again["message-id"] == first["message-id"]
        assert (again["redelivered"], again["redelivery-count"]) == ("true", "1")
        a.expect_nothing()
        b.ack(again)
        assert counts(b, "at1") == (0, 0, 0)
        a.expect_nothing(wait=TIMEOUT + 0.2)  # past b's deadline: the ACK settled it
        b.expect_nothing(sync=False)


@pytest.mark.parametrize(
    "config_timeout, sub_timeout, send_timeout, expires",
    [
        (0.0, None, None, False),  # --ack-timeout 0: forever
        (0.0, "0.3", "0", False),  # SEND ack-timeout:0 wins over SUBSCRIBE
        (0.3, "0", None, False),  # SUBSCRIBE ack-timeout:0 wins over --ack-timeout
        (0.0, "0", "0.3", True),  # SEND wins over SUBSCRIBE
        (0.0, "0.3", None, True),  # SUBSCRIBE wins over --ack-timeout
    ],
)
def test_ack_timeout_precedence(make_memory_broker, config_timeout, sub_timeout, send_timeout, expires):
    broker = make_memory_broker(config=BrokerConfig(ack_timeout=config_timeout))
    with Client(broker.port) as c:
        sub_headers = {} if sub_timeout is None else {"ack-timeout": sub_timeout}
        c.subscribe("/queue/at2", ack="client-individual", **sub_headers)
        send_all(broker.port, "/queue/at2", ["x"], lambda i: {} if send_timeout is None else {"ack-timeout": send_timeout})
        first = c.message()
        if expires:
            again = c.message()
            assert (again.body, again["redelivery-count"]) == (b"x", "1")
            assert again["ack"] != first["ack"], "a redelivery has a fresh ack id"
            c.ack(again)
        else:
            c.expect_nothing(wait=0.7)  # more than twice the 0.3 s that must not apply
            c.ack(first)
        assert counts(c, "at2") == (0, 0, 0)


def test_ack_timeout_alone_subscriber_gets_it_back(broker):
    """With nobody else to take it, the expired message goes back to the same subscriber,
    again and again, counting redeliveries; an ACK in time ends it."""
    with Client(broker.port) as c:
        c.subscribe("/queue/at3", ack="client-individual", **{"ack-timeout": "0.2"})
        send_all(broker.port, "/queue/at3", ["lonely"])
        msgs = c.messages(3)
        assert [m.body for m in msgs] == [b"lonely"] * 3
        assert [m["redelivery-count"] for m in msgs] == ["0", "1", "2"]
        assert [m["redelivered"] for m in msgs] == ["false", "true", "true"]
        assert len({m["ack"] for m in msgs}) == 3
        assert len({m["message-id"] for m in msgs}) == 1
        last = c.message()
        c.ack(last)
        c.expect_nothing(wait=0.6)
        assert counts(c, "at3") == (0, 0, 0)


def test_ack_in_time_prevents_redelivery(broker):
    with Client(broker.port) as a, Client(broker.port) as b:
        a.subscribe("/queue/at4", ack="client-individual", **{"ack-timeout": "0.3"})
        b.subscribe("/queue/at4", ack="client-individual", **{"ack-timeout": "0.3"})
        send_all(broker.port, "/queue/at4", ["one", "two"])
        for c in (a, b):
            c.ack(c.message())
        a.expect_nothing(wait=0.8)
        b.expect_nothing(wait=0.1)
        assert counts(a, "at4") == (0, 0, 0)


@pytest.mark.parametrize("others", [0, 1])
def test_a_late_ack_is_answered_and_the_slow_worker_keeps_its_connection(broker, others):
    """The ACK of a delivery its ack timeout requeued is too late: its RECEIPT says so
    (``ack-late:true``), it settles nothing (not the message's new delivery), and the worker
    keeps its connection and its other delivery in flight, whose deadline it extended."""
    with Client(broker.port) as late, Client(broker.port) as other:
        late.subscribe("/queue/at5", ack="client-individual", prefetch="2", **{"ack-timeout": str(TIMEOUT)})
        send_all(broker.port, "/queue/at5", ["m", "kept"])
        first, kept = late.messages(2)
        assert control(late, "extend-ack", id=kept["ack"], **{"ack-timeout": "60"})["extended"] == "1"
        if others:
            other.subscribe("/queue/at5", ack="client-individual")
            again = other.message()
        else:
            again = late.message()
        assert (again.body, again["redelivery-count"]) == (b"m", "1")
        assert late.request("ACK", {"id": first["ack"]})["ack-late"] == "true"
        assert counts(other, "at5") == (2, 0, 2)  # the new delivery and the kept one, both in flight
        late.ack(kept)
        (other if others else late).ack(again)
        assert counts(other, "at5") == (0, 0, 0)
        late.expect_nothing(wait=2 * TIMEOUT)  # no ERROR, nothing redelivered
        wait_sessions(broker, 2)


def test_extending_the_deadline_of_a_long_task_keeps_it_from_other_workers(broker):
    """A task six ack timeouts long, its deadline extended every half timeout, is never
    redelivered to the idle worker beside it, and its ACK then settles it."""
    with Client(broker.port) as busy, Client(broker.port) as idle:
        busy.subscribe("/queue/at-long", ack="client-individual", **{"ack-timeout": str(TIMEOUT)})
        send_all(broker.port, "/queue/at-long", ["long"])
        task = busy.message()
        idle.subscribe("/queue/at-long", ack="client-individual")
        for _ in range(12):
            assert control(busy, "extend-ack", id=task["ack"], **{"ack-timeout": str(TIMEOUT)})["extended"] == "1"
            idle.expect_nothing(wait=TIMEOUT / 2, sync=False)
        busy.ack(task)
        idle.expect_nothing(wait=2 * TIMEOUT)
        assert counts(idle, "at-long") == (0, 0, 0)


def test_connection_failed_by_error_gets_no_more_deliveries(broker):
    """After an ERROR the connection only lingers so the client can read it: its session
    is over, so its unacked messages go back at once and nothing new is delivered to it
    (a message handed to it would be lost with the socket and counted as a redelivery)."""
    with Client(broker.port) as failing:
        failing.subscribe("/queue/err-held", ack="client-individual")
        failing.subscribe("/queue/err-idle", ack="client-individual")
        send_all(broker.port, "/queue/err-held", ["held"])
        assert failing.message().body == b"held"
        failing.frame("ACK", {"id": "no-such-ack-id"})
        error = failing.recv()
        assert error.command == "ERROR"
        # the failed connection is still open (lingering): nothing may go to it any more
        send_all(broker.port, "/queue/err-idle", ["fresh"])
        with Client(broker.port) as other:
            other.subscribe("/queue/err-idle", ack="client-individual")
            fresh = other.message(timeout=0.5)
            assert (fresh.body, fresh["redelivered"]) == (b"fresh", "false")
            other.subscribe("/queue/err-held", ack="client-individual")
            held = other.message(timeout=0.5)
            assert (held.body, held["redelivery-count"]) == (b"held", "1")
        assert failing.raw_bytes(0.2).strip(b"\n") == b"", "nothing may follow the ERROR"


# ---------------------------------------------------------------------------- dead letters


@pytest.mark.parametrize("how", ["nack", "timeout", "disconnect"])
def test_dead_letter_after_max_redeliveries(make_broker, how):
    """--max-redeliveries 2: the third requeue moves the message to /queue/DLQ.<name>,
    keeping its headers, body and priority and adding why and where from."""
    broker = make_broker(config=BrokerConfig(max_redeliveries=2))
    headers = {"priority": "7", "customer": "42", "x-trace": "a-b"}
    if how == "timeout":
        headers["ack-timeout"] = "0.2"
    send_all(broker.port, "/queue/dl1", ["doomed"], lambda i: headers)
    if how == "disconnect":
        for expected in range(3):
            c = Client(broker.port)
            c.subscribe("/queue/dl1", ack="client-individual")
            m = c.message()
            assert m["redelivery-count"] == str(expected)
            c.abort_connection()
            wait_sessions(broker, 0)
    else:
        with Client(broker.port) as c:
            c.subscribe("/queue/dl1", ack="client-individual", prefetch="1")
            for expected in range(3):
                m = c.message()
                assert (m.body, m["redelivery-count"]) == (b"doomed", str(expected))
                if how == "nack":
                    c.nack(m)
            if how == "timeout":
                wait_until(lambda: counts(c, "DLQ.dl1")[0] == 1, "the dead letter")
            c.expect_nothing(wait=0.4 if how == "timeout" else 0.03)
    with Client(broker.port) as c:
        assert counts(c, "dl1") == (0, 0, 0)
        assert counts(c, "DLQ.dl1") == (1, 1, 0)
        c.subscribe("/queue/DLQ.dl1", ack="client-individual")
        dead = c.message()
        c.expect_nothing()
        c.ack(dead)
        assert counts(c, "DLQ.dl1") == (0, 0, 0)
    assert dead.body == b"doomed"
    assert dead["destination"] == "/queue/DLQ.dl1"
    assert dead["original-destination"] == "/queue/dl1"
    assert "redeliver" in dead["dead-letter-reason"] and "2" in dead["dead-letter-reason"]
    assert (dead["priority"], dead["customer"], dead["x-trace"]) == ("7", "42", "a-b")


def test_dead_letters_do_not_chain(make_broker):
    broker = make_broker(config=BrokerConfig(max_redeliveries=0))
    send_all(broker.port, "/queue/dl2", ["x"])
    with Client(broker.port) as c:
        c.subscribe("/queue/dl2", ack="client-individual")
        c.nack(c.message())  # the first requeue is already one too many
        c.subscribe("/queue/DLQ.dl2", ack="client-individual")
        dead = c.message()
        assert dead["destination"] == "/queue/DLQ.dl2"
        c.nack(dead)  # dies in its dead-letter queue: dropped
        c.expect_nothing()
        assert counts(c, "dl2") == (0, 0, 0)
        assert counts(c, "DLQ.dl2") == (0, 0, 0)
        assert counts(c, "DLQ.DLQ.dl2") == (0, 0, 0)


@pytest.mark.parametrize("dead_letter_rejected", [True, False])
def test_nack_requeue_false_dead_letters_when_configured(make_broker, dead_letter_rejected):
    broker = make_broker(config=BrokerConfig(dead_letter_rejected=dead_letter_rejected))
    send_all(broker.port, "/queue/dl3", ["bad", "good"], lambda i: {"n": str(i)})
    with Client(broker.port) as c:
        c.subscribe("/queue/dl3", ack="client-individual", prefetch="1")
        bad = c.message()
        c.nack(bad, requeue="false")
        good = c.message()
        assert good.body == b"good"
        c.ack(good)
        c.expect_nothing()
        assert counts(c, "dl3") == (0, 0, 0)
        if not dead_letter_rejected:
            assert counts(c, "DLQ.dl3") == (0, 0, 0)
            return
        assert counts(c, "DLQ.dl3") == (1, 1, 0)
        c.subscribe("/queue/DLQ.dl3")
        dead = c.message()
    assert (dead.body, dead["n"]) == (b"bad", "0")
    assert dead["original-destination"] == "/queue/dl3"
    assert "reject" in dead["dead-letter-reason"]


# ---------------------------------------------------------------------------- priorities


def test_priority_order_with_redeliveries_across_memory_and_disk(make_broker, store_kind):
    """Strict (priority desc, seq asc) whether a message is in the window or in the store,
    including requeued messages, which keep their place by seq.

    window=5 on the SQLite store: the 70 messages cannot all be in memory, and the
    requeued low-priority messages land beyond the window's boundary, so they are only
    found again by paging from disk.
    """
    broker = make_broker(config=BrokerConfig(window=5))
    q = "/queue/prio-disk"
    prio: dict[int, int] = {}  # body (= send order, so seq order) -> priority
    next_body = 0

    def send(priorities) -> None:
        nonlocal next_body
        with Client(broker.port) as p:
            for pr in priorities:
                prio[next_body] = pr
                p.send_to(q, str(next_body), headers={"priority": str(pr)})
                next_body += 1

    def ordered(bodies) -> list[int]:
        return sorted(bodies, key=lambda b: order_key(prio[b], b))

    send([(i * 7) % 10 for i in range(40)])
    with Client(broker.port) as keeper, Client(broker.port) as taker:
        keeper.subscribe(q, "keeper", ack="client-individual", prefetch="1")
        kept_msg = keeper.message()
        kept = int(kept_msg.body)
        if store_kind == "sqlite":
            queue_size = broker.call(lambda: broker.broker.queues["prio-disk"].size)
            assert queue_size <= 5, "the window must hold at most 5 ready messages"
        taker.subscribe(q, "taker", ack="client-individual", prefetch="12")
        taken = taker.messages(12)
        taker.expect_nothing()
        assert [kept] + [int(m.body) for m in taken] == ordered(prio)[:13]
        acked = set()
        for m in taken[1::4]:
            taker.ack(m)
            acked.add(int(m.body))
        # each ACK made room for the next best message, wherever it was (window or store)
        refill = taker.messages(len(acked))
        assert [int(m.body) for m in refill] == ordered(prio)[13 : 13 + len(acked)]
        taken += refill
        taker.expect_nothing()
        # Higher priorities than anything the taker holds: they fill the window, so
        # the taker's messages requeue beyond the boundary (into the store only).
        send([9] * 8 + [3, 0, 5])
        requeued = {int(m.body) for m in taken} - acked
        taker.unsubscribe("taker")
        taker.expect_nothing()
        send([4, 9, 0, 6, 2, 8])
        remaining = set(prio) - acked - {kept}
        got = []
        keeper.ack(kept_msg, receipt=False)
        for _ in range(len(remaining)):
            m = keeper.message()
            got.append(m)
            keeper.ack(m, receipt=False)
        keeper.expect_nothing()
    bodies = [int(m.body) for m in got]
    assert bodies == ordered(remaining)
    for m in got:
        body = int(m.body)
        assert m["priority"] == str(prio[body])
        assert m["redelivered"] == ("true" if body in requeued else "false"), body



def test_nack_keeps_place_among_equal_priorities(make_broker):
    """A NACKed message goes back before younger messages of its priority, behind older
    ones and behind higher priorities, including those only in the store."""
    broker = make_broker(config=BrokerConfig(window=3))
    send_all(broker.port, "/queue/prio-nack", [str(i) for i in range(12)], lambda i: {"priority": "5" if i % 2 else "4"})
    with Client(broker.port) as c:
        c.subscribe("/queue/prio-nack", ack="client-individual", prefetch="4")
        held = c.messages(4)  # 1, 3, 5, 7 (priority 5)
        assert [m.body for m in held] == [b"1", b"3", b"5", b"7"]
        c.nack(held[2], receipt=False)  # 5 comes back: next after nothing (9, 11 are younger)
        c.ack(held[0], receipt=False)
        c.ack(held[1], receipt=False)
        c.ack(held[3], receipt=False)
        got = []
        for _ in range(9):
            m = c.message()
            got.append((int(m.body), m["redelivered"]))
            c.ack(m, receipt=False)
        c.expect_nothing()
    assert got == [(5, "true"), (9, "false"), (11, "false")] + [(i, "false") for i in range(0, 12, 2)]


# ---------------------------------------------------------------------------- /control


def test_count_msgs_and_subscribers(broker):
    send_all(broker.port, "/queue/cnt", [str(i) for i in range(5)])
    with Client(broker.port) as c, Client(broker.port) as other:
        assert counts(c, "cnt") == (5, 5, 0)
        assert counts(c, "never-used") == (0, 0, 0)
        assert subscribers(c, "queue", "cnt") == 0
        c.subscribe("/queue/cnt", "s1", ack="client-individual", prefetch="2")
        held = c.messages(2)
        assert counts(c, "cnt") == (5, 3, 2)
        assert subscribers(c, "queue", "cnt") == 1
        other.subscribe("/queue/cnt", "s2", ack="client-individual", prefetch="1")
        held_other = other.message()
        assert subscribers(c, "queue", "cnt") == 2
        assert counts(c, "cnt") == (5, 2, 3)
        c.ack(held[0])  # frees a slot: one more goes out
        c.message()
        assert counts(c, "cnt") == (4, 1, 3)
        other.ack(held_other)
        other.message()
        assert counts(c, "cnt") == (3, 0, 3)
        other.unsubscribe("s2")  # its unacked message goes back
        assert subscribers(c, "queue", "cnt") == 1
        assert counts(c, "cnt") == (3, 1, 2)


def test_count_topic_subscribers_includes_matching_prefixes(broker):
    with Client(broker.port) as a, Client(broker.port) as b:
        a.subscribe("/topic/news.sport", "exact")
        a.subscribe("/topic/news.*", "dotted")
        b.subscribe("/topic/*", "all")
        b.subscribe("/topic/weather", "weather")
        assert subscribers(a, "topic", "news.sport") == 3
        assert subscribers(a, "topic", "news.weather") == 2
        assert subscribers(a, "topic", "weather") == 2
        assert subscribers(a, "topic", "other") == 1
        assert subscribers(a, "queue", "news.sport") == 0
        b.unsubscribe("all")
        assert subscribers(a, "topic", "news.sport") == 2
        assert subscribers(a, "topic", "other") == 0


def test_purge_drops_ready_messages_and_keeps_deliveries_in_flight(broker):
    send_all(broker.port, "/queue/pg", [str(i) for i in range(6)])
    with Client(broker.port) as c:
        c.subscribe("/queue/pg", "s", ack="client-individual", prefetch="2")
        held = c.messages(2)
        assert counts(c, "pg") == (6, 4, 2)
        control(c, "purge/queue/pg")
        assert counts(c, "pg") == (2, 0, 2)
        c.expect_nothing()
        c.ack(held[0])
        c.expect_nothing()  # nothing ready to fill the freed slot
        assert counts(c, "pg") == (1, 0, 1)
        c.unsubscribe("s")  # the unacked delivery returns to the (purged) queue
        assert counts(c, "pg") == (1, 1, 0)
    send_all(broker.port, "/queue/pg", ["after"])
    with Client(broker.port) as c:
        c.subscribe("/queue/pg", ack="client-individual")
        back, after = c.messages(2)
        c.expect_nothing()
        assert (back.body, back["redelivered"]) == (held[1].body, "true")
        assert after.body == b"after"
        c.ack(back)
        c.ack(after)
        assert counts(c, "pg") == (0, 0, 0)


def test_purge_of_a_queue_only_in_the_store(make_broker):
    broker = make_broker(config=BrokerConfig(window=3))
    send_all(broker.port, "/queue/pg2", [str(i) for i in range(10)])
    send_all(broker.port, "/queue/pg2-other", ["keep"])
    with Client(broker.port) as c:
        control(c, "purge/queue/pg2")
        assert counts(c, "pg2") == (0, 0, 0)
        assert counts(c, "pg2-other") == (1, 1, 0)
        c.subscribe("/queue/pg2")
        c.expect_nothing()
        send_all(broker.port, "/queue/pg2", ["new"])
        assert c.message().body == b"new"


def test_delete_queue_drops_messages_and_bindings(broker):
    with Client(broker.port) as c:
        control(c, "declare/exchange/dq")
        control(c, "bind/exchange/dq", queue="/queue/dq-a")
        control(c, "bind/exchange/dq", queue="/queue/dq-b", weight="3")
        for i in range(20):
            c.send_to(f"/exchange/dq/k{i}", receipt=False)
        c.sync()
        assert counts(c, "dq-a")[0] + counts(c, "dq-b")[0] == 20
        control(c, "delete/queue/dq-a")
        assert counts(c, "dq-a") == (0, 0, 0)
        listing = control(c, "list-bindings/exchange/dq")
        assert listing["num-bindings"] == "1"
        assert (listing["binding-0-queue"], listing["binding-0-weight"]) == ("/queue/dq-b", "3")
        before = counts(c, "dq-b")[0]
        for i in range(20):
            c.send_to(f"/exchange/dq/k{i}", receipt=False)
        c.sync()
        assert counts(c, "dq-b")[0] == before + 20
        assert counts(c, "dq-a") == (0, 0, 0)


@pytest.mark.parametrize(
    "destination, words",
    [
        ("/control/frobnicate/queue/x", ["/control/frobnicate/queue/x"]),
        ("/control/count-msgs/topic/x", ["/control/count-msgs/topic/x"]),
        ("/control/purge/exchange/x", ["/control/purge/exchange/x"]),
        ("/control/count-msgs", ["/control/count-msgs"]),
        ("/control/count-msgs/queue/", ["name"]),
    ],
)
def test_unknown_control_destination_is_an_error(memory_broker, destination, words):
    with Client(memory_broker.port) as c:
        c.frame("SEND", {"destination": destination, "receipt": "r"})
        error = c.expect_error()
    assert error.headers.get("receipt-id") == "r"
    for word in words:
        assert word in error["message"], error


def test_control_send_without_receipt_still_runs(broker):
    send_all(broker.port, "/queue/nr", [str(i) for i in range(4)])
    with Client(broker.port) as c:
        for path in ("purge/queue/nr", "declare/exchange/nr", "count-msgs/queue/nr"):
            c.frame("SEND", {"destination": "/control/" + path})
        c.frame("SEND", {"destination": "/control/bind/exchange/nr", "queue": "/queue/nr-q", "weight": "7"})
        assert counts(c, "nr") == (0, 0, 0)
        listing = control(c, "list-bindings/exchange/nr")
        assert (listing["num-bindings"], listing["binding-0-queue"], listing["binding-0-weight"]) == (
            "1",
            "/queue/nr-q",
            "7",
        )
        c.expect_nothing()


def test_control_receipts_in_order_with_other_receipts(broker):
    """Control answers that must read the store do not overtake (or fall behind) other receipts."""
    with Client(broker.port) as c:
        for i in range(30):
            c.frame("SEND", {"destination": "/queue/ord", "receipt": f"s{i}"})
            c.frame("SEND", {"destination": "/control/count-msgs/queue/ord", "receipt": f"c{i}"})
        got = [c.recv() for _ in range(60)]
    assert [f.command for f in got] == ["RECEIPT"] * 60
    assert [f["receipt-id"] for f in got] == [x for i in range(30) for x in (f"s{i}", f"c{i}")]
    # an answer counts at least every message sent before it (a durable store counts later)
    numbers = [int(f["num-messages"]) for f in got[1::2]]
    assert all(n >= i + 1 for i, n in enumerate(numbers)), numbers
    assert numbers == sorted(numbers) and numbers[-1] == 30, numbers


def test_client_error_is_not_swallowed(memory_broker):
    """Sanity check of the helpers: an ERROR while waiting for a receipt fails loudly."""
    with Client(memory_broker.port) as c:
        with pytest.raises(BrokerError):
            control(c, "nope/queue/x")
