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
the first and to the last of the held messages delivered again on a survivor, and the lease;
and, after ``--warmup`` of steady load, the survivors' rate over three windows of ``--settle``
each (before the kill, from it, after that), read from one series of samples.  ``--controls N``
interleaves N rounds that do the same without the kill: how much the windows move anyway.

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
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import SynchronizedArray
from multiprocessing.synchronize import Event
from typing import TypeAlias, cast

from benchmarks.proc import cpu_seconds, tree_cpu_seconds
from benchmarks.stompload import Client, send_frame
from tests.support.local_broker import LocalBroker
from tests.support.postgres_server import PostgresServer

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
        except TimeoutError:
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


@dataclass
class Takeover:
    """One fail-over round: seconds from the kill to the first and last held message delivered
    again, and the survivors' msg/s over three windows of ``--settle`` each, counted by the same
    consumers: before the kill, from it, and after that (``after``: how much the rate moves
    between two windows without a kill in them, the machine's noise)."""

    first: float
    last: float
    before: float
    during: float
    after: float
    load: float


class Sampled:
    """The consumers' total, sampled every ``SAMPLE`` seconds by a thread of the main process, so
    that each window's rate is read from one series of samples (not from reads made at different
    moments around the kill and the waits)."""

    SAMPLE = 0.05

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), self.workers.received()))
            time.sleep(self.SAMPLE)

    def rate(self, start: float, end: float) -> float:
        """msg/s between the samples nearest ``start`` and ``end``."""
        a = min(self.samples, key=lambda s: abs(s[0] - start))
        b = min(self.samples, key=lambda s: abs(s[0] - end))
        return (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else 0.0

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def failover(args: argparse.Namespace, pg: PostgresServer, kill: bool = True) -> Takeover:
    """One kill -9 of a broker holding ``--held`` unacked messages under load on the two others
    (after ``--warmup`` seconds of that load, so that the windows do not measure the brokers'
    start): see ``Takeover``.  ``kill`` False: a control round, the same in every step but the
    kill (its windows show what the rate does at that moment of a round without a take-over)."""
    dest = f"/queue/failover-{os.getpid()}-{time.monotonic_ns()}"
    with brokers(pg, 3, args.lease) as (victim, *survivors):
        workers = Workers(2, 2)
        counts = None
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
            time.sleep(args.warmup)  # the survivors' steady rate; the claims reach the database
            counts = Sampled(workers)
            time.sleep(args.settle)  # the window before the kill
            workers.check()
            killed = time.monotonic()
            times = [0.0]
            if kill:
                os.kill(pid(victim), signal.SIGKILL)
                assert victim.proc is not None
                victim.proc.wait(TIMEOUT)
                times.clear()
            else:
                held.clear()
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
            time.sleep(max(0.0, killed + 2 * args.settle - time.monotonic()))
            load = os.getloadavg()[0]
        finally:
            if counts is not None:
                counts.close()
            workers.close()
    assert counts is not None
    return Takeover(min(times), max(times), counts.rate(killed - args.settle, killed),
                    counts.rate(killed, killed + args.settle), counts.rate(killed + args.settle, killed + 2 * args.settle),
                    load)


def _kept(rate: float, before: float) -> float:
    return rate / before if before else 0.0


def _windows(args: argparse.Namespace, t: Takeover) -> str:
    return (f"survivors' msg/s over {args.settle:g} s before {t.before:,.0f}, from the kill {t.during:,.0f}"
            f" ({100 * _kept(t.during, t.before):.0f} %), after that {t.after:,.0f}"
            f" ({100 * _kept(t.after, t.before):.0f} %); load average {t.load:.1f}")


def _ratios(kept: list[float]) -> str:
    return (f"{100 * min(kept):.0f}-{100 * max(kept):.0f} % (median {100 * statistics.median(kept):.0f} %,"
            f" {sum(k < 0.7 for k in kept)} of {len(kept)} below 70 %)")


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
    parser.add_argument("--controls", type=int, default=0,
                        help="rounds without the kill, each before one of the first fail-overs")
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
            rounds: list[Takeover] = []
            controls: list[Takeover] = []
            for r in range(args.rounds):
                if r < args.controls:  # interleaved with the kills, so under the same load
                    controls.append(failover(args, pg, kill=False))
                    print(f"control {r + 1} (no kill): {_windows(args, controls[-1])}", flush=True)
                rounds.append(failover(args, pg))
                print(f"fail-over {r + 1}: kill -9 of a broker holding {args.held} unacked; first taken over after"
                      f" {rounds[-1].first:.2f} s, last after {rounds[-1].last:.2f} s (lease {args.lease:g} s);"
                      f" {_windows(args, rounds[-1])}", flush=True)
            lasts = [t.last for t in rounds]
            print(f"{args.rounds} fail-overs: last held message taken over after {min(lasts):.2f}-{max(lasts):.2f} s"
                  f" (median {statistics.median(lasts):.2f} s)", flush=True)
            for name, taken in (("fail-overs", rounds), ("controls (no kill)", controls)):
                if taken:
                    print(f"{name}: {_ratios([_kept(t.during, t.before) for t in taken])} of the rate before in the"
                          f" window from the kill, {_ratios([_kept(t.after, t.before) for t in taken])} in the one"
                          f" after it", flush=True)
        print(f"load average {os.getloadavg()[0]:.1f}")
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
