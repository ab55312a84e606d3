"""How long a dead broker's unacked messages take to reach a consumer on another broker.

Starts two stompmq brokers on one PostgreSQL database (``--store-url``), puts ``--messages``
messages on a queue, lets a client-ack consumer on broker A take ``--prefetch`` of them
without acking, ``kill -9``s broker A, and times, from the kill, the arrival of each of those
messages at a consumer on broker B.  Repeats ``--rounds`` times and prints the median and
maximum delay per round and overall.  Loopback only; every wait is bounded.

  python -m benchmarks.failover --store-url postgresql://USER:PASSWORD@127.0.0.1:PORT/DB --lease 10
"""

from __future__ import annotations

import argparse
import signal
import statistics
import time

from benchmarks.stompload import Client, send_frame
from tests.support.local_broker import LocalBroker

#: Seconds any single wait may take before the run is declared failed.
TIMEOUT = 120.0


def connect(port: int) -> Client:
    return Client("127.0.0.1", port, timeout=TIMEOUT, retry_until=time.monotonic() + TIMEOUT)


def one_round(args: argparse.Namespace, queue: str) -> list[float]:
    a = LocalBroker("--store", args.store_url, "--lease", str(args.lease))
    b = LocalBroker("--store", args.store_url, "--lease", str(args.lease))
    try:
        a.start()
        b.start()
        assert a.proc is not None
        port_a, port_b = a.port, b.port
        producer = connect(port_b)
        for i in range(args.messages):
            producer.queue(send_frame(f"/queue/{queue}", str(i).encode()))
        producer.flush()
        held = connect(port_a)
        held.subscribe(f"/queue/{queue}", "1", "client-individual", args.prefetch)
        taken = {held.message()[2] for _ in range(args.prefetch)}
        time.sleep(args.settle)  # the deliveries' state reaches the database (write-behind)
        killed = time.monotonic()
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(TIMEOUT)
        rescuer = connect(port_b)
        rescuer.subscribe(f"/queue/{queue}", "1")
        delays = []
        while taken:
            _, _, body = rescuer.message()
            if body in taken:
                taken.discard(body)
                delays.append(time.monotonic() - killed)
        return delays
    finally:
        a.stop()
        b.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store-url", required=True, help="postgresql://... shared by both brokers")
    parser.add_argument("--lease", type=float, default=10.0, help="--lease of both brokers (seconds)")
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--prefetch", type=int, default=100, help="unacked messages held by the broker killed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=0.5, help="seconds between the last delivery and the kill")
    args = parser.parse_args()
    every: list[float] = []
    for r in range(args.rounds):
        delays = one_round(args, f"failover-{int(time.time())}-{r}")
        every += delays
        print(f"round {r + 1}: {len(delays)} messages, delay median {statistics.median(delays):.2f} s,"
              f" max {max(delays):.2f} s (lease {args.lease} s)")
    print(f"all rounds: median {statistics.median(every):.2f} s, max {max(every):.2f} s over {len(every)} messages")


if __name__ == "__main__":
    main()
