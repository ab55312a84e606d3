"""Smoke test of examples/pipeline_events.py at a small size, in the test run's Spark session,
against the local broker the example would start itself (tests/support/local_broker.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")  # the spark extra

from examples import pipeline_events

from ..support.local_broker import LocalBroker

pytestmark = pytest.mark.spark


def test_help_shows_the_defaults(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        pipeline_events.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 200000)" in text and "(default: 0)" in text and "(default: None)" not in text


def test_pipeline_events_counts_every_event_in_a_window(spark: Any, tmp_path: Path, capsys: Any) -> None:
    args = pipeline_events.parse_args(["--events", "3000", "--streams", "3", "--keys", "20", "--quiet", "--out", str(tmp_path / "out")])
    with LocalBroker() as url:
        assert pipeline_events.run(url, args, spark) == 0
    summary = capsys.readouterr().out
    assert "3,000 events counted" in summary and "over 3 stream partitions" in summary
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.agg({"events": "sum"}).collect()[0][0] == 3000
    assert out.select("key").distinct().count() == 20
