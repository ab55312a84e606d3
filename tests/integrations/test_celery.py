"""Celery's real worker (``celery worker``, threads pool, in a subprocess) on a real broker
process, through ``stompmq.integrations.celery``: exactly-once counts, countdown timing in the
broker, priorities, retries, results over ``rpc://``, ``celery inspect ping``, a worker killed
-9 during an ``acks_late`` task, a task longer than its ack timeout, and ``celery events``.

What the tasks did is read from the file they append to (tests/integrations/celery_app.py);
every wait polls for a condition with a generous deadline, and "nothing more happens" is a
quiet period after the condition."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ..support.broker_process import ROOT, BrokerProcess, free_port
from ..support.chromium import chromium
from ..support.waiting import holds_for, wait_until

pytest.importorskip("celery")
from .celery_app import make_app  # noqa: E402  (after the skip: the celery extra)

pytestmark = pytest.mark.celery

#: Seconds a worker gets to connect and say it is ready (imports, a first connection).
START = 60.0


def logging_to(log: Path, args: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``args`` started with their output (stdout and stderr) in ``log``: the child holds the
    file open, our copy closes at once."""
    with log.open("wb") as out:
        return subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


class Run:
    """One test's broker process, record file and the workers it started."""

    def __init__(self, tmp_path: Path, *broker_args: str) -> None:
        self.tmp = tmp_path
        self.record = tmp_path / "record.txt"
        self.record.touch()
        self.broker = BrokerProcess(tmp_path / "broker.db", "--http-port", "0", *broker_args).start()
        self.url = f"stompmq://127.0.0.1:{self.broker.port}//"
        self.workers: list[subprocess.Popen[bytes]] = []
        self._logs = 0

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env.update(STOMPMQ_URL=self.url, RECORD_FILE=str(self.record), **extra)
        return env

    def worker(self, *args: str, concurrency: int = 4, **env: str) -> subprocess.Popen[bytes]:
        """``celery worker`` (threads pool), started and ready."""
        self._logs += 1
        log = self.tmp / f"worker{self._logs}.log"
        proc = logging_to(
            log, [sys.executable, "-m", "celery", "-A", "tests.integrations.celery_app", "worker", "--pool", "threads",
                  "-c", str(concurrency), "-l", "INFO", "-n", f"w{self._logs}@%h", "--without-gossip",
                  "--without-mingle", *args],
            cwd=ROOT, env=self.env(**env),
        )
        self.workers.append(proc)
        wait_until(lambda: " ready." in log.read_text() or proc.poll() is not None, "the worker's start", START)
        assert proc.poll() is None, log.read_text()
        return proc

    def lines(self, prefix: str) -> list[list[str]]:
        return [line.split()[1:] for line in self.record.read_text().splitlines() if line.startswith(prefix + " ")]

    def close(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.broker.close()


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    made = Run(tmp_path)
    try:
        yield made
    finally:
        made.close()


@contextmanager
def client(run: Run, ack_timeout: float = 60.0) -> Iterator[object]:
    app = make_app(run.url, ack_timeout)
    try:
        yield app
    finally:
        app.close()


def test_two_thousand_tasks_run_exactly_once_through_one_worker(run: Run) -> None:
    run.worker()
    with client(run) as app:
        started = time.monotonic()
        for i in range(2000):
            app.send_task("record", (str(i),))
        wait_until(lambda: len(run.lines("ran")) >= 2000, "2,000 tasks run", 120)
        took = time.monotonic() - started
    holds_for(lambda: len(run.lines("ran")) == 2000, "no task run twice, late", 1.0)
    ran = Counter(key for key, _ in run.lines("ran"))
    assert len(ran) == 2000 and set(ran.values()) == {1}
    print(f"2,000 tasks in {took:.2f} s: {2000 / took:.0f} tasks/s")


def test_a_countdown_task_waits_in_the_broker_and_runs_on_time(run: Run) -> None:
    run.worker()
    with client(run) as app:
        sent = time.time()
        app.send_task("record", ("later",), countdown=3)
        app.send_task("record", ("now",))
        wait_until(lambda: len(run.lines("ran")) == 2, "both tasks", 15)
    at = {key: float(when) for key, when in run.lines("ran")}
    assert at["now"] - sent < 1.0
    assert 3.0 <= at["later"] - sent < 4.0, at["later"] - sent


def test_priorities_order_what_a_worker_takes(run: Run) -> None:
    with client(run) as app:
        for priority in (3, 9, 0, 6, 1, 8):
            app.send_task("record", (str(priority),), priority=priority)
        app.send_task("record", ("none",))  # no priority: 0, as on RabbitMQ
    run.worker(concurrency=1)  # prefetch 1 (multiplier 4 x 1 would take four at once)
    wait_until(lambda: len(run.lines("ran")) == 7, "seven tasks", 30)
    order = [key for key, _ in run.lines("ran")]
    assert order[:4] == ["9", "8", "6", "3"] and set(order[4:]) == {"1", "0", "none"}


def test_results_through_rpc_and_retries_with_countdown(run: Run) -> None:
    run.worker()
    with client(run) as app:
        assert app.send_task("add", (2, 3)).get(timeout=30) == 5
        app.send_task("flaky", ("f",))
        wait_until(lambda: len(run.lines("try")) == 3, "three tries", 30)
    assert [retries for _, retries, _ in run.lines("try")] == ["0", "1", "2"]


def test_celery_inspect_ping_answers(run: Run) -> None:
    run.worker()
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.integrations.celery_app", "inspect", "ping", "--timeout", "5"],
        cwd=ROOT, env=run.env(), capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "pong" in out.stdout and "w1@" in out.stdout


def test_an_acks_late_task_whose_worker_is_killed_runs_again_once(run: Run) -> None:
    doomed = run.worker(SLOW_SECONDS="60")
    with client(run) as app:
        app.send_task("slow", ("k",))
        wait_until(lambda: len(run.lines("start")) == 1, "the task's start", 30)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        run.worker(SLOW_SECONDS="0")
        wait_until(lambda: len(run.lines("done")) == 1, "the task run again", 60)
    holds_for(lambda: len(run.lines("start")) == 2, "no third start", 1.0)
    assert [key for key, _ in run.lines("start")] == ["k", "k"]
    assert [key for key, _ in run.lines("done")] == ["k"]


@pytest.mark.parametrize("extended", [True, False])
def test_a_task_three_times_longer_than_the_ack_timeout_runs_once(tmp_path: Path, extended: bool) -> None:
    """The broker's --ack-timeout is 1 s and the task takes 3 s: with the transport extending its
    deadline (ack_timeout 1 s, renewed every third of it) it runs once; without (ack_timeout 0:
    the broker's timeout applies, nothing extends it) the broker redelivers it meanwhile."""
    run = Run(tmp_path, "--ack-timeout", "1")
    try:
        run.worker(SLOW_SECONDS="3", ACK_TIMEOUT="1" if extended else "0")
        with client(run) as app:
            app.send_task("slow", ("long",))
            wait_until(lambda: len(run.lines("done")) >= 1, "the task's end", 30)
        if extended:  # two more timeouts: a redelivery would start it again
            holds_for(lambda: len(run.lines("start")) == 1, "a single start", 2.0)
        else:
            wait_until(lambda: len(run.lines("start")) > 1, "a redelivery starting it again", 30)
    finally:
        run.close()


def test_celery_events_sees_the_workers_task_events(run: Run) -> None:
    run.worker("-E")
    events = logging_to(
        run.tmp / "events.txt", [sys.executable, "-m", "celery", "-A", "tests.integrations.celery_app", "events",
                                 "--dump"], cwd=ROOT, env=run.env(),
    )
    try:
        with client(run) as app:

            def succeeded() -> bool:
                """`celery events` binds its queue once it has started: a task is sent at each
                poll until it sees one succeed."""
                if "task succeeded" in (run.tmp / "events.txt").read_text():
                    return True
                app.send_task("record", ("seen",))
                return False

            wait_until(succeeded, "`celery events` to see a task succeed", 60, interval=0.5)
    finally:
        events.terminate()
        events.wait(30)
    assert "task received" in (run.tmp / "events.txt").read_text()


def test_the_example_runs_as_its_docstring_says(run: Run) -> None:
    """examples/celery_tasks.py: its worker command, then the example as a script."""
    env = {**run.env(), "STOMPMQ_URL": run.url}
    log = run.tmp / "example-worker.log"
    proc = logging_to(
        log, [sys.executable, "-m", "celery", "-A", "examples.celery_tasks", "worker", "--pool", "threads", "-c", "4",
              "-l", "INFO"], cwd=ROOT, env=env,
    )
    run.workers.append(proc)
    out = subprocess.run([sys.executable, "-m", "examples.celery_tasks"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr + log.read_text()
    assert "2 + 3 = 5" in out.stdout and "4 + 5 = 9" in out.stdout and "crunch: done" in out.stdout
    wait_until(lambda: "add: 1 + 1 = 2" in log.read_text(), "the priority task's line")
    assert log.read_text().count("crunch: 15 s done") == 1


@pytest.mark.browser
def test_flower_lists_the_workers_tasks_in_chromium(run: Run) -> None:
    """Flower, Celery's monitor, on stompmq: its task list (from the workers' events) and its
    worker list (from ``inspect`` through the pidbox), read in headless Chromium."""
    pytest.importorskip("flower")
    run.worker("-E")
    port = free_port()
    log = run.tmp / "flower.log"
    flower = logging_to(
        log, [sys.executable, "-m", "celery", "-A", "tests.integrations.celery_app", "flower", f"--port={port}",
              "--address=127.0.0.1"], cwd=ROOT, env=run.env(),
    )
    run.workers.append(flower)
    wait_until(lambda: "Connected to stompmq://" in log.read_text() or flower.poll() is not None, "Flower's start", START)
    assert flower.poll() is None, log.read_text()
    with chromium() as browser, client(run) as app:
        tasks = f"http://127.0.0.1:{port}/tasks"
        first: list[str] = []
        sent_at = [0.0]

        def one_listed() -> bool:
            # Flower's event receiver binds its queue once it has started: send (twice a second)
            # until it lists one
            if time.monotonic() - sent_at[0] > 0.5:
                first.append(app.send_task("record", (f"probe{len(first)}",)).id)
                sent_at[0] = time.monotonic()
            browser.get(tasks)
            return any(task_id in browser.page_source for task_id in first)

        wait_until(one_listed, "Flower's task list showing a task", START)
        ids = [app.send_task("record", (f"flower{i}",)).id for i in range(3)]

        def all_listed() -> bool:
            browser.get(tasks)
            return all(task_id in browser.page_source for task_id in ids)

        wait_until(all_listed, "Flower's task list showing the three tasks", START)
        assert "SUCCESS" in browser.page_source
        browser.get(f"http://127.0.0.1:{port}/workers")
        wait_until(lambda: "w1@" in browser.page_source, "Flower's worker list", START)
