"""A throw-away broker process for the benchmarks, the examples and the tests that run them:
``python -m stompmq.cli`` on a free loopback port and a SQLite store in a temporary directory,
stopped (SIGTERM, then SIGKILL) on exit.

The examples and most benchmarks take ``--url`` (or ``--port``); when none is given they run
against one of these, so a single command works on a machine with nothing running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

from stompmq.sync_client import Connection, StompmqError

from .broker_process import ROOT, free_port
from .waiting import poll

#: Seconds the broker gets to listen (imports, migrations) and to exit on SIGTERM.
START_TIMEOUT = STOP_TIMEOUT = 30.0


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
        proc = self.proc

        def answers() -> bool:
            try:
                Connection(url).close()
            except StompmqError:
                return False
            return True

        if poll(lambda: answers() or proc.poll() is not None, START_TIMEOUT, interval=0.1) and proc.poll() is None:
            return url
        self.stop()
        raise SystemExit("the local broker did not start:\n" + self.log_text)

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
