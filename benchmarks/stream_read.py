"""The stream read path without Spark: broker and reader CPU per entry (docs/benchmarks.md, sitting 9d).

  python -m benchmarks.stream_read --entries 200000 --rounds 3

Fills 4 streams with ``--entries`` 100-byte entries each (one pipelined producer), then reads
every stream from offset 0 with the Spark source's own reader (``stompmq.spark.source._read``:
the MESSAGE cutter and the Arrow record batches), one stream after the other, ``--rounds`` times.
Per round it prints the rate and the CPU per entry of the reader (this process) and of the
broker (from ``/proc``): on a machine shared with other work the rate swings with the load, the
CPU per entry much less, and their sum is what a Spark read costs besides Spark itself.

A local broker on a temporary SQLite store is started unless --url and --broker-pid are given.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from benchmarks.proc import cpu_seconds
from stompmq.spark.client import Connection
from stompmq.spark.source import Options, StreamRange, _read
from tests.support.local_broker import LocalBroker

STREAMS = 4
BODY = b"x" * 100


def fill(url: str, prefix: str, entries: int) -> None:
    with Connection(url) as conn:
        frame = b"SEND\ndestination:/stream/%s%d\ncontent-length:100\n\n" + BODY + b"\x00"
        for s in range(STREAMS):
            data = frame % (prefix.encode(), s)
            for done in range(0, entries, 1000):
                conn.sock.sendall(data * min(1000, entries - done))
            conn.stream_bounds(f"{prefix}{s}")  # answered once every SEND before it is committed


def read_round(opts: Options, prefix: str, entries: int) -> int:
    rows = 0
    for s in range(STREAMS):
        for batch in _read(opts, StreamRange(f"{prefix}{s}", 0, entries)):
            rows += batch.num_rows
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=200_000, help="entries per stream")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", help="a running broker (stomp://host:port); needs --broker-pid")
    parser.add_argument("--broker-pid", type=int)
    parser.add_argument("--prefix", default=f"read{os.getpid()}-")
    args = parser.parse_args(argv)
    if (args.url is None) != (args.broker_pid is None):
        parser.error("--url and --broker-pid go together")
    local = LocalBroker() if args.url is None else None
    with local if local is not None else contextlib.nullcontext(args.url) as url:
        pid = args.broker_pid if local is None else local.proc.pid  # type: ignore[union-attr]
        fill(url, args.prefix, args.entries)
        opts = Options(url, None, None, [])
        for n in range(args.rounds):
            wall, mine, broker = time.perf_counter(), time.process_time(), cpu_seconds(pid)
            rows = read_round(opts, args.prefix, args.entries)
            wall, mine, broker = time.perf_counter() - wall, time.process_time() - mine, cpu_seconds(pid) - broker
            print(f"round {n + 1}: {rows:,} entries in {wall:.2f} s = {rows / wall:,.0f} msg/s; CPU per entry:"
                  f" reader {mine / rows * 1e6:.1f} us, broker {broker / rows * 1e6:.1f} us,"
                  f" load {os.getloadavg()[0]:.1f}", flush=True)
            if rows != STREAMS * args.entries:
                raise SystemExit(f"read {rows} entries, expected {STREAMS * args.entries}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
