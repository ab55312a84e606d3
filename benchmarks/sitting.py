"""One benchmark sitting: the standard scenarios against several brokers, interleaved run by run.

Each scenario runs ``--runs`` times; within a run every target goes once, in turn, so slow
drift of the machine (thermal, other load) spreads over all brokers alike.  At the end it
prints one Markdown table: the median rate per target, the broker's CPU per message, the slowest
run as a fraction of the median (runs go to the same broker process one after another, so a
broker that slows down as it ages shows there), and each target's rate as a ratio of the first
target's.  Every run is also printed as it finishes
(one summary line, and one JSON line with ``--json``).  The load generator is
python -m benchmarks.load, imported, so every option there applies to the runs here.

  python -m benchmarks.sitting --target stompmq=127.0.0.1:61613 \\
      --target rabbitmq=127.0.0.1:61614:guest:guest --target activemq=127.0.0.1:61616 \\
      --runs 5 --affinity 1

A target is NAME=HOST:PORT[:LOGIN:PASSCODE][/tls][/ws]: ``/tls`` and ``/ws`` pick bench.py's
transports (TLS, verified against ``--tls-ca`` if given; STOMP over WebSocket), so one broker's
listeners can be compared with each other:

  python -m benchmarks.sitting --target tcp=127.0.0.1:61613 --target tls=127.0.0.1:61614/tls \
      --target ws=127.0.0.1:15674/ws --scenarios queue --runs 5 --affinity 1

Its broker's process is found by the port (``--broker-pid auto``) for the CPU figures.  Scenarios (``--scenarios``, comma separated)
are listed in ``SCENARIOS`` below and by ``--help``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from benchmarks import load as bench

#: The standard scenarios: bench.py options per scenario, the same for every broker; peers that
#: only persist on request get ``--persistent`` where the scenario is about durability.
SCENARIOS: dict[str, list[str]] = {
    "queue": ["--scenario", "queue", "--count", "200000"],
    "queue-ack": ["--scenario", "queue-ack", "--prefetch", "1000", "--count", "100000"],
    "queue-4p4c": ["--scenario", "queue", "--count", "200000", "--producers", "4", "--consumers", "4"],
    "receipts": ["--scenario", "receipts", "--window", "1000", "--ack", "client-individual", "--prefetch", "1000",
                 "--count", "100000", "--persistent"],
    "fanout": ["--scenario", "fanout", "--subscribers", "10", "--count", "50000"],
    "queue-1k": ["--scenario", "queue", "--count", "100000", "--body-size", "1024"],
    "queue-64k": ["--scenario", "queue", "--count", "5000", "--body-size", "65536"],
    "queue-1m": ["--scenario", "queue", "--count", "500", "--warmup", "50", "--batch", "8", "--body-size", "1048576"],
}



#: Transport suffixes of a target and the bench.py options they stand for.
TRANSPORTS = {"tls": "--tls", "ws": "--ws"}


def parse_target(text: str) -> tuple[str, list[str]]:
    name, sep, address = text.partition("=")
    address, *transports = address.split("/")
    parts = address.split(":")
    if not sep or len(parts) not in (2, 4) or not parts[1].isdigit() or set(transports) - set(TRANSPORTS):
        raise argparse.ArgumentTypeError(f"expected NAME=HOST:PORT[:LOGIN:PASSCODE][/tls][/ws], got {text!r}")
    args = ["--host", parts[0], "--port", parts[1], *(TRANSPORTS[t] for t in transports)]
    if len(parts) == 4:
        args += ["--login", parts[2], "--passcode", parts[3]]
    return name, args


def main() -> int:
    listing = "\n".join(f"  {name:10} {' '.join(options)}" for name, options in SCENARIOS.items())
    parser = argparse.ArgumentParser(
        description=f"{__doc__}\nscenarios:\n{listing}", formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", type=parse_target, action="append", required=True, help="NAME=HOST:PORT[:LOGIN:PASSCODE]")
    parser.add_argument("--scenarios", default="queue,queue-ack,queue-4p4c,queue-1k,queue-64k",
                        help="comma-separated (default: the standard set, %(default)s)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--affinity", default=None, help="CPUs for the load generator (bench.py --affinity)")
    parser.add_argument("--tls-ca", default=None, help="CA the /tls targets' certificates are verified against")
    parser.add_argument("--json", action="store_true", help="also print every run as a JSON line")
    args = parser.parse_args()
    scenarios = args.scenarios.split(",")
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r}: choose from {', '.join(SCENARIOS)}")
    results: dict[tuple[str, str], list[tuple[float, float | None]]] = {}
    for scenario in scenarios:
        for run in range(args.runs):
            for name, target_args in args.target:
                argv = [*target_args, *SCENARIOS[scenario], "--broker-pid", "auto"]
                if args.affinity:
                    argv += ["--affinity", args.affinity]
                if args.tls_ca and "--tls" in target_args:
                    argv += ["--tls-ca", args.tls_ca]
                bargs = bench.build_parser().parse_args(argv)
                if bargs.affinity is not None:
                    bargs.affinity = {int(x) for x in bargs.affinity.split(",") if x}
                try:
                    res = bench.run_throughput(bargs, bench.BrokerStats(bench.resolve_broker_pid(bargs)))
                except bench.LoadError as e:
                    print(f"{scenario} run {run + 1} {name}: failed: {e}", flush=True)
                    continue
                print(f"{scenario} run {run + 1} {name}: {bench.summary_line(res)}", flush=True)
                if args.json:
                    print(json.dumps({"target": name, "scenario": scenario, **res}), flush=True)
                results.setdefault((scenario, name), []).append((res["rate"], res.get("broker_cpu_us_per_msg")))
    names = [name for name, _ in args.target]
    print()
    print("| scenario | " + " | ".join(f"{n} msg/s (µs CPU/msg, slowest/median)" for n in names) + " | "
          + " | ".join(f"{n}/{names[0]}" for n in names[1:]) + " |")
    print("|---" * (1 + len(names) + len(names) - 1) + "|")
    for scenario in scenarios:
        medians = {}
        cells = []
        for n in names:
            runs = results.get((scenario, n), [])
            if not runs:
                cells.append("failed")
                continue
            medians[n] = statistics.median(r for r, _ in runs)
            cpu = [c for _, c in runs if c is not None]
            slowest = min(r for r, _ in runs) / medians[n]  # a cliff shows here (a broker that slows as it ages)
            cells.append(f"{medians[n]:,.0f}" + (f" ({statistics.median(cpu):.1f} µs" if cpu else " (")
                         + f", {slowest:.2f})")
        ratios = [f"{medians[n] / medians[names[0]]:.2f}" if n in medians and names[0] in medians else "-"
                  for n in names[1:]]
        print(f"| {scenario} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
