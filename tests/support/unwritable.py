"""Making a file or directory unwritable in tests, even for root (who ignores permission bits)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``path`` cannot be written inside the block: chmod for users, ``chattr +i`` for root."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root on a filesystem without chattr +i support")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
