"""Several stompmq brokers on one PostgreSQL database: aggregate rate, CPU per message, fail-over.

Starts a throw-away PostgreSQL server (``tests/support/postgres_server.py``, durable) and, on a fresh database
each time, 1, 2, then 3 broker processes (``tests/support/local_broker.py``), loopback only.

Throughput: for an auto-ack queue and a client-individual queue (prefetch ``--prefetch``,
every message acked), one producer and one consumer per broker on ONE queue shared by all
brokers.  Producers send ``--batch`` messages per receipt, a few batches unanswered, and pause
while more than ``--backlog`` messages are sent but not yet received.  After ``--warmup``
seconds, the consumers' deliveries over ``--seconds``, ``--repeat`` times on new queues (the
table shows the run of median rate): aggregate msg/s, each broker's consumer's share, and CPU
per message of the brokers, of PostgreSQL (postmaster and all its processes) and of the load
processes, from ``/proc``; "cores busy" is the three together per wall second.

Fail-over: three brokers, a producer and a client-ack consumer on each of two (the survivors)
under steady load, and on the third (the victim) a client-ack consumer that takes ``--held``
messages and acks none.  The victim is ``kill -9``ed; printed are the times from the kill to
the first and to the last of the held messages delivered again on a survivor, and the lease.

  python -m benchmarks.cluster --quick              # about two minutes
  python -m benchmarks.cluster                      # the figures in docs/benchmarks.md
  python -m benchmarks.cluster --brokers 1 2 --parts throughput --seconds 30

Every wait is bounded; every broker and the server are stopped on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import multiprocessing as mp
import os
import queue
import signal
import statistics
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import SynchronizedArray
from multiprocessing.synchronize import Event

from benchmarks.proc import cpu_seconds, tree_cpu_seconds
from tests.support.local_broker import LocalBroker
from tests.support.postgres_server import PostgresServer
from benchmarks.stompload import Client, send_frame

#: Seconds any single wait (a connection, a receipt, a worker's start) may take.
TIMEOUT = 60.0
#: Seconds a consumer's read waits before it looks at the stop flag again.
POLL = 0.5
#: Receipted batches a producer may have unanswered.
IN_FLIGHT = 4
ACK_MODES = {"auto": "auto", "client": "client-individual"}

#: Shared counters, one slot per process (``Array(..., lock=False)``: each slot has one writer).
Counts: TypeAlias = "SynchronizedArray[int]"


@dataclass
class Load:
    """What the load processes share: one slot per producer in ``sent``, per consumer in
    ``received`` (each written by its own process only), and the flag that stops them."""

    sent: Counts
    received: Counts
    stop: Event
    redelivered: Queue[tuple[float, bytes]]


def connect(port: int) -> Client:
    return Client("127.0.0.1", port, timeout=TIMEOUT, retry_until=time.monotonic() + TIMEOUT)


def produce(port: int, dest: str, slot: int, load: Load, batch: int, backlog: int, body_size: int) -> None:
    """Batches of unique bodies, each ending in a receipt, ``IN_FLIGHT`` batches unanswered at
    most (so a commit's latency does not bound the rate); paused while the queue holds more
    than ``backlog``."""
    client = connect(port)
    seq = answered = 0
    while not load.stop.is_set():
        if sum(load.sent[:]) - sum(load.received[:]) > backlog:
            time.sleep(0.001)
            continue
        for _ in range(batch):
            client.queue(send_frame(dest, (b"%d-%d " % (slot, seq)).ljust(body_size, b"x")))
            seq += 1
        client.flush(wait=False)
        load.sent[slot] += batch
        while client.receipts - answered >= IN_FLIGHT:
            answered += 1
            client.wait_receipt(f"flush-{answered}", "a batch's receipt")
    client.close()


def consume(port: int, dest: str, slot: int, load: Load, ack: str, prefetch: int) -> None:
    """Count every MESSAGE (acking each in client mode); report redelivered ones with their time."""
    client = connect(port)
    client.subscribe(dest, "1", ack, prefetch if ack != "auto" else None)
    client.settimeout(POLL)
    while not load.stop.is_set():
        try:
            frames = client.reader.read()
        except socket.timeout:
            continue
        acks = []
        count = 0
        for command, header, body in frames:
            if command != b"MESSAGE":
                continue
            count += 1
            if ack != "auto":
                acks.append(client.ack(cast(bytes, header)))  # a bytearray does as well
            if b"\nredelivered:true" in header and body is not None:
                load.redelivered.put((time.monotonic(), body.split(b" ", 1)[0]))
        if acks:
            client.send(b"".join(acks))
        load.received[slot] += count
    client.close()


def run_worker(target: Callable[..., None], *args: object) -> None:
    """Process entry point: a failure prints its traceback and exits 1 (the main process checks)."""
    try:
        target(*args)
    except Exception:
        traceback.print_exc()
        sys.exit(1)


class Workers:
    """The load processes of one measurement; all stopped (and killed if stuck) on exit."""

    def __init__(self, producers: int, consumers: int) -> None:
        ctx = mp.get_context("fork")
        self.ctx = ctx
        self.load = Load(ctx.Array(ctypes.c_longlong, producers, lock=False),
                         ctx.Array(ctypes.c_longlong, consumers, lock=False),
                         ctx.Event(), ctx.Queue())
        self.procs: list[BaseProcess] = []

    def start(self, target: Callable[..., None], *args: object) -> None:
        proc = self.ctx.Process(target=run_worker, args=(target, *args), daemon=True)
        proc.start()
        self.procs.append(proc)

    def check(self) -> None:
        dead = [p for p in self.procs if not p.is_alive()]
        if dead:
            raise SystemExit(f"a load process failed (exit codes {[p.exitcode for p in dead]}); see above")

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs if p.pid is not None)

    def received(self) -> int:
        return sum(self.load.received[:])

    def wait_flowing(self) -> None:
        """Until every consumer has had a message (its subscription is live)."""
        deadline = time.monotonic() + TIMEOUT
        while not all(self.load.received[:]):
            self.check()
            if time.monotonic() > deadline:
                raise SystemExit(f"no messages reached some consumer within {TIMEOUT:g} s: {self.load.received[:]}")
            time.sleep(0.05)

    def close(self) -> None:
        self.load.stop.set()
        for proc in self.procs:
            proc.join(TIMEOUT)
            if proc.is_alive():
                proc.kill()
                proc.join()


@contextlib.contextmanager
def brokers(pg: PostgresServer, count: int, lease: float) -> Iterator[list[LocalBroker]]:
    """``count`` brokers on a fresh database of ``pg``, stopped on exit."""
    url = pg.new_database()
    with contextlib.ExitStack() as stack:
        started = []
        for _ in range(count):
            broker = LocalBroker("--store", url, "--lease", str(lease))
            stack.callback(broker.stop)
            broker.start()
            started.append(broker)
        yield started


def pid(broker: LocalBroker) -> int:
    assert broker.proc is not None
    return broker.proc.pid


@dataclass
class Row:
    brokers: int
    ack: str
    rate: float
    low: float
    high: float
    shares: list[float]
    broker_us: float
    postgres_us: float | None
    clients_us: float
    cores: float


def server_cpu(pg: PostgresServer) -> float | None:
    """CPU seconds the PostgreSQL server used so far; None for one the benchmark did not start."""
    pid = pg.postmaster_pid()
    return None if pid is None else tree_cpu_seconds(pid)


def measure(args: argparse.Namespace, pg: PostgresServer, started: list[LocalBroker], ack: str) -> Row:
    """One producer and one consumer per broker on one queue; the figures of the timed window."""
    n = len(started)
    dest = f"/queue/cluster-{ack}-{n}-{os.getpid()}-{time.monotonic_ns()}"
    workers = Workers(n, n)
    try:
        for slot, broker in enumerate(started):
            workers.start(consume, broker.port, dest, slot, workers.load, ACK_MODES[ack], args.prefetch)
        for slot, broker in enumerate(started):
            workers.start(produce, broker.port, dest, slot, workers.load, args.batch, args.backlog, args.body_size)
        workers.wait_flowing()
        time.sleep(args.warmup)
        workers.check()
        before = [sum(cpu_seconds(pid(b)) for b in started), server_cpu(pg), workers.cpu()]
        per0, wall0 = workers.load.received[:], time.monotonic()
        time.sleep(args.seconds)
        per1, wall1 = workers.load.received[:], time.monotonic()
        after = [sum(cpu_seconds(pid(b)) for b in started), server_cpu(pg), workers.cpu()]
        workers.check()
    finally:
        workers.close()
    got = [b - a for a, b in zip(per0, per1, strict=True)]
    messages = max(sum(got), 1)
    used = [None if a is None or b is None else b - a for a, b in zip(before, after, strict=True)]
    broker_cpu, postgres_cpu, clients_cpu = used
    assert broker_cpu is not None and clients_cpu is not None
    wall = wall1 - wall0
    rate = sum(got) / wall
    return Row(n, ack, rate, rate, rate, [g / messages for g in got], 1e6 * broker_cpu / messages,
               None if postgres_cpu is None else 1e6 * postgres_cpu / messages, 1e6 * clients_cpu / messages,
               sum(u for u in used if u is not None) / wall)


def median_run(runs: list[Row]) -> Row:
    """The run of median rate, with the lowest and highest rate of all."""
    ranked = sorted(runs, key=lambda r: r.rate)
    middle = ranked[(len(ranked) - 1) // 2]
    middle.low, middle.high = ranked[0].rate, ranked[-1].rate
    return middle


def print_rows(rows: list[Row]) -> None:
    one = {r.ack: r.rate for r in rows if r.brokers == 1}
    print("\n| brokers | ack | msg/s (median run) | lowest-highest | vs one broker | per broker | broker CPU µs/msg | postgres CPU µs/msg"
          " | clients CPU µs/msg | cores busy |")
    print("|---:|---|---:|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        ratio = f"{r.rate / one[r.ack]:.2f}" if r.ack in one else "-"
        postgres = "-" if r.postgres_us is None else f"{r.postgres_us:.1f}"
        shares = "/".join(f"{100 * s:.0f}" for s in r.shares) + " %"
        print(f"| {r.brokers} | {r.ack} | {r.rate:,.0f} | {r.low:,.0f}-{r.high:,.0f} | {ratio} | {shares} | {r.broker_us:.1f} | {postgres}"
              f" | {r.clients_us:.1f} | {r.cores:.2f} |")


def failover(args: argparse.Namespace, pg: PostgresServer) -> tuple[float, float, float, float]:
    """One kill -9 of a broker holding ``--held`` unacked messages under load on the two others:
    seconds from the kill to the first and the last held message delivered again, and the
    survivors' msg/s over the ``--settle`` before the kill and from the kill to the last (or to
    ``--settle`` after the kill, whichever is later)."""
    dest = f"/queue/failover-{os.getpid()}-{time.monotonic_ns()}"
    with brokers(pg, 3, args.lease) as (victim, *survivors):
        workers = Workers(2, 2)
        try:
            for slot, broker in enumerate(survivors):
                workers.start(consume, broker.port, dest, slot, workers.load, "client-individual", args.prefetch)
            for slot, broker in enumerate(survivors):
                workers.start(produce, broker.port, dest, slot, workers.load, args.batch, args.backlog, args.body_size)
            workers.wait_flowing()
            holder = connect(victim.port)
            holder.subscribe(dest, "held", "client-individual", args.held)
            for i in range(args.held):  # through the victim, so that its own consumer gets them
                holder.queue(send_frame(dest, b"held-%d " % i))
            holder.flush()
            held = {holder.message()[2].split(b" ", 1)[0] for _ in range(args.held)}  # type: ignore[union-attr]
            settling, before0 = time.monotonic(), workers.received()
            time.sleep(args.settle)  # the deliveries' claims reach the database (write-behind)
            workers.check()
            received0 = workers.received()
            killed = time.monotonic()
            before = (received0 - before0) / (killed - settling)
            os.kill(pid(victim), signal.SIGKILL)
            assert victim.proc is not None
            victim.proc.wait(TIMEOUT)
            times = []
            deadline = killed + 3 * args.lease + TIMEOUT
            while held:
                workers.check()
                try:
                    at, body = workers.load.redelivered.get(timeout=max(0.0, min(POLL, deadline - time.monotonic())))
                except queue.Empty:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{len(held)} held messages not delivered again within"
                                         f" {deadline - killed:.0f} s of the kill") from None
                    continue
                if body in held:
                    held.discard(body)
                    times.append(at - killed)
            # At least --settle after the kill, as before it: a take-over of 0.3 s is too short a
            # window for a rate on a busy machine.
            time.sleep(max(0.0, killed + args.settle - time.monotonic()))
            rate = (workers.received() - received0) / (time.monotonic() - killed)
        finally:
            workers.close()
    return min(times), max(times), before, rate


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run: 2 s warm-up, 5 s window, one fail-over")
    parser.add_argument("--parts", nargs="+", choices=["throughput", "failover"], default=["throughput", "failover"])
    parser.add_argument("--brokers", type=int, nargs="+", default=[1, 2, 3], help="broker counts to measure")
    parser.add_argument("--ack", nargs="+", choices=list(ACK_MODES), default=list(ACK_MODES))
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load before the window")
    parser.add_argument("--seconds", type=float, default=15.0, help="the timed window")
    parser.add_argument("--repeat", type=int, default=3, help="windows per broker count and ack mode, each on a new queue")
    parser.add_argument("--prefetch", type=int, default=1000, help="prefetch of the client-ack consumers")
    parser.add_argument("--batch", type=int, default=100, help="SENDs per receipt")
    parser.add_argument("--backlog", type=int, default=5000, help="most messages sent but not yet received")
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--lease", type=float, default=10.0, help="the brokers' --lease (seconds)")
    parser.add_argument("--held", type=int, default=100, help="unacked messages the killed broker holds")
    parser.add_argument("--settle", type=float, default=0.5, help="seconds between the held deliveries and the kill")
    parser.add_argument("--rounds", type=int, default=3, help="fail-overs")
    args = parser.parse_args(argv)
    if args.quick:
        args.warmup, args.seconds, args.repeat, args.rounds = 2.0, 5.0, 1, 1
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    pg = PostgresServer(durable=True).start()
    try:
        print(f"PostgreSQL durable on port {pg.port}; load average {os.getloadavg()[0]:.1f}", flush=True)
        if "throughput" in args.parts:
            rows = []
            for n in args.brokers:
                with brokers(pg, n, args.lease) as started:
                    for ack in args.ack:
                        runs = []
                        for _ in range(args.repeat):
                            runs.append(measure(args, pg, started, ack))
                            print(f"{n} broker(s), {ack} ack: {runs[-1].rate:,.0f} msg/s, shares"
                                  f" {'/'.join(f'{100 * s:.0f}' for s in runs[-1].shares)} %", flush=True)
                        rows.append(median_run(runs))
            print_rows(rows)
        if "failover" in args.parts:
            lasts, kept = [], []
            for r in range(args.rounds):
                first, last, before, rate = failover(args, pg)
                lasts.append(last)
                kept.append(rate / before if before else 0.0)
                print(f"fail-over {r + 1}: kill -9 of a broker holding {args.held} unacked; first taken over after"
                      f" {first:.2f} s, last after {last:.2f} s (lease {args.lease:g} s); survivors {before:,.0f}"
                      f" msg/s before, {rate:,.0f} meanwhile ({100 * kept[-1]:.0f} %)", flush=True)
            print(f"{args.rounds} fail-overs: last held message taken over after {min(lasts):.2f}-{max(lasts):.2f} s"
                  f" (median {statistics.median(lasts):.2f} s); survivors kept {100 * min(kept):.0f}-"
                  f"{100 * max(kept):.0f} % of their rate (median {100 * statistics.median(kept):.0f} %)", flush=True)
        print(f"load average {os.getloadavg()[0]:.1f}")
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
