"""Selectors on queues in the engine alone (sift.py): who gets what, nothing starved, bounded memory."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stompmq.broker import Broker, BrokerConfig, ClientError
from stompmq.protocol import Frame
from stompmq.storage.memory import MemoryStore

from .fakes import DictStore, FakeOutbox, run_reads
from .test_claims import SharedDictStore


def connect(broker: Broker, name: str) -> tuple[object, FakeOutbox]:
    outbox = FakeOutbox()
    return broker.open_session(name, "1.2", outbox), outbox


def handle(broker: Broker, session: object, command: str, body: bytes = b"", **headers: str) -> None:
    broker.handle(session, Frame(command, headers, body))  # type: ignore[arg-type]
    run_reads(broker)


def subscribe(broker: Broker, session: object, selector: str | None, sub_id: str = "s", prefetch: int = 1000,
              **headers: str) -> None:
    if selector is not None:
        headers["selector"] = selector
    handle(broker, session, "SUBSCRIBE", id=sub_id, destination="/queue/q", ack="client-individual",
           prefetch=str(prefetch), **headers)


def send(broker: Broker, session: object, body: str, **headers: str) -> None:
    handle(broker, session, "SEND", body.encode(), destination="/queue/q", **headers)


def received(outbox: FakeOutbox, broker: Broker | None = None, session: object = None) -> list[str]:
    """The bodies delivered so far; each ACKed when ``broker`` is given."""
    frames = outbox.take("MESSAGE")
    if broker is not None:
        for frame in frames:
            handle(broker, session, "ACK", id=frame.headers["ack"])
    return [f.body.decode() for f in frames]


STORES = [pytest.param(lambda: MemoryStore(), id="memory"), pytest.param(lambda: DictStore(), id="durable")]


@pytest.mark.parametrize("make_store", STORES)
def test_complementary_selectors_split_the_queue(make_store) -> None:
    broker = Broker(make_store(), BrokerConfig(window=16))
    eu, out_eu = connect(broker, "eu")
    rest, out_rest = connect(broker, "rest")
    subscribe(broker, eu, "region = 'eu'")
    subscribe(broker, rest, "NOT region = 'eu' OR region IS NULL")
    regions = ["eu", "us", "eu", "asia", None, "eu", "us"] * 10
    for i, region in enumerate(regions):
        send(broker, eu, str(i), **({"region": region} if region else {}))
    got_eu, got_rest = received(out_eu), received(out_rest)
    assert got_eu == [str(i) for i, r in enumerate(regions) if r == "eu"]
    assert got_rest == [str(i) for i, r in enumerate(regions) if r != "eu"]


@pytest.mark.parametrize("make_store", STORES)
def test_a_rejected_message_stays_for_the_next_subscriber(make_store) -> None:
    broker = Broker(make_store(), BrokerConfig(window=16))
    eu, out_eu = connect(broker, "eu")
    subscribe(broker, eu, "region = 'eu'")
    for i, region in enumerate(["us", "eu", "us", "eu"]):
        send(broker, eu, str(i), region=region)
    assert received(out_eu, broker, eu) == ["1", "3"]
    us, out_us = connect(broker, "us")
    subscribe(broker, us, "region = 'us'")
    assert received(out_us) == ["0", "2"]
    anyone, out_any = connect(broker, "any")
    subscribe(broker, anyone, None)
    send(broker, eu, "4", region="eu")
    assert received(out_any) + received(out_eu) == ["4"]  # nothing was left over for anyone


def test_a_backlog_nobody_matches_does_not_starve_the_matches_and_stays_in_the_store() -> None:
    """100 messages in 2,000 match; the window holds 20: the matching consumer still gets all of
    them, in order, while the window never holds more than its capacity."""
    store = DictStore()
    broker = Broker(store, BrokerConfig(window=20))
    producer, _ = connect(broker, "p")
    for i in range(2000):
        send(broker, producer, str(i), kind="hit" if i % 20 == 7 else "miss")
    consumer, out = connect(broker, "c")
    subscribe(broker, consumer, "kind = 'hit'", prefetch=5)
    got: list[str] = []
    for _ in range(100):
        got += received(out, broker, consumer)
        queue = broker.dispatcher.queues["q"]
        assert queue.size <= 20 and len(queue.window.tail) <= 10
    assert got == [str(i) for i in range(7, 2000, 20)]
    assert len(store.rows) == 1900  # the others wait in the store
    assert broker.page_reads < 2000 // 10 + 5  # pages, not a read per message


def test_a_busy_match_waits_for_its_subscriber_and_the_others_flow_past() -> None:
    broker = Broker(DictStore(), BrokerConfig(window=50))
    slow, out_slow = connect(broker, "slow")
    fast, out_fast = connect(broker, "fast")
    subscribe(broker, slow, "kind = 'slow'", prefetch=1)
    subscribe(broker, fast, "kind = 'fast'")
    for i in range(6):
        send(broker, fast, str(i), kind="slow" if i < 3 else "fast")
    assert received(out_fast) == ["3", "4", "5"]
    got = []
    for _ in range(3):
        got += received(out_slow, broker, slow)
    assert got == ["0", "1", "2"]


def test_a_subscriber_without_selector_joining_gets_what_was_sifted_out() -> None:
    broker = Broker(DictStore(), BrokerConfig(window=8))
    eu, out_eu = connect(broker, "eu")
    subscribe(broker, eu, "region = 'eu'")
    for i in range(30):
        send(broker, eu, str(i), region="eu" if i % 10 == 0 else "us")
    assert received(out_eu, broker, eu) == ["0", "10", "20"]
    anyone, out_any = connect(broker, "any")
    subscribe(broker, anyone, None)
    got = []
    for _ in range(10):
        got += received(out_any, broker, anyone)
    assert sorted(got, key=int) == [str(i) for i in range(30) if i % 10]


def test_the_last_selector_leaving_gives_the_others_everything() -> None:
    broker = Broker(DictStore(), BrokerConfig(window=8))
    eu, out_eu = connect(broker, "eu")
    plain, out_plain = connect(broker, "plain")
    subscribe(broker, eu, "region = 'eu'")
    subscribe(broker, plain, "region = 'none'")
    for i in range(4):
        send(broker, eu, str(i), region="us")
    assert received(out_eu) == [] and received(out_plain) == []
    handle(broker, eu, "UNSUBSCRIBE", id="s")
    subscribe(broker, eu, None, sub_id="t")
    assert received(out_eu) == ["0", "1", "2", "3"]


def test_a_single_active_consumer_gets_what_it_matches_and_its_successor_the_rest() -> None:
    broker = Broker(DictStore(), BrokerConfig(window=8))
    first, out_first = connect(broker, "first")
    second, out_second = connect(broker, "second")
    subscribe(broker, first, "region = 'eu'", **{"activemq.exclusive": "true"})
    subscribe(broker, second, None, **{"activemq.exclusive": "true"})
    for i, region in enumerate(["eu", "us", "eu", "us"]):
        send(broker, first, str(i), region=region)
    assert received(out_first, broker, first) == ["0", "2"]
    assert received(out_second) == []
    handle(broker, first, "UNSUBSCRIBE", id="s")
    assert received(out_second) == ["1", "3"]


def test_a_shared_store_frees_the_rows_nobody_here_matches() -> None:
    store = SharedDictStore()
    broker = Broker(store, BrokerConfig(window=100))
    eu, out_eu = connect(broker, "eu")
    subscribe(broker, eu, "region = 'eu'")
    for i, region in enumerate(["us", "eu", "us"]):
        send(broker, eu, str(i), region=region)
    assert received(out_eu) == ["1"]
    sent = sorted(store.rows)
    assert store.freed == [sent[0], sent[2]]  # given back at once, for the other brokers


def test_a_selector_on_a_browser_is_refused() -> None:
    broker = Broker(MemoryStore())
    session, _ = connect(broker, "b")
    with pytest.raises(ClientError, match="not supported on browser subscriptions"):
        handle(broker, session, "SUBSCRIBE", id="s", destination="/queue/q", browser="true", selector="a = 1")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", None]), max_size=60), st.integers(1, 4), st.integers(4, 12),
       st.randoms())
def test_every_message_reaches_exactly_one_matching_subscriber(regions, prefetch, window, rnd: random.Random) -> None:
    """Sifted or plain, each message goes once to a subscriber it matches (selectors a, b and
    none at all), whatever the prefetch, the window and the order the consumers ACK in."""
    broker = Broker(DictStore(), BrokerConfig(window=window))
    subs = {"a": "region = 'a'", "b": "region = 'b'", "any": None}
    sessions = {}
    for name, selector in subs.items():
        sessions[name] = connect(broker, name)
        subscribe(broker, sessions[name][0], selector, prefetch=prefetch)
    got: dict[str, list[int]] = {name: [] for name in subs}
    for i, region in enumerate(regions):
        send(broker, sessions["a"][0], str(i), **({"region": region} if region else {}))
        name = rnd.choice(list(subs))
        got[name] += map(int, received(sessions[name][1], broker, sessions[name][0]))
    for _ in range(len(regions) + 1):
        for name in subs:
            got[name] += map(int, received(sessions[name][1], broker, sessions[name][0]))
    assert sorted(n for seqs in got.values() for n in seqs) == list(range(len(regions)))
    for name in ("a", "b"):
        assert all(regions[n] == name for n in got[name])


def test_higher_priority_consumers_get_messages_first_while_they_have_room() -> None:
    """``x-priority``/``activemq.priority``: the higher one takes everything up to its prefetch,
    the lower one only the overflow; equal priorities share round-robin."""
    broker = Broker(MemoryStore())
    low, out_low = connect(broker, "low")
    high, out_high = connect(broker, "high")
    twin, out_twin = connect(broker, "twin")
    subscribe(broker, low, None, prefetch=10)
    subscribe(broker, high, None, prefetch=4, **{"x-priority": "5"})
    subscribe(broker, twin, None, prefetch=4, **{"activemq.priority": "5"})
    for i in range(12):
        send(broker, low, str(i))
    assert received(out_high, broker, high) == ["0", "2", "4", "6"]  # (ACKed: room again)
    assert received(out_twin) == ["1", "3", "5", "7"]
    assert received(out_low) == ["8", "9", "10", "11"]
    send(broker, low, "12")  # the low one has room too: the high one is first
    assert received(out_high) == ["12"] and received(out_low) == []


def test_priority_and_selector_together() -> None:
    broker = Broker(MemoryStore())
    low, out_low = connect(broker, "low")
    high, out_high = connect(broker, "high")
    subscribe(broker, low, None)
    subscribe(broker, high, "region = 'eu'", **{"x-priority": "9"})
    for i, region in enumerate(["eu", "us", "eu"]):
        send(broker, low, str(i), region=region)
    assert received(out_high) == ["0", "2"] and received(out_low) == ["1"]


@pytest.mark.parametrize("value", ["high", "1.5", "", "99999999999999", "2147483648"])
def test_a_bad_consumer_priority_is_refused(value: str) -> None:
    broker = Broker(MemoryStore())
    session, _ = connect(broker, "b")
    with pytest.raises(ClientError, match="x-priority must be an integer"):
        subscribe(broker, session, None, **{"x-priority": value})


# ------------------------------------------------------------------ sifted messages still expire

WALL = 1_700_000_000.0  # seconds: the wall clock at time 0
NOW = 500.0  # the monotonic clock at the same moment


def run_at(broker: Broker, seconds: float) -> None:
    """Move the engine's clocks to ``seconds`` after time 0 and do everything due then."""
    broker.advance(NOW + seconds, WALL + seconds)
    broker.run_due()
    while run_reads(broker):
        broker.run_due()


