"""Single active consumers and message groups in the engine alone (no event loop, no socket)."""

from __future__ import annotations

import pytest

from stompmq.broker import Broker, ClientError
from stompmq.protocol import Frame
from stompmq.storage.memory import MemoryStore

from .fakes import DictStore, FakeOutbox, run_reads


def connect(broker: Broker, name: str) -> tuple[object, FakeOutbox]:
    outbox = FakeOutbox()
    return broker.open_session(name, "1.2", outbox), outbox


def handle(broker: Broker, session: object, command: str, body: bytes = b"", **headers: str) -> None:
    broker.handle(session, Frame(command, headers, body))  # type: ignore[arg-type]


def subscribe(broker: Broker, session: object, sub_id: str = "s", prefetch: str = "100",
              ack: str = "client-individual", **headers: str) -> None:
    handle(broker, session, "SUBSCRIBE", id=sub_id, destination="/queue/q", ack=ack, prefetch=prefetch, **headers)


def send(broker: Broker, session: object, body: str, **headers: str) -> None:
    handle(broker, session, "SEND", body.encode(), destination="/queue/q", **headers)


def bodies(outbox: FakeOutbox) -> list[str]:
    return [f.body.decode() for f in outbox.take("MESSAGE")]


def ack_all(broker: Broker, session: object, frames: list[Frame]) -> None:
    for f in frames:
        handle(broker, session, "ACK", id=f.headers["ack"])


EXCLUSIVE = {"activemq.exclusive": "true"}


def two_subscribers(prefetch_a: str = "100", prefetch_b: str = "100", ack: str = "client-individual", **headers: str):
    """A broker on the memory store with sessions a and b, each subscribed to /queue/q."""
    broker = Broker(MemoryStore())
    a, out_a = connect(broker, "a")
    b, out_b = connect(broker, "b")
    subscribe(broker, a, prefetch=prefetch_a, ack=ack, **headers)
    subscribe(broker, b, prefetch=prefetch_b, ack=ack, **headers)
    return broker, a, out_a, b, out_b


@pytest.mark.parametrize("header", ["activemq.exclusive", "x-single-active-consumer"])
def test_only_the_oldest_exclusive_subscriber_receives(header: str) -> None:
    broker, a, out_a, b, out_b = two_subscribers(**{header: "TRUE"})
    for i in range(5):
        send(broker, b, str(i))
    assert bodies(out_a) == ["0", "1", "2", "3", "4"]
    assert bodies(out_b) == []


def test_the_next_exclusive_subscriber_takes_over_with_the_unacked_first_in_order() -> None:
    broker = Broker(MemoryStore())
    a, out_a = connect(broker, "a")
    b, out_b = connect(broker, "b")
    subscribe(broker, a, prefetch="3", **EXCLUSIVE)
    subscribe(broker, b, **EXCLUSIVE)
    for i in range(6):
        send(broker, b, str(i))
    first = out_a.take("MESSAGE")
    assert [f.body for f in first] == [b"0", b"1", b"2"]
    handle(broker, a, "ACK", id=first[0].headers["ack"])  # 0 done; 1 and 2 stay unacked
    assert bodies(out_a) == ["3"]
    broker.close_session(a)  # type: ignore[arg-type]
    got = out_b.take("MESSAGE")
    assert [f.body for f in got] == [b"1", b"2", b"3", b"4", b"5"]
    assert [f.headers["redelivered"] for f in got] == ["true", "true", "true", "false", "false"]


def test_plain_subscribers_wait_while_an_exclusive_one_is_there() -> None:
    broker = Broker(MemoryStore())
    a, out_a = connect(broker, "a")
    b, out_b = connect(broker, "b")
    subscribe(broker, b)
    subscribe(broker, a, **EXCLUSIVE)
    send(broker, a, "x")
    assert bodies(out_a) == ["x"] and bodies(out_b) == []
    handle(broker, a, "UNSUBSCRIBE", id="s")  # x was unacked: it goes to b first
    send(broker, a, "y")
    assert bodies(out_b) == ["x", "y"]


def test_a_bad_exclusive_value_is_an_error_naming_the_header() -> None:
    broker = Broker(MemoryStore())
    a, _ = connect(broker, "a")
    with pytest.raises(ClientError, match="activemq.exclusive"):
        subscribe(broker, a, **{"activemq.exclusive": "yes"})
    with pytest.raises(ClientError, match="x-single-active-consumer"):
        subscribe(broker, a, **{"x-single-active-consumer": "1"})


def test_a_group_stays_with_one_subscriber_while_it_has_messages_in_flight() -> None:
    broker, a, out_a, b, out_b = two_subscribers()
    for i in range(4):
        send(broker, a, f"g{i}", JMSXGroupID="g")
        send(broker, a, f"h{i}", group="h")
    assert bodies(out_a) == ["g0", "g1", "g2", "g3"]
    assert bodies(out_b) == ["h0", "h1", "h2", "h3"]


