"""The broker's whole per-message path in one process, in virtual time: repeatable cost figures.

Wall-clock benchmarks on a shared machine are noisy, and worse, the broker's behaviour depends
on timing (whether a message is still buffered when the store flushes, whether a burst outruns
the ready window), so one slow moment changes what the broker does, not only how long it takes.
This drives the same code as a connection (``FrameParser.feed`` on 256 KiB reads, ``Broker.handle_frames``
per read, the MESSAGE encoder into a real ``ConnectionOutbox``, ``Broker.written`` after each
socket write) over a real SQLite store with its database thread, but the clock is a trio
``MockClock`` that moves a fixed ``--us-per-message`` per message read: the flush timer, the
paging and the settling happen at the same points on every run.  Run it under
``valgrind --tool=callgrind`` (with ``--callgrind`` it only collects the measured part) for
instruction counts, or read its CPU figure (process CPU time, database thread included).

Scenarios:

* ``keep-up``: one producer, one auto-ack consumer that takes everything written after each read
  (the in-memory case: the backlog never leaves the window); with ``--ack client-individual``
  (or ``client``) the consumer subscribes with ``--prefetch`` and ACKs every message it took,
  the ACKs of one write in one read, as ``benchmarks/load.py --scenario queue-ack`` does;
* ``standing``: as keep-up, but ``--backlog`` messages were sent first while the consumer took
  nothing, and its socket then takes everything only after every second read: the outbox
  stays at its limit and a standing backlog in the ready window, which every measured message
  joins and leaves (what ``benchmarks/load.py --scenario queue`` shows, where a producer's read
  often finds the consumer's output still sending the one before);
* ``backlog``: the consumer subscribes only after ``--messages`` were sent, then drains them (the
  on-disk case: all but the window are paged back from the store);
* ``stalled``: the consumer stays subscribed but its socket takes nothing while the messages
  are sent, then it drains them: a backlog in a subscribed queue, held in the ready window as
  far as ``--window``/``--window-bytes`` allow and paged back from the store beyond it.  With
  the defaults the backlog lives on disk; with a window larger than the backlog it lives in
  memory, and the two runs differ in nothing else (the backlog on disk against the in-memory
  case);
* ``bursts``: ``--bursts`` bursts of ``--messages`` each into one broker, consumer slower than the
  producer by ``--consumer-share`` (it takes that fraction of each read's worth of output), so
  every burst builds a backlog; prints the cost of each burst.

  python -m benchmarks.engine --scenario keep-up --messages 100000
  valgrind --tool=callgrind --instr-atstart=no python -m benchmarks.engine --callgrind ...
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from benchmarks.proc import cpu_seconds
from stompmq.broker import Broker
from stompmq.broker.config import BrokerConfig
from stompmq.protocol import Frame, FrameParser
from stompmq.server.app import tune_gc
from stompmq.server.outbox import ConnectionOutbox
from stompmq.server.runtime import Runtime
from stompmq.storage.sqlite import SQLiteStore

READ_BYTES = 256 * 1024  # what Connection._reader receives at most per read


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread by role (main, db, reader), from /proc (Linux only)."""
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        role = "main" if thread is threading.main_thread() else thread.name.split()[0].removeprefix("stompmq-")
        try:
            used = cpu_seconds(os.getpid(), thread=thread.native_id)
        except OSError:
            continue
        out[role] = out.get(role, 0.0) + used
    return out


def toggle_callgrind(on: bool) -> None:
    """Start/stop callgrind's collection around the measured part (a no-op outside valgrind)."""
    try:
        import ctypes

        ctypes.CDLL(None)  # noqa: B018 - just to fail early outside Linux
    except OSError:
        return
    os.system(f"callgrind_control -i {'on' if on else 'off'} {os.getpid()} >/dev/null 2>&1")


