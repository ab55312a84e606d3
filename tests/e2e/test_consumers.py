"""Exclusive (single active) consumers, message groups and queue browsing against a real listening
broker on every store, with raw frames and with stomp.py."""

from __future__ import annotations

import queue as stdqueue
import time

import pytest
import stomp

from stompmq.broker import BrokerConfig

from ..support.stompclient import Client
from ..support.waiting import send_all, wait_sessions

EXCLUSIVE = {"activemq.exclusive": "true"}


def ack(c: Client, frames) -> None:
    for f in frames:
        c.frame("ACK", {"id": f["ack"]})


# -- exclusive consumers -------------------------------------------------------------------------
def test_an_exclusive_consumer_gets_everything_and_hands_over_its_unacked_in_order(broker):
    first, second = Client(broker.port), Client(broker.port)
    first.subscribe("/queue/q", ack="client-individual", prefetch="3", **EXCLUSIVE)
    second.subscribe("/queue/q", ack="client-individual", **{"x-single-active-consumer": "true"})
    send_all(broker.port, "/queue/q", [str(i) for i in range(6)])
    got = first.messages(3)
    assert [f.body for f in got] == [b"0", b"1", b"2"]
    ack(first, got[:1])
    assert first.message().body == b"3"
    second.expect_nothing()
    first.close()  # 1, 2, 3 unacked: the next exclusive consumer gets them first, in order
    taken = second.messages(5)
    assert [f.body for f in taken] == [b"1", b"2", b"3", b"4", b"5"]
    assert [f["redelivered"] for f in taken] == ["true", "true", "true", "false", "false"]


def test_a_queue_declared_single_active_makes_plain_subscribers_take_turns(store_kind, tmp_path):
    """RabbitMQ's form: x-single-active-consumer is a queue argument; declared once (and stored,
    so it survives a restart), it makes every subscription of the queue a single active one."""
    from ..support.broker_thread import restarting
    from ..support.stompclient import control

    with restarting(store_kind, tmp_path) as start:
        broker = start()
        with Client(broker.port) as c:
            control(c, "declare/queue/sac", **{"x-single-active-consumer": "true"})
        if store_kind != "memory":  # the memory store starts empty
            broker = start()
        first, second = Client(broker.port), Client(broker.port)
        first.subscribe("/queue/sac", ack="client-individual")
        second.subscribe("/queue/sac", ack="client-individual")
        send_all(broker.port, "/queue/sac", [str(i) for i in range(4)])
        got = first.messages(4)
        assert [f.body for f in got] == [b"0", b"1", b"2", b"3"]
        second.expect_nothing()
        ack(first, got[:2])
        first.close()
        assert [f.body for f in second.messages(2)] == [b"2", b"3"]
        second.close()


def test_exclusive_with_stomp_py(broker):
    inbox: stdqueue.Queue = stdqueue.Queue()

    class Listener(stomp.ConnectionListener):
        def __init__(self, name: str) -> None:
            self.name = name

        def on_message(self, frame) -> None:
            inbox.put((self.name, frame.body))

    conns = []
    for name in ("a", "b"):
        conn = stomp.Connection12([("127.0.0.1", broker.port)])
        conn.set_listener("", Listener(name))
        conn.connect(wait=True)
        conn.subscribe("/queue/x", id="1", ack="auto", headers=EXCLUSIVE)
        conns.append(conn)
    try:
        send_all(broker.port, "/queue/x", [str(i) for i in range(10)])
        got = [inbox.get(timeout=5) for _ in range(10)]
        assert got == [("a", str(i)) for i in range(10)]
        conns[0].disconnect()
        wait_sessions(broker, 1)
        send_all(broker.port, "/queue/x", ["after"])
        assert inbox.get(timeout=5) == ("b", "after")
    finally:
        for conn in conns:
            if conn.is_connected():
                conn.disconnect()


