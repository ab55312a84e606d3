"""Dramatiq's real worker (the ``dramatiq`` command: a main process and its worker process) on
a real stompmq process, over real sockets: exactly once, delays, a worker killed with SIGKILL,
dead letters.  The actors are in dramatiq_app.py; each writes a line per event to a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dramatiq
import pytest

from stompmq.integrations.dramatiq import StompmqBroker

from ..support.broker_process import ROOT, BrokerProcess, Peer
from ..support.stompclient import control
from ..support.waiting import pace, wait_until
from .reading import first_message

pytestmark = pytest.mark.dramatiq

DRAMATIQ = str(Path(sys.executable).with_name("dramatiq"))


class Workers:
    """``dramatiq tests.integrations.dramatiq_app -p 1 -t 4`` in a session (process group) of
    its own, so SIGKILL reaches the main process and its worker process at once."""

    def __init__(self, port: int, record: Path, log: Path, **env: str) -> None:
        self.record = record
        self.log = log.open("ab")
        environment = {**os.environ, "PYTHONPATH": str(ROOT), "STOMPMQ_URL": f"stomp://127.0.0.1:{port}",
                       "RECORD_FILE": str(record), **env}
        self.proc = subprocess.Popen(
            [DRAMATIQ, "tests.integrations.dramatiq_app", "--processes", "1", "--threads", "4"],
            cwd=ROOT, env=environment, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            start_new_session=True,
        )

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.log.close()


#: A broker that wants heart-beats every second (it closes a client silent for 2 s), for workers
#: that offer the same.
BEATING = ("--heart-beat", "1000,1000")


@pytest.fixture
def stompmq(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerProcess]:
    """The broker; a test may give it options (``indirect`` parametrisation)."""
    with BrokerProcess(tmp_path / "stompmq.db", *getattr(request, "param", ())).start() as process:
        yield process


@pytest.fixture
def record(tmp_path: Path) -> Path:
    path = tmp_path / "record.txt"
    path.touch()
    return path


@pytest.fixture
def workers(stompmq: BrokerProcess, record: Path, tmp_path: Path) -> Iterator[Callable[..., Workers]]:
    started: list[Workers] = []

    def start(**env: str) -> Workers:
        w = Workers(stompmq.port, record, tmp_path / "workers.log", **env)
        started.append(w)
        wait_until(lambda: subscribers(stompmq.port, "default") >= 1, "the worker's consumer", timeout=60)
        return w

    yield start
    for w in started:
        w.stop()


@pytest.fixture
def producer(stompmq: BrokerProcess) -> Iterator[StompmqBroker]:
    broker = StompmqBroker(url=f"stomp://127.0.0.1:{stompmq.port}", confirm_delivery=True)
    yield broker
    broker.close()


def subscribers(port: int, queue: str) -> int:
    with Peer(port) as c:
        return int(control(c, f"count-subscribers/queue/{queue}")["num-subscribers"])


def send(broker: StompmqBroker, actor: str, key: str, **kw: int) -> dramatiq.Message:
    message = dramatiq.Message(queue_name="default", actor_name=actor, args=(key,), kwargs={}, options={})
    return broker.enqueue(message, **kw)


def lines(record: Path, prefix: str) -> list[str]:
    return [line for line in record.read_text().splitlines() if line.startswith(prefix)]


def test_thousand_messages_run_exactly_once(workers, producer, record, stompmq):
    workers()
    for i in range(1000):
        send(producer, "record", str(i))
    wait_until(lambda: len(lines(record, "ran ")) >= 1000, "1,000 runs", timeout=120)
    producer.join("default", min_successes=5, timeout=30_000)
    keys = [line.split()[1] for line in lines(record, "ran ")]
    assert sorted(keys, key=int) == [str(i) for i in range(1000)]  # each once, none twice


def test_delay_is_honoured(workers, producer, record):
    workers()
    sent = time.time()
    send(producer, "record", "late", delay=3000)
    wait_until(lambda: lines(record, "ran late"), "the delayed message", timeout=30)
    started = float(lines(record, "ran late")[0].split()[2])
    assert 3.0 <= started - sent < 4.0


def test_message_of_a_killed_worker_runs_again(workers, producer, record):
    first = workers(SLOW_SECONDS="60")
    send(producer, "slow", "k")
    wait_until(lambda: lines(record, "start k"), "the first start", timeout=30)
    first.kill9()
    workers(SLOW_SECONDS="0")
    wait_until(lambda: lines(record, "done k"), "the second run", timeout=60)
    producer.join("default", min_successes=3, timeout=30_000)
    assert (len(lines(record, "start k")), len(lines(record, "done k"))) == (2, 1)


def test_rejected_message_lands_in_the_dead_letter_queue(workers, producer, record, stompmq):
    workers()
    message = send(producer, "fail", "x")
    wait_until(lambda: producer.get_queue_message_counts("default") == (0, 1), "the dead letter", timeout=30)
    assert len(lines(record, "fail x")) == 1
    dead = first_message(stompmq.port, "default.XQ")
    assert dramatiq.Message.decode(dead.body).message_id == message.message_id
    assert dead.headers["dramatiq-reason"] == "ValueError: x always fails"


@pytest.mark.parametrize("stompmq", [BEATING], indirect=True)
def test_heart_beats_keep_a_workers_connections_through_idle_time_and_a_long_task(workers, producer, record,
                                                                                   stompmq):
    """Against a broker that closes a client silent for 2 s, a worker with 1 s heart-beats idles
    4 s, then runs a 4 s task that holds a publishing connection idle: the consumer's connection
    stays (the task's ACK lands: it runs once), and so does the publishing one."""
    workers(HEART_BEAT="1", SLOW_SECONDS="4")
    pace(4)  # (idle on purpose: only heart-beats cross the connections meanwhile)
    assert subscribers(stompmq.port, "default") == 1
    send(producer, "hold", "long")
    wait_until(lambda: lines(record, "kept long"), "the long task", timeout=60)
    wait_until(lambda: lines(record, "ran long"), "the task it published", timeout=30)
    wait_until(lambda: producer.get_queue_message_counts("default") == (0, 0), "every message acked", timeout=30)
    assert lines(record, "beats long") == ["beats long 1.0 1.0"]  # negotiated, and ran once
    assert lines(record, "kept long") == ["kept long True"]
    assert subscribers(stompmq.port, "default") == 1
