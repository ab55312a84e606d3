"""Soak: minutes of mixed load on one broker, watching its memory and counting every message.

Load (loopback only, bounded in time and in count):
  queue /queue/soak.work   a receipted producer (--rate msg/s, a receipt every --batch), a
                           stalled auto-ack consumer (reads nothing until the end), a slow
                           client-ack consumer (prefetch 10, --slow-ms per ACK),
                           and churn: every --churn-every s a client takes a few messages
                           client-ack and drops the connection without ACK (they come back)
  topic /topic/soak.events a producer (--rate msg/s), a fast subscriber and a stalled one
                           (never reads: the broker drops for it, never slows the producer)

At the end the producers stop, the stalled consumer unsubscribes and reads what was written to
it, and a drainer empties the queue.  Report: the broker's RSS (min/max per minute), messages
sent/received/lost/duplicated per destination (lost on a queue = receipted but never received;
topics lose by design for the stalled subscriber), and every broker log line at WARNING or
above.  Exit status 1 if a queue lost anything.

  python -m benchmarks.soak --minutes 1                   # quick check (spawns a broker on a temp SQLite)
  python -m benchmarks.soak --minutes 10                  # the run recorded in docs/benchmarks.md
  python -m benchmarks.soak --port 61613 --pid PID        # against a broker you started
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter

from benchmarks.proc import sample_rss
from benchmarks.stompload import Client, header_value, send_frame
from tests.support.local_broker import LocalBroker

QUEUE, TOPIC = "/queue/soak.work", "/topic/soak.events"
#: Seconds a consumer's read waits before it looks at the stop flag again.
POLL = 0.5


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: dict[str, int] = Counter()  # receipted (queue) or handed to the socket (topic)
        self.received: dict[str, Counter[int]] = {}  # consumer -> seq -> times

    def got(self, who: str, seq: int) -> None:
        with self.lock:
            self.received.setdefault(who, Counter())[seq] += 1


def body_seq(body: bytes | None) -> int:
    assert body is not None
    return int(body.split(b" ", 1)[0])


def subscribe(client: Client, dest: str, sub_id: str, **headers: str) -> None:
    extra = "".join(f"{k}:{v}\n" for k, v in headers.items())
    client.queue(f"SUBSCRIBE\nid:{sub_id}\ndestination:{dest}\n{extra}\n\x00".encode())
    client.flush()


def producer(args: argparse.Namespace, dest: str, stats: Stats, stop: threading.Event) -> None:
    """Send at --rate; queue SENDs count once their receipt arrived."""
    client = Client(args.host, args.port)
    pad = b" " + b"x" * max(0, args.body_size - 12)
    seq, start = 0, time.monotonic()
    while not stop.is_set() and seq < args.max_messages:
        for _ in range(args.batch):
            client.queue(send_frame(dest, b"%d" % seq + pad))
            seq += 1
        client.flush(wait=True)  # a receipt every batch: at most --batch SENDs unconfirmed
        with stats.lock:
            stats.sent[dest] = seq
        ahead = seq / args.rate - (time.monotonic() - start)
        if ahead > 0:
            stop.wait(ahead)
    client.close()


def consume(client: Client, who: str, stats: Stats, stop: threading.Event, ack: bool = False,
            slow: float = 0.0) -> None:
    """Read MESSAGEs until ``stop`` (ACKing each after ``slow`` seconds if ``ack``)."""
    client.settimeout(POLL)
    while not stop.is_set():
        try:
            command, hdr, body = client.read_frame()
        except TimeoutError:
            continue
        if command != b"MESSAGE":
            continue
        stats.got(who, body_seq(body))
        if ack:
            if slow:
                time.sleep(slow)
            client.send(client.ack(hdr))


def churn(args: argparse.Namespace, stats: Stats, stop: threading.Event) -> None:
    """Clients that come, take a few messages without ACK, and vanish (the messages come back)."""
    n = 0
    while not stop.wait(args.churn_every):
        n += 1
        client = Client(args.host, args.port)
        subscribe(client, QUEUE, "c", ack="client-individual", prefetch="3")
        client.settimeout(1.0)
        try:
            for _ in range(3):
                command, _, body = client.read_frame()
                if command == b"MESSAGE":
                    stats.got("churn", body_seq(body))
        except TimeoutError:
            pass
        client.close()  # no DISCONNECT, no ACK


def drain_stalled(client: Client, stats: Stats) -> None:
    """The stalled consumer's end: UNSUBSCRIBE, then read everything up to its DISCONNECT receipt."""
    client.settimeout(60)
    client.send(b"UNSUBSCRIBE\nid:s\n\n\x00DISCONNECT\nreceipt:bye\n\n\x00")
    while True:
        command, _, body = client.read_frame()
        if command == b"MESSAGE":
            stats.got("stalled-auto", body_seq(body))
        elif command == b"RECEIPT":
            return


def drain_queue(args: argparse.Namespace, stats: Stats) -> None:
    """Empty the queue with a fast auto-ack consumer until /control says it is empty."""
    client = Client(args.host, args.port)
    subscribe(client, QUEUE, "d")
    counter = Client(args.host, args.port)
    client.settimeout(2.0)
    deadline = time.monotonic() + args.drain_timeout
    while time.monotonic() < deadline:
        try:
            command, _, body = client.read_frame()
            if command == b"MESSAGE":
                stats.got("drainer", body_seq(body))
            continue
        except TimeoutError:
            pass
        counter.queue(b"SEND\ndestination:/control/count-msgs/queue/soak.work\n\n\x00")
        counter.flush(wait=False)
        while True:
            command, hdr, _ = counter.read_frame()
            if command == b"RECEIPT":
                break
        if header_value(hdr, b"num-messages") == b"0":
            return
    print("drain timed out", file=sys.stderr)