def waiting(broker: Broker) -> list[bytes]:
    """The bodies the queue still holds: in memory on the memory store, in the store otherwise."""
    store = broker.store
    if isinstance(store, DictStore):
        return sorted(row[0].body for row in store.rows.values())
    return sorted(m.body for m in broker.queues["q"].aside or ())


@pytest.mark.parametrize("make_store", STORES)
def test_a_message_no_selector_matches_still_expires_at_its_ttl(make_store) -> None:
    broker = Broker(make_store(), BrokerConfig(window=16))
    run_at(broker, 0.0)
    eu, out_eu = connect(broker, "eu")
    subscribe(broker, eu, "region = 'eu'")
    send(broker, eu, "late", ttl="100", region="us")
    send(broker, eu, "kept", ttl="60000", region="us")
    assert waiting(broker) == [b"kept", b"late"]
    run_at(broker, 2.0)
    assert broker.queue_stats["q"].expired == 1
    assert waiting(broker) == [b"kept"]
    run_at(broker, 62.0)
    assert broker.queue_stats["q"].expired == 2
    assert waiting(broker) == [] and broker.queues["q"].size == 0
    assert received(out_eu) == []


@pytest.mark.parametrize("make_store", STORES)
def test_a_sifted_message_that_expires_is_dead_lettered_when_declared(make_store) -> None:
    broker = Broker(make_store(), BrokerConfig(window=16))
    run_at(broker, 0.0)
    broker.administer("declare/queue/q", {"dead-letter": "true"})
    eu, _ = connect(broker, "eu")
    subscribe(broker, eu, "region = 'eu'")
    send(broker, eu, "old", ttl="100", region="us")
    run_at(broker, 2.0)
    dlq, out_dlq = connect(broker, "dlq")
    handle(broker, dlq, "SUBSCRIBE", id="d", destination="/queue/DLQ.q")
    (dead,) = out_dlq.take("MESSAGE")
    assert (dead.body, dead.headers["dead-letter-reason"], dead.headers["region"]) == (b"old", "expired", "us")