def test_a_group_parked_behind_a_full_owner_lets_other_groups_pass_and_keeps_its_order() -> None:
    broker, a, out_a, b, out_b = two_subscribers("1", "10")
    send(broker, a, "g0", group="g")  # a owns g, and is full
    send(broker, a, "g1", group="g")  # parked for a
    send(broker, a, "x0")  # ungrouped: to b
    send(broker, a, "g2", group="g")
    send(broker, a, "k0", group="k")  # a new group: to b (a has no room)
    got_a = out_a.take("MESSAGE")
    assert [f.body for f in got_a] == [b"g0"]
    assert bodies(out_b) == ["x0", "k0"]
    for expected in ("g1", "g2"):
        handle(broker, a, "ACK", id=got_a[0].headers["ack"])
        got_a = out_a.take("MESSAGE")
        assert [f.body.decode() for f in got_a] == [expected]


def written(broker: Broker, session: object, outbox: FakeOutbox) -> None:
    """Everything written to ``outbox`` reached the socket: its auto-ack deliveries settle."""
    broker.written(session, outbox.queued)  # type: ignore[arg-type]


@pytest.mark.parametrize("ack", ["auto", "client", "client-individual"])
def test_a_group_stays_with_its_owner_when_nothing_is_in_flight(ack: str) -> None:
    """Sticky, as ActiveMQ's and Artemis's groups: settled or not, in every ack mode, the group's
    next message goes to its owner, however the round-robin stands."""
    broker, a, out_a, b, out_b = two_subscribers(ack=ack)
    got: dict[str, list[str]] = {"a": [], "b": []}
    for i in range(6):
        send(broker, a, f"g{i}", group="g")
        send(broker, a, f"h{i}", JMSXGroupID="h")
        send(broker, a, f"x{i}")  # ungrouped: moves the round-robin on
        for name, session, outbox in (("a", a, out_a), ("b", b, out_b)):
            frames = outbox.take("MESSAGE")
            got[name] += [f.body.decode() for f in frames]
            written(broker, session, outbox)
            if ack == "client" and frames:
                ack_all(broker, session, frames[-1:])  # cumulative: the newest covers the rest
            elif ack == "client-individual":
                ack_all(broker, session, frames)
        assert not broker.queues["q"].inflight  # every message settled before the next of its group
    assert [m for m in got["a"] if m[0] == "g"] == [f"g{i}" for i in range(6)]  # (a the lighter at g0)
    assert [m for m in got["b"] if m[0] == "h"] == [f"h{i}" for i in range(6)]
    assert not any(m[0] == "h" for m in got["a"]) and not any(m[0] == "g" for m in got["b"])
    assert {m[0] for m in got["a"] + got["b"]} == {"g", "h", "x"}


def test_a_closed_group_picks_an_owner_afresh() -> None:
    """``JMSXGroupSeq:-1`` ends the group once it and the group's earlier messages are
    settled: the next message of that name is a new group, placed as a new group is."""
    broker, a, out_a, b, out_b = two_subscribers(ack="auto")
    send(broker, a, "g0", group="g")
    send(broker, a, "g1", group="g", JMSXGroupSeq="-1")
    written(broker, a, out_a)
    assert bodies(out_a) == ["g0", "g1"]
    assert "g" not in (broker.queues["q"].groups or {})
    send(broker, a, "g2", group="g")  # the round-robin stands at b (g1 went past it, to its owner)
    assert bodies(out_a) == [] and bodies(out_b) == ["g2"]


def test_a_message_after_the_closing_one_reopens_the_group_with_its_owner() -> None:
    """Sent before the closing message settled, it stays with the owner (order kept), and the
    group is sticky again."""
    broker, a, out_a, b, out_b = two_subscribers(ack="auto")
    send(broker, a, "g0", group="g", JMSXGroupSeq="-1")
    send(broker, a, "g1", group="g")
    written(broker, a, out_a)
    send(broker, a, "x")
    send(broker, a, "g2", group="g")
    assert bodies(out_a) == ["g0", "g1", "g2"] and bodies(out_b) == ["x"]


def test_the_group_of_an_owner_that_leaves_goes_to_another_subscriber() -> None:
    broker, a, out_a, b, out_b = two_subscribers(ack="auto")
    send(broker, a, "g0", group="g")
    written(broker, a, out_a)
    assert bodies(out_a) == ["g0"]
    handle(broker, a, "UNSUBSCRIBE", id="s")
    send(broker, a, "g1", group="g")
    assert bodies(out_b) == ["g1"]
    assert broker.queues["q"].groups["g"].owner.session is b  # type: ignore[index]


def test_idle_groups_beyond_the_bound_forget_the_least_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from stompmq.broker import queue as queue_module

    monkeypatch.setattr(queue_module, "IDLE_GROUPS_MAX", 2)
    broker, a, out_a, b, out_b = two_subscribers(ack="auto")
    for name in ("g1", "g2", "g3"):
        send(broker, a, name, group=name)
        for session, outbox in ((a, out_a), (b, out_b)):
            written(broker, session, outbox)
    groups = broker.queues["q"].groups
    assert groups is not None and sorted(groups) == ["g2", "g3"]  # g1, idle the longest, forgotten


