"""No silent topic loss: the --topic-overflow policies against a real listening broker.

Topic messages are never stored, so a subscriber whose connection is over its
output limit either slows the publisher (block, the default), misses messages
(drop, counted and logged) or is disconnected (disconnect, counted).
"""

from __future__ import annotations

import logging
import threading

import pytest

from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings
from stompmq.server.outbox import HARD_LIMIT

from ..support.stompclient import Client
from ..support.waiting import pace, poll, wait_until

HUGE = 16 * 1024 * 1024  # the default --max-frame-size
BIG = 64 * 1024


def read_bodies(client: Client, n: int, out: list[bytes], timeout: float = 30) -> threading.Thread:
    """Read ``n`` MESSAGE bodies on a thread as fast as the socket allows."""

    def run() -> None:
        for _ in range(n):
            out.append(client.message(timeout=timeout).body)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def publish_numbered(producer: Client, topic: str, count: int) -> None:
    """``count`` BIG messages to ``/topic/<topic>`` numbered by ``seq``, then a round trip: the
    broker read them all (the publisher was not held back for good)."""
    for i in range(count):
        producer.send_to(f"/topic/{topic}", b"n" * BIG, receipt=False, headers={"seq": str(i)})
    producer.sync()


def topic_stats(port: int, topic: str) -> dict[str, str]:
    with Client(port) as c:
        return c.request("SEND", {"destination": f"/control/stats/topic/{topic}"}).headers


@pytest.mark.parametrize("round", range(3))
def test_two_huge_messages_reach_two_subscribers_every_time(memory_broker, round):
    """A reported bug: the second 16 MiB message used to be dropped once 8 MiB waited."""
    with Client(memory_broker.port) as first, Client(memory_broker.port) as second:
        subs = [first, second]
        for s in subs:
            s.subscribe("/topic/huge")
        got: list[list[bytes]] = [[], []]
        readers = [read_bodies(s, 2, g) for s, g in zip(subs, got)]
        bodies = [bytes([65 + i]) * HUGE for i in range(2)]
        with Client(memory_broker.port) as producer:
            for body in bodies:
                producer.send_to("/topic/huge", body, receipt=False)
            producer.sync()
        for r in readers:
            r.join(60)
        assert [len(b) for g in got for b in g] == [HUGE] * 4
        assert got == [bodies, bodies]
    assert topic_stats(memory_broker.port, "huge")["total-dropped"] == "0"


def test_block_bounds_a_slow_subscribers_outbox_and_loses_nothing(make_memory_broker):
    """The default policy: a subscriber that stops reading stops the publisher (its SENDs are no
    longer read), its outbox stays bounded, and once it reads it gets every message in order
    (--topic-block-timeout 0: the publisher waits as long as it takes)."""
    broker = make_memory_broker(settings=ServerSettings(port=0, topic_block_timeout=0))
    count = (HARD_LIMIT * 3) // BIG
    slow = Client(broker.port, rcvbuf=4096)
    slow.subscribe("/topic/blocked")
    producer = Client(broker.port)
    sent = []

    def publish() -> None:
        for i in range(count):
            producer.send_to("/topic/blocked", b"b" * BIG, receipt=False, headers={"seq": str(i)})
            sent.append(i)

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()

    def outbox_size() -> int:
        return broker.call(lambda: broker.broker.sessions[slow.session_id].outbox.size)  # type: ignore[return-value]

    wait_until(lambda: outbox_size() >= HARD_LIMIT, "the slow subscriber's outbox to fill")
    publisher.join(1.0)  # the slow subscriber reads nothing meanwhile
    assert publisher.is_alive() and len(sent) < count, "the publisher was never held back"
    # over the limit by at most one read of the publisher (256 KiB) and one message
    assert outbox_size() < HARD_LIMIT + 256 * 1024 + BIG + 1024, outbox_size()
    seqs = [int(slow.message(timeout=10)["seq"]) for _ in range(count)]
    publisher.join(30)
    assert seqs == list(range(count))
    assert topic_stats(broker.port, "blocked")["total-lagging"] == "0"
    producer.close()
    slow.close()


