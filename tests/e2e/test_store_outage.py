"""A store outage under receipted load, end to end: a real broker process on the test PostgreSQL
server, which is stopped (``pg_ctl stop -m fast``, as a restart or a fail-over does), left down
for a few seconds and started again while producers send with receipts over real sockets; and
a broker whose SQLite commits fail for a while, holding a heart-beating producer back.

The promises: a RECEIPT only for a stored message, and every receipted message delivered;
within ``--store-timeout`` no SEND is refused and no connection is closed (the receipts come
once the database is back); past it, an ERROR only for a message that is then never
delivered; the outage is logged once when it starts and once when it ends.

Nobody subscribes during the load: an auto-ack subscriber that keeps up is handed each message
in the step that received it, settled once its bytes reach the socket, so its insert and delete
cancel out before any commit and its RECEIPT needs no database (the last test here).  With one,
the receipts never wait for the outage these tests are about.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from stompmq.broker import BrokerConfig
from stompmq.server import connection
from stompmq.server.settings import ServerSettings
from stompmq.storage.groupcommit import GroupCommitStore

from ..storage.test_sqlite_store import ControlledBackend
from ..support.broker_process import BrokerProcess, Peer
from ..support.broker_thread import BrokerThread
from ..support.stores import postgres_server
from ..support.waiting import holds_for, wait_until

#: Seconds the database stays down after it stopped (a restart takes about one more).
OUTAGE = 3.0
#: Receipted SENDs each producer keeps outstanding.
WINDOW = 50
#: Seconds of load before the outage, and after the database is back.
BEFORE, AFTER = 1.0, 2.0
#: How long a receipt may take at the worst: the outage, reconnecting, a slow machine.
RECEIPT_WAIT = 60.0


class Producer(threading.Thread):
    """One connection sending receipted SENDs to /queue/outage, ``WINDOW`` outstanding, until
    ``stop``; then it waits for the outstanding answers.  After an ERROR (the broker closes the
    connection) it connects again and goes on."""

    def __init__(self, port: int, name: str, stop: threading.Event) -> None:
        super().__init__(name=f"producer {name}")
        self.port, self.tag, self.stop = port, name, stop
        self.receipted: list[str] = []
        self.refused: list[str] = []  # answered ERROR (with that receipt-id)
        self.unanswered: list[str] = []  # outstanding on a connection the broker closed
        self.closed = 0  # connections the broker closed
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as e:  # reported by the test
            self.failure = e

    def _produce(self) -> None:
        peer = Peer(self.port)
        outstanding: set[str] = set()
        i = 0
        while not self.stop.is_set() or outstanding:
            while len(outstanding) < WINDOW and not self.stop.is_set():
                body = f"{self.tag}-{i}"
                i += 1
                peer.frame("SEND", {"destination": "/queue/outage", "receipt": body}, body.encode())
                outstanding.add(body)
            frame = peer.recv(RECEIPT_WAIT)
            if frame.command == "RECEIPT":
                outstanding.remove(frame["receipt-id"])
                self.receipted.append(frame["receipt-id"])
                continue
            assert frame.command == "ERROR", frame
            refused = frame.headers.get("receipt-id")
            assert refused in outstanding, frame
            assert "could not store" in frame["message"], frame
            self.refused.append(refused)
            self.unanswered += sorted(outstanding - {refused})
            outstanding.clear()
            peer.assert_closed()
            peer.close()
            self.closed += 1
            peer = Peer(self.port)
        peer.close()


def drain(port: int) -> list[str]:
    """The bodies a new subscriber of /queue/outage is given, until none comes for 3 s."""
    delivered: list[str] = []
    with Peer(port) as consumer:
        consumer.subscribe("/queue/outage")
        while True:
            try:
                delivered.append(consumer.message(timeout=3).body.decode())
            except TimeoutError:
                return delivered


def outage_lines(log: str) -> tuple[list[str], list[str]]:
    """The broker's log lines saying the store became unavailable, and available again."""
    lines = log.splitlines()
    return ([line for line in lines if "is unavailable, retrying" in line],
            [line for line in lines if "is available again after" in line])


@pytest.fixture
def database() -> str:
    server = postgres_server()
    if not server.owned:
        pytest.skip("the database is not one these tests started, so they cannot restart it")
    return server.new_database()


def run_load(broker: BrokerProcess) -> list[Producer]:
    """Three producers under load through a database outage; the producers, once answered."""
    stop = threading.Event()
    producers = [Producer(broker.port, str(n), stop) for n in range(3)]
    for p in producers:
        p.start()
    wait_until(lambda: all(len(p.receipted) > WINDOW for p in producers), "the producers to be under way")
    stop.wait(BEFORE)
    postgres_server().restart("fast", down=OUTAGE)
    stop.wait(AFTER)
    stop.set()
    for p in producers:
        p.join(RECEIPT_WAIT + 10)
        assert not p.is_alive(), f"{p.name} still waits for its receipts; the broker's log:\n{broker.stderr}"
        assert p.failure is None, f"{p.name}: {p.failure!r}; the broker's log:\n{broker.stderr}"
    return producers


