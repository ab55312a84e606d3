"""A database outage longer than the lease ends no lease: two broker processes on one PostgreSQL
server that is stopped for 20 s while their consumers hold messages.

No broker could reach the database meanwhile, so none could take anything over: when it comes
back every broker keeps its claims (a sweeper judges leases only once it has been connected for a
lease itself, storage/pg_liveness.py), nothing is redelivered, and the held messages' ACKs delete
them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from ..support.broker_process import BrokerProcess, Peer
from ..support.stores import NO_PSYCOPG, postgres_server
from ..support.waiting import wait_until

psycopg = pytest.importorskip("psycopg", reason=NO_PSYCOPG)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: The brokers' lease: the outage lasts four of them.
LEASE = 5.0
OUTAGE = 20.0
#: Messages each consumer holds through the outage.
HELD = 10


def renewing_a_lease(database: str, since: dict[str, datetime]) -> bool:
    """Both brokers renewed more than a lease (and a renewal period) after their first renewal
    once the database came back (``since``, filled in as this polls; on the database's clock)."""
    with psycopg.connect(database, autocommit=True) as conn:
        rows = conn.execute("SELECT id, renewed_at, pg_postmaster_start_time() FROM brokers").fetchall()
    for broker, renewed, back in rows:
        if renewed > back:
            since.setdefault(broker, renewed)
    judged = timedelta(seconds=LEASE * 4 / 3)
    return len(since) == 2 and all(renewed - since.get(broker, renewed) > judged for broker, renewed, _ in rows)


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    server = postgres_server()
    if not server.owned:
        pytest.skip("the database is not one these tests started, so they cannot stop it")
    database = server.new_database()
    started = [BrokerProcess(database, "--lease", str(LEASE)).start() for _ in range(2)]
    try:
        yield started
    finally:
        for b in started:
            b.close()


def test_an_outage_longer_than_the_lease_causes_no_redelivery(brokers: list[BrokerProcess]) -> None:
    consumers = [Peer(b.port) for b in brokers]
    try:
        for consumer in consumers:
            consumer.subscribe("/queue/outage", ack="client-individual", prefetch=str(HELD))
        with Peer(brokers[0].port) as producer:
            for i in range(3 * HELD):  # (the rest waits in the database, or in a broker's read-ahead)
                producer.send_to("/queue/outage", str(i))
        held = [[consumer.message(timeout=30) for _ in range(HELD)] for consumer in consumers]
        assert all(msg["redelivered"] == "false" for msgs in held for msg in msgs)
        since: dict[str, datetime] = {}
        postgres_server().restart("fast", down=OUTAGE)
        # Every broker back and renewing for more than a lease since (so its sweeps judge leases
        # at last, and would end the others' if the outage had), before the ACKs.
        wait_until(lambda: renewing_a_lease(brokers[0].args[brokers[0].args.index("--store") + 1], since),
                   "every broker renewing for a lease after the outage", timeout=10 * LEASE)
        for consumer in consumers:
            consumer.expect_nothing(0.5)  # nothing held comes again, flagged or not
        for consumer, msgs in zip(consumers, held, strict=True):
            for msg in msgs:
                consumer.ack(msg)
        rest: list[bytes] = []

        def drained() -> bool:
            for consumer in consumers:
                with contextlib.suppress(TimeoutError):
                    msg = consumer.message(timeout=0.2)
                    assert msg["redelivered"] == "false", msg.body
                    rest.append(msg.body)
                    consumer.ack(msg)
            return len(rest) == HELD

        wait_until(drained, "the rest of the messages", timeout=60)
        with Peer(brokers[1].port) as checker:
            wait_until(lambda: checker.count("outage") == 0, "the queue to be empty: every ACK deleted its row")
        for broker in brokers:
            assert "its messages are free again" not in broker.stderr, broker.stderr
            # Its own lease never ended either.  ("cannot renew the lease on …" may appear: a
            # renewal in flight when the database went down fails, which is what an outage is.)
            assert "lapsed" not in broker.stderr, broker.stderr
    finally:
        for consumer in consumers:
            consumer.close()