# -- message groups ------------------------------------------------------------------------------
def test_groups_go_to_one_subscriber_each_in_order_and_spread(broker):
    subs = [Client(broker.port) for _ in range(3)]
    for s in subs:
        s.subscribe("/queue/g", ack="client-individual")
    groups = [f"g{i}" for i in range(9)]
    send_all(broker.port, "/queue/g", [f"{g}:{n}" for n in range(4) for g in groups],
             lambda i: {"JMSXGroupID": groups[i % 9]} if i % 2 else {"group": groups[i % 9]})
    seen: dict[str, list[int]] = {}
    owner: dict[str, int] = {}
    deadline = time.monotonic() + 10
    while sum(map(len, seen.values())) < 36 and time.monotonic() < deadline:
        for k, s in enumerate(subs):
            try:
                f = s.message(timeout=0.05)
            except TimeoutError:
                continue
            group, n = f.body.decode().split(":")
            assert owner.setdefault(group, k) == k, f"{group} went to two subscribers"
            seen.setdefault(group, []).append(int(n))
    assert seen == {g: [0, 1, 2, 3] for g in groups}
    assert len(set(owner.values())) == 3  # spread over every subscriber


def test_a_group_moves_to_another_subscriber_when_its_owner_leaves(broker):
    a, b = Client(broker.port), Client(broker.port)
    a.subscribe("/queue/m", ack="client-individual", prefetch="2")
    send_all(broker.port, "/queue/m", ["1", "2", "3"], lambda i: {"group": "G"})
    assert [f.body for f in a.messages(2)] == [b"1", b"2"]
    b.subscribe("/queue/m", ack="client-individual")
    b.expect_nothing()  # 3 waits for a, the group's owner
    a.close()
    assert [f.body for f in b.messages(3)] == [b"1", b"2", b"3"]


def test_groups_stay_with_their_auto_ack_subscriber_between_messages(broker):
    """Sticky groups in ack:auto too (ActiveMQ and Artemis keep a group with its consumer until
    it leaves): each message is settled, read by its subscriber, before the next of its group is
    sent, and ungrouped messages move the round-robin on between them; a closed group
    (``JMSXGroupSeq:-1``) frees its name."""
    subs = [Client(broker.port), Client(broker.port)]
    for s in subs:
        s.subscribe("/queue/sticky", ack="auto")
    owner: dict[str, set[int]] = {"A": set(), "B": set()}
    with Client(broker.port) as producer:
        for n in range(8):
            for group in ("A", "B"):
                producer.send_to("/queue/sticky", f"{group}:{n}", headers={"JMSXGroupID": group})
                ungrouped = 1 + n % 2  # the round-robin stands at either subscriber next time
                for _ in range(ungrouped):
                    producer.send_to("/queue/sticky", f"x:{n}")
                got: dict[int, list[str]] = {0: [], 1: []}
                deadline = time.monotonic() + 10
                while len(got[0]) + len(got[1]) < 1 + ungrouped:
                    assert time.monotonic() < deadline, f"round {n}: only {got}"
                    for k, s in enumerate(subs):
                        try:
                            got[k].append(s.message(timeout=0.05).body.decode())
                        except TimeoutError:
                            pass
                for k, bodies in got.items():
                    owner[group].update(k for body in bodies if body.startswith(group))
        assert owner["A"] and owner["B"] and all(len(ks) == 1 for ks in owner.values()), owner
        (a_owner,) = owner["A"]
        producer.send_to("/queue/sticky", "A:last", headers={"JMSXGroupID": "A", "JMSXGroupSeq": "-1"})
        assert subs[a_owner].message().body == b"A:last"
    for s in subs:
        s.close()


# -- browsing ------------------------------------------------------------------------------------
def browse(c: Client, destination: str, sub_id: str = "b") -> list[bytes]:
    c.subscribe(destination, sub_id, browser="true")
    bodies = []
    while True:
        f = c.message()
        if f.headers.get("browser") == "end":
            assert f["subscription"] == sub_id and f["destination"] == destination and f.body == b""
            return bodies
        bodies.append(f.body)


def test_browsing_shows_the_ready_messages_in_order_and_consumes_none(broker):
    send_all(broker.port, "/queue/br", [b"low"], lambda i: {"priority": "1"})
    send_all(broker.port, "/queue/br", [str(i).encode() for i in range(5)])
    with Client(broker.port) as c:
        assert browse(c, "/queue/br") == [b"0", b"1", b"2", b"3", b"4", b"low"]
        c.unsubscribe("b")
        c.request("SEND", {"destination": "/queue/br"}, b"later")
        c.expect_nothing()  # a browser never gets new messages
        count = c.request("SEND", {"destination": "/control/count-msgs/queue/br"})
        assert count["num-messages"] == "7"


