"""Dramatiq no-op messages per second on stompmq and on RabbitMQ, same app, same worker settings.

For each broker: a ``dramatiq benchmarks.dramatiq_app`` worker (``--processes 1 --threads 8``)
is started and waits on an empty queue; then this process enqueues N no-op messages (no
confirms, as Dramatiq's RabbitMQ broker defaults) and the figure is N over the time from the
first enqueue to the worker's N-th processed message (its middleware writes that time).  The
enqueue rate alone is printed too, and each message's enqueue-to-start latency (p50, p99). The
messages are sent as fast as ``send`` goes, so that latency includes the wait behind those
before (a broker that takes them faster builds a longer queue); ``--rate R`` paces the sends at
R a second instead, below what either broker takes, for the latency of a broker that keeps up.

    python -m benchmarks.dramatiq_bench [-n 20000] [--rate 500] [--amqp amqp://guest:guest@127.0.0.1:5672]

stompmq runs as a throw-away local broker (SQLite); RabbitMQ must already listen on --amqp
(its own benchmark scripts start it); ``--target stompmq`` measures stompmq alone.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.local_broker import ROOT, LocalBroker

THREADS = 8


def measure(url: str, n: int, rate: float | None) -> tuple[float, float, float, float]:
    """(enqueued messages/s, processed messages/s, p50 ms, p99 ms) for ``n`` no-op messages
    through ``url``, sent at ``rate`` a second (None: as fast as they go)."""
    with tempfile.TemporaryDirectory() as tmp:
        done = Path(tmp) / "done"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_BROKER": url, "BENCH_N": str(n),
               "BENCH_DONE": str(done)}
        worker = subprocess.Popen(
            [str(Path(sys.executable).with_name("dramatiq")), "benchmarks.dramatiq_app", "--processes", "1",
             "--threads", str(THREADS)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        try:
            os.environ.update(env)
            from . import dramatiq_app  # the same broker class and actor as the worker's

            time.sleep(5)  # the worker's imports and consumer start; nothing is queued yet
            start = time.time()
            for i in range(n):
                if rate is not None:
                    ahead = start + i / rate - time.time()
                    if ahead > 0:
                        time.sleep(ahead)
                dramatiq_app.noop.send(i)
            enqueued = time.time()
            deadline = time.monotonic() + 600
            while not done.exists():
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise SystemExit(f"the worker did not finish {n} messages on {url}")
                time.sleep(0.05)
            finished, *latencies = map(float, done.read_text().split())
            dramatiq_app.broker.close()
            latencies.sort()
            return (n / (enqueued - start), n / (finished - start), statistics.median(latencies),
                    latencies[int(len(latencies) * 0.99) - 1])
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--rate", type=float, help="messages sent a second (default: as fast as they go)")
    parser.add_argument("--amqp", default="amqp://guest:guest@127.0.0.1:5672")
    parser.add_argument("--target", choices=["stompmq", "rabbitmq"], help="measure this broker only (one per process)")
    args = parser.parse_args()
    if args.target is None:  # each broker in a process of its own: dramatiq_app picks its class at import
        for target in ("stompmq", "rabbitmq"):
            subprocess.run([sys.executable, "-m", "benchmarks.dramatiq_bench", "-n", str(args.n), "--amqp",
                            args.amqp, "--target", target, *(["--rate", str(args.rate)] if args.rate else [])],
                           cwd=ROOT, check=True)
        return
    if args.target == "stompmq":
        with LocalBroker() as url:
            sent, done, p50, p99 = measure(url, args.n, args.rate)
    else:
        sent, done, p50, p99 = measure(args.amqp, args.n, args.rate)
    print(f"{args.target:8}  {args.n} no-op messages, {THREADS} threads: enqueue {sent:,.0f} msg/s, "
          f"enqueue to processed {done:,.0f} msg/s, enqueue to start p50 {p50:,.1f} ms, p99 {p99:,.1f} ms",
          flush=True)


if __name__ == "__main__":
    main()
