"""Every benchmark module imports: a benchmark is run by hand, so a module it imports that moved
(tests/support/local_broker.py once did) would otherwise be found only on the day of a sitting."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
#: Modules with a side effect at import: the Dramatiq worker's app reads its broker from the
#: environment and installs it as the process's broker (dramatiq_bench.py runs it as a worker).
SIDE_EFFECTS = {"dramatiq_app"}


@pytest.mark.parametrize("name", sorted(p.stem for p in BENCHMARKS.glob("*.py")
                                        if p.stem != "__init__" and p.stem not in SIDE_EFFECTS))
def test_the_benchmark_imports(name: str) -> None:
    importlib.import_module(f"benchmarks.{name}")
