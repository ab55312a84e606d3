"""A topic publisher that outruns one slow subscriber: the broker's memory and the fast subscribers' pace.

One publisher sends sequence-numbered messages to one topic as fast as TCP lets it for
--seconds; --fast subscribers read as fast as they can; one slow subscriber reads at most
--slow-rate messages a second.  Each phase runs on a fresh broker this script starts (memory
store, so the disk plays no part) with the --topic-overflow policy under test:

  baseline        no slow subscriber: the fast subscribers' unhindered pace
  POLICY          the same with the slow subscriber, once per --policy

For each phase it reports the publisher's rate, the fast subscribers' rates (and their ratio to
the baseline), messages the fast ones lost (a gap in the sequence numbers, or not received 5 s
after the publisher's last), what the slow one read, missed (gaps: the broker dropped them for
it) and had still not read when the phase ended (its backlog, not a loss), the broker's peak RSS
(VmHWM) and its RSS sampled every second, and the broker's slow-subscriber log lines.

  python -m benchmarks.slow_subscriber                       # 60 s per phase, block and drop
  python -m benchmarks.slow_subscriber --policy block --block-timeout 5
  python -m benchmarks.slow_subscriber --seconds 10 --slow-rate 2000 --policy block
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import threading
import time

from benchmarks.proc import rss_kib, sample_rss
from benchmarks.stompload import Client, send_frame
from tests.support.local_broker import LocalBroker

TOPIC = "/topic/slow-subscriber"
#: Seconds after the publisher stops that subscribers keep reading what is still on its way.
SETTLE = 5.0


def subscriber(host: str, port: int, rate: float, ready: mp.Event, stop: mp.Event, out: mp.Queue) -> None:
    """Read MESSAGEs (at most ``rate`` a second when ``rate``) until ``stop``; report count and gaps."""
    client = Client(host, port)
    client.queue(f"SUBSCRIBE\nid:1\ndestination:{TOPIC}\n\n\x00".encode())
    client.flush()
    ready.set()
    client.settimeout(0.5)
    received = lost = 0
    expected = 0
    first = last = 0.0
    while not stop.is_set():
        try:
            command, _, body = client.read_frame()
        except TimeoutError:
            continue
        if command != b"MESSAGE" or body is None:
            continue
        seq = int(body.split(b" ", 1)[0])
        lost += max(0, seq - expected)
        expected = seq + 1
        received += 1
        last = time.monotonic()
        if received == 1:
            first = last
        if rate and received % 100 == 0:
            ahead = received / rate - (last - first)
            if ahead > 0:
                time.sleep(ahead)
    out.put({"received": received, "lost": lost, "last_seq": expected - 1, "first": first, "last": last})
    client.close()


def publisher(host: str, port: int, seconds: float, body_size: int, go: mp.Event, out: mp.Queue) -> None:
    """Send numbered messages for ``seconds``, 100 per write; report how many."""
    client = Client(host, port)
    pad = b" " + b"x" * max(0, body_size - 12)
    go.wait()
    seq, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        client.send(b"".join(send_frame(TOPIC, b"%d" % (seq + i) + pad) for i in range(100)))
        seq += 100
    client.queue(send_frame(TOPIC, b"%d" % seq + pad))  # the last one, with a receipt: all were read
    client.flush()
    out.put({"sent": seq + 1, "seconds": time.monotonic() - start})
    client.close()


def phase(args: argparse.Namespace, policy: str | None) -> dict[str, object]:
    """One broker, one run: the baseline when ``policy`` is None."""
    broker_args = ["--store", "memory", "--topic-overflow", policy or "block"]
    if args.block_timeout is not None:
        broker_args += ["--topic-block-timeout", str(args.block_timeout)]
    broker = LocalBroker(*broker_args)
    broker.start()
    proc = broker.proc
    assert proc is not None
    args.port = broker.port
    samples: list[tuple[float, int]] = []
    done = threading.Event()
    threading.Thread(target=sample_rss, args=(proc.pid, samples, done), daemon=True).start()
    ctx = mp.get_context("spawn")
    stop, go, out, pub_out = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
    rates = [0.0] * args.fast + ([args.slow_rate] if policy else [])
    readies = [ctx.Event() for _ in rates]
    subs = [ctx.Process(target=subscriber, args=(args.host, args.port, r, ready, stop, out))
            for r, ready in zip(rates, readies, strict=True)]
    for p in subs:
        p.start()
    for ready in readies:
        ready.wait(30)
    pub = ctx.Process(target=publisher, args=(args.host, args.port, args.seconds, args.body_size, go, pub_out))
    pub.start()
    go.set()
    sent = pub_out.get(timeout=args.seconds * 20 + 60)
    time.sleep(SETTLE)
    stop.set()
    results = [out.get(timeout=60) for _ in subs]
    for p in subs + [pub]:
        p.join(30)
    peak = rss_kib(proc.pid, "VmHWM")
    done.set()
    broker.stop()
    warnings = [line for line in broker.log_text.splitlines()
                if " WARNING " in line and "topic subscriber" in line]
    # Subscribers report in the order they finish: the slow one is the one that read the least.
    results.sort(key=lambda r: r["received"], reverse=True)
    fast, slow = results[: args.fast], results[args.fast :]
    fast_rates = [r["received"] / max(1e-9, r["last"] - r["first"]) for r in fast]
    return {
        "policy": policy or "baseline",
        "sent": sent["sent"],
        "publish_rate": sent["sent"] / sent["seconds"],
        "fast_rate": statistics.median(fast_rates),
        "fast_lost": sum(r["lost"] + sent["sent"] - 1 - r["last_seq"] for r in fast),
        "slow_received": slow[0]["received"] if slow else None,
        "slow_missed": slow[0]["lost"] if slow else None,
        "slow_unread": sent["sent"] - 1 - slow[0]["last_seq"] if slow else None,
        "peak_rss_mib": peak / 1024,
        "rss_mib": [kib / 1024 for _, kib in samples],
        "warnings": warnings,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "::1"], help="loopback only")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the publisher sends, per phase")
    parser.add_argument("--fast", type=int, default=3, help="fast subscribers")
    parser.add_argument("--slow-rate", type=float, default=1000.0, help="messages/s the slow subscriber reads")
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--block-timeout", type=float, default=None,
                        help="the brokers' --topic-block-timeout (default: the broker's default)")
    parser.add_argument("--policy", action="append", choices=["block", "drop", "disconnect"],
                        help="--topic-overflow policies to run (default: block and drop)")
    args = parser.parse_args(argv)
    policies = args.policy or ["block", "drop"]
    rows = [phase(args, None)] + [phase(args, p) for p in policies]
    base = rows[0]["fast_rate"]
    timeout = "the default" if args.block_timeout is None else f"{args.block_timeout:g}"
    print(f"{args.seconds:g} s per phase, --topic-block-timeout {timeout}, {args.fast} fast subscribers, slow subscriber at "
          f"{args.slow_rate:g} msg/s, {args.body_size} B bodies, memory store")
    print("| phase | published | publish msg/s | fast msg/s (median) | fast vs baseline | fast lost "
          "| slow read | slow missed | slow unread at the end | peak RSS MiB | RSS MiB min–max |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        rss = r["rss_mib"] or [r["peak_rss_mib"]]
        print(f"| {r['policy']} | {r['sent']:,} | {r['publish_rate']:,.0f} | {r['fast_rate']:,.0f} "
              f"| {base / r['fast_rate']:.2f}× slower | {r['fast_lost']} | "
              f"{'' if r['slow_received'] is None else format(r['slow_received'], ',')} | "
              f"{'' if r['slow_missed'] is None else format(r['slow_missed'], ',')} | "
              f"{'' if r['slow_unread'] is None else format(r['slow_unread'], ',')} | {r['peak_rss_mib']:.1f} "
              f"| {min(rss):.1f}–{max(rss):.1f} |")
    for r in rows:
        print(f"{r['policy']}: {len(r['warnings'])} slow-subscriber log lines" +
              "".join(f"\n  {line}" for line in r["warnings"][:6]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
