"""Crash probe: after rounds of ``kill -9`` and a quick restart, is every receipted message there?

Two brokers on one PostgreSQL database (a throw-away server, or ``--store-url``). Each round
sends ``--messages`` receipted SENDs through broker A while a client-ack consumer on A holds up
to ``--prefetch`` of them unacked, then ``kill -9``s A and restarts it at once. After
``--kills`` rounds a consumer on the restarted A drains the queue until ``--silence`` seconds
pass without a message: every receipted message must come (the claims of A's dead processes
are freed when their database sessions end, not when their leases lapse). Repeats ``--runs``
times, each on a fresh database, and prints the drained count of each run.

  python -m benchmarks.crash_probe --runs 10
"""

from __future__ import annotations

import argparse
import os
import time

from tests.support.broker_process import BrokerProcess, Peer
from tests.support.postgres_server import PostgresServer


def one_run(url: str, args: argparse.Namespace, run: int) -> tuple[int, int]:
    """(receipted, drained) of one run."""
    a = BrokerProcess(url, "--lease", str(args.lease)).start()
    b = BrokerProcess(url, "--lease", str(args.lease)).start()
    queue = f"/queue/probe-{run}"
    sent: set[str] = set()
    try:
        for kill in range(args.kills):
            holder = Peer(a.port)
            holder.subscribe(queue, ack="client-individual", prefetch=str(args.prefetch))
            with Peer(a.port) as producer:
                for i in range(args.messages):
                    body = f"{kill}-{i}"
                    producer.send_to(queue, body)  # receipted
                    sent.add(body)
            a.kill9()
            holder.close()
            a.start()
        got: set[str] = set()
        with Peer(a.port) as drain:
            drain.subscribe(queue)
            last = time.monotonic()
            while time.monotonic() - last < args.silence:
                try:
                    got.add(drain.message(timeout=0.2).body.decode())
                    last = time.monotonic()
                except TimeoutError:
                    pass
        return len(sent), len(sent & got)
    finally:
        a.close()
        b.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store-url", help="an empty database shared by both brokers (default: a throw-away server)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--messages", type=int, default=2000, help="receipted SENDs per round")
    parser.add_argument("--prefetch", type=int, default=100)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--silence", type=float, default=3.0, help="seconds without a message that end the drain")
    args = parser.parse_args()
    os.environ.setdefault("STOMPMQ_HTTP_PORT", "0")  # (two brokers on this machine: no HTTP port clash)
    server = None if args.store_url else PostgresServer().start()
    complete = 0
    for run in range(args.runs):
        url = args.store_url or server.new_database()  # type: ignore[union-attr]
        receipted, drained = one_run(url, args, run)
        complete += receipted == drained
        print(f"run {run + 1}: {drained} of {receipted} receipted messages drained", flush=True)
    print(f"{complete} of {args.runs} runs drained every receipted message")
    if server is not None:
        server.stop()


if __name__ == "__main__":
    main()
