"""The restart contract on one broker on SQLite: a seeded workload over every kind of message
(plain, persistent, priorities, TTL, delayed, transactional, grouped, a durable topic
subscription, a stream, a bounded queue, exclusive consumers), consumers that come and go with
auto and client acks, and a schedule of SIGTERM and ``kill -9`` (once while the broker starts)
with restarts; then the checks of tests/support/restart_history.py over what the clients saw.

One short seed here (select it with ``-m restart_contract``); ``scripts/restart_soak.py`` runs
many, and replays one: ``scripts/restart_soak.py --seed S`` prints its history.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..support.restart_workload import run

pytestmark = [pytest.mark.slow, pytest.mark.restart_contract]

#: The seed and its number of restarts: the environment's, else a fixed short one.
SEED = int(os.environ.get("RESTART_CONTRACT_SEED", "1"))
RESTARTS = int(os.environ.get("RESTART_CONTRACT_RESTARTS", "6"))


def test_every_promise_holds_across_random_restarts(tmp_path: Path) -> None:
    outcome = run(SEED, RESTARTS, tmp_path)
    print("\n" + outcome.report())
    assert outcome.restarts >= RESTARTS, outcome.report()
    assert not outcome.violations, outcome.report() + f"\nreplay: scripts/restart_soak.py --seed {SEED} --restarts {RESTARTS}"