def test_block_timeout_frees_the_publisher_of_a_topics_only_subscriber_that_never_reads(
    make_memory_broker, caplog
):
    """A subscriber that reads nothing, alone on its topic, held every publisher of it for good:
    with no faster peer it never counted as slow.  Now one that holds a publisher back for a
    whole --topic-block-timeout without its output falling below the limit is slow, peers or
    not: the publisher goes on, and its misses are counted and logged."""
    broker = make_memory_broker(settings=ServerSettings(port=0, topic_block_timeout=0.3))
    stalled = Client(broker.port, rcvbuf=4096)
    stalled.subscribe("/topic/alone", "never-reads")
    count = (HARD_LIMIT * 3) // BIG
    with caplog.at_level(logging.WARNING, logger="stompmq.broker.overflow"), Client(broker.port) as producer:
        publish_numbered(producer, "alone", count)  # got through although the only subscriber read nothing
        stats = topic_stats(broker.port, "alone")
        assert stats["total-lagging"] == "1" and stats["subscription-0-id"] == "never-reads", stats
        assert int(stats["subscription-0-dropped"]) > 0, stats
    lines = [r.getMessage() for r in caplog.records if r.name == "stompmq.broker.overflow"]
    assert "without its output falling below the limit" in lines[0], lines
    stalled.close()


def test_block_lets_the_publisher_go_on_without_a_subscriber_that_stalls_it_too_long(make_memory_broker, caplog):
    """--topic-block-timeout: a subscriber that holds the publisher back that long is treated as
    under drop from then on: it misses messages (counted, logged) while its output is over the
    limit, takes them again once it has caught up; the fast subscriber gets everything."""
    broker = make_memory_broker(settings=ServerSettings(port=0, topic_block_timeout=0.5))
    stalled = Client(broker.port, rcvbuf=4096)
    stalled.subscribe("/topic/lagging", "stalled-sub")
    fast = Client(broker.port)
    fast.subscribe("/topic/lagging")
    count = (HARD_LIMIT * 3) // BIG
    got: list[bytes] = []
    reader = read_bodies(fast, count, got)
    with caplog.at_level(logging.WARNING, logger="stompmq.broker.overflow"), Client(broker.port) as producer:
        publish_numbered(producer, "lagging", count)  # got through although the stalled one read nothing
        reader.join(30)
        assert len(got) == count
        stats = topic_stats(broker.port, "lagging")
        assert stats["total-lagging"] == "1" and stats["subscription-0-id"] == "stalled-sub"
        seqs = []
        while True:
            try:
                seqs.append(int(stalled.message(timeout=0.5)["seq"]))
            except TimeoutError:
                break
        assert seqs == list(range(len(seqs)))  # what it got is a gap-free prefix
        assert stats["subscription-0-dropped"] == str(count - len(seqs))
        producer.send_to("/topic/lagging", "after")  # caught up: it takes messages again
        assert stalled.message().body == b"after"
    lines = [r.getMessage() for r in caplog.records if r.name == "stompmq.broker.overflow"]
    assert "held a publisher back for 0.5 s" in lines[0], lines
    assert "caught up after missing" in lines[-1], lines
    stalled.close()
    fast.close()


