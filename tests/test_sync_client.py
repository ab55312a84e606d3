"""The blocking STOMP client (stompmq/sync_client.py) against a real broker: what a worker that
owns no event loop does with it (send, subscribe, receive, ACK/NACK), and its errors."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stompmq.protocol import Frame, encode_frame
from stompmq.server import ServerSettings
from stompmq.server.auth import Permission
from stompmq.storage.memory import MemoryStore
from stompmq.sync_client import Connection, ConnectionLost, NoAnswer, StompmqError

from .support.broker_process import BrokerProcess, free_port
from .support.broker_thread import BrokerThread
from .support.users import write_users
from .support.waiting import pace

#: Seconds a test waits for a frame that must come (generous: the machine may be busy).
DEADLINE = 30.0


def url(broker: BrokerThread) -> str:
    return f"stomp://127.0.0.1:{broker.port}"


def test_a_sent_message_is_received_and_acknowledged(memory_broker: BrokerThread) -> None:
    with Connection(url(memory_broker)) as producer, Connection(url(memory_broker)) as consumer:
        producer.send("/queue/jobs", b"one", {"kind": "a"})
        consumer.subscribe("/queue/jobs", ack="client-individual")
        message = consumer.receive(timeout=DEADLINE)
        assert message is not None and message.command == "MESSAGE"
        assert (message.body, message.headers["kind"]) == (b"one", "a")
        consumer.ack(message)
    with Connection(url(memory_broker)) as again:  # the ACK removed it: a new subscriber gets nothing
        again.subscribe("/queue/jobs", ack="client-individual")
        assert again.receive(timeout=0.3) is None


def test_a_nacked_message_comes_back_redelivered(memory_broker: BrokerThread) -> None:
    with Connection(url(memory_broker)) as conn:
        conn.send("/queue/retry", b"job")
        conn.subscribe("/queue/retry", ack="client-individual")
        first = conn.receive(timeout=DEADLINE)
        assert first is not None
        conn.nack(first)
        second = conn.receive(timeout=DEADLINE)
        assert second is not None and second.body == b"job" and second.headers["redelivered"] == "true"


def test_unsubscribing_hands_unacknowledged_messages_back(memory_broker: BrokerThread) -> None:
    with Connection(url(memory_broker)) as conn:
        conn.send("/queue/back", b"kept")
        subscription = conn.subscribe("/queue/back", ack="client-individual")
        assert conn.receive(timeout=DEADLINE) is not None
        conn.unsubscribe(subscription)
    with Connection(url(memory_broker)) as other:
        other.subscribe("/queue/back")
        message = other.receive(timeout=DEADLINE)
        assert message is not None and message.body == b"kept"


def test_messages_that_arrive_during_a_request_wait_for_receive_in_order(memory_broker: BrokerThread) -> None:
    with Connection(url(memory_broker)) as conn:
        conn.subscribe("/topic/news")
        conn.send("/topic/news", b"1")  # its MESSAGE may come before the RECEIPT of the next SEND
        conn.send("/topic/news", b"2")
        conn.send("/queue/elsewhere", b"x")
        bodies = []
        for _ in range(2):
            message = conn.receive(timeout=DEADLINE)
            assert message is not None
            bodies.append(message.body)
        assert bodies == [b"1", b"2"]


def test_send_all_returns_after_every_receipt(memory_broker: BrokerThread) -> None:
    frames = (encode_frame(Frame("SEND", {"destination": "/queue/bulk", "receipt": str(i)}, b"%d" % i), "1.2")
              for i in range(2000))  # several SEND_CHUNKs
    with Connection(url(memory_broker)) as conn:
        assert conn.send_all(frames) == 2000
        answer = conn.request("SEND", {"destination": "/control/count-msgs/queue/bulk"})
    assert answer["num-messages"] == "2000"


def test_receive_gives_none_when_nothing_comes(memory_broker: BrokerThread) -> None:
    with Connection(url(memory_broker)) as conn:
        conn.subscribe("/queue/empty")
        assert conn.receive(timeout=0.2) is None
        conn.send("/queue/empty", b"late")  # the connection still works after a timeout
        message = conn.receive(timeout=DEADLINE)
        assert message is not None and message.body == b"late"


def test_an_error_frame_raises_with_the_brokers_message(memory_broker: BrokerThread) -> None:
    with Connection(url(memory_broker)) as conn:
        with pytest.raises(StompmqError, match="refused /nowhere/x"):
            conn.send("/nowhere/x", b"")


def test_only_a_client_acknowledged_message_can_be_acked(memory_broker: BrokerThread) -> None:
    with Connection(url(memory_broker)) as conn:
        conn.send("/queue/auto", b"x")
        conn.subscribe("/queue/auto")  # ack:auto, so its MESSAGE has no ack header
        message = conn.receive(timeout=DEADLINE)
        assert message is not None
        with pytest.raises(StompmqError, match="client or client-individual"):
            conn.ack(message)


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerThread]:
    users = write_users(tmp_path / "users.toml", {"worker": Permission()})
    with BrokerThread(MemoryStore, settings=ServerSettings(port=0, users_file=users)).start() as thread:
        yield thread


def test_a_refused_login_names_the_login_options(secured: BrokerThread) -> None:
    with Connection(url(secured), "worker", "pw-worker") as conn:
        conn.send("/queue/ok", b"")
    with pytest.raises(StompmqError, match="refused the connection.*'login'/'passcode'"):
        Connection(url(secured), "worker", "wrong")


@pytest.mark.parametrize(("address", "complaint"), [
    (None, "option 'url' is required"),
    ("http://127.0.0.1:1", "option 'url': bad URL .*expected stomp://USER:PASS@HOST:PORT"),
    ("stomp://127.0.0.1:99999", "option 'url': bad URL .*the port must be"),
    ("stomp://al%40ice:s3cr%40t@127.0.0.1:0x", r"\*\*\*"),
])
def test_a_bad_url_is_one_clear_error(address: str | None, complaint: str) -> None:
    with pytest.raises(StompmqError, match=complaint):
        Connection(address)


def test_an_unreachable_broker_names_the_url() -> None:
    address = f"stomp://127.0.0.1:{free_port()}"
    with pytest.raises(StompmqError, match=f"cannot reach the broker at {address}"):
        Connection(address)


def test_a_silent_broker_is_no_answer_not_a_hang(memory_broker: BrokerThread) -> None:
    with Connection(url(memory_broker)) as conn:
        conn.timeout = 0.2  # TIMEOUT, shortened: the broker owes this connection nothing
        with pytest.raises(NoAnswer, match="no answer from the broker"):
            conn.next()


# ---------------------------------------------------------------------------- heart-beats

#: The broker's heart-beat requirement in these tests, ms each way: short, so a connection that
#: sends none is closed within BEAT_GRACE of it (0.4 s) and an idle period of IDLE is many of them.
BEATS_MS = 200
IDLE = 2.0


@pytest.fixture
def beating() -> Iterator[BrokerThread]:
    settings = ServerSettings(port=0, heart_beat=(BEATS_MS, BEATS_MS))
    with BrokerThread(MemoryStore, settings=settings).start() as thread:
        yield thread


def test_an_idle_connection_keeps_its_heart_beats(beating: BrokerThread) -> None:
    """Neither side writes anything for ten heart-beat intervals: the client's beats keep the
    broker from closing it, the broker's keep the client from counting it lost; then it works."""
    with Connection(url(beating), heart_beat=BEATS_MS / 1000) as conn:
        assert (conn.send_every, conn.expect_every) == (BEATS_MS / 1000, BEATS_MS / 1000)
        conn.subscribe("/queue/idle", ack="client-individual")
        assert conn.receive(timeout=IDLE) is None  # (nothing comes: the wait is the test)
        with Connection(url(beating), heart_beat=0) as producer:
            producer.send("/queue/idle", b"after the idle period")
        message = conn.receive(timeout=DEADLINE)
        assert message is not None and message.body == b"after the idle period"
        conn.ack(message)


