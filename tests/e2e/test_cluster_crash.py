"""A crashed broker is seen dead at once: broker processes on one PostgreSQL database, ``kill -9``.

The lease here is 30 s, so only the dead broker's ended database session (the advisory lock it
held, storage/pg_liveness.py) can explain a take-over within seconds: the messages it had out for
delivery reach a consumer on a survivor, and a broker restarted in its place serves them, at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ..support.broker_process import BrokerProcess, Peer
from ..support.stores import postgres_server

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: A lease far longer than any take-over these tests accept.
LONG_LEASE = 30.0
#: Seconds from the kill to the last taken-over delivery that these tests accept: the target is
#: 2 s; the bound is generous for a busy machine and still far under the lease.
TAKEOVER = 8.0
#: Messages the victim's consumer holds unacked when the broker dies.
HELD = 20


@pytest.fixture
def database() -> str:
    return postgres_server().new_database()


def started(database: str) -> BrokerProcess:
    return BrokerProcess(database, "--lease", str(LONG_LEASE)).start()


@pytest.fixture
def pair(database: str) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    brokers = started(database), started(database)
    try:
        yield brokers
    finally:
        for b in brokers:
            b.close()


def hold_and_kill(victim: BrokerProcess, producer_port: int) -> tuple[set[str], float]:
    """``HELD`` messages out for delivery to a consumer of ``victim``, which is then killed: their
    bodies and the time of the kill."""
    with Peer(producer_port) as producer:
        for i in range(HELD):
            producer.send_to("/queue/held", str(i))
    held = Peer(victim.port)
    held.subscribe("/queue/held", ack="client-individual", prefetch=str(HELD))
    bodies = {held.message(timeout=30).body.decode() for _ in range(HELD)}
    victim.kill9()
    killed = time.monotonic()
    held.close()
    return bodies, killed


def collect(port: int, bodies: set[str], killed: float) -> list[float]:
    """Seconds from the kill to each of ``bodies`` reaching a consumer on ``port`` (each must be
    flagged ``redelivered``), once all came or ``LONG_LEASE`` passed."""
    delays: list[float] = []
    missing = set(bodies)
    with Peer(port) as rescuer:
        rescuer.subscribe("/queue/held", ack="client-individual", prefetch=str(HELD))
        while missing and time.monotonic() - killed < LONG_LEASE:
            try:
                msg = rescuer.message(timeout=1.0)
            except TimeoutError:
                continue
            body = msg.body.decode()
            assert msg["redelivered"] == "true", f"{body} came again unflagged"
            missing.discard(body)
            delays.append(time.monotonic() - killed)
            rescuer.ack(msg, receipt=False)
    assert not missing, f"{len(missing)} of the dead broker's messages not taken over within the lease"
    return delays


def test_a_killed_brokers_messages_reach_a_survivor_at_once(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    victim, survivor = pair
    bodies, killed = hold_and_kill(victim, survivor.port)
    delays = collect(survivor.port, bodies, killed)
    print(f"take-over after kill -9: first {min(delays):.2f} s, last {max(delays):.2f} s")
    assert max(delays) < TAKEOVER, f"the last taken-over delivery came {max(delays):.1f} s after the kill"
    assert "is gone (its database session ended)" in survivor.stderr


def test_a_restarted_broker_serves_what_it_held_before_at_once(database: str) -> None:
    """Alone on the database: the broker restarted after a ``kill -9`` frees the claims of the
    process it replaces at its start, and its consumer gets them at once."""
    broker = started(database)
    try:
        bodies, killed = hold_and_kill(broker, broker.port)
        broker.start()
        delays = collect(broker.port, bodies, killed)
        print(f"restart after kill -9: last held message served {max(delays):.2f} s after the kill")
        assert max(delays) < TAKEOVER + 5, f"served {max(delays):.1f} s after the kill"  # (the restart's share)
    finally:
        broker.close()
