"""The same Celery app and worker settings on stompmq and on RabbitMQ (AMQP), in one sitting:
no-op tasks per second through one worker (threads pool, 4) and enqueue-to-start latency.

    python -m benchmarks.celery_vs_rabbitmq [--tasks 5000] [--amqp amqp://guest:guest@127.0.0.1:5672//]

stompmq is a throw-away local broker (``tests/support/local_broker.py``, SQLite); RabbitMQ must be
running (``start-rabbitmq.sh`` of the peers starts it with AMQP on 127.0.0.1:5672).  For each
broker a worker is started and waits, idle; then the client publishes ``--tasks`` tasks, each
carrying its send time, as fast as ``send_task`` goes.  Rate: tasks over the time from the first
send to the last task's start; latency: each task's start minus its send time (one clock: the
worker and the client run on this machine).  A queue of its own per run, deleted on RabbitMQ after.

This module is also the worker's app (``celery -A benchmarks.celery_vs_rabbitmq worker``): the
broker comes from ``BENCH_BROKER``, the queue from ``BENCH_QUEUE``, the record file from
``RECORD_FILE``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celery import Celery

import stompmq.integrations.celery  # noqa: F401  (registers stompmq://)
from tests.support.local_broker import ROOT, LocalBroker

app = Celery("bench", broker=os.environ.get("BENCH_BROKER", "memory://"))
app.conf.update(task_default_queue=os.environ.get("BENCH_QUEUE", "bench"), task_ignore_result=True,
                worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)


@app.task(name="bench.noop")
def noop(sent: float) -> None:
    now = time.time()
    fd = os.open(os.environ["RECORD_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{sent:.6f} {now:.6f}\n".encode())
    finally:
        os.close(fd)


def measure(broker: str, tasks: int, work: Path) -> tuple[float, float, float]:
    """(tasks/s, p50 ms, p99 ms) of one worker on ``broker``."""
    queue = f"bench_{os.getpid()}_{time.monotonic_ns()}"
    record = work / f"{queue}.txt"
    record.touch()
    env = dict(os.environ, BENCH_BROKER=broker, BENCH_QUEUE=queue, RECORD_FILE=str(record),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = work / f"{queue}.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "benchmarks.celery_vs_rabbitmq", "worker", "--pool", "threads",
         "-c", "4", "-l", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{queue}@%h"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    client = Celery("bench", broker=broker)
    client.conf.update(task_default_queue=queue, task_ignore_result=True)
    try:
        deadline = time.monotonic() + 60
        while " ready." not in log.read_text():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the worker on {broker} did not start:\n{log.read_text()}")
            time.sleep(0.1)
        first = time.time()
        for _ in range(tasks):
            client.send_task("bench.noop", (time.time(),))
        deadline = time.monotonic() + 300
        while (done := record.read_text().count("\n")) < tasks:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {done} of {tasks} tasks ran on {broker}")
            time.sleep(0.05)
        rows = [tuple(map(float, line.split())) for line in record.read_text().splitlines()]
        last = max(start for _, start in rows)
        latencies = sorted((start - sent) * 1000 for sent, start in rows)
        return tasks / (last - first), statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]
    finally:
        worker.terminate()
        worker.wait(60)
        if broker.startswith("amqp"):
            with client.connection_for_write() as conn:
                conn.default_channel.queue_delete(queue)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--amqp", default="amqp://guest:guest@127.0.0.1:5672//")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="celery-bench-") as tmp, LocalBroker() as url:
        stomp = "stompmq://" + url.removeprefix("stomp://") + "//"
        results = {"stompmq": measure(stomp, args.tasks, Path(tmp)), "RabbitMQ": measure(args.amqp, args.tasks, Path(tmp))}
    print(f"{args.tasks} no-op tasks, one worker (threads pool, 4), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| broker | tasks/s | enqueue-to-start p50 ms | p99 ms |\n|---|---|---|---|")
    for name, (rate, p50, p99) in results.items():
        print(f"| {name} | {rate:,.0f} | {p50:.1f} | {p99:.1f} |")
    print(f"stompmq / RabbitMQ: {results['stompmq'][0] / results['RabbitMQ'][0]:.2f}x")


if __name__ == "__main__":
    main()
