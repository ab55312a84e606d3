"""The broker process tunes the cyclic garbage collector at start (server/app.py)."""

from __future__ import annotations

import re
from pathlib import Path

from stompmq.server.app import GC_THRESHOLDS

from ..support.broker_process import BrokerProcess


def test_the_broker_freezes_start_up_objects_and_raises_the_gc_thresholds(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "db", log_level="DEBUG").start() as broker:
        found = re.search(r"garbage collector: (\d+) start-up objects frozen, thresholds (\S+)", broker.stderr)
        assert found is not None, broker.stderr
        assert int(found.group(1)) > 1000  # the imported modules at least
        assert found.group(2) == "/".join(map(str, GC_THRESHOLDS))
