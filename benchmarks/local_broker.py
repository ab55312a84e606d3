"""A throw-away broker process for the benchmarks and examples: ``python -m stompmq.cli`` on a
free loopback port and a SQLite store in a temporary directory, stopped (SIGTERM, then SIGKILL)
on exit.

The examples and most benchmarks take ``--url`` (or ``--port``); when none is given they run
against one of these, so a single command works on a machine with nothing running.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

from stompmq.spark.client import Connection, StompmqError

ROOT = Path(__file__).resolve().parent.parent

TICKS = os.sysconf("SC_CLK_TCK")
#: Seconds the broker gets to listen (imports, migrations) and to exit on SIGTERM.
START_TIMEOUT = STOP_TIMEOUT = 30.0


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """The broker's resident memory now (VmRSS) or at its peak so far (VmHWM), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field}")


def cpu_seconds(pid: int, reaped: bool = False) -> float:
    """User + system CPU of ``pid`` so far (``reaped``: plus its children that have exited and
    been waited for): less noisy than wall time on a loaded machine."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return sum(int(x) for x in fields[11:15 if reaped else 13]) / TICKS  # utime stime [cutime cstime]


def sample_rss(pid: int, samples: list[tuple[float, int]], stop: threading.Event) -> None:
    start = time.monotonic()
    while not stop.wait(1.0):
        samples.append((time.monotonic() - start, rss_kib(pid)))


class LocalBroker:
    """``with LocalBroker(*cli_args) as url:`` -- ``url`` is ``stomp://127.0.0.1:PORT``.

    ``cli_args`` come last on the command line, so they override the defaults (``--store``,
    ``--http-port``, ``--log-level``).  ``port`` and ``proc`` are the broker's; after the end,
    ``log_text`` is what it logged (its stderr).
    """

    def __init__(self, *cli_args: str) -> None:
        self.cli_args = cli_args
        self.workdir = tempfile.TemporaryDirectory(prefix="stompmq-local-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = free_port()
        self.log = Path(self.workdir.name) / "broker.log"
        self.log_text = ""

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> str:
        """Start the broker and wait until it takes connections; its URL."""
        work = Path(self.workdir.name)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "stompmq.cli", "--port", str(self.port), "--store",
                 f"sqlite:///{work / 'stompmq.db'}", "--log-level", "WARNING", "--http-port", "0", *self.cli_args],
                stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=str(ROOT),
            )
        url = f"stomp://127.0.0.1:{self.port}"
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                Connection(url).close()
                return url
            except StompmqError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit("the local broker did not start:\n" + self.log_text) from None
                time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM (SIGKILL after ``STOP_TIMEOUT``); keeps the log in ``log_text``; removes the data."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log.exists():
            self.log_text = self.log.read_text(errors="replace")
        self.workdir.cleanup()
