"""Taskiq's real worker (``taskiq worker``, in a subprocess) on a real stompmq process: 1,000
tasks exactly once, the ``delay`` label, the ``priority`` label, and what the broker does with
the acks.  The test's own side (kick, listen) runs in ``asyncio.run``: the suite's async tests
run on trio, and this integration is asyncio's."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from taskiq import AckableMessage, BrokerMessage

from stompmq.integrations.taskiq import StompmqBroker
from stompmq.stomp_url import StompmqError

from ..support.broker_process import ROOT, BrokerProcess, Peer
from ..support.stompclient import control
from ..support.waiting import pace, wait_until

pytestmark = pytest.mark.taskiq

TASKIQ = str(Path(sys.executable).with_name("taskiq"))


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
def worker(stompmq: BrokerProcess, record: Path, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    log = (tmp_path / "worker.log").open("ab")

    def start(**extra: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "STOMPMQ_URL": f"stomp://127.0.0.1:{stompmq.port}",
               "RECORD_FILE": str(record), **extra}
        procs.append(subprocess.Popen(
            [TASKIQ, "worker", "tests.integrations.taskiq_app:broker", "--workers", "1"],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True))
        wait_until(lambda: counts(stompmq.port, "taskiq", "count-subscribers", "num-subscribers") >= 1,
                   "the worker's subscription", timeout=60)
        return procs[-1]

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    log.close()


def counts(port: int, queue: str, verb: str = "count-msgs", field: str = "num-messages") -> int:
    with Peer(port) as c:
        return int(control(c, f"{verb}/queue/{queue}")[field])


def client(port: int) -> StompmqBroker:
    broker = StompmqBroker(f"stomp://127.0.0.1:{port}")

    @broker.task(task_name="record")
    async def record(key: str) -> None:  # the worker's task, as the client knows it
        raise AssertionError("runs in the worker")

    return broker


def lines(record: Path) -> list[str]:
    return record.read_text().splitlines()


def test_thousand_tasks_run_exactly_once(stompmq, worker, record):
    worker()

    async def kick_all() -> None:
        broker = client(stompmq.port)
        await broker.startup()
        task = broker.find_task("record")
        assert task is not None
        await asyncio.gather(*(task.kiq(str(i)) for i in range(1000)))
        await broker.shutdown()

    asyncio.run(kick_all())
    wait_until(lambda: len(lines(record)) >= 1000, "1,000 runs", timeout=120)
    wait_until(lambda: counts(stompmq.port, "taskiq") == 0, "every task acked", timeout=30)
    keys = [line.split()[1] for line in lines(record)]
    assert sorted(keys, key=int) == [str(i) for i in range(1000)]


def test_delay_label_waits_in_the_broker(stompmq, worker, record):
    worker()

    async def kick_late() -> float:
        broker = client(stompmq.port)
        await broker.startup()
        task = broker.find_task("record")
        assert task is not None
        sent = time.time()
        await task.kicker().with_labels(delay=1.5).kiq("late")
        assert counts(stompmq.port, "taskiq") == 0  # stored apart until due
        await broker.shutdown()
        return sent

    sent = asyncio.run(kick_late())
    wait_until(lambda: lines(record), "the delayed task", timeout=30)
    assert 1.5 <= float(lines(record)[0].split()[2]) - sent < 2.5


def test_idle_worker_stops_on_sigterm(stompmq, worker):
    """``taskiq worker`` sets its stop event from a signal handler: the listener must wake the loop."""
    proc = worker()
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(15)
    wait_until(lambda: counts(stompmq.port, "taskiq", "count-subscribers", "num-subscribers") == 0, "no subscriber")


@pytest.mark.parametrize("stompmq", [("--heart-beat", "1000,1000")], indirect=True)
def test_heart_beats_keep_an_idle_workers_connection(stompmq, worker, record):
    """Against a broker that closes a client silent for 2 s, a worker with 1 s heart-beats idles
    4 s, then runs a blocking 2 s task: its subscription stays and the task runs once, acked."""
    worker(HEART_BEAT="1")
    pace(4)  # (idle on purpose: only heart-beats cross the connection meanwhile)
    assert counts(stompmq.port, "taskiq", "count-subscribers", "num-subscribers") == 1

    async def kick() -> None:
        broker = client(stompmq.port)

        @broker.task(task_name="hold")
        def hold(key: str, seconds: float) -> None:
            raise AssertionError("runs in the worker")

        await broker.startup()
        await hold.kiq("long", 2.0)
        await broker.shutdown()

    asyncio.run(kick())
    wait_until(lambda: lines(record), "the task", timeout=30)
    wait_until(lambda: counts(stompmq.port, "taskiq") == 0, "the task acked", timeout=30)
    assert lines(record) == ["held long 1.0,1.0"]
    assert counts(stompmq.port, "taskiq", "count-subscribers", "num-subscribers") == 1


def test_priority_label_and_acks(stompmq):
    """Without a worker: listen sees the priority order, and only ACKed tasks leave the queue
    (one left unacked comes back when its connection ends)."""

    async def run() -> list[tuple[str, str]]:
        broker = client(stompmq.port)
        await broker.startup()
        for p in (1, 9, 5):
            await broker.kick(BrokerMessage(task_id=str(p), task_name="record", message=f"{p}".encode(),
                                            labels={"priority": p}))
        with pytest.raises(ValueError, match="0-9"):
            await broker.kick(BrokerMessage(task_id="x", task_name="record", message=b"x",
                                            labels={"priority": 10}))
        got: list[tuple[str, str]] = []
        listener = broker.listen()
        for _ in range(3):
            message = await anext(listener)
            assert isinstance(message, AckableMessage)
            got.append(message.data.decode())
            if message.data != b"1":
                await message.ack()
        await listener.aclose()  # its connection closes with "1" unacked
        await broker.shutdown()
        return got

    assert asyncio.run(run()) == ["9", "5", "1"]
    wait_until(lambda: counts(stompmq.port, "taskiq") == 1, "the unacked task back in its queue")


def test_refused_kick_raises(stompmq):
    with Peer(stompmq.port) as c:
        control(c, "declare/queue/taskiq", **{"max-length": "1", "overflow": "reject-publish"})

    async def run() -> None:
        broker = client(stompmq.port)
        await broker.startup()
        message = BrokerMessage(task_id="1", task_name="record", message=b"{}", labels={})
        await broker.kick(message)
        with pytest.raises(StompmqError, match="refused"):
            await broker.kick(message)
        await broker.shutdown()

    asyncio.run(run())
