"""The streaming sink's exactly-once promise against a driver killed with SIGKILL mid-write: the
query restarted from its checkpoint replays the unfinished micro-batch, and the broker drops the
rows it already stored (the tasks are idempotent producers), so the target holds each row once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.broker_process import ROOT
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.stores import make_store_factory
from ..support.waiting import wait_until

pytest.importorskip("pyspark")  # the spark extra, in the driver subprocess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: Source rows: several micro-batches of ``maxOffsetsPerTrigger`` (200) over two streams.
ROWS = 1200
#: Body bytes per row: a task's SENDs leave in several chunks (spark/client.py SEND_CHUNK).
BODY = 4096


def count(port: int, stream: str) -> tuple[int, int]:
    """(entries, repeats dropped) of ``stream``."""
    with Client(port) as c:
        receipt = c.request("SEND", {"destination": f"/control/stream-offsets/stream/{stream}"})
    return int(receipt["count"]), int(receipt["duplicates"])


def driver(port: int, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    """The query's driver (and, under it, Spark's JVM and Python workers) in a session of its own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with log.open("ab") as err:  # the driver holds it open; our copy closes
        return subprocess.Popen(
            [sys.executable, "-m", "tests.spark.sink_driver", f"stomp://127.0.0.1:{port}", "/stream/in0,/stream/in1",
             "/stream/out", str(checkpoint)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_driver_killed_mid_write_and_restarted_writes_every_row_once(tmp_path: Path) -> None:
    with BrokerThread(make_store_factory("sqlite", tmp_path)).start() as broker:
        with Client(broker.port) as c:
            for i in range(ROWS):
                c.send_to(f"/stream/in{i % 2}", f"{i:06d}".ljust(BODY, "."), receipt=False)
            c.sync()
        checkpoint, log = tmp_path / "checkpoint", tmp_path / "driver.log"
        first = driver(broker.port, checkpoint, log)
        try:
            wait_until(lambda: count(broker.port, "out")[0] >= ROWS // 3 or first.poll() is not None,
                       "a third of the rows written", timeout=300)
            assert first.poll() is None, f"the driver ended before the kill: {log.read_text()[-3000:]}"
            os.kill(first.pid, signal.SIGKILL)
            first.wait()
            # Spark's JVM exits when its stdin (the driver's pipe) closes; its workers follow.
            wait_until(lambda: not group_alive(first.pid), "Spark's JVM and workers to exit", timeout=120)
        finally:
            if group_alive(first.pid):
                os.killpg(first.pid, signal.SIGKILL)
        at_kill, _ = count(broker.port, "out")
        assert at_kill < ROWS
        second = driver(broker.port, checkpoint, log)
        try:
            assert second.wait(timeout=600) == 0, log.read_text()[-3000:]
        finally:
            if group_alive(second.pid):
                os.killpg(second.pid, signal.SIGKILL)
        entries, repeats = count(broker.port, "out")
        assert entries == ROWS, f"{entries} rows stored of {ROWS} ({repeats} repeats dropped, {at_kill} at the kill)"
        with Client(broker.port) as c:
            c.subscribe("/stream/out", x_stream_offset="first")
            bodies = sorted(m.body[:6].decode() for m in c.messages(ROWS))
            c.expect_nothing()
        assert bodies == [f"{i:06d}" for i in range(ROWS)]
        print(f"killed at {at_kill} rows stored; the restart's repeats dropped: {repeats}")
