"""examples/dramatiq_tasks.py and examples/taskiq_tasks.py as their docstrings run them: the
framework's worker command and the example as a script, against a real broker process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.broker_process import ROOT, BrokerProcess
from ..support.waiting import wait_until

BIN = Path(sys.executable).parent


@pytest.fixture
def stompmq(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "stompmq.db").start() as process:
        yield process


def run_example(stompmq: BrokerProcess, tmp_path: Path, worker: list[str], module: str) -> str:
    """Start ``worker``, run ``python -m module`` once it is up, and return the worker's output
    once the three ``add`` lines came (the delayed one last)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STOMPMQ_URL": f"stomp://127.0.0.1:{stompmq.port}"}
    out = tmp_path / "worker.out"
    with out.open("wb") as log:
        proc = subprocess.Popen(worker, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        subprocess.run([sys.executable, "-m", module], cwd=ROOT, env=env, check=True, timeout=60)
        wait_until(lambda: "add: 4 + 5 = 9" in out.read_text(), "the delayed task's line", timeout=60)
        return out.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.dramatiq
def test_dramatiq_example(stompmq, tmp_path):
    text = run_example(stompmq, tmp_path, [str(BIN / "dramatiq"), "examples.dramatiq_tasks", "--processes", "1"],
                       "examples.dramatiq_tasks")
    assert "add: 2 + 3 = 5" in text and "add: 1 + 1 = 2" in text
    wait_until(lambda: "not today" in (tmp_path / "worker.out").read_text(), "the rejection logged")


@pytest.mark.taskiq
def test_taskiq_example(stompmq, tmp_path):
    text = run_example(stompmq, tmp_path, [str(BIN / "taskiq"), "worker", "examples.taskiq_tasks:broker",
                                           "--workers", "1"], "examples.taskiq_tasks")
    assert "add: 2 + 3 = 5" in text and "add: 1 + 1 = 2" in text