def test_block_timeout_keeps_blocking_for_subscribers_as_busy_as_each_other(make_memory_broker, caplog):
    """--topic-block-timeout singles out a subscriber that keeps reading only when another one of
    the topic drains at least twice as fast: two subscribers reading at the same (slow) pace
    behind a publisher that outruns both hold it back past the timeout, and neither misses
    anything.  (The timeout leaves room for a reader thread descheduled a while on a busy
    machine: a wait that lasts it all marks a subscriber as stalled.)"""
    broker = make_memory_broker(settings=ServerSettings(port=0, topic_block_timeout=0.5))
    subs = [Client(broker.port, rcvbuf=4096) for _ in range(2)]
    for s in subs:
        s.subscribe("/topic/paced")
    count = (HARD_LIMIT * 6) // BIG
    got: list[list[int]] = [[], []]

    def read_paced(client: Client, out: list[int]) -> None:
        for _ in range(count):
            out.append(int(client.message(timeout=30)["seq"]))
            pace(0.002)  # both read at the same pace, slower than the publisher

    readers = [threading.Thread(target=read_paced, args=(s, g)) for s, g in zip(subs, got)]
    for r in readers:
        r.start()
    producer = Client(broker.port)
    publisher = threading.Thread(
        target=lambda: [
            producer.send_to("/topic/paced", b"p" * BIG, receipt=False, headers={"seq": str(i)})
            for i in range(count)
        ]
    )
    caplog.set_level(logging.DEBUG, logger="stompmq.broker.overflow")
    publisher.start()
    outbox_size = lambda: broker.call(lambda: broker.broker.sessions[subs[0].session_id].outbox.size)  # noqa: E731
    wait_until(lambda: outbox_size() >= HARD_LIMIT, "the publisher to fill a subscriber's outbox")
    publisher.join(60)
    for r in readers:
        r.join(60)
    kept = [r.getMessage() for r in caplog.records if "the publisher keeps waiting" in r.getMessage()]
    assert kept, "the publisher was never held back past the timeout: the test proved nothing"
    assert got == [list(range(count))] * 2
    stats = topic_stats(broker.port, "paced")
    assert stats["total-lagging"] == "0" and stats["total-dropped"] == "0", stats
    producer.close()
    for s in subs:
        s.close()


def test_drop_counts_per_subscription_and_logs_once_per_episode(make_memory_broker, caplog):
    broker = make_memory_broker(config=BrokerConfig(topic_overflow="drop"))
    slow = Client(broker.port, rcvbuf=4096)
    slow.subscribe("/topic/dropping", "slow-sub")
    count = (HARD_LIMIT * 2) // BIG
    with caplog.at_level(logging.WARNING, logger="stompmq.broker.overflow"), Client(broker.port) as producer:
        publish_numbered(producer, "dropping", count)
        stats = topic_stats(broker.port, "dropping")
        seqs = []
        while True:
            try:
                seqs.append(int(slow.message(timeout=0.5)["seq"]))
            except TimeoutError:
                break
        producer.send_to("/topic/dropping", "after")
        assert slow.message().body == b"after"
    dropped = count - len(seqs)
    assert dropped > 0
    assert stats["num-dropped"] == stats["subscription-0-dropped"] == str(dropped)
    assert stats["subscription-0-id"] == "slow-sub" and stats["topic-overflow"] == "drop"
    lines = [r.getMessage() for r in caplog.records if r.name == "stompmq.broker.overflow"]
    assert len(lines) == 2, lines  # the episode's start and its end
    assert "misses messages" in lines[0] and f"caught up after missing {dropped}" in lines[1]
    slow.close()


def test_disconnect_closes_the_slow_subscriber_only(make_memory_broker):
    broker = make_memory_broker(config=BrokerConfig(topic_overflow="disconnect"))
    slow = Client(broker.port, rcvbuf=4096)
    slow.subscribe("/topic/strict")
    fast = Client(broker.port)
    fast.subscribe("/topic/strict")
    count = (HARD_LIMIT * 2) // BIG
    got: list[bytes] = []
    reader = read_bodies(fast, count, got)
    with Client(broker.port) as producer:
        for i in range(count):
            # keep the fast subscriber within a few messages: on a loaded machine this test's
            # reader thread could otherwise fall 8 MiB behind too and (by design) be disconnected
            poll(lambda sent=i: sent - len(got) <= 16, 20, interval=0.001)  # not asserted: the count is, below
            producer.send_to("/topic/strict", b"s" * BIG, receipt=False)
        producer.sync()
    reader.join(30)
    assert len(got) == count
    wait_until(lambda: topic_stats(broker.port, "strict")["total-disconnected"] == "1", "a disconnect")
    assert topic_stats(broker.port, "strict")["num-subscribers"] == "1"
    with pytest.raises((EOFError, ConnectionResetError)):
        while True:
            frame = slow.recv(timeout=10)
            if frame.command == "ERROR":
                assert "slow topic subscriber" in frame["message"]
    slow.close()
    fast.close()