def test_when_a_group_owner_leaves_its_unacked_and_parked_messages_go_to_the_next_in_order() -> None:
    broker = Broker(MemoryStore())
    a, out_a = connect(broker, "a")
    b, out_b = connect(broker, "b")
    subscribe(broker, a, prefetch="2")
    for i in range(5):
        send(broker, b, f"g{i}", group="g")
    assert bodies(out_a) == ["g0", "g1"]
    subscribe(broker, b, prefetch="10")
    assert bodies(out_b) == []  # g2..g4 wait for a: the group is a's
    broker.close_session(a)  # type: ignore[arg-type]
    assert bodies(out_b) == ["g0", "g1", "g2", "g3", "g4"]
    assert not broker.queues["q"].groups or broker.queues["q"].groups["g"].owner.session is b


def test_groups_spread_over_subscribers() -> None:
    broker = Broker(MemoryStore())
    sessions = [connect(broker, f"s{i}") for i in range(4)]
    for session, _ in sessions:
        subscribe(broker, session)
    for i in range(100):
        send(broker, sessions[0][0], str(i), group=f"g{i % 20}")
    owners: dict[str, set[str]] = {}
    for session, outbox in sessions:
        for f in outbox.take("MESSAGE"):
            owners.setdefault(f.headers["group"], set()).add(str(session))
        assert outbox  # every subscriber got some groups
    assert all(len(s) == 1 for s in owners.values())
    assert len({next(iter(s)) for s in owners.values()}) == 4


def test_parking_is_bounded_by_the_window_and_pages_resume() -> None:
    from stompmq.broker import BrokerConfig

    store = DictStore()
    broker = Broker(store, BrokerConfig(window=4))
    a, out_a = connect(broker, "a")
    b, out_b = connect(broker, "b")
    subscribe(broker, a, prefetch="1")
    subscribe(broker, b, prefetch="100")
    run_reads(broker)
    for i in range(30):
        send(broker, b, f"g{i}", group="g")
    run_reads(broker)
    queue = broker.queues["q"]
    assert queue.nparked <= 4
    got: list[str] = []
    assert bodies(out_b) == []
    for _ in range(40):
        frames = out_a.take("MESSAGE")
        got += [f.body.decode() for f in frames]
        ack_all(broker, a, frames)
        run_reads(broker)
    # a acked as it went: every message of g reached a, in order
    assert got == [f"g{i}" for i in range(30)]


def test_a_browse_pages_through_the_store_as_the_outbox_makes_room() -> None:
    from stompmq.broker import BrokerConfig
    from stompmq.broker.browse import FIRST_PAGE

    from .fakes import complete

    store = DictStore()
    broker = Broker(store, BrokerConfig(window=4))
    producer, _ = connect(broker, "p")
    for i in range(40):
        send(broker, producer, f"m{i:02}")
    browser, outbox = connect(broker, "b")
    outbox.room = False  # a full socket: nothing is read while nothing can be written
    handle(broker, browser, "SUBSCRIBE", id="b", destination="/queue/q", browser="true")
    assert run_reads(broker) == 0 and outbox.take() == []
    outbox.room = True
    broker.resume(browser)  # type: ignore[arg-type]
    read = broker.take_read()
    assert read is not None
    read.done(complete(read.fetch(store)))  # one page: written, and only then the next is asked for
    assert len(outbox.take("MESSAGE")) == FIRST_PAGE and len(broker.reads.pending) == 1
    run_reads(broker)
    frames = outbox.take("MESSAGE")
    assert [f.body.decode() for f in frames[:-1]] == [f"m{i:02}" for i in range(FIRST_PAGE, 40)]
    assert frames[-1].headers["browser"] == "end" and frames[-1].body == b""
    assert all("ack" not in f.headers for f in frames)
    assert len(store.rows) == 40  # nothing consumed
    send(broker, producer, "later")
    assert outbox.take() == []  # a browse never gets new messages


def test_parked_messages_count_as_ready() -> None:
    broker, _, _, b, out_b = two_subscribers("1", "10")
    for i in range(3):
        send(broker, b, f"g{i}", group="g")  # g0 to a (full), g1 and g2 parked for it
    assert broker.queues["q"].nparked == 2
    control = Frame("SEND", {"destination": "/control/count-msgs/queue/q", "receipt": "c"})
    broker.handle(b, control)  # type: ignore[arg-type]
    (receipt,) = out_b.take("RECEIPT")
    assert (receipt.headers["num-messages"], receipt.headers["num-ready"]) == ("3", "2")


def test_a_new_group_goes_to_the_lighter_of_the_next_two_subscribers() -> None:
    broker, a, out_a, b, out_b = two_subscribers()
    for body in ("x0", "x1", "x2"):
        send(broker, a, body)  # a, b, a: b's turn next
    ack_all(broker, a, out_a.take("MESSAGE"))  # a has nothing unacked, b one
    send(broker, a, "g0", group="g")
    assert bodies(out_a) == ["g0"]
    assert bodies(out_b) == ["x1"]
