"""How evenly the consistent-hash exchange spreads keys: per-bucket counts and chi-squared for
2-20, 100 and 1000 buckets over millions of keys, as a Markdown and a CSV table and a PNG chart.

  python -m examples.pipeline_distribution                       # 2,000,000 keys; starts a local broker
  python -m examples.pipeline_distribution --keys 10000000 --out /tmp/dist
  python -m examples.pipeline_distribution --url stomp://127.0.0.1:61613 --check-keys 50000

RabbitMQ's documentation shows such a table for 2-20 buckets and 100,000 keys; this one is
larger and drawn.  The setup: exchange ``dist-N`` with N weight-1 streams ``/stream/dist-N-I``
bound, keys "0", "1", ... as routing keys.  All keys are routed by the broker's own router
(``stompmq.broker.hashring``, the code an exchange runs) in this process, because millions of
keys times 22 bucket counts would take minutes through a socket; the first ``--check-keys`` of
them are also sent through the broker, and the script fails unless every stream received exactly
the count the router predicted (the streams' ``count`` from /control/stream-offsets).

Output in --out: distribution.md, distribution.csv, distribution.png.  Chi-squared is compared
with the p = 0.01 critical value for N - 1 degrees of freedom (benchmarks/hashring_table.py).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.hashring_table import chi_squared, critical_p01, route_all
from examples.pipeline_events import Help
from stompmq.protocol import Frame, encode_frame
from stompmq.sync_client import Connection
from tests.support.local_broker import LocalBroker

#: The bucket counts of the report (argparse parses a string default with ``type``).
BUCKETS = "2-20,100,1000"


@dataclass(frozen=True)
class Row:
    buckets: int
    keys: int
    chi2: float
    critical: float
    smallest: int
    largest: int
    checked: int  # keys sent through the broker, whose per-stream counts matched

    @property
    def spread(self) -> float:
        """The largest relative deviation of a bucket from the mean, in percent."""
        mean = self.keys / self.buckets
        return 100 * max(mean - self.smallest, self.largest - mean) / mean


def streams(n: int) -> list[str]:
    return [f"/stream/dist-{n}-{i}" for i in range(n)]


def measure(n: int, keys: list[str], conn: Connection | None, check_keys: int) -> Row:
    names = streams(n)
    routed = route_all(f"dist-{n}", [(name, 1) for name in names], keys)
    per_bucket = Counter(routed)
    counts = [per_bucket[name] for name in names]
    checked = 0
    if conn is not None and check_keys:
        checked = min(check_keys, len(keys))
        check(n, keys[:checked], Counter(routed[:checked]), conn)
    return Row(n, len(keys), chi_squared(counts, len(keys) / n), critical_p01(n - 1), min(counts), max(counts),
               checked)


def check(n: int, keys: list[str], predicted: Counter[str | None], conn: Connection) -> None:
    """Send ``keys`` through the broker's exchange and compare each stream's count."""
    exchange = f"dist-{n}"
    conn.request("SEND", {"destination": f"/control/declare/exchange/{exchange}"})
    for name in streams(n):
        conn.request("SEND", {"destination": f"/control/declare/stream/{name[8:]}"})
        conn.request("SEND", {"destination": f"/control/bind/exchange/{exchange}", "queue": name})
    conn.send_all(
        encode_frame(Frame("SEND", {"destination": f"/exchange/{exchange}/{key}", "receipt": key}, b""), "1.2")
        for key in keys
    )
    for name in streams(n):
        got = conn.stream_bounds(name[8:])
        if got[1] - got[0] != predicted[name]:
            raise SystemExit(f"{name}: the broker routed {got[1] - got[0]} keys, the router predicts {predicted[name]}")


def write_tables(rows: list[Row], out: Path) -> None:
    with open(out / "distribution.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["buckets", "keys", "chi_squared", "critical_p01", "min", "max", "max_deviation_pct",
                         "checked_through_broker"])
        for r in rows:
            writer.writerow([r.buckets, r.keys, f"{r.chi2:.2f}", f"{r.critical:.2f}", r.smallest, r.largest,
                             f"{r.spread:.3f}", r.checked])
    lines = [
        f"Keys \"0\"..\"{rows[0].keys - 1}\" over N weight-1 streams of a consistent-hash exchange.",
        "",
        "| N | chi-squared | critical (p = 0.01) | min | max | max deviation | checked through the broker |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.buckets} | {r.chi2:.2f} | {r.critical:.2f} | {r.smallest:,} | {r.largest:,} | {r.spread:.2f} % "
        f"| {r.checked:,} |"
        for r in rows
    ]
    (out / "distribution.md").write_text("\n".join(lines) + "\n")


def draw(rows: list[Row], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [str(r.buckets) for r in rows]
    x = range(len(rows))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    top.bar(x, [r.chi2 / (r.buckets - 1) for r in rows], color="tab:blue", label="chi-squared / (N - 1)")
    top.plot(x, [r.critical / (r.buckets - 1) for r in rows], "r_", markersize=14, mew=2,
             label="p = 0.01 critical value / (N - 1)")
    top.set_ylabel("chi-squared per degree of freedom")
    top.legend(loc="upper right")
    mean = [r.keys / r.buckets for r in rows]
    bottom.vlines(x, [100 * (r.smallest / m - 1) for r, m in zip(rows, mean)],
                  [100 * (r.largest / m - 1) for r, m in zip(rows, mean)], color="tab:green", lw=6)
    bottom.axhline(0, color="black", lw=0.8)
    bottom.set_ylabel("smallest .. largest bucket vs mean (%)")
    bottom.set_xlabel("buckets (N)")
    bottom.set_xticks(list(x), labels)
    fig.suptitle(f"stompmq consistent-hash exchange: {rows[0].keys:,} keys over N buckets")
    fig.tight_layout()
    fig.savefig(out / "distribution.png", dpi=110)
    plt.close(fig)


def parse_buckets(text: str) -> list[int]:
    """``2-20,100,1000`` -> [2, 3, ..., 20, 100, 1000]."""
    result: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        result.extend(range(int(lo), int(hi or lo) + 1))
    if not result or min(result) < 2:
        raise argparse.ArgumentTypeError("buckets must be 2 or more, e.g. 2-20,100,1000")
    return result


@contextlib.contextmanager
def broker(args: argparse.Namespace) -> Iterator[Connection | None]:
    if not args.check_keys:
        yield None
        return
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(LocalBroker())
        yield stack.enter_context(Connection(url, args.login, args.passcode))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=Help)
    parser.add_argument("--keys", type=int, default=2_000_000, help="keys routed per bucket count")
    parser.add_argument("--buckets", type=parse_buckets, default=BUCKETS, help="bucket counts")
    parser.add_argument("--check-keys", type=int, default=10_000,
                        help="the first K keys also go through the broker (0: no broker)")
    parser.add_argument("--url", help="broker (stomp://host:port); default: start a local one")
    parser.add_argument("--login", help="the broker's login")
    parser.add_argument("--passcode", help="the broker's passcode")
    parser.add_argument("--out", type=Path, default=Path("pipeline-distribution"), help="where the report goes")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    keys = [str(i) for i in range(args.keys)]
    started = time.monotonic()
    rows = []
    with broker(args) as conn:
        for n in args.buckets:
            rows.append(measure(n, keys, conn, args.check_keys))
            r = rows[-1]
            verdict = "ok" if r.chi2 < r.critical else "ABOVE the critical value"
            print(f"N={n:5d}  chi2={r.chi2:10.2f}  critical={r.critical:9.2f}  {verdict}", flush=True)
    write_tables(rows, args.out)
    draw(rows, args.out)
    print(f"{len(rows)} bucket counts x {args.keys:,} keys in {time.monotonic() - started:.1f} s; "
          f"wrote {args.out / 'distribution.md'}, distribution.csv, distribution.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
