"""Queue and topic semantics end to end, on every store.

Competing consumers, priorities, prefetch, redelivery after a consumer goes
away or NACKs, and topic fan-out.  Every test runs once per store through the
parametrised ``broker``/``make_broker`` fixtures, so a store that loses the
order, the redelivery count or a message fails here.
"""

from __future__ import annotations

import pytest

from stompmq.broker import BrokerConfig
from stompmq.broker.subscriptions import PREFETCH_HEADERS

from ..support.stompclient import Client
from ..support.waiting import send_all, wait_sessions

# ---------------------------------------------------------------------------- competing consumers


def test_competing_consumers_round_robin(broker):
    consumers = [Client(broker.port) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe("/queue/rr")
        send_all(broker.port, "/queue/rr", [str(i) for i in range(30)])
        got = [[int(m.body) for m in c.messages(10)] for c in consumers]
        for c in consumers:
            c.expect_nothing()
        assert sorted(sum(got, [])) == list(range(30))
        for ids in got:
            assert ids == sorted(ids), "FIFO per consumer"
            # strict round robin: each consumer takes every third message
            assert {i % 3 for i in ids} == {ids[0] % 3}, got
    finally:
        for c in consumers:
            c.close()


def test_competing_consumers_busy_one_does_not_block_others(broker):
    with Client(broker.port) as busy, Client(broker.port) as free:
        busy.subscribe("/queue/rr2", ack="client-individual", prefetch="1")
        free.subscribe("/queue/rr2", ack="client-individual", prefetch="100")
        send_all(broker.port, "/queue/rr2", [str(i) for i in range(10)])
        held = busy.message()
        others = free.messages(9)
        busy.expect_nothing()
        assert sorted([int(held.body)] + [int(m.body) for m in others]) == list(range(10))
        busy.ack(held)
        free.expect_nothing()


def test_each_message_delivered_once(broker):
    consumers = [Client(broker.port) for _ in range(4)]
    try:
        for c in consumers:
            c.subscribe("/queue/once", ack="client-individual", prefetch="5")
        send_all(broker.port, "/queue/once", [str(i) for i in range(20)])
        got = []
        for c in consumers:
            msgs = c.messages(5)
            got += [int(m.body) for m in msgs]
            for m in msgs:
                c.ack(m)
        for c in consumers:
            c.expect_nothing()
        assert sorted(got) == list(range(20))
    finally:
        for c in consumers:
            c.close()


# ---------------------------------------------------------------------------- priorities


PRIORITIES = [None, 9, 0, 5, 9, 4, None, 0, 7, 5, 4, 1, None, 8, 9]


def expected_order(priorities):
    effective = [4 if p is None else p for p in priorities]
    return sorted(range(len(priorities)), key=lambda i: (-effective[i], i))


def test_priority_order_fifo_within_priority(broker):
    send_all(
        broker.port,
        "/queue/prio",
        [str(i) for i in range(len(PRIORITIES))],
        lambda i: {} if PRIORITIES[i] is None else {"priority": str(PRIORITIES[i])},
    )
    with Client(broker.port) as c:
        c.subscribe("/queue/prio", ack="client-individual")
        msgs = c.messages(len(PRIORITIES))
        c.expect_nothing()
    assert [int(m.body) for m in msgs] == expected_order(PRIORITIES)
    for m in msgs:
        p = PRIORITIES[int(m.body)]
        assert m["priority"] == str(4 if p is None else p)


def test_priority_order_across_store_pages(make_broker):
    """More ready messages than the in-memory window: pages from the store keep the order."""
    broker = make_broker(config=BrokerConfig(window=8))
    priorities = [(i * 7) % 10 for i in range(60)]
    send_all(broker.port, "/queue/pages", [str(i) for i in range(60)], lambda i: {"priority": str(priorities[i])})
    with Client(broker.port) as c:
        c.subscribe("/queue/pages", ack="client-individual", prefetch="3")
        got = []
        for _ in range(60):
            m = c.message()
            got.append(int(m.body))
            c.ack(m, receipt=False)
        c.expect_nothing()
    assert got == expected_order(priorities)


def test_large_bodies_past_a_byte_bounded_window_arrive_once_in_order(make_broker):
    """64 KiB bodies to a subscribed consumer that does not read: the window (256 KiB) spills, the
    rest waits in the store's buffer or on disk and comes back in pages (on SQLite laid over the
    disk from the buffer, beside the commits); each message arrives once, in order."""
    broker = make_broker(config=BrokerConfig(window_bytes=256 * 1024))
    body = 64 * 1024
    with Client(broker.port, rcvbuf=65536) as c:
        c.subscribe("/queue/large")
        got = []
        for batch in range(3):  # the consumer reads between batches: pages mix disk and buffer
            first = batch * 40
            send_all(broker.port, "/queue/large", [str(i).encode().ljust(body, b".") for i in range(first, first + 40)],
                     receipt=False)
            got += [int(m.body.rstrip(b".")) for m in c.messages(40)]
        c.expect_nothing()
    assert got == list(range(120))


def test_default_priority_is_4(broker):
    with Client(broker.port) as producer:
        producer.send_to("/queue/p4", "default-a")
        producer.send_to("/queue/p4", "explicit-4", headers={"priority": "4"})
        producer.send_to("/queue/p4", "three", headers={"priority": "3"})
        producer.send_to("/queue/p4", "default-b")
        producer.send_to("/queue/p4", "five", headers={"priority": "5"})
    with Client(broker.port) as c:
        c.subscribe("/queue/p4")
        msgs = c.messages(5)
    assert [m.body for m in msgs] == [b"five", b"default-a", b"explicit-4", b"default-b", b"three"]
    assert [m["priority"] for m in msgs] == ["5", "4", "4", "4", "3"]


def test_fresh_send_does_not_overtake_equal_priority(broker):
    """A consumer with a full window: later SENDs queue behind older ready ones of equal priority."""
    with Client(broker.port) as c:
        c.subscribe("/queue/fifo", ack="client-individual", prefetch="1")
        send_all(broker.port, "/queue/fifo", ["a", "b", "c"])
        first = c.message()
        assert first.body == b"a"
        send_all(broker.port, "/queue/fifo", ["d", "urgent"], lambda i: {"priority": "9"} if i else {})
        got = [first.body]
        msg = first
        for _ in range(4):
            c.ack(msg)
            msg = c.message()
            got.append(msg.body)
        c.ack(msg)
        c.expect_nothing()
    assert got == [b"a", b"urgent", b"b", b"c", b"d"]


# ---------------------------------------------------------------------------- prefetch


@pytest.mark.parametrize("header", PREFETCH_HEADERS)
@pytest.mark.parametrize("mode", ["client", "client-individual"])
def test_prefetch_limits_unacked(broker, header, mode):
    send_all(broker.port, "/queue/pf", [str(i) for i in range(5)])
    with Client(broker.port) as c:
        c.subscribe("/queue/pf", ack=mode, **{header: "2"})
        first, second = c.messages(2)
        c.expect_nothing()
        c.ack(first)
        third = c.message()
        c.expect_nothing()
        c.ack(third)  # cumulative in client mode: frees two slots
        rest = c.messages(2 if mode == "client" else 1)
        c.expect_nothing()
    bodies = [m.body for m in [first, second, third, *rest]]
    assert bodies == [str(i).encode() for i in range(len(bodies))]


def test_prefetch_first_header_spelling_wins(broker):
    send_all(broker.port, "/queue/pf2", [str(i) for i in range(5)])
    with Client(broker.port) as c:
        c.subscribe("/queue/pf2", ack="client-individual", **{"prefetch": "1", "activemq.prefetchSize": "4"})
        c.message()
        c.expect_nothing()


def test_prefetch_clamped_by_max_prefetch(make_broker):
    broker = make_broker(config=BrokerConfig(max_prefetch=3))
    send_all(broker.port, "/queue/pf3", [str(i) for i in range(6)])
    with Client(broker.port) as c:
        c.subscribe("/queue/pf3", ack="client-individual", prefetch="100")
        c.messages(3)
        c.expect_nothing()


def test_default_prefetch(make_broker):
    broker = make_broker(config=BrokerConfig(default_prefetch=2))
    send_all(broker.port, "/queue/pf4", [str(i) for i in range(5)])
    with Client(broker.port) as c:
        c.subscribe("/queue/pf4", ack="client")
        c.messages(2)
        c.expect_nothing()


def test_prefetch_does_not_limit_auto_ack(broker):
    send_all(broker.port, "/queue/pf5", [str(i) for i in range(5)])
    with Client(broker.port) as c:
        c.subscribe("/queue/pf5", prefetch="1")
        assert [m.body for m in c.messages(5)] == [str(i).encode() for i in range(5)]


def test_prefetch_is_per_subscription(broker):
    send_all(broker.port, "/queue/pf6", [str(i) for i in range(4)])
    with Client(broker.port) as c:
        c.subscribe("/queue/pf6", "one", ack="client-individual", prefetch="1")
        c.subscribe("/queue/pf6", "two", ack="client-individual", prefetch="1")
        msgs = c.messages(2)
        assert sorted(m["subscription"] for m in msgs) == ["one", "two"]
        c.expect_nothing()


# ---------------------------------------------------------------------------- redelivery


def take(broker, destination: str, n: int, ack: str = "client-individual") -> tuple[Client, list]:
    c = Client(broker.port)
    c.subscribe(destination, "taker", ack=ack)
    return c, c.messages(n)


@pytest.mark.parametrize("how", ["disconnect", "close", "reset", "unsubscribe"])
@pytest.mark.parametrize("mode", ["client", "client-individual"])
def test_unacked_requeued_when_consumer_goes_away(broker, how, mode):
    send_all(broker.port, "/queue/rq", ["m0", "m1", "m2"])
    c, msgs = take(broker, "/queue/rq", 3, ack=mode)
    first_ids = {m.body: m["message-id"] for m in msgs}
    if mode == "client-individual":
        c.ack(msgs[1])
        expected = [b"m0", b"m2"]
    else:
        c.ack(msgs[0])
        expected = [b"m1", b"m2"]
    if how == "disconnect":
        c.disconnect()
    elif how == "close":
        c.close()
    elif how == "reset":
        c.abort_connection()
    else:
        c.unsubscribe("taker")
        c.expect_nothing()
    if how != "unsubscribe":
        wait_sessions(broker, 0)
    with Client(broker.port) as other:
        other.subscribe("/queue/rq", ack="client-individual")
        again = other.messages(2)
        other.expect_nothing()
    assert [m.body for m in again] == expected
    for m in again:
        assert m["redelivered"] == "true"
        assert m["redelivery-count"] == "1"
        assert m["message-id"] == first_ids[m.body], "a redelivery keeps its message-id"
    if how == "unsubscribe":
        c.expect_nothing()
        c.close()


def test_requeued_to_live_consumer(broker):
    """A consumer already waiting gets the requeued messages at once, in order."""
    with Client(broker.port) as waiting:
        holder = Client(broker.port)
        holder.subscribe("/queue/rq2", ack="client-individual", prefetch="10")
        send_all(broker.port, "/queue/rq2", ["a", "b"])
        assert [m.body for m in holder.messages(2)] == [b"a", b"b"]
        waiting.subscribe("/queue/rq2", ack="client-individual", prefetch="10")
        waiting.expect_nothing()
        holder.abort_connection()
        again = waiting.messages(2)
        assert [(m.body, m["redelivered"]) for m in again] == [(b"a", "true"), (b"b", "true")]


def test_redelivery_count_accumulates(broker):
    send_all(broker.port, "/queue/rq3", ["x"])
    for expected in range(4):
        c, (msg,) = take(broker, "/queue/rq3", 1)
        assert msg.body == b"x"
        assert msg["redelivery-count"] == str(expected)
        assert msg["redelivered"] == ("true" if expected else "false")
        c.abort_connection()
        wait_sessions(broker, 0)


def test_nack_requeues_to_head(broker):
    send_all(broker.port, "/queue/nk", ["m0", "m1", "m2", "m3"])
    with Client(broker.port) as c:
        c.subscribe("/queue/nk", ack="client-individual", prefetch="2")
        m0, m1 = c.messages(2)
        c.nack(m0)
        again = c.message()  # back at the head: before m2
        assert (again.body, again["redelivered"], again["redelivery-count"]) == (b"m0", "true", "1")
        assert again["message-id"] == m0["message-id"]
        c.expect_nothing()
        c.ack(m1)
        assert c.message().body == b"m2"
        c.ack(again)
        assert c.message().body == b"m3"


def test_nack_requeue_false_discards(broker):
    send_all(broker.port, "/queue/nk2", ["drop", "keep"])
    with Client(broker.port) as c:
        c.subscribe("/queue/nk2", ack="client-individual", prefetch="1")
        drop = c.message()
        assert drop.body == b"drop"
        c.nack(drop, requeue="false")
        keep = c.message()
        assert keep.body == b"keep"
        c.ack(keep)
        c.expect_nothing()
    with Client(broker.port) as c:
        c.subscribe("/queue/nk2")
        c.expect_nothing()


def test_nack_requeued_message_delivered_exactly_once(broker):
    with Client(broker.port) as a, Client(broker.port) as b:
        a.subscribe("/queue/nk3", ack="client-individual", prefetch="1")
        send_all(broker.port, "/queue/nk3", ["x"])
        x = a.message()
        b.subscribe("/queue/nk3", ack="client-individual", prefetch="1")
        b.expect_nothing()
        a.nack(x)
        got = received(a) + received(b)
        assert [(m.body, m["redelivered"]) for m in got] == [(b"x", "true")]


def received(c: Client) -> list:
    """Every MESSAGE the broker sent ``c`` up to now (dispatch is synchronous: a round trip suffices)."""
    c.sync()
    msgs = [f for f in c.stash if f.command == "MESSAGE"]
    c.stash.clear()
    return msgs


# ---------------------------------------------------------------------------- topics


def test_topic_broadcast_to_every_subscriber(broker):
    clients = [Client(broker.port, v) for v in ("1.0", "1.1", "1.2", "1.2")]
    try:
        for i, c in enumerate(clients):
            c.subscribe("/topic/news", f"s{i}" if c.version != "1.0" else None)
        with Client(broker.port) as producer:
            producer.send_to("/topic/news", "extra!", headers={"edition": "late"})
        msgs = [c.message() for c in clients]
        for c in clients:
            c.expect_nothing()
    finally:
        for c in clients:
            c.close()
    assert all(m.body == b"extra!" and m["edition"] == "late" for m in msgs)
    assert all(m["destination"] == "/topic/news" for m in msgs)
    assert [m["subscription"] for m in msgs] == ["/topic/news", "s1", "s2", "s3"]
    assert len({m["message-id"] for m in msgs}) == 1


def test_topic_exact_and_prefix_subscriptions(broker):
    with Client(broker.port) as c:
        c.subscribe("/topic/news.sport", "exact")
        c.subscribe("/topic/news.*", "dotted")
        c.subscribe("/topic/news*", "prefix")
        c.subscribe("/topic/*", "all")
        with Client(broker.port) as producer:
            for name in ("news.sport", "news.weather", "news", "newsroom", "other", "news.sport.extra"):
                producer.send_to(f"/topic/{name}", name, receipt=False)
            producer.sync()
        got = sorted((m["subscription"], m.body.decode()) for m in received(c))
    assert got == sorted(
        [
            ("exact", "news.sport"),
            ("dotted", "news.sport"),
            ("dotted", "news.weather"),
            ("dotted", "news.sport.extra"),
            ("prefix", "news.sport"),
            ("prefix", "news.weather"),
            ("prefix", "news"),
            ("prefix", "newsroom"),
            ("prefix", "news.sport.extra"),
            ("all", "news.sport"),
            ("all", "news.weather"),
            ("all", "news"),
            ("all", "newsroom"),
            ("all", "other"),
            ("all", "news.sport.extra"),
        ]
    )


def test_topic_subscribed_twice_gets_one_copy_per_id(broker):
    with Client(broker.port) as c:
        c.subscribe("/topic/twice", "first")
        c.subscribe("/topic/twice", "second")
        c.subscribe("/topic/tw*", "third")
        with Client(broker.port) as producer:
            producer.send_to("/topic/twice", "hello")
        msgs = c.messages(3)
        c.expect_nothing()
        assert sorted(m["subscription"] for m in msgs) == ["first", "second", "third"]
        assert len({m["message-id"] for m in msgs}) == 1
        c.unsubscribe("second")
        with Client(broker.port) as producer:
            producer.send_to("/topic/twice", "again")
        msgs = c.messages(2)
        c.expect_nothing()
        assert sorted(m["subscription"] for m in msgs) == ["first", "third"]


def test_queue_subscribed_twice_competes_with_itself(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/twice", "one")
        c.subscribe("/queue/twice", "two")
        send_all(broker.port, "/queue/twice", ["a", "b", "c", "d"])
        msgs = c.messages(4)
        c.expect_nothing()
    assert sorted(m.body for m in msgs) == [b"a", b"b", b"c", b"d"]
    assert sorted(m["subscription"] for m in msgs) == ["one", "one", "two", "two"]


def test_topic_messages_not_stored(broker):
    with Client(broker.port) as producer:
        producer.send_to("/topic/void", "nobody listens")
    with Client(broker.port) as c:
        c.subscribe("/topic/void")
        c.expect_nothing()
        with Client(broker.port) as producer:
            producer.send_to("/topic/void", "now")
        assert c.message().body == b"now"


def test_topic_unacked_not_redelivered(broker):
    """Topic messages are transient: an unacked client-mode delivery is not redelivered."""
    with Client(broker.port) as other:
        other.subscribe("/topic/tr", ack="client-individual")
        c = Client(broker.port)
        c.subscribe("/topic/tr", ack="client-individual")
        with Client(broker.port) as producer:
            producer.send_to("/topic/tr", "once")
        assert c.message().body == b"once"
        got = other.message()
        other.ack(got)
        c.abort_connection()
        wait_sessions(broker, 1)
        other.expect_nothing()


def test_queue_and_topic_of_same_name_are_distinct(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/same", "q")
        c.subscribe("/topic/same", "t")
        with Client(broker.port) as producer:
            producer.send_to("/queue/same", "to-queue")
            producer.send_to("/topic/same", "to-topic")
        got = sorted((m["subscription"], m.body) for m in c.messages(2))
        c.expect_nothing()
    assert got == [("q", b"to-queue"), ("t", b"to-topic")]