def report(args: argparse.Namespace, stats: Stats, samples: list[tuple[float, int]], log_text: str) -> int:
    print(f"soak: {args.minutes} min, rate {args.rate} msg/s per producer, body {args.body_size} B")
    print("RSS per minute (MiB):")
    for minute in range(int(args.minutes + 0.999)):
        values = [kib for t, kib in samples if minute * 60 <= t < (minute + 1) * 60]
        if values:
            print(f"  minute {minute + 1}: min {min(values) / 1024:.1f}  max {max(values) / 1024:.1f}")
    lost_on_queues = 0
    for dest, consumers in ((QUEUE, ("stalled-auto", "slow-client", "churn", "drainer")),
                            (TOPIC, ("fast-topic",))):
        sent = stats.sent[dest]
        received = Counter[int]()
        for who in consumers:
            received.update(stats.received.get(who, Counter()))
        lost = sum(1 for seq in range(sent) if seq not in received)
        dupes = sum(n - 1 for n in received.values() if n > 1)
        if dest == QUEUE:
            lost_on_queues = lost
        per = ", ".join(f"{who} {sum(stats.received.get(who, Counter()).values())}" for who in consumers)
        print(f"{dest}: sent {sent}, received {len(received)} distinct ({per}), lost {lost}, duplicates {dupes}")
    stalled_topic = sum(stats.received.get("stalled-topic", Counter()).values())
    print(f"{TOPIC} stalled subscriber: read {stalled_topic} (it never reads: the broker drops for it)")
    warnings = [line for line in log_text.splitlines()
                if any(level in line for level in (" WARNING ", " ERROR ", " CRITICAL ", "Traceback"))]
    print(f"broker log lines at WARNING or above: {len(warnings)}")
    for line in warnings[:20]:
        print("  " + line)
    return 1 if lost_on_queues else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "localhost", "::1"],
                        help="loopback only")
    parser.add_argument("--port", type=int, default=0, help="a running broker (default: spawn one)")
    parser.add_argument("--pid", type=int, default=0, help="the running broker's process id (RSS)")
    parser.add_argument("--rate", type=int, default=1000, help="messages per second per producer")
    parser.add_argument("--batch", type=int, default=50, help="queue SENDs per receipt")
    parser.add_argument("--body-size", type=int, default=200)
    parser.add_argument("--max-messages", type=int, default=2_000_000, help="per producer, whatever the time")
    parser.add_argument("--slow-ms", type=float, default=2.0, help="the slow consumer's pause per ACK")
    parser.add_argument("--churn-every", type=float, default=0.5, help="seconds between churning clients")
    parser.add_argument("--drain-timeout", type=float, default=300.0)
    parser.add_argument("--broker-args", nargs=argparse.REMAINDER, default=[],
                        help="extra arguments for a spawned broker (last on the line)")
    args = parser.parse_args(argv)

    broker = None
    if not args.port:
        broker = LocalBroker(*args.broker_args)
        broker.start()
        assert broker.proc is not None
        args.port, args.pid = broker.port, broker.proc.pid
    if not args.pid:
        parser.error("--pid is needed with --port (for the RSS readings)")
    stats, stop, done = Stats(), threading.Event(), threading.Event()
    samples: list[tuple[float, int]] = []
    sampler = threading.Thread(target=sample_rss, args=(args.pid, samples, done), daemon=True)
    sampler.start()

    # The stalled clients keep the kernel's default buffers: a tiny SO_RCVBUF on loopback (MSS
    # 64 KiB) never reopens the window by a full segment, so the kernel stalls on its zero-window
    # probe backoff, which would measure TCP, not the broker.
    stalled = Client(args.host, args.port)
    subscribe(stalled, QUEUE, "s", ack="auto")
    slow, fast_topic, stalled_topic = (Client(args.host, args.port) for _ in range(3))
    subscribe(slow, QUEUE, "1", ack="client-individual", prefetch="10")
    subscribe(fast_topic, TOPIC, "1")
    subscribe(stalled_topic, TOPIC, "1")
    threads = [
        threading.Thread(target=producer, args=(args, QUEUE, stats, stop)),
        threading.Thread(target=producer, args=(args, TOPIC, stats, stop)),
        threading.Thread(target=consume, args=(slow, "slow-client", stats, stop, True, args.slow_ms / 1000)),
        threading.Thread(target=consume, args=(fast_topic, "fast-topic", stats, done)),
        threading.Thread(target=churn, args=(args, stats, stop)),
    ]
    for thread in threads:
        thread.daemon = True  # a failure in the main thread must not leave the script hanging
        thread.start()
    log_text = ""
    try:
        stop.wait(args.minutes * 60)
        stop.set()
        for thread in threads[:3] + threads[4:]:
            thread.join()
        drain_stalled(stalled, stats)
        slow.close()  # its unacked messages go back to the queue
        drain_queue(args, stats)
        done.set()
        threads[3].join()
        stalled_topic.close()
    finally:
        stop.set()
        done.set()
        if broker is not None:
            broker.stop()
            log_text = broker.log_text
    return report(args, stats, samples, log_text)


if __name__ == "__main__":
    sys.exit(main())
