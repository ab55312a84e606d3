"""Scale and memory benchmarks: broker RSS under many messages, queues or subscriptions.

Targets a running broker by --host/--port and reads its resident memory from
/proc/<--pid>/status, so it measures any broker on this machine.  The client is benchmarks/stompload.py:
pipelined raw STOMP frames with a receipt every --batch frames for flow control.

  queued         --messages N over --queues Q (no subscribers), RSS before/after
  queues         --queues Q queues holding one message each, RSS before/after
  first-message  wait for the port, subscribe to --queue-name, time to the first MESSAGE
  subscriptions  --connections C x --per-connection S queue subscriptions over --queues Q
  prefix-topics  --subscriptions N prefix subscriptions, then publish rate to a topic
  queue-fanout   --subscriptions N subscribers on one queue, then publish/deliver rate
  ack-timeouts   --messages N through one queue, delivered with ack-timeout:3600 and each
                 acked; RSS before/after (ack-timeout memory must follow what is unacked)
  delayed        --messages N SENDs with deliver-at spread at random over --spread seconds
                 starting --lead seconds from now, to one queue with one auto-ack subscriber
                 (a separate process); RSS while they wait and at the end, and the lateness of
                 each delivery (receipt wall time minus deliver-at) p50/p99/p99.9/max
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.connection
import multiprocessing.synchronize
import random
import time

from benchmarks.proc import rss_kib
from benchmarks.stompload import Client, send_frame

TIMEOUT = 60.0


def connect(args: argparse.Namespace, retry_until: float | None = None) -> Client:
    return Client(args.host, args.port, login=args.login, passcode=args.passcode, timeout=TIMEOUT,
                  retry_until=retry_until)


def publish_rate(producer: Client, frame: bytes, args: argparse.Namespace) -> float:
    """Send ``frame`` --messages times, pipelined with a receipt every --batch; messages/s."""
    t0 = time.time()
    for i in range(args.messages):
        producer.queue(frame)
        if (i + 1) % args.batch == 0:
            producer.flush()
    producer.flush()
    return args.messages / (time.time() - t0)


def report(label: str, before: int, after: int, count: int, unit: str) -> None:
    delta = after - before
    print(
        f"{label}: RSS before={before / 1024:.1f} MiB after={after / 1024:.1f} MiB "
        f"delta={delta / 1024:.1f} MiB for {count} {unit} = {delta * 1024 / max(count, 1):.0f} bytes each"
    )


def scenario_queued(args: argparse.Namespace) -> None:
    c = connect(args)
    body = b"x" * args.body_size
    before = rss_kib(args.pid)
    frames = [send_frame(f"/queue/{args.prefix}{q}", body) for q in range(args.queues)]
    t0 = time.time()
    for i in range(args.messages):
        c.queue(frames[i % args.queues])
        if (i + 1) % args.batch == 0:
            c.flush()
    c.flush()
    elapsed = time.time() - t0
    time.sleep(args.settle)
    print(f"sent {args.messages} messages in {elapsed:.1f} s ({args.messages / elapsed:.0f} msg/s)")
    report("queued", before, rss_kib(args.pid), args.messages, "messages")
    print(f"peak RSS of the broker process so far (VmHWM): {rss_kib(args.pid, 'VmHWM') / 1024:.1f} MiB")


def scenario_queues(args: argparse.Namespace) -> None:
    c = connect(args)
    body = b"x" * args.body_size
    before = rss_kib(args.pid)
    for q in range(args.queues):
        c.queue(send_frame(f"/queue/{args.prefix}{q}", body))
        if (q + 1) % args.batch == 0:
            c.flush()
    c.flush()
    time.sleep(args.settle)
    report("queues", before, rss_kib(args.pid), args.queues, "queues")


def scenario_first_message(args: argparse.Namespace) -> None:
    t0 = time.time()
    c = connect(args, retry_until=time.monotonic() + TIMEOUT)
    connected = time.time() - t0
    c.send(f"SUBSCRIBE\nid:1\ndestination:/queue/{args.queue_name}\n\n\x00".encode())
    c.message()
    print(f"first-message: connected after {connected:.2f} s, first MESSAGE after {time.time() - t0:.2f} s")


def scenario_subscriptions(args: argparse.Namespace) -> None:
    before = rss_kib(args.pid)
    clients = []
    n = 0
    for ci in range(args.connections):
        c = connect(args)
        for si in range(args.per_connection):
            q = (ci * args.per_connection + si) % args.queues
            c.queue(f"SUBSCRIBE\nid:{si}\ndestination:/queue/{args.prefix}{q}\nack:client-individual\n\n\x00".encode())
            n += 1
        c.flush()
        clients.append(c)
    time.sleep(args.settle)
    report("subscriptions", before, rss_kib(args.pid), n, "subscriptions")


def scenario_prefix_topics(args: argparse.Namespace) -> None:
    c = connect(args)
    before = rss_kib(args.pid)
    for i in range(args.subscriptions):
        c.queue(f"SUBSCRIBE\nid:{i}\ndestination:/topic/{args.prefix}{i:07d}.*\n\n\x00".encode())
        if (i + 1) % args.batch == 0:
            c.flush()
    c.flush()
    report("prefix-topics", before, rss_kib(args.pid), args.subscriptions, "prefix subscriptions")
    producer = connect(args)
    frame = send_frame(f"/topic/{args.prefix}0000001.orders.eu", b"x" * args.body_size)
    rate = publish_rate(producer, frame, args)
    print(f"published {args.messages} to a topic among {args.subscriptions} prefix subscriptions: {rate:.0f} msg/s")


def scenario_queue_fanout(args: argparse.Namespace) -> None:
    clients = []
    per = max(1, args.subscriptions // args.connections)
    for _ in range(args.connections):
        c = connect(args)
        for si in range(per):
            c.queue(f"SUBSCRIBE\nid:{si}\ndestination:/queue/{args.queue_name}\n\n\x00".encode())
        c.flush()
        clients.append(c)
    producer = connect(args)
    frame = send_frame(f"/queue/{args.queue_name}", b"x" * args.body_size)
    rate = publish_rate(producer, frame, args)
    print(f"published {args.messages} to a queue with {per * args.connections} subscribers: {rate:.0f} msg/s")


def scenario_ack_timeouts(args: argparse.Namespace) -> None:
    producer = connect(args)
    consumer = connect(args)
    consumer.queue(
        f"SUBSCRIBE\nid:1\ndestination:/queue/{args.queue_name}\nack:client-individual\n"
        f"ack-timeout:3600\nprefetch:{args.batch}\n\n\x00".encode()
    )
    consumer.flush()
    frame = send_frame(f"/queue/{args.queue_name}", b"x" * args.body_size)
    before = rss_kib(args.pid)
    peak = before
    for done in range(0, args.messages, args.batch):
        n = min(args.batch, args.messages - done)
        for _ in range(n):
            producer.queue(frame)
        producer.flush()
        received = 0
        while received < n:
            command, hdr, _ = consumer.read_frame()
            if command == b"MESSAGE":
                consumer.queue(consumer.ack(hdr))
                received += 1
        consumer.flush()
        if done % (args.batch * 50) == 0:
            peak = max(peak, rss_kib(args.pid))
    time.sleep(args.settle)
    print(f"ack-timeouts: peak RSS {peak / 1024:.1f} MiB during the run")
    report("ack-timeouts", before, rss_kib(args.pid), args.messages, "messages delivered and acked")


def _receive_delayed(args: argparse.Namespace, ready: multiprocessing.synchronize.Event,
                     out: multiprocessing.connection.Connection) -> None:
    """The subscriber of ``delayed``: lateness in ms of each MESSAGE (its body is its due time)."""
    c = connect(args)
    c.settimeout(args.lead + args.spread + 600)
    c.subscribe(f"/queue/{args.prefix}delayed", "1")
    ready.set()
    late = []
    for _ in range(args.messages):
        _, _, body = c.message()
        now = time.time() * 1000
        assert body is not None
        late.append(now - int(body[:13]))
    out.send(late)


def scenario_delayed(args: argparse.Namespace) -> None:
    ready = multiprocessing.Event()
    results, out = multiprocessing.Pipe(duplex=False)
    consumer = multiprocessing.Process(target=_receive_delayed, args=(args, ready, out), daemon=True)
    consumer.start()
    if not ready.wait(TIMEOUT):
        raise RuntimeError("the subscriber could not subscribe (is the broker up?)")
    c = connect(args)
    before = rss_kib(args.pid)
    start = int(time.time() * 1000) + int(args.lead * 1000)
    spread = int(args.spread * 1000)
    rng = random.Random(1)
    destination = f"/queue/{args.prefix}delayed".encode()
    pad = b"x" * max(0, args.body_size - 13)
    t0 = time.time()
    for i in range(args.messages):
        due = start + rng.randrange(spread)
        body = b"%d%s" % (due, pad)
        c.queue(b"SEND\ndestination:%s\ndeliver-at:%d\ncontent-length:%d\n\n%s\x00"
                % (destination, due, len(body), body))
        if (i + 1) % args.batch == 0:
            c.flush()
    c.flush()
    published = time.time() - t0
    print(f"sent {args.messages} delayed messages in {published:.1f} s ({args.messages / published:.0f} msg/s);"
          f" the first is due {args.lead - published:.1f} s after the last SEND")
    report("waiting", before, rss_kib(args.pid), args.messages, "delayed messages")
    peak_waiting = 0
    while not results.poll(1.0):
        if not consumer.is_alive():
            raise RuntimeError("the subscriber died")
        peak_waiting = max(peak_waiting, rss_kib(args.pid))
    late = sorted(results.recv())
    consumer.join()

    def at(q: float) -> float:
        return late[min(len(late) - 1, int(q * len(late)))]

    print(f"delivered {len(late)}: lateness p50={at(0.5):.1f} ms p99={at(0.99):.1f} ms p99.9={at(0.999):.1f} ms"
          f" max={late[-1]:.1f} ms (min {late[0]:.1f} ms)")
    print(f"RSS during delivery peak={peak_waiting / 1024:.1f} MiB end={rss_kib(args.pid) / 1024:.1f} MiB;"
          f" VmHWM={rss_kib(args.pid, 'VmHWM') / 1024:.1f} MiB")


SCENARIOS = {
    "ack-timeouts": scenario_ack_timeouts,
    "queued": scenario_queued,
    "queues": scenario_queues,
    "first-message": scenario_first_message,
    "subscriptions": scenario_subscriptions,
    "prefix-topics": scenario_prefix_topics,
    "queue-fanout": scenario_queue_fanout,
    "delayed": scenario_delayed,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=61613)
    parser.add_argument("--pid", type=int, default=0, help="broker process id, for RSS readings")
    parser.add_argument("--login")
    parser.add_argument("--passcode")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--per-connection", type=int, default=10_000)
    parser.add_argument("--subscriptions", type=int, default=100_000)
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=2000, help="frames between flow-control receipts")
    parser.add_argument("--prefix", default="scale-", help="queue/topic name prefix")
    parser.add_argument("--queue-name", default="scale-0")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds to wait before the RSS reading")
    parser.add_argument("--spread", type=float, default=600.0, help="delayed: seconds the due times spread over")
    parser.add_argument("--lead", type=float, default=120.0, help="delayed: seconds from start to the first due time")
    args = parser.parse_args()
    SCENARIOS[args.scenario](args)


if __name__ == "__main__":
    main()
