#!/usr/bin/env python3
"""Management API figures: paging through many queues, and a /metrics scrape.

Starts ``stompmq`` in a subprocess on a fresh store, creates --queues queues (one message
each, pipelined SENDs, then one RECEIPT), then times every page of ``GET /api/queues`` at
--limit per page, and one ``GET /metrics`` (time and size; per-queue series are bounded by
--metrics-top-queues).

  python -m benchmarks.management_api --queues 100000                 # issue 14: < 100 ms per page
  python -m benchmarks.management_api --queues 10000 --store memory   # /metrics with 10,000 queues
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def populate(port: int, queues: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\0")
        chunk = bytearray()
        for i in range(queues):
            chunk += b"SEND\ndestination:/queue/bench-%08d\n\nx\0" % i
            if len(chunk) > 1 << 16:
                sock.sendall(chunk)
                chunk.clear()
        chunk += b"DISCONNECT\nreceipt:done\n\n\0"
        sock.sendall(chunk)
        data = b""
        while b"receipt-id:done" not in data:
            more = sock.recv(1 << 16)
            if not more:
                raise SystemExit("broker closed the connection: " + data.decode(errors="replace")[-300:])
            data += more


def get(url: str) -> tuple[float, bytes]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
    return time.perf_counter() - start, body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=100_000)
    parser.add_argument("--limit", type=int, default=1000, help="queues per page (the API's maximum is 1000)")
    parser.add_argument("--store", default="sqlite", choices=["sqlite", "memory"])
    parser.add_argument("--metrics-top-queues", type=int, default=100)
    args = parser.parse_args()
    port, http_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        store = "memory" if args.store == "memory" else f"sqlite:///{tmp}/bench.db"
        broker = subprocess.Popen(
            [sys.executable, "-m", "stompmq.cli", "--port", str(port), "--http-port", str(http_port),
             "--store", store, "--log-level", "WARNING", "--metrics-top-queues", str(args.metrics_top_queues)],
            cwd=ROOT,
        )
        try:
            base = f"http://127.0.0.1:{http_port}"
            for _ in range(300):
                try:
                    get(base + "/healthz")
                    break
                except OSError:
                    time.sleep(0.1)
            started = time.perf_counter()
            populate(port, args.queues)
            print(f"created {args.queues} queues in {time.perf_counter() - started:.1f} s ({args.store})")
            times, after, seen = [], "", 0
            while True:
                elapsed, body = get(f"{base}/api/queues?limit={args.limit}&after={after}")
                page = json.loads(body)
                times.append(elapsed * 1000)
                seen += len(page["items"])
                if page["next_after"] is None:
                    break
                after = page["next_after"]
            print(f"queue list: {len(times)} pages of {args.limit}, {seen} queues; per page ms: "
                  f"mean {statistics.mean(times):.1f} p50 {statistics.median(times):.1f} max {max(times):.1f}")
            elapsed, body = get(base + "/metrics")
            lines = body.count(b"\n")
            print(f"/metrics: {elapsed * 1000:.1f} ms, {len(body)} bytes, {lines} lines "
                  f"(top {args.metrics_top_queues} queues per-queue)")
        finally:
            broker.terminate()
            broker.wait(30)


if __name__ == "__main__":
    main()