def test_browsing_skips_messages_out_for_delivery(broker):
    send_all(broker.port, "/queue/busy", [b"a", b"b", b"c"])
    consumer = Client(broker.port)
    consumer.subscribe("/queue/busy", ack="client-individual", prefetch="1")
    assert consumer.message().body == b"a"
    with Client(broker.port) as c:
        assert browse(c, "/queue/busy") == [b"b", b"c"]


def test_browsing_reads_messages_paged_out_to_the_store(make_broker, store_kind):
    broker = make_broker(config=BrokerConfig(window=4))
    consumer = Client(broker.port)
    consumer.subscribe("/queue/big", ack="client-individual", prefetch="1")
    send_all(broker.port, "/queue/big", [f"{i:03}".encode() for i in range(300)], receipt=False)
    assert consumer.message().body == b"000"
    with Client(broker.port) as c:
        assert browse(c, "/queue/big") == [f"{i:03}".encode() for i in range(1, 300)]


def test_browsing_an_empty_or_unknown_queue_ends_at_once(broker):
    with Client(broker.port) as c:
        assert browse(c, "/queue/nothing-here") == []


def test_browsing_with_stomp_py(broker):
    send_all(broker.port, "/queue/sp", [b"x", b"y"])
    inbox: stdqueue.Queue = stdqueue.Queue()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame) -> None:
            inbox.put(frame)

    conn = stomp.Connection11([("127.0.0.1", broker.port)])
    conn.set_listener("", Listener())
    conn.connect(wait=True)
    try:
        conn.subscribe("/queue/sp", id="b", headers={"browser": "true"})
        frames = [inbox.get(timeout=5) for _ in range(3)]
        assert [f.body for f in frames[:2]] == ["x", "y"]
        assert frames[2].headers["browser"] == "end"
    finally:
        conn.disconnect()
    wait_sessions(broker, 0)


# -- bad headers ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "headers, expected",
    [
        ({"destination": "/queue/q", "activemq.exclusive": "yes"}, "activemq.exclusive"),
        ({"destination": "/queue/q", "x-single-active-consumer": "1"}, "x-single-active-consumer"),
        ({"destination": "/queue/q", "browser": "maybe"}, "browser"),
        ({"destination": "/topic/t", "browser": "true"}, "needs a queue destination"),
    ],
)
def test_bad_consumer_headers_are_errors_naming_them(memory_broker, headers, expected):
    with Client(memory_broker.port) as c:
        c.frame("SUBSCRIBE", {"id": "1", **headers})
        error = c.next()
        assert error.command == "ERROR" and expected in error["message"], error


# -- consumer priorities -------------------------------------------------------------------------
def test_the_higher_priority_consumer_gets_messages_first_while_it_has_room(broker):
    """``x-priority`` (RabbitMQ) and ``activemq.priority`` (ActiveMQ): the priority-5 consumer
    takes up to its prefetch, the default one only the overflow; when it has room again the
    next message is its own."""
    with Client(broker.port) as low, Client(broker.port) as high:
        low.subscribe("/queue/prio", ack="client-individual", prefetch="10")
        high.subscribe("/queue/prio", ack="client-individual", prefetch="3", **{"x-priority": "5"})
        send_all(broker.port, "/queue/prio", [str(i) for i in range(5)])
        got_high = high.messages(3)
        assert [f.body for f in got_high] == [b"0", b"1", b"2"]
        assert [f.body for f in low.messages(2)] == [b"3", b"4"]
        ack(high, got_high)
        high.sync()
        send_all(broker.port, "/queue/prio", ["5"])
        assert high.message().body == b"5"
        low.expect_nothing()


def test_a_bad_consumer_priority_is_an_error(memory_broker):
    with Client(memory_broker.port) as c:
        c.frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "activemq.priority": "high", "receipt": "r"})
        error = c.next()
        assert error.command == "ERROR" and "activemq.priority must be an integer" in error["message"]
