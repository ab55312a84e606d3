#!/usr/bin/env python3
"""Restart soak: the restart contract test (tests/e2e/test_restart_contract.py) over many seeds.

Each seed is one broker on a fresh SQLite file under the whole workload (every kind of message,
consumers that come and go) with ``--restarts`` stops (SIGTERM or kill -9, at moments the seed
picks) and restarts, then a drain and the checks of tests/support/restart_history.py.  Each seed
prints one line; a seed that breaks a promise prints the broken promises and the history of the
messages concerned.

  scripts/restart_soak.py --seeds 20              # seeds 1..20, 10 restarts each
  scripts/restart_soak.py --seed 7 --restarts 6   # replay one; --history FILE writes every event
  scripts/restart_soak.py --seeds 4 --keep DIR    # each seed's database stays in DIR/seed-N

Exit status 1 if any seed broke a promise; the failing seeds are listed at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.restart_workload import Outcome, run  # noqa: E402


def one(seed: int, restarts: int, history: Path | None, keep: Path | None) -> Outcome:
    if keep is not None:  # the broker's database stays, to be read with sqlite3 afterwards
        workdir = keep / f"seed-{seed}"
        workdir.mkdir(parents=True, exist_ok=True)
        outcome = run(seed, restarts, workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="restart-soak-") as tmp:
            outcome = run(seed, restarts, Path(tmp))
    status = "ok" if not outcome.violations else "FAILED"
    print(f"{status} {outcome.report()}", flush=True)
    if history is not None:
        history.write_text("\n".join(str(e) for e in outcome.history.events) + "\n")
    return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--seeds", type=int, default=10, help="run seeds FIRST..FIRST+N-1 (default 10)")
    group.add_argument("--seed", type=int, help="run (replay) this seed only")
    parser.add_argument("--first", type=int, default=1, help="the first seed of --seeds (default 1)")
    parser.add_argument("--restarts", type=int, default=10, help="stops and restarts per seed (default 10)")
    parser.add_argument("--history", type=Path, help="with --seed: write its whole history to this file")
    parser.add_argument("--keep", type=Path, help="keep each seed's database in DIR/seed-N (else a temporary directory)")
    args = parser.parse_args()
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    began = time.monotonic()
    failed, restarts = [], 0
    for seed in seeds:
        outcome = one(seed, args.restarts, args.history if args.seed is not None else None, args.keep)
        restarts += outcome.restarts
        if outcome.violations:
            failed.append(seed)
    print(f"{len(seeds)} seeds, {restarts} restarts in {time.monotonic() - began:.0f} s: "
          + (f"failed seeds {failed}" if failed else "0 violations"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
