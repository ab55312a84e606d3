"""Several brokers on one PostgreSQL database as one cluster: claims, fail-over and fencing.

Broker processes (``python -m stompmq.cli``) on one database, consumers on several of them:
what one broker receives is shared by every broker's subscribers (claim on demand); a broker
killed with ``kill -9`` under load hands what it held over within its lease and a few seconds;
a broker paused past its lease (SIGSTOP) comes back fenced: it delivers nothing another broker
took over and its stale ACKs delete nothing.  docs/decisions/claim-on-demand.md says why.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from ..support.broker_process import BrokerProcess, Peer
from ..support.stores import NO_PSYCOPG, TEST_LEASE, postgres_server
from ..support.waiting import pace, wait_until

psycopg = pytest.importorskip("psycopg", reason=NO_PSYCOPG)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: Seconds to wait for a message another broker must hand over (a notification, a lease, a poll).
HANDOVER = 3 * TEST_LEASE + 30  # a generous deadline: a loaded machine renews leases late
#: What the fail-over contract allows from the kill to the last message taken over, seconds.
TAKEOVER_BOUND = TEST_LEASE + 5


@pytest.fixture
def database() -> str:
    return postgres_server().new_database()


def start_brokers(database: str, n: int) -> list[BrokerProcess]:
    return [BrokerProcess(database, "--lease", str(TEST_LEASE)).start() for _ in range(n)]


@pytest.fixture
def three(database: str) -> Iterator[list[BrokerProcess]]:
    started = start_brokers(database, 3)
    try:
        yield started
    finally:
        for b in started:
            b.close()


@pytest.fixture
def two(database: str) -> Iterator[list[BrokerProcess]]:
    started = start_brokers(database, 2)
    try:
        yield started
    finally:
        for b in started:
            b.close()


@dataclass
class Consumer:
    """A client-individual subscriber on its own thread: acks each message after ``busy``
    seconds (never, with ``ack`` False) and records what it got, when, and whether redelivered."""

    port: int
    queue: str
    prefetch: int
    busy: float = 0.0
    ack: bool = True
    got: list[tuple[str, bool, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    peer: Peer | None = None

    def start(self) -> Consumer:
        self.peer = Peer(self.port)
        self.peer.subscribe(f"/queue/{self.queue}", ack="client-individual", prefetch=str(self.prefetch))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        assert self.peer is not None
        while not self.stop.is_set():
            try:
                msg = self.peer.message(timeout=0.1)
            except TimeoutError:
                continue
            except (OSError, EOFError):
                return  # its broker was killed
            self.got.append((msg.body.decode(), msg["redelivered"] == "true", time.monotonic()))
            if self.busy:
                pace(self.busy)  # a consumer's work per message: part of the load
            if self.ack:
                try:
                    self.peer.ack(msg, receipt=False)
                except OSError:
                    return

    def bodies(self) -> set[str]:
        return {body for body, _, _ in list(self.got)}

    def close(self) -> None:
        self.stop.set()
        self._thread.join(10)
        if self.peer is not None:
            self.peer.close()


def test_busy_consumers_on_three_brokers_share_what_one_broker_receives(three: list[BrokerProcess]) -> None:
    """1,500 messages through broker a, a busy consumer on each broker: each gets >= 20 %."""
    total = 1500
    consumers = [Consumer(b.port, "shared", prefetch=10, busy=0.002).start() for b in three]
    try:
        with Peer(three[0].port) as producer:
            for i in range(total):
                producer.send_to("/queue/shared", str(i), receipt=False)
            producer.sync()
        wait_until(lambda: sum(len(c.got) for c in consumers) >= total, f"{total} deliveries", timeout=HANDOVER + 30)
    finally:
        for c in consumers:
            c.close()
    shares = [len(c.got) / total for c in consumers]
    print("fair share per consumer (brokers a, b, c):", [f"{s:.1%}" for s in shares])
    assert set().union(*(c.bodies() for c in consumers)) == {str(i) for i in range(total)}
    assert all(share >= 0.20 for share in shares), shares


def test_a_slow_consumer_holds_no_work_a_fast_one_elsewhere_could_take(two: list[BrokerProcess]) -> None:
    """A consumer taking 0.2 s a message on broker a, a fast one on b, 200 messages through a:
    a keeps only what its consumer can take (and a small read-ahead), b gets the rest."""
    a, b = two
    slow = Consumer(a.port, "jobs", prefetch=1, busy=0.2).start()
    fast = Consumer(b.port, "jobs", prefetch=10).start()
    try:
        with Peer(a.port) as producer:
            for i in range(200):
                producer.send_to("/queue/jobs", str(i), receipt=False)
            producer.sync()
        # The slow one can take about 5 a second; the fast one takes the rest in well under that.
        wait_until(lambda: len(fast.got) >= 170, "the fast consumer to get what the slow one cannot take",
                   timeout=HANDOVER)
    finally:
        slow.close()
        fast.close()


def test_kill9_under_load_hands_over_what_the_dead_broker_held_within_its_lease(
    three: list[BrokerProcess],
) -> None:
    """A producer on each survivor keeps sending faster than the survivors' busy consumers take,
    so both have a backlog; the victim's consumer holds 20 messages unacked when the victim is
    killed: the survivors deliver them, redelivered, within lease + 5 s of the kill, while the
    producers still send (the freed rows sort before everything the survivors hold)."""
    survivor, other, victim = three
    held = Consumer(victim.port, "load", prefetch=20, ack=False).start()
    with Peer(survivor.port) as producer:  # no subscriber there yet: the victim claims them
        for i in range(20):
            producer.send_to("/queue/load", f"held-{i}", receipt=False)
        producer.sync()
    wait_until(lambda: len(held.got) >= 20, "the victim's consumer to hold 20 unacked", timeout=HANDOVER)
    unacked = held.bodies()
    consumers = [Consumer(b.port, "load", prefetch=20, busy=0.004).start() for b in (survivor, other)]
    stop = threading.Event()
    sent = [0, 0]

    def produce(n: int, broker: BrokerProcess) -> None:
        with Peer(broker.port) as producer:
            while not stop.is_set():
                producer.send_to("/queue/load", f"{n}-{sent[n]}", receipt=False)
                sent[n] += 1
                pace(0.002)  # the load's publishing rate

    producers = [threading.Thread(target=produce, args=(n, b), daemon=True) for n, b in enumerate((survivor, other))]
    for t in producers:
        t.start()
    try:
        wait_until(lambda: min(sent) >= 300, "the producers to be under way", timeout=HANDOVER)
        killed = time.monotonic()
        victim.kill9()
        held.close()

        def taken_over() -> list[float]:
            return [at for c in consumers for body, redelivered, at in list(c.got) if body in unacked and redelivered]

        wait_until(lambda: len(taken_over()) >= len(unacked), "the survivors to deliver what the victim held",
                   timeout=HANDOVER + 40)
        elapsed = max(taken_over()) - killed
        assert not stop.is_set() and all(t.is_alive() for t in producers), "a producer stopped before the handover"
    finally:
        stop.set()
        for t in producers:
            t.join(30)
        for c in consumers:
            c.close()
    print(f"fail-over under load: last taken-over message delivered {elapsed:.2f} s after kill -9"
          f" (lease {TEST_LEASE} s, {sum(sent)} messages sent)")
    assert elapsed <= TAKEOVER_BOUND, f"{elapsed:.2f} s from the kill to the last handover"


def test_a_broker_paused_past_its_lease_is_fenced_when_it_resumes(database: str, two: list[BrokerProcess]) -> None:
    """SIGSTOP of broker x past its lease: y takes over what x held; after SIGCONT x delivers
    none of it, x's consumer's stale ACKs delete none of y's deliveries, and x holds a new lease."""
    x, y = two
    total = 100
    keeper = Consumer(y.port, "fence", prefetch=1000, ack=False).start()  # never acks: y keeps all
    with Peer(x.port) as stale:
        stale.subscribe("/queue/fence", ack="client-individual", prefetch="20")
        with Peer(x.port) as producer:
            for i in range(total):
                producer.send_to("/queue/fence", str(i), receipt=False)
            producer.sync()
        held = [stale.message(timeout=HANDOVER) for _ in range(20)]
        assert x.proc is not None
        try:
            x.proc.send_signal(signal.SIGSTOP)
            wait_until(lambda: len(keeper.bodies()) >= total, "y to take over everything x held", timeout=HANDOVER)
            taken_over = {body for body, redelivered, _ in keeper.got if redelivered}
            assert {m.body.decode() for m in held} <= taken_over
        finally:
            x.proc.send_signal(signal.SIGCONT)
        for msg in held:
            stale.ack(msg)  # stale ACKs (with a receipt: the broker handled them)
        stale_deliveries = []
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                stale_deliveries.append(stale.message(timeout=0.1).body.decode())
            except TimeoutError:
                pass
        print(f"stale deliveries after resume: {len(stale_deliveries)}")
        assert stale_deliveries == []
    with Peer(y.port) as checker:
        assert checker.count("fence") == total, "a stale ACK deleted a delivery y holds"
    with psycopg.connect(database) as conn:
        epochs = [row[0] for row in conn.execute("SELECT epoch FROM brokers")]
    assert len(epochs) == 2 and max(epochs) >= 3, epochs  # x registered anew: a third lease
    assert "lease on" in x.stderr and "lapsed" in x.stderr, x.stderr
    keeper.close()


