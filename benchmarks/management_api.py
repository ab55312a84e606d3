"""Management API figures: paging through many queues, and a /metrics scrape.

Starts ``stompmq`` in a subprocess on a fresh store, creates --queues queues (one message
each, pipelined SENDs, then one RECEIPT), then times every page of ``GET /api/queues`` at
--limit per page, and one ``GET /metrics`` (time and size; per-queue series are bounded by
--metrics-top-queues).

  python -m benchmarks.management_api --queues 100000                 # a page should take < 100 ms
  python -m benchmarks.management_api --queues 10000 --store memory   # /metrics with 10,000 queues
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request

from benchmarks.stompload import Client, send_frame
from tests.support.broker_process import free_port
from tests.support.local_broker import LocalBroker

#: SENDs per write while populating.
BATCH = 1000


def populate(port: int, queues: int) -> None:
    """One message in each of ``queues`` queues, pipelined; returns once the broker handled them all."""
    client = Client("127.0.0.1", port, timeout=120)
    for i in range(queues):
        client.queue(send_frame(f"/queue/bench-{i:08d}", b"x"))
        if len(client.queued) == BATCH:
            client.send(b"".join(client.queued))
            client.queued.clear()
    client.disconnect()  # its receipt comes once the broker has read every SEND


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
    http_port = free_port()
    store = ["--store", "memory"] if args.store == "memory" else []
    broker = LocalBroker("--http-port", str(http_port), "--metrics-top-queues", str(args.metrics_top_queues), *store)
    with broker:
        base = f"http://127.0.0.1:{http_port}"
        for _ in range(300):
            try:
                get(base + "/healthz")
                break
            except OSError:
                time.sleep(0.1)
        started = time.perf_counter()
        populate(broker.port, args.queues)
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


if __name__ == "__main__":
    main()
