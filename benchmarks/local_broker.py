"""A throw-away broker for the pipeline scripts: ``python -m stompmq.cli`` on a free loopback
port and a SQLite store in a temporary directory, stopped (SIGTERM, then SIGKILL) on exit.

The scripts take ``--url``; when none is given they run against one of these, so a single
command shows the whole pipeline on a machine with nothing running.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from stompmq.spark.client import Connection, StompmqError

ROOT = Path(__file__).resolve().parent.parent

#: Seconds the broker gets to listen (imports, migrations) and to exit on SIGTERM.
START_TIMEOUT = STOP_TIMEOUT = 30.0


class LocalBroker:
    """``with LocalBroker(*cli_args) as url:`` -- ``url`` is ``stomp://127.0.0.1:PORT``."""

    def __init__(self, *cli_args: str) -> None:
        self.cli_args = cli_args
        self.workdir = tempfile.TemporaryDirectory(prefix="stompmq-pipeline-")
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        work = Path(self.workdir.name)
        self.log = work / "broker.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "stompmq.cli", "--port", str(port), "--store",
                 f"sqlite:///{work / 'stompmq.db'}", "--log-level", "WARNING", "--http-port", "0", *self.cli_args],
                stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=str(ROOT),
            )
        url = f"stomp://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                Connection(url).close()
                return url
            except StompmqError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    text = self.log.read_text()
                    self.__exit__(None, None, None)
                    raise SystemExit("the local broker did not start:\n" + text) from None
                time.sleep(0.1)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.workdir.cleanup()
