"""Selector subscribers on two brokers sharing one PostgreSQL database (broker/sift.py).

Each broker claims only what its own subscribers' selectors match: a row nobody there matches is
freed at once for the other broker's subscribers, and a row nobody anywhere matches stays in the
database for a later consumer, without the brokers passing it back and forth.
"""

from __future__ import annotations

import threading

import pytest

from ..support.broker_process import BrokerProcess, Peer
from ..support.stores import NO_PSYCOPG, TEST_LEASE, postgres_server
from ..support.waiting import holds_for, wait_until

psycopg = pytest.importorskip("psycopg", reason=NO_PSYCOPG)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REGIONS = ("eu", "us", "asia")
PER_REGION = 100


def versions(database: str) -> dict[int, str]:
    """Each stored message's row version (``xmin``: the transaction that last wrote it), read
    now (PostgreSQL's update statistics lag behind: other sessions flush them when they will)."""
    with psycopg.connect(database, autocommit=True) as conn:
        return {int(seq): str(xmin) for seq, xmin in conn.execute("SELECT seq, xmin::text FROM messages")}


def stored(database: str) -> int:
    """Rows in ``messages``."""
    with psycopg.connect(database, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM messages").fetchone()
    assert row is not None
    return int(row[0])


class SelectiveConsumer:
    """A client-individual subscriber with a selector, on its own thread, acking what it gets."""

    def __init__(self, port: int, selector: str) -> None:
        self.peer = Peer(port)
        self.peer.subscribe("/queue/shared", ack="client-individual", prefetch="10", selector=selector)
        self.got: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                msg = self.peer.message(timeout=0.1)
            except TimeoutError:
                continue
            self.got.append(msg.body.decode())
            self.peer.ack(msg, receipt=False)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.peer.close()


def test_selector_subscribers_on_two_brokers_share_the_queue() -> None:
    database = postgres_server().new_database()
    a = BrokerProcess(database, "--lease", str(TEST_LEASE)).start()
    b = BrokerProcess(database, "--lease", str(TEST_LEASE)).start()
    consumers = []
    try:
        consumers = [SelectiveConsumer(a.port, "region = 'eu'"), SelectiveConsumer(b.port, "region = 'us'")]
        with Peer(a.port) as producer:  # every message reaches broker a first
            for i in range(PER_REGION * len(REGIONS)):
                producer.send_to("/queue/shared", f"{REGIONS[i % 3]}-{i}", receipt=False,
                                 headers={"region": REGIONS[i % 3]})
            producer.sync()
        eu, us = consumers
        wait_until(lambda: len(eu.got) >= PER_REGION and len(us.got) >= PER_REGION, "every eu and us message",
                   timeout=3 * TEST_LEASE + 60)
        # Nobody matches asia: neither broker keeps claiming and freeing it (a ping-pong of
        # claims updated thousands of rows a second).  Once settled (every ACK deleted its row),
        # the rows lie still.
        wait_until(lambda: stored(database) == PER_REGION, "only the asia messages left stored", timeout=60)
        before = versions(database)

        def still() -> bool:
            now = versions(database)
            return sum(now.get(seq) != version for seq, version in before.items()) < PER_REGION // 2

        holds_for(still, "the asia rows lying still (fewer than half of them written again)", 2.0)
        for consumer in consumers:
            consumer.close()
        consumers = []
        with Peer(b.port) as rest:
            rest.subscribe("/queue/shared")
            asia = [m.body.decode() for m in rest.messages(PER_REGION)]
            rest.expect_nothing(0.3)
    finally:
        for consumer in consumers:
            consumer.close()
        a.close()
        b.close()
    assert sorted(eu.got) == sorted(f"eu-{i}" for i in range(0, 300, 3))
    assert sorted(us.got) == sorted(f"us-{i}" for i in range(1, 300, 3))
    assert sorted(asia) == sorted(f"asia-{i}" for i in range(2, 300, 3))
