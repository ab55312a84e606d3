"""Smoke test of scripts/pipeline_events.py at a small size, in the test run's Spark session,
against the local broker the script would start itself (scripts/local_broker.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from ..support.broker_process import ROOT

SCRIPTS = ROOT / "scripts"
pytestmark = pytest.mark.spark


def test_pipeline_events_counts_every_event_in_a_window(spark: Any, tmp_path: Path, capsys: Any) -> None:
    sys.path.insert(0, str(SCRIPTS))
    try:
        import pipeline_events
        from local_broker import LocalBroker
    finally:
        sys.path.remove(str(SCRIPTS))
    args = pipeline_events.parse_args(["--events", "3000", "--streams", "3", "--keys", "20", "--quiet", "--out", str(tmp_path / "out")])
    with LocalBroker() as url:
        assert pipeline_events.run(url, args, spark) == 0
    summary = capsys.readouterr().out
    assert "3,000 events counted" in summary and "over 3 stream partitions" in summary
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.agg({"events": "sum"}).collect()[0][0] == 3000
    assert out.select("key").distinct().count() == 20