def test_a_sifted_message_read_again_is_left_to_dispatch() -> None:
    """A subscriber that may match joins: the sifted message is the window's again, so the
    sweep leaves it (dispatch drops it when it reaches it, once)."""
    store = DictStore()
    broker = Broker(store, BrokerConfig(window=16))
    run_at(broker, 0.0)
    eu, _ = connect(broker, "eu")
    subscribe(broker, eu, "region = 'eu'")
    send(broker, eu, "old", ttl="100", region="us")
    assert broker.queues["q"].sifted == {1}
    us, out_us = connect(broker, "us")
    subscribe(broker, us, "region = 'us'", prefetch=1)
    assert received(out_us) == ["old"]  # delivered before its expiry, in flight
    run_at(broker, 2.0)
    assert broker.expiry.removed == 0 and broker.queue_stats["q"].expired == 0
    assert len(store.rows) == 1


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=60), st.integers(4, 12),
       st.lists(st.sampled_from(["send", "join", "read", "take"]), max_size=30), st.randoms())
def test_a_store_filtering_by_header_loses_no_message(regions, window, steps, rnd: random.Random) -> None:
    """Only selector subscribers, so the page reads are filtered by header (the fake store
    applies the filter as SQLite does): a subscriber joining, a page read still in flight or
    not, gets what the reads left out for the others; one without a selector joining last gets
    the rest.  Each message goes once, to a subscriber it matches."""
    broker = Broker(DictStore(), BrokerConfig(window=window))
    producer, _ = connect(broker, "p")
    backlog = regions[: len(regions) // 2]
    for i, region in enumerate(backlog):
        send(broker, producer, str(i), **({"region": region} if region else {}))
    sent = len(backlog)
    selectors = {"a": "region = 'a'", "b": "region IN ('b', 'c') AND region IS NOT NULL", "any": None}
    sessions = {"a": connect(broker, "a")}
    subscribe(broker, sessions["a"][0], selectors["a"], prefetch=3)
    got: dict[str, list[int]] = {name: [] for name in selectors}

    def take(name: str, acking: bool = True) -> None:  # ACK without running the reads asked
        session, outbox = sessions[name]
        for frame in outbox.take("MESSAGE"):
            got[name].append(int(frame.body))
            if acking:
                broker.handle(session, Frame("ACK", {"id": frame.headers["ack"]}))  # type: ignore[arg-type]

    for step in steps:
        if step == "send" and sent < len(regions):
            region = regions[sent]
            broker.handle(producer, Frame("SEND", {"destination": "/queue/q", **({"region": region} if region else {})},
                                          str(sent).encode()))  # type: ignore[arg-type]
            sent += 1
        elif step == "join" and "b" not in sessions:
            sessions["b"] = connect(broker, "b")
            broker.handle(sessions["b"][0], Frame("SUBSCRIBE", {  # type: ignore[arg-type]
                "id": "s", "destination": "/queue/q", "ack": "client-individual", "prefetch": "2",
                "selector": selectors["b"]}))
        elif step == "read":
            run_reads(broker)
        elif step == "take":
            take(rnd.choice(sorted(sessions)))
    for i in range(sent, len(regions)):
        send(broker, producer, str(i), **({"region": regions[i]} if regions[i] else {}))
    run_reads(broker)
    sessions["any"] = connect(broker, "any")
    subscribe(broker, sessions["any"][0], None)
    for _ in range(2 * len(regions) + 2):
        for name in sorted(sessions):
            take(name)
        run_reads(broker)
    assert sorted(n for seqs in got.values() for n in seqs) == list(range(len(regions)))
    assert all(regions[n] == "a" for n in got["a"]) and all(regions[n] in ("b", "c") for n in got["b"])


@pytest.mark.parametrize(("selector", "priority"), [("kind = 'job'", "0"), (None, "5")], ids=["selector", "priority"])
@pytest.mark.parametrize("make_store", STORES)
def test_message_groups_stay_sticky_with_selector_and_priority_subscribers(make_store, selector, priority) -> None:
    """A group's messages go to the subscriber that got its first one, whichever else has room
    or a higher priority, until a message with ``JMSXGroupSeq:-1`` closes it; a message its
    owner's selector rejects goes to one that matches it, the group staying its owner's."""
    broker = Broker(make_store(), BrokerConfig(window=16))
    sessions = [connect(broker, name) for name in ("one", "two", "other")]
    for (session, _), level in zip(sessions[:2], (priority, "9"), strict=True):
        subscribe(broker, session, selector, prefetch=2, **{"x-priority": level})
    subscribe(broker, sessions[2][0], "kind = 'chore'", prefetch=100)
    producer, _ = connect(broker, "p")
    owners: dict[str, set[int]] = {"g0": set(), "g1": set(), "g2": set()}
    for i in range(60):
        group = f"g{i % 3}"
        send(broker, producer, str(i), kind="chore" if i == 30 else "job", JMSXGroupID=group)
        for index, (session, outbox) in enumerate(sessions[:2]):
            if index == 0 or i % 4 == 3:  # the higher one ACKs seldom: often only the lower one has room
                for body in received(outbox, broker, session):
                    owners[f"g{int(body) % 3}"].add(index)
    for _ in range(3):
        for index, (session, outbox) in enumerate(sessions[:2]):
            for body in received(outbox, broker, session):
                owners[f"g{int(body) % 3}"].add(index)
    assert received(sessions[2][1]) == (["30"] if selector else [])  # (else its owner matches it)
    assert all(len(indexes) == 1 for indexes in owners.values()), owners
