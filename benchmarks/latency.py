"""A latency profile: publish-to-deliver p50/p99/p99.9 at fixed offered rates, per broker.

For each rate of ``--rates`` (and, with ``--max-rate auto``, 80 % of each broker's measured
maximum) and each ``--target``, it runs ``load.py``'s ``latency`` scenario: one paced
producer sends 100-byte SENDs to a fresh queue with one consumer (auto ack by default;
``--ack client-individual`` ACKs every message, prefetch 1,000).  Targets are interleaved
within every repeat, so a slow patch of a shared machine hits all of them; the table and
the chart show the median over ``--repeats`` of each figure.

How the figures stay the broker's, not the load generator's:

* Producer and consumer are separate processes (fork), each with its own connection, so
  neither waits on the other's interpreter.  Both timestamps are ``CLOCK_MONOTONIC``, which
  is system-wide on Linux: the producer writes the instant it builds each SEND into the
  body, the consumer subtracts it from the instant the ``recv`` holding that MESSAGE
  returned (before parsing the chunk, so parse time is not counted).
* Pacing runs on a monotonic schedule (message i due at start + i/rate), so lateness never
  accumulates.  Each wait sleeps until ``--spin-us`` before the due time (timer slack cut
  to 1 µs) and spins the rest: sleeping alone wakes tens of µs late, spinning alone would
  take one of two cores from the broker.  Messages found due together go out in one
  write.  The producer's lateness against the schedule is reported (``pace p99``): when it
  nears the latency, the step measured the machine, not the broker.
* The consumer does per MESSAGE only a slice and an int() of the body; ``achieved`` (the
  producer's rate) and ``lost`` say whether a step kept up.  Rates above a broker's 80 %
  are left out: past saturation the queue grows and "latency" is the backlog's age.

Examples::

  python -m benchmarks.latency                                   # a local stompmq
  python -m benchmarks.latency --target stompmq=local \\
      --target rabbitmq=127.0.0.1:61614:guest:guest --target activemq=127.0.0.1:61616 \\
      --max-rate auto --repeats 3 --json latency.json --chart docs/latency.png

A target is NAME=HOST:PORT[:LOGIN:PASSCODE] (as for ``benchmarks.sitting``) or NAME=local: a
throw-away stompmq (``tests/support/local_broker.py``, SQLite in a temporary directory), optionally followed
by its command-line options (``"mem=local --store memory"``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks import load
from benchmarks.sitting import parse_target
from benchmarks.stompload import LoadError
from tests.support.local_broker import LocalBroker

#: The figures of a step, medians over repeats in the table and chart.
FIGURES = ("p50_ms", "p99_ms", "p99.9_ms", "max_ms", "rate", "pace_p99_us", "broker_cpu_pct")
PERCENTILES = (("p50_ms", "p50"), ("p99_ms", "p99"), ("p99.9_ms", "p99.9"))


def loadavg() -> float:
    """The one-minute load average (the machine is shared: say how busy it was)."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def load_args(target: list[str], extra: list[str]) -> argparse.Namespace:
    """load.py's options for one run against ``target`` (its --host/--port/... arguments)."""
    args = load.build_parser().parse_args([*target, *extra])
    args.affinity = None
    return args


def measure_max(target: list[str]) -> float:
    """The broker's auto-ack queue rate (load.py's queue scenario, 100,000 messages)."""
    args = load_args(target, ["--scenario", "queue", "--count", "100000"])
    res = load.run_throughput(args, load.BrokerStats(load.resolve_broker_pid(args)))
    return float(res["rate"])