class Pipeline:
    """A producer and a consumer session on one broker, fed and drained like connections are."""

    def __init__(self, broker: Broker, store: SQLiteStore, runtime: Runtime, clock: trio.testing.MockClock,
                 args: argparse.Namespace) -> None:
        self.broker, self.runtime, self.clock, self.args = broker, runtime, clock, args
        assert store._thread is not None
        # The database thread, and the reader thread of page reads when the store has one.
        self.threads = [store._thread] + ([store._reader[0]] if store._reader is not None else [])
        self.parser = FrameParser()
        self.ack_parser = FrameParser()  # the consumer connection's
        self.acked = 0  # ACKs the consumer sent (1.2 ack ids are 1, 2, ... on this session)
        self.producer = broker.open_session("p", "1.2", ConnectionOutbox())
        self.outbox = ConnectionOutbox()
        self.consumer = broker.open_session("c", "1.2", self.outbox)
        self.outbox.on_drain = lambda: broker.resume(self.consumer)
        body = b"x" * args.body_size
        frame = (b"SEND\ndestination:/queue/bench\ncontent-type:application/octet-stream\ncontent-length:%d\n\n"
                 % len(body)) + body + b"\0"
        self.frame = frame
        self.subscribed = False
        self.sent_total = 0  # bytes the consumer's socket took
        self.delivered = 0  # MESSAGE frames the consumer's socket took
        self.jobs = [0]  # jobs submitted to the store's threads
        for thread in self.threads:
            self._count_jobs(thread)

    def _count_jobs(self, thread: Any) -> None:
        submit = thread.submit

        def counted(*a: Any) -> Any:
            self.jobs[0] += 1
            return submit(*a)

        thread.submit = counted

    def subscribe(self) -> None:
        args = self.args
        self.broker.handle(self.consumer, Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/bench", "ack": args.ack,
                                                              "prefetch": str(args.prefetch)}))
        self.subscribed = True

    async def settle(self) -> None:
        """Let the commit loop and page reads run to completion (trio tasks and the database
        thread): what happens then depends on virtual time only, not on the thread's speed."""
        while True:
            await trio.testing.wait_all_tasks_blocked()
            before = self.jobs[0]
            for thread in self.threads:
                await thread.call(int)  # a thread runs jobs in order: all earlier ones are done
            await trio.testing.wait_all_tasks_blocked()
            if self.jobs[0] == before + len(self.threads):  # nothing new was queued meanwhile
                return

    async def write(self, share: float = 1.0) -> int:
        """The consumer's socket takes ``share`` of what waits in the outbox; returns bytes sent."""
        outbox = self.outbox
        if not outbox.size:
            return 0
        data = await outbox.take()
        sent = len(data) if share >= 1.0 else int(len(data) * share)
        if sent < len(data):  # the rest goes back to the front of the outbox
            outbox._chunks.insert(0, data[sent:])
        self.runtime.tick()
        outbox.sent(sent)
        self.sent_total += sent
        self.delivered += data.count(b"\0", 0, sent)  # every frame here is a MESSAGE (ends with NUL)
        if self.consumer.unsent:
            self.broker.written(self.consumer, self.sent_total)
        if self.args.ack != "auto" and self.delivered > self.acked:
            self.acknowledge()
        return sent

    def acknowledge(self) -> None:
        """The consumer ACKs every message it took so far, in one read (client: the last one only)."""
        first = self.acked + 1 if self.args.ack == "client-individual" else self.delivered
        data = b"".join(b"ACK\nid:%d\n\n\0" % i for i in range(first, self.delivered + 1))
        self.acked = self.delivered
        self.runtime.tick()
        self.broker.handle_frames(self.consumer, self.ack_parser.feed(data))

    async def send(self, count: int, share: float = 1.0, drain_each: bool = True, write_every: int = 1) -> None:
        """``count`` SENDs in 256 KiB reads; after each read (each ``write_every``-th) the
        consumer's writer runs."""
        per_read = max(1, READ_BYTES // len(self.frame))
        step = self.args.us_per_message * 1e-6 * per_read
        left = count
        store = self.broker.store
        reads = 0
        while left:
            n = min(per_read, left)
            left -= n
            reads += 1
            await store.wait_for_room()
            self.clock.jump(step)
            self.runtime.tick()
            self.broker.handle_frames(self.producer, self.parser.feed(self.frame * n))
            await self.settle()
            if drain_each and self.subscribed and reads % write_every == 0:
                await self.write(share)
                await self.settle()
                while self.args.ack != "auto" and self.outbox.size:  # its ACKs made room for more
                    await self.write(share)
                    await self.settle()

    async def drain(self, expected: int) -> None:
        """The consumer takes everything until ``expected`` messages were delivered in total."""
        idle = 0
        while self.delivered < expected:
            self.clock.jump(0.002)
            self.runtime.tick()
            self.broker.run_due()
            sent = await self.write()
            await self.settle()
            idle = 0 if sent else idle + 1
            if idle > 20000:
                raise RuntimeError(f"stuck: {self.delivered} of {expected} messages delivered")


def rows_written(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    finally:
        conn.close()


class Counting:
    """Rows the store inserted and deleted (wraps the backend's commit)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.inserted = self.deleted = self.pages = 0
        backend = store._backend
        commit: Callable[..., None] = backend.commit
        load = backend.load_ready
        read = backend.read_ready

        def counted_commit(group: Any) -> None:
            self.inserted += len(group.inserts)
            self.deleted += len(group.deletes)
            commit(group)

        def counted_load(*a: Any) -> Any:
            self.pages += 1
            return load(*a)

        backend.commit = counted_commit  # type: ignore[method-assign]
        backend.load_ready = counted_load  # type: ignore[method-assign,assignment]

        def counted_read(*a: Any) -> Any:
            self.pages += 1
            return read(*a)

        backend.read_ready = counted_read  # type: ignore[method-assign]


async def run(args: argparse.Namespace, clock: trio.testing.MockClock) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bench.db")
        store = SQLiteStore(path)
        counting = Counting(store)
        broker = Broker(store, BrokerConfig(window=args.window, window_bytes=args.window_bytes))
        runtime = Runtime(broker)
        await runtime.open()
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            pipe = Pipeline(broker, store, runtime, clock, args)
            # warm-up: a few reads, not measured
            pipe.subscribe()
            await pipe.send(2000)
            await pipe.drain(2000)
            if args.scenario == "standing":  # the backlog the measured messages queue behind
                await pipe.send(args.backlog, drain_each=False)
            if args.callgrind:
                toggle_callgrind(True)
            bursts = args.bursts if args.scenario == "bursts" else 1
            for burst in range(bursts):
                before_threads = thread_cpu()
                before_cpu, ins0, del0, pages0 = cpu(), counting.inserted, counting.deleted, counting.pages
                base = pipe.delivered
                if args.scenario == "keep-up":
                    await pipe.send(args.messages)
                elif args.scenario == "stalled":
                    await pipe.send(args.messages, drain_each=False)
                elif args.scenario == "standing":
                    await pipe.send(args.messages, write_every=2)
                elif args.scenario == "backlog":
                    broker.handle(pipe.consumer, Frame("UNSUBSCRIBE", {"id": "1"}))
                    pipe.subscribed = False
                    await pipe.send(args.messages)
                    pipe.subscribe()
                else:
                    await pipe.send(args.messages, share=args.consumer_share)
                await pipe.drain(base + args.messages + (args.backlog if args.scenario == "standing" else 0))
                used = cpu() - before_cpu
                split = " ".join(
                    f"{role}={(spent - before_threads.get(role, 0.0)) / args.messages * 1e6:.2f}"
                    for role, spent in thread_cpu().items()
                )
                print(f"scenario={args.scenario} burst={burst + 1} messages={args.messages} "
                      f"cpu_us_per_msg={used / args.messages * 1e6:.2f} rows_inserted={counting.inserted - ins0} "
                      f"rows_deleted={counting.deleted - del0} page_reads={counting.pages - pages0} threads_us: {split}", flush=True)
            if args.callgrind:
                toggle_callgrind(False)
            nursery.cancel_scope.cancel()
        await runtime.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", choices=["keep-up", "standing", "backlog", "stalled", "bursts"], default="keep-up")
    p.add_argument("--backlog", type=int, default=1000,
                   help="standing: messages waiting before the measured ones (default %(default)s)")
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--bursts", type=int, default=5)
    p.add_argument("--body-size", type=int, default=100)
    p.add_argument("--us-per-message", type=float, default=12.0,
                   help="virtual time a read of N messages takes: N times this (default %(default)s)")
    p.add_argument("--consumer-share", type=float, default=0.8,
                   help="bursts: the fraction of the outbox the consumer takes per read (default %(default)s)")
    p.add_argument("--ack", choices=["auto", "client", "client-individual"], default="auto",
                   help="the consumer's ack mode (default %(default)s)")
    p.add_argument("--prefetch", type=int, default=1000, help="the consumer's prefetch (client acks)")
    p.add_argument("--window", type=int, default=BrokerConfig().window,
                   help="ready messages a queue keeps in memory (default %(default)s)")
    p.add_argument("--window-bytes", type=int, default=BrokerConfig().window_bytes,
                   help="...and bytes of them (default %(default)s)")
    p.add_argument("--default-gc", action="store_true", help="keep Python's GC thresholds (no tune_gc)")
    p.add_argument("--callgrind", action="store_true", help="collect only the measured part (under callgrind)")
    args = p.parse_args()
    if not args.default_gc:
        tune_gc()  # what the broker process does at start
    clock = trio.testing.MockClock()
    start = time.perf_counter()
    trio.run(run, args, clock, clock=clock)
    print(f"wall {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
