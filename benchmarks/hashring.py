"""Micro-benchmark of HashRing.route: routing decisions per second on one core.

Usage: python -m benchmarks.hashring [--keys 20000] [--repeat 5]

For each N in 10, 100, 1000 it times routing str keys "0", "1", ... through a
ring of N weight-1 queues and through a ring of N queues with weights cycling
1..4 (which takes the several-weights path), with the native router and with
the pure-Python fallback, and prints the best of ``--repeat`` runs. Targets from the issue: >= 200,000/s at N = 10 and
>= 20,000/s at N = 100. Time is this process's CPU time (time.process_time),
so waiting for a core on a busy host does not count; pin it to one core
(``taskset -c 0``) as well.
"""

from __future__ import annotations

import argparse
import time

from stompmq.broker.hashring import NATIVE, HashRing


def decisions_per_second(ring: HashRing, keys: list[str], repeat: int) -> float:
    route = ring.route
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for key in keys:
            route(key)
        best = min(best, time.process_time() - start)
    return len(keys) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=20_000, help="keys routed per run (N = 1000 uses a tenth)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case; the fastest is reported")
    args = parser.parse_args()
    routers = {"native": True, "python": False} if NATIVE else {"python": False}
    print(f"{'N':>5}  {'weights':<8}" + "".join(f"  {name + ' /s':>12}" for name in routers))
    for n in (10, 100, 1000):
        keys = [str(i) for i in range(args.keys if n < 1000 else args.keys // 10)]
        for label, weight_of in (("all 1", lambda i: 1), ("1..4", lambda i: 1 + i % 4)):
            bindings = [(f"queue-{i}", weight_of(i)) for i in range(n)]
            rates = [decisions_per_second(HashRing("bench", bindings, native=native), keys, args.repeat)
                     for native in routers.values()]
            print(f"{n:>5}  {label:<8}" + "".join(f"  {rate:>12,.0f}" for rate in rates))


if __name__ == "__main__":
    main()
