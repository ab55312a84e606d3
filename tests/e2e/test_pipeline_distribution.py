"""Smoke test of examples/pipeline_distribution.py at a small size, against the local broker it starts
(tests/spark/test_pipeline_events.py has the Spark pipeline's)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.broker_process import ROOT


def test_pipeline_distribution_tables_chart_and_broker_check(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "examples.pipeline_distribution", "--keys", "20000", "--buckets", "2-3,100",
         "--check-keys", "500", "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=str(ROOT),
    )
    assert done.returncode == 0, done.stderr
    with open(out / "distribution.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["buckets"]) for r in rows] == [2, 3, 100]
    assert all(int(r["keys"]) == 20000 and int(r["checked_through_broker"]) == 500 for r in rows)
    assert all(int(r["min"]) <= 20000 / int(r["buckets"]) <= int(r["max"]) for r in rows)
    assert "| 100 |" in (out / "distribution.md").read_text()
    assert (out / "distribution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
