"""The core flows through a real third-party client, stomp.py, in all three protocol versions.

stomp.py runs its receiver in its own thread; the listener below turns its
callbacks into ``queue.Queue``s so every wait in a test has a timeout and
nothing sleeps and hopes.  Each test asserts on what stomp.py received from
the broker.  Runs on every store.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
import stomp

from stompmq.server import ServerSettings

from ..support.waiting import pace

TIMEOUT = 5.0
CONNECTIONS = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


class Recorder(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.errors: queue.Queue = queue.Queue()
        self.receipts: list[str] = []
        self.receipt_headers: dict[str, dict[str, str]] = {}
        self._receipt_cond = threading.Condition()
        self.connected: queue.Queue = queue.Queue()
        self.disconnected = threading.Event()
        self.heartbeat_timeouts = 0

    def on_connected(self, frame) -> None:
        self.connected.put(frame)

    def on_message(self, frame) -> None:
        self.messages.put(frame)

    def on_error(self, frame) -> None:
        self.errors.put(frame)

    def on_receipt(self, frame) -> None:
        with self._receipt_cond:
            self.receipt_headers[frame.headers["receipt-id"]] = frame.headers
            self.receipts.append(frame.headers["receipt-id"])
            self._receipt_cond.notify_all()

    def on_disconnected(self) -> None:
        self.disconnected.set()

    def on_heartbeat_timeout(self) -> None:
        self.heartbeat_timeouts += 1

    # -- waiting --------------------------------------------------------------
    def receipt(self, receipt_id: str, timeout: float = TIMEOUT) -> None:
        with self._receipt_cond:
            ok = self._receipt_cond.wait_for(lambda: receipt_id in self.receipts, timeout)
        assert ok, f"no RECEIPT {receipt_id!r}; errors: {list(self.errors.queue)}"

    def message(self, timeout: float = TIMEOUT):
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no MESSAGE in time; errors: {list(self.errors.queue)}") from None

    def no_message(self) -> None:
        assert self.messages.empty(), list(self.messages.queue)

    def error(self, timeout: float = TIMEOUT):
        try:
            return self.errors.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no ERROR in time") from None


class Peer:
    """One stomp.py connection and its recorder, with a receipt counter for round trips."""

    def __init__(self, port: int, version: str, **kwargs) -> None:
        self.version = version
        self.conn = CONNECTIONS[version]([("127.0.0.1", port)], **kwargs)
        self.rec = Recorder()
        self.conn.set_listener("recorder", self.rec)
        self._n = 0

    def connect(self, **kwargs) -> Peer:
        self.conn.connect(wait=True, **kwargs)
        frame = self.rec.connected.get(timeout=TIMEOUT)
        assert frame.headers["version"] == self.version
        return self

    def rid(self) -> str:
        self._n += 1
        return f"{self.version}-{id(self)}-{self._n}"

    def sync(self) -> None:
        """A round trip (BEGIN/ABORT with receipts): the broker handled everything sent before."""
        tx = self.rid()
        rid = self.rid()
        self.conn.begin(tx)
        self.conn.abort(tx, receipt=rid)
        self.rec.receipt(rid)

    def subscribe(self, destination: str, sub_id: str, ack: str = "auto", **headers: str) -> None:
        rid = self.rid()
        self.conn.subscribe(destination, sub_id, ack=ack, headers={**headers, "receipt": rid})
        self.rec.receipt(rid)

    def send(self, destination: str, body: str, **headers: str) -> None:
        rid = self.rid()
        self.conn.send(destination, body, headers={**headers, "receipt": rid})
        self.rec.receipt(rid)

    def ack(self, frame, **kw) -> None:
        h = frame.headers
        if self.version == "1.2":
            self.conn.ack(h["ack"], **kw)
        elif self.version == "1.1":
            self.conn.ack(h["message-id"], h["subscription"], **kw)
        else:
            self.conn.ack(h["message-id"], **kw)

    def nack(self, frame, **kw) -> None:
        h = frame.headers
        if self.version == "1.2":
            self.conn.nack(h["ack"], **kw)
        else:
            self.conn.nack(h["message-id"], h["subscription"], **kw)

    def disconnect(self) -> None:
        rid = self.rid()
        self.conn.disconnect(receipt=rid)
        # stomp.py marks itself disconnected before it calls the listeners: wait, do not assert
        self.rec.receipt(rid)
        assert self.rec.disconnected.wait(TIMEOUT)

    def close(self) -> None:
        if self.conn.is_connected():
            self.conn.disconnect(receipt=self.rid())


@pytest.fixture
def peers(broker) -> Iterator:
    made: list[Peer] = []

    def make(version: str = "1.2", **kwargs) -> Peer:
        peer = Peer(broker.port, version, **kwargs).connect()
        made.append(peer)
        return peer

    try:
        yield make
    finally:
        for p in made:
            p.close()


VERSIONS = ["1.0", "1.1", "1.2"]


@pytest.mark.parametrize("version", VERSIONS)
def test_roundtrip(peers, version):
    consumer = peers(version)
    producer = peers(version)
    consumer.subscribe("/queue/sp-rt", "s1")
    producer.send("/queue/sp-rt", "hello \u2603", **{"x-trace": "abc", "content-type": "text/plain"})
    msg = consumer.rec.message()
    assert msg.body == "hello \u2603"
    assert msg.headers["destination"] == "/queue/sp-rt"
    assert msg.headers["x-trace"] == "abc"
    assert msg.headers["subscription"] == "s1"
    assert msg.headers["message-id"]
    consumer.disconnect()
    producer.disconnect()


@pytest.mark.parametrize("version", VERSIONS)
def test_topic_roundtrip_between_versions(peers, version):
    consumers = [peers(v) for v in VERSIONS]
    for i, c in enumerate(consumers):
        c.subscribe("/topic/sp-news", f"t{i}")
    peers(version).send("/topic/sp-news", "flash", edition="1")
    for i, c in enumerate(consumers):
        msg = c.rec.message()
        assert (msg.body, msg.headers["edition"], msg.headers["subscription"]) == ("flash", "1", f"t{i}")


@pytest.mark.parametrize("version", VERSIONS)
def test_client_individual_ack(peers, broker, version):
    c = peers(version)
    c.subscribe("/queue/sp-ci", "s", ack="client-individual")
    for body in ("a", "b", "c"):
        c.send("/queue/sp-ci", body)
    a, b, cc = (c.rec.message() for _ in range(3))
    assert (a.body, b.body, cc.body) == ("a", "b", "c")
    c.ack(b)
    c.disconnect()
    other = peers(version)
    other.subscribe("/queue/sp-ci", "s", ack="client-individual")
    again = [other.rec.message(), other.rec.message()]
    assert [m.body for m in again] == ["a", "c"]
    assert all(m.headers["redelivered"] == "true" for m in again)
    for m in again:
        other.ack(m)
    other.sync()
    other.rec.no_message()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_long_task_extends_its_ack_deadline_and_a_late_ack_is_answered(peers, version):
    """stomp.py extends a delivery's deadline with a plain SEND to /control/extend-ack, and a
    1.2 ACK that comes after the deadline requeued its message is answered in its RECEIPT."""
    worker = peers(version)
    worker.subscribe("/queue/sp-long", "s", ack="client-individual", prefetch="2", **{"ack-timeout": "0.5"})
    worker.send("/queue/sp-long", "short")
    worker.send("/queue/sp-long", "long")
    short, long = worker.rec.message(), worker.rec.message()
    rid = worker.rid()
    worker.conn.send("/control/extend-ack", "", headers={
        "id": long.headers["ack" if version == "1.2" else "message-id"], "ack-timeout": "60", "receipt": rid})
    worker.rec.receipt(rid)
    assert worker.rec.receipt_headers[rid]["extended"] == "1"
    again = worker.rec.message()  # "short" only, after its 0.5 s
    assert (again.body, again.headers["redelivered"]) == ("short", "true")
    if version == "1.2":  # (1.0 and 1.1 name a delivery by message-id, the same for both)
        rid = worker.rid()
        worker.ack(short, receipt=rid)
        worker.rec.receipt(rid)
        assert worker.rec.receipt_headers[rid]["ack-late"] == "true"
    worker.ack(again)
    worker.ack(long)
    worker.sync()
    worker.rec.no_message()
    assert worker.rec.errors.empty() and worker.conn.is_connected()


@pytest.mark.parametrize("version", VERSIONS)
def test_client_cumulative_ack(peers, version):
    c = peers(version)
    c.subscribe("/queue/sp-cc", "s", ack="client")
    for body in ("a", "b", "c"):
        c.send("/queue/sp-cc", body)
    msgs = [c.rec.message() for _ in range(3)]
    c.ack(msgs[1])  # a and b
    c.disconnect()
    other = peers(version)
    other.subscribe("/queue/sp-cc", "s", ack="client")
    again = other.rec.message()
    assert (again.body, again.headers["redelivered"]) == ("c", "true")
    other.ack(again)
    other.sync()
    other.rec.no_message()


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_nack_requeues(peers, version):
    c = peers(version)
    c.subscribe("/queue/sp-nack", "s", ack="client-individual")
    c.send("/queue/sp-nack", "retry me")
    first = c.rec.message()
    assert first.headers["redelivered"] == "false"
    c.nack(first)
    again = c.rec.message()
    assert again.body == "retry me"
    assert again.headers["redelivered"] == "true"
    assert again.headers["redelivery-count"] == "1"
    c.nack(again, requeue="false")
    c.sync()
    c.rec.no_message()


@pytest.mark.parametrize("version", VERSIONS)
def test_transaction_commit_and_abort(peers, version):
    consumer = peers(version)
    consumer.subscribe("/queue/sp-tx", "s")
    producer = peers(version)
    tx = producer.conn.begin()
    producer.conn.send("/queue/sp-tx", "in-tx-1", transaction=tx)
    producer.conn.send("/queue/sp-tx", "in-tx-2", transaction=tx)
    producer.sync()
    consumer.sync()
    consumer.rec.no_message()
    rid = producer.rid()
    producer.conn.commit(tx, receipt=rid)
    producer.rec.receipt(rid)
    assert [consumer.rec.message().body for _ in range(2)] == ["in-tx-1", "in-tx-2"]
    tx2 = producer.conn.begin()
    producer.conn.send("/queue/sp-tx", "aborted", transaction=tx2)
    producer.conn.abort(tx2)
    producer.send("/queue/sp-tx", "after")
    assert consumer.rec.message().body == "after"
    consumer.sync()
    consumer.rec.no_message()


@pytest.mark.parametrize("version", VERSIONS)
def test_transactional_ack(peers, version):
    c = peers(version)
    c.subscribe("/queue/sp-txack", "s", ack="client-individual")
    c.send("/queue/sp-txack", "x")
    c.send("/queue/sp-txack", "y")
    x, y = c.rec.message(), c.rec.message()
    tx = c.conn.begin()
    c.ack(x, transaction=tx)
    c.conn.abort(tx)  # x stays unacked
    tx = c.conn.begin()
    c.ack(y, transaction=tx)
    c.conn.commit(tx)
    c.disconnect()
    other = peers(version)
    other.subscribe("/queue/sp-txack", "s", ack="client-individual")
    again = other.rec.message()
    assert (again.body, again.headers["redelivered"]) == ("x", "true")
    other.ack(again)
    other.sync()
    other.rec.no_message()


@pytest.mark.parametrize("version", VERSIONS)
def test_exactly_one_receipt_per_frame(peers, version):
    c = peers(version)
    rids = [c.rid() for _ in range(8)]
    c.conn.subscribe("/queue/sp-rc", "s", ack="client-individual", receipt=rids[0])
    c.conn.send("/queue/sp-rc", "m", receipt=rids[1])
    msg = c.rec.message()
    if version == "1.2":
        c.conn.ack(msg.headers["ack"], receipt=rids[2])
    elif version == "1.1":
        c.conn.ack(msg.headers["message-id"], "s", receipt=rids[2])
    else:
        c.conn.ack(msg.headers["message-id"], receipt=rids[2])
    c.conn.begin("t", receipt=rids[3])
    c.conn.send("/queue/sp-rc", "n", transaction="t", receipt=rids[4])
    c.conn.abort("t", receipt=rids[5])
    c.conn.unsubscribe(**({"id": "s"} if version != "1.0" else {"destination": "/queue/sp-rc", "id": "s"}),
                       receipt=rids[6])
    c.conn.disconnect(receipt=rids[7])
    c.rec.receipt(rids[7])
    assert c.rec.disconnected.wait(TIMEOUT)
    counts = Counter(r for r in c.rec.receipts if r in rids)
    assert counts == Counter(rids), counts
    assert [r for r in c.rec.receipts if r in rids] == rids, "receipts out of order"


@pytest.mark.parametrize("version", VERSIONS)
def test_error_reported_and_connection_closed(peers, version):
    c = peers(version)
    c.conn.send("/nowhere/at-all", "x", receipt="bad")
    error = c.rec.error()
    assert error.headers["message"]
    assert error.headers.get("receipt-id") == "bad"
    assert c.rec.disconnected.wait(TIMEOUT)


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_heart_beats_keep_stomp_py_connected(make_memory_broker, version):
    """stomp.py gives up when a beat is 1.5 x late (S17): the broker's beats must be on time,
    from the first one on."""
    broker = make_memory_broker(settings=ServerSettings(port=0, heart_beat=(150, 150), heart_beat_grace=2.0))
    peer = Peer(broker.port, version, heartbeats=(150, 150)).connect()
    try:
        peer.subscribe("/queue/sp-hb", "s")
        pace(0.8)  # idle time for several beats in both directions: the idleness is the test
        assert peer.conn.is_connected()
        peer.send("/queue/sp-hb", "still here")
        assert peer.rec.message().body == "still here"
        assert peer.rec.heartbeat_timeouts == 0
        peer.disconnect()
    finally:
        peer.close()


def test_stomp_py_uses_stomp_frame_and_connect_frame(peers):
    """stomp.py 1.2 sends STOMP by default; with_connect_command sends CONNECT: both work (S12)."""
    a = peers("1.2")
    b = Peer(a.conn.transport.current_host_and_port[1], "1.2")
    b.conn.connect(wait=True, with_connect_command=True)
    assert b.rec.connected.get(timeout=TIMEOUT).headers["version"] == "1.2"
    b.subscribe("/queue/sp-cmd", "s")
    a.send("/queue/sp-cmd", "x")
    assert b.rec.message().body == "x"
    b.disconnect()


SPECIAL_HEADERS = {
    "special-1": "test with colon : test",
    "special-2": "test with backslash \\ test",
    "special-3": "test with newline \n",
    "special-4": "test with carriage return \r",
}
"""stomp.py's own STOMP 1.2 header-escaping case (its s12 test), which RabbitMQ passes."""

SPECIAL_CARRIED = {"1.2": {"special-1", "special-2", "special-3", "special-4"},
                   "1.1": {"special-1", "special-2", "special-3"}}
"""What a subscriber of each version receives of them: one its version cannot carry is left
out of its MESSAGE (docs/security.md), the others arrive intact."""


@pytest.mark.parametrize("version", ["1.2", "1.1"])
def test_v12_special_headers_reach_subscribers_intact(peers, version):
    """The SEND is accepted (a RECEIPT, no ERROR) and delivered intact."""
    consumer = peers(version)
    consumer.subscribe("/queue/sp-special", "s")
    peers("1.2").send("/queue/sp-special", "test message 1", **SPECIAL_HEADERS)
    msg = consumer.rec.message()
    assert msg.body == "test message 1"
    received = {name: value for name, value in msg.headers.items() if name.startswith("special-")}
    assert received == {name: SPECIAL_HEADERS[name] for name in SPECIAL_CARRIED[version]}
