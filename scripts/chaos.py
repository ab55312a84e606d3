#!/usr/bin/env python3
"""Chaos soak: tests/e2e/test_chaos.py over many seeds, one after the other, until a time is up.

Each round is one schedule (two kill -9s, each followed by a restart of the killed broker after
0.5 to 6 s, a SIGSTOP past the lease, a PostgreSQL restart, in an order and on brokers the seed
picks) against three broker processes on a throw-away PostgreSQL server, with consumers that
hold each message 0.5 to 2 s before its ACK; each round prints the messages receipted, refused,
delivered and acked and how long each take-over took, and a round that breaks a promise (among
them: never twice at once without redelivered, per subscription and per queue; a take-over
within the lease plus 5 s) its history and the command that replays it.

  scripts/chaos.py --minutes 30                 # seeds 1, 2, 3, ... for half an hour
  scripts/chaos.py --seeds 17 42                # just these
  STOMPMQ_CHAOS_SEED=42 .venv-test/bin/python -m pytest tests/e2e/test_chaos.py -s   # replay one

Exit status 1 if any round failed; the failing seeds are listed at the end.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(seed: int) -> bool:
    """One round; True if it kept every promise."""
    env = dict(os.environ, STOMPMQ_CHAOS_SEED=str(seed))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/e2e/test_chaos.py", "-q", "-s", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    ok = result.returncode == 0
    counts = [line for line in result.stdout.splitlines()
              if line.startswith("{'receipted'") or line.startswith("take-over after")]
    print(f"seed {seed}: {'ok' if ok else 'FAILED'} {'; '.join(counts)}", flush=True)
    if not ok:
        print(result.stdout[-20_000:], result.stderr[-5_000:], sep="\n", flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="stop starting rounds after this long")
    parser.add_argument("--seeds", type=int, nargs="*", help="run these seeds only (default 1, 2, 3, ...)")
    args = parser.parse_args()
    seeds: Iterable[int] = args.seeds if args.seeds else itertools.count(1)
    end = time.monotonic() + args.minutes * 60
    failed = []
    for seed in seeds:
        if time.monotonic() > end:
            break
        if not run(seed):
            failed.append(seed)
    print(f"failed seeds: {failed}" if failed else "every round kept every promise")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
