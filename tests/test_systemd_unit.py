"""The shipped systemd unit passes ``systemd-analyze verify`` (where systemd is installed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent.parent / "deploy" / "stompmq.service"


def test_unit_verifies(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart's program exists: point it at this checkout's entry point.
    stompmq = Path(sys.executable).parent / "stompmq"
    unit = tmp_path / "stompmq.service"
    unit.write_text(UNIT.read_text().replace("/opt/stompmq/venv/bin/stompmq", str(stompmq)))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True)
    problems = [line for line in done.stderr.splitlines() if "stompmq.service" in line]
    assert done.returncode == 0 and not problems, done.stderr