def run_step(target: list[str], rate: float, seconds: float, ack: str) -> dict[str, Any]:
    """One latency run at ``rate`` msg/s for ``seconds``."""
    extra = ["--scenario", "latency", "--rate", str(rate), "--duration", str(seconds), "--ack", ack,
             "--settle", "1", "--broker-pid", "auto", "--warmup", "1000"]
    args = load_args(target, extra)
    return load.run_throughput(args, load.BrokerStats(load.resolve_broker_pid(args)))


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (target, offered rate), in the order first seen."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["target"], r["target_rate"]), []).append(r)
    out = []
    for (name, rate), rs in groups.items():
        row: dict[str, Any] = {"target": name, "offered": rate, "repeats": len(rs),
                               "lost": sum(r.get("lost", 0) for r in rs)}
        for f in FIGURES:
            vals = [r[f] for r in rs if r.get(f) is not None]
            row[f] = round(statistics.median(vals), 3) if vals else None
        out.append(row)
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    """The summary as a Markdown table, one row per offered rate, columns per target."""
    names = list(dict.fromkeys(r["target"] for r in rows))
    rates = sorted({r["offered"] for r in rows})
    by = {(r["target"], r["offered"]): r for r in rows}
    head = "| offered msg/s | " + " | ".join(names) + " |"
    lines = [head, "|---:|" + "---|" * len(names)]
    for rate in rates:
        cells = []
        for n in names:
            r = by.get((n, rate))
            cells.append("" if r is None else
                         f"{r['p50_ms']:.3f} / {r['p99_ms']:.3f} / {r['p99.9_ms']:.2f} ({r['rate']:,.0f})")
        lines.append(f"| {rate:,.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(rows: list[dict[str, Any]], path: str, title: str) -> None:
    """Latency percentiles against the offered rate: a colour per percentile, a line style per broker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D"]
    colours = {"p50_ms": "tab:blue", "p99_ms": "tab:orange", "p99.9_ms": "tab:red"}
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for i, name in enumerate(dict.fromkeys(r["target"] for r in rows)):
        mine = sorted((r for r in rows if r["target"] == name), key=lambda r: r["offered"])
        for key, label in PERCENTILES:
            ax.plot([r["offered"] for r in mine], [r[key] for r in mine], linestyle=styles[i % 4],
                    marker=markers[i % 4], color=colours[key], label=f"{name} {label}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("offered rate (msg/s, one producer, one consumer)")
    ax.set_ylabel("publish-to-deliver latency (ms)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", action="append", metavar="NAME=HOST:PORT[:LOGIN:PASSCODE]|NAME=local [OPTIONS]",
                   help="a broker to measure (repeatable; default: stompmq=local)")
    p.add_argument("--rates", type=float, nargs="+", default=[1000, 2000, 5000, 10000, 20000, 50000, 100000],
                   help="offered rates, msg/s (default %(default)s)")
    p.add_argument("--max-rate", default="none", metavar="auto|none",
                   help="auto: measure each broker's auto-ack queue rate first, drop the rates above 80 %% "
                        "of it and add 80 %% of it as the last step")
    p.add_argument("--seconds", type=float, default=5, help="seconds per step (default %(default)s)")
    p.add_argument("--min-samples", type=int, default=10000,
                   help="a slow step runs long enough for this many messages (default %(default)s)")
    p.add_argument("--repeats", type=int, default=3, help="runs per step and target (default %(default)s)")
    p.add_argument("--ack", choices=["auto", "client-individual"], default="auto",
                   help="the consumer's ack mode (default %(default)s)")
    p.add_argument("--warm-up", type=float, default=5, metavar="SECONDS",
                   help="an unrecorded run at 10,000 msg/s per target first (JIT, caches; default %(default)s)")
    p.add_argument("--json", metavar="FILE", help="write every run and the medians here")
    p.add_argument("--chart", metavar="FILE.png", help="draw the medians (needs matplotlib)")
    args = p.parse_args(argv)
    with ExitStack() as stack:
        targets: list[tuple[str, list[str]]] = []
        for text in args.target or ["stompmq=local"]:
            name, _, address = text.partition("=")
            local, *cli_args = shlex.split(address) or [""]
            if local == "local":
                broker = LocalBroker(*cli_args)
                stack.enter_context(broker)
                targets.append((name, ["--port", str(broker.port)]))
            else:
                try:
                    targets.append(parse_target(text))
                except argparse.ArgumentTypeError as e:
                    p.error(str(e))
        try:
            return sitting(args, targets)
        except LoadError as e:
            print(f"latency: {e}", file=sys.stderr)
            return 1


def sitting(args: argparse.Namespace, targets: list[tuple[str, list[str]]]) -> int:
    """Warm up, find the maxima, run every step; print, write and draw the medians."""
    meta: dict[str, Any] = {"ack": args.ack, "seconds": args.seconds, "min_samples": args.min_samples,
                            "repeats": args.repeats, "loadavg": [loadavg()], "started": time.strftime("%F %T")}
    if args.warm_up > 0:
        for _, t in targets:
            run_step(t, 10000, args.warm_up, args.ack)
    steps: dict[str, list[float]] = {}
    for name, t in targets:
        rates = list(args.rates)
        if args.max_rate == "auto":
            top = measure_max(t)
            meta.setdefault("max_rate", {})[name] = round(top)
            rates = [r for r in rates if r < 0.8 * top] + [round(0.8 * top, -2)]
        steps[name] = rates
        print(f"{name}: steps {', '.join(f'{r:g}' for r in rates)}", flush=True)
    runs = []
    for rep in range(args.repeats):
        for rate in sorted({r for rs in steps.values() for r in rs}):
            for name, t in targets:
                if rate not in steps[name]:
                    continue
                res = run_step(t, rate, max(args.seconds, args.min_samples / rate), args.ack)
                res.update(target=name, repeat=rep, loadavg=loadavg())
                meta["loadavg"].append(res["loadavg"])
                runs.append(res)
                print(f"{name} {rate:>8g}/s: p50 {res['p50_ms']} p99 {res['p99_ms']} p99.9 {res['p99.9_ms']} ms, "
                      f"achieved {res['rate']:.0f}/s, pace p99 {res['pace_p99_us']} µs, "
                      f"broker CPU {res.get('broker_cpu_pct')} %, load {res['loadavg']}", flush=True)
    rows = summarize(runs)
    print("\ncells: p50 / p99 / p99.9 ms (achieved msg/s), medians of", args.repeats)
    print(markdown(rows))
    print(f"load average during the sitting: {min(meta['loadavg']):.2f}-{max(meta['loadavg']):.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "summary": rows, "runs": runs}, indent=1))
    if args.chart:
        chart(rows, args.chart, f"STOMP queue latency, 1 producer / 1 consumer, {args.ack} ack, "
                                f"median of {args.repeats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