def since_renewal(conn: psycopg.Connection[Any], broker_id: str) -> float:
    """Seconds since ``broker_id`` last renewed its lease, on the database's clock."""
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp() - renewed_at)::float8 FROM brokers"
                       " WHERE id = %s", (broker_id,)).fetchone()
    assert row is not None
    return float(row[0])


def test_a_renewal_that_comes_back_after_the_trust_ran_out_pumps_again(database: str) -> None:
    """Broker b's lease renewal is held (a row lock on its ``brokers`` row) until b's trust in its
    claims ran out, and messages sent through a meanwhile wake b's subscriber, whose pump is
    refused then.  The renewal returns within the lease: b must pump again and deliver them at
    once, though nothing else happens on the queue (no delivery in flight, no further news);
    before, b delivered them only when its next renewal found its trust run out, lease / 3 later."""
    lease = 30.0  # renewed every lease / 3 and trusted for 0.8 lease: room for the lock's timing
    b = BrokerProcess(database, "--lease", str(lease)).start()
    a = None
    consumer = None
    try:
        with psycopg.connect(database, autocommit=True) as conn:
            (b_id,) = conn.execute("SELECT id FROM brokers").fetchone() or ("",)
        a = BrokerProcess(database, "--lease", str(lease)).start()
        consumer = Consumer(b.port, "woken", prefetch=100).start()
        with Peer(a.port) as producer:
            producer.send_to("/queue/woken", "first")  # b's subscriber is served through a
            wait_until(lambda: len(consumer.got) == 1, "the first message on b", timeout=HANDOVER)
            with psycopg.connect(database, autocommit=True) as conn:
                wait_until(lambda: since_renewal(conn, b_id) < 0.5, "a renewal by b", timeout=lease)
            with psycopg.connect(database) as locker:
                # b's next renewal (due lease / 3 after the last) waits for this lock, released
                # 0.92 lease after the last: past b's trust (0.8 lease), before its lease lapses.
                locker.execute("SELECT 1 FROM brokers WHERE id = %s FOR UPDATE", (b_id,))
                renewed = time.monotonic() - since_renewal(locker, b_id)
                # Past b's trust, which b counts on its own clock and does not expose: the
                # wall clock passing that point is the condition.
                pace(max(0.0, renewed + 0.85 * lease - time.monotonic()))
                for i in range(20):
                    producer.send_to("/queue/woken", str(i), receipt=False)
                producer.sync()
                pace(max(0.0, renewed + 0.92 * lease - time.monotonic()))  # the lock held to 0.92 lease
                locker.rollback()
        wait_until(lambda: len(consumer.got) == 21, "b's subscriber to get what was sent meanwhile", timeout=lease / 6)
    finally:
        if consumer is not None:
            consumer.close()
        for broker in (a, b):
            if broker is not None:
                broker.close()