@pytest.mark.postgres
@pytest.mark.slow
def test_within_the_store_timeout_a_restart_refuses_nothing_and_closes_nothing(database: str) -> None:
    broker = BrokerProcess(database).start()
    try:
        producers = run_load(broker)
        receipted = {body for p in producers for body in p.receipted}
        refused = [body for p in producers for body in p.refused]
        closed = sum(p.closed for p in producers)
        delivered = set(drain(broker.port))
        log = broker.stderr
        down, up = outage_lines(log)
        print(f"\nreceipts {len(receipted)}, ERRORs {len(refused)}, connections closed {closed},"
              f" outage log lines {len(down)} + {len(up)}: {up}")
        assert not refused and not closed, f"{len(refused)} SENDs refused, {closed} connections closed"
        lost = receipted - delivered
        assert not lost, f"{len(lost)} receipted messages never delivered, e.g. {sorted(lost)[:5]}"
        assert len(down) == 1 and len(up) == 1, log
        seconds = float(re.search(r"available again after ([\d.]+) s", up[0]).group(1))  # type: ignore[union-attr]
        assert seconds >= OUTAGE, up[0]
        assert "Traceback" not in log and "failed, retrying" not in log, log
    finally:
        broker.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_past_the_store_timeout_an_errored_send_is_never_delivered(database: str) -> None:
    """``--store-timeout 0``: a SEND is refused at the first failed commit, if its message can
    be withdrawn (no consumer has it: there is none during the outage)."""
    broker = BrokerProcess(database, "--store-timeout", "0").start()
    try:
        producers = run_load(broker)
        receipted = {body for p in producers for body in p.receipted}
        refused = {body for p in producers for body in p.refused}
        unanswered = {body for p in producers for body in p.unanswered}
        closed = sum(p.closed for p in producers)
        delivered = drain(broker.port)
        print(f"\nreceipts {len(receipted)}, ERRORs {len(refused)}, connections closed {closed},"
              f" unanswered on them {len(unanswered)}, delivered {len(delivered)}")
        assert refused, "no SEND was refused: the outage did not reach the receipts"
        lost = receipted - set(delivered)
        assert not lost, f"{len(lost)} receipted messages never delivered, e.g. {sorted(lost)[:5]}"
        resurrected = refused & set(delivered)
        assert not resurrected, f"{len(resurrected)} ERROR-ed messages delivered, e.g. {sorted(resurrected)[:5]}"
        assert len(delivered) == len(set(delivered)), "a message was delivered twice"
    finally:
        broker.close()


def test_a_producer_held_back_through_an_outage_is_not_closed_for_missing_heart_beats(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backlog bound holds through an outage (the reader stops reading), and the heart-beats
    the producer keeps sending meanwhile, unread, do not count as silence."""
    backend = ControlledBackend(tmp_path / "s.db")
    budget = 64 * 1024
    # A reader is held between reads: the read that fills the budget passes it by up to a read.
    monkeypatch.setattr(connection, "RECEIVE_BYTES", budget // 2)
    thread = BrokerThread(
        lambda: GroupCommitStore(backend, max_backlog_bytes=budget),
        settings=ServerSettings(port=0, heart_beat=(0, 500), heart_beat_grace=2.0),
        config=BrokerConfig(store_timeout=60),
    ).start()
    try:
        backend.failures = 10**9  # every commit fails until the test says otherwise
        producer = Peer(thread.port, heart_beat="500,0")  # silence past 1 s would close it
        beating = threading.Event()

        def beat() -> None:
            while not beating.wait(0.05):
                producer.send(b"\n")

        beats = threading.Thread(target=beat)
        beats.start()
        try:
            body = b"x" * (8 * 1024)
            for i in range(40):  # 320 KiB: five times the budget
                producer.frame("SEND", {"destination": "/queue/held", "receipt": str(i)}, body)
            store = thread.broker.store if thread.broker else None
            assert isinstance(store, GroupCommitStore)
            wait_until(lambda: thread.call(store.full), "the backlog to fill up")
            # over twice the 1 s the broker allows, the reader held back all along
            holds_for(lambda: thread.call(store.backlog_bytes) < 2 * budget, "the backlog bound", 2.5)
            assert producer.no_frame(0.1), "an answer came while the store was down"
            backend.failures = 0
            receipts = [producer.recv(30) for _ in range(40)]
            assert [f["receipt-id"] for f in receipts] == [str(i) for i in range(40)], receipts
        finally:
            beating.set()
            beats.join()
        producer.close()
    finally:
        thread.stop()


def test_a_message_an_auto_ack_subscriber_takes_at_once_is_receipted_without_the_store(tmp_path: Path) -> None:
    """Why the outage tests subscribe only after the load.  The delivery of a SEND to an
    auto-ack subscriber with nothing waiting goes to its socket at the end of the read that
    carried the SEND (server/outbox.py: ``WriteBatch``), in the same step as the receipt's
    ticket: the message is settled before the commit loop runs, its insert and delete cancel
    out, and the receipt needs no commit, so every commit failing changes nothing."""
    backend = ControlledBackend(tmp_path / "s.db")
    thread = BrokerThread(lambda: GroupCommitStore(backend), config=BrokerConfig(store_timeout=60)).start()
    try:
        consumer, producer = Peer(thread.port), Peer(thread.port)
        consumer.subscribe("/queue/taken")
        for warm_up in (b"first", b"second"):  # the queue's first message is stored; the second's
            producer.send_to("/queue/taken", warm_up)  # receipt commits the first's delete
            assert consumer.message().body == warm_up
        backend.failures = failures = 10**9  # every commit from here on would fail
        for i in range(100):
            producer.send_to("/queue/taken", str(i))  # waits for its RECEIPT
            assert consumer.message().body == str(i).encode()
        assert backend.failures == failures, f"{failures - backend.failures} commits were attempted"
        consumer.close()
        producer.close()
    finally:
        backend.failures = 0
        thread.stop()