def test_a_publisher_that_never_reads_keeps_its_heart_beats(beating: BrokerThread) -> None:
    """A publisher between sends neither writes nor reads: the heart-beat thread beats for it."""
    with Connection(url(beating), heart_beat=BEATS_MS / 1000) as conn:
        conn.send("/queue/pub", b"one")
        pace(IDLE)  # (idle on purpose: the heart-beat thread alone keeps it open)
        conn.check()
        conn.send("/queue/pub", b"two")


def test_the_broker_asks_for_longer_intervals_and_they_are_kept(beating: BrokerThread) -> None:
    with Connection(url(beating), heart_beat=0.05) as conn:
        assert (conn.send_every, conn.expect_every) == (BEATS_MS / 1000, BEATS_MS / 1000)


def test_no_heart_beats_when_the_client_offers_none(beating: BrokerThread) -> None:
    with Connection(url(beating), heart_beat=0) as conn:
        assert (conn.send_every, conn.expect_every) == (0.0, 0.0)
        assert conn.receive(timeout=IDLE / 2) is None  # the broker wants none from it either
        conn.send("/queue/none", b"still open")


def test_a_broker_gone_silent_is_noticed_within_its_grace(tmp_path: Path) -> None:
    """A broker that stops (SIGSTOP: its socket stays open, nothing comes) is a lost connection
    after BEAT_GRACE of its intervals, not a receive that waits for ever."""
    with BrokerProcess(tmp_path / "broker.db", "--heart-beat", f"{BEATS_MS},{BEATS_MS}").start() as broker:
        assert broker.proc is not None
        with Connection(f"stomp://127.0.0.1:{broker.port}", heart_beat=BEATS_MS / 1000) as conn:
            conn.subscribe("/queue/q")
            broker.proc.send_signal(signal.SIGSTOP)
            try:
                started = time.monotonic()
                with pytest.raises(ConnectionLost, match="no heart-beat from the broker"):
                    conn.receive(timeout=DEADLINE)
                assert time.monotonic() - started < DEADLINE / 2
            finally:
                broker.proc.send_signal(signal.SIGCONT)
