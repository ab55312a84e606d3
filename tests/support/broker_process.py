"""The broker as a real subprocess (``python -m stompmq.cli``), for crash and signal tests.

``BrokerThread`` cannot be killed with SIGKILL without killing the test, and
only a separate process exercises the command line's startup errors and its
signal handling.  ``BrokerProcess.start()`` returns once the broker answers
CONNECT, or raises (with the broker's stderr) if the process exited or did
not listen in time.  Every wait has a timeout: a broker that hangs fails the
test instead of hanging it.  stderr goes to a file, so a chatty broker can
never block on a full pipe.

``Peer`` is the end-to-end ``Client`` (tests/support/stompclient.py) with what these suites add:
receipts, MESSAGE reads that fail on ERROR, ``/control`` counts, and a way to
prove the broker handled every frame sent so far without asking for a commit.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path
from typing import IO

from .rawclient import RawFrame
from .stompclient import Client
from .waiting import poll

#: Seconds a broker gets to open its store and listen (imports + migrations + recovery).
START_TIMEOUT = 30.0
#: Seconds a broker gets to exit after a signal (it commits everything still buffered first).
STOP_TIMEOUT = 30.0

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def stomp_ready(port: int, host: str = "127.0.0.1") -> bool:
    """True if a STOMP broker answers CONNECT on ``port`` (not merely something listening)."""
    try:
        with socket.create_connection((host, port), timeout=0.5) as sock:
            sock.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
            data = b""
            while b"\x00" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    return False
                data += chunk
            return data.lstrip(b"\r\n").startswith(b"CONNECTED")
    except OSError:
        return False


def _close_all(files: list[IO[bytes]]) -> None:
    """Close a broker process's stderr files (its finalizer: it must not hold the process)."""
    for file in files:
        file.close()


class BrokerProcess:
    """``stompmq`` on ``sqlite:///db_path`` (or on a ``postgresql://`` URL) in a subprocess of its own."""

    def __init__(self, db_path: str | Path, *extra: str, port: int | None = None, log_level: str = "WARNING",
                 open_files: tuple[int, int] | None = None) -> None:
        is_url = str(db_path).startswith("postgresql://")
        self.db_path = Path(db_path)
        self.open_files = open_files  # (soft, hard) RLIMIT_NOFILE for the process
        self.port = port if port is not None else free_port()
        self._auto_port = port is None
        self.args = [
            sys.executable,
            "-m",
            "stompmq.cli",
            "--port",
            str(self.port),
            "--store",
            str(db_path) if is_url else f"sqlite:///{self.db_path}",
            "--log-level",
            log_level,
            *extra,
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr_file = tempfile.TemporaryFile()
        # Tests that only terminate() (to read stderr after the stop) still close the file once
        # the process object goes: a file left to the garbage collector is a ResourceWarning.
        self._files = [self._stderr_file]
        weakref.finalize(self, _close_all, self._files)

    # -- lifecycle -------------------------------------------------------------------------
    def spawn(self) -> BrokerProcess:
        """Start the process without waiting for it to listen (for startup-error tests)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("STOMPMQ_STORE", None)
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr_file,
            cwd=str(ROOT),
            env=env,
            preexec_fn=self._limit_open_files if self.open_files is not None else None,
        )
        return self

    def _limit_open_files(self) -> None:
        """In the child, before exec: the open-file limit the broker inherits."""
        assert self.open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, self.open_files)

    def start(self, timeout: float = START_TIMEOUT) -> BrokerProcess:
        """Start the broker and return once it answers CONNECT on its port."""
        for attempt in range(3):
            self.spawn()
            assert self.proc is not None
            proc = self.proc
            if not poll(lambda proc=proc, port=self.port: stomp_ready(port) or proc.poll() is not None, timeout):
                self.kill9()
                raise RuntimeError(f"broker did not listen within {timeout} s:\n{self.stderr}")
            if proc.poll() is None:
                return self
            if self._auto_port and "cannot listen" in self.stderr and attempt < 2:
                # Someone took the free port between our probe and the broker's bind: retry.
                self.port = free_port()
                self.args[self.args.index("--port") + 1] = str(self.port)
                self._stderr_file.close()
                self._stderr_file = tempfile.TemporaryFile()
                self._files.append(self._stderr_file)
                continue
            raise RuntimeError(f"broker exited with {self.proc.returncode} before listening:\n{self.stderr}")
        raise AssertionError("unreachable")

    def kill9(self) -> int:
        """SIGKILL: no flush, no cleanup, exactly like a crash or a power cut of the process."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.wait()

    def terminate(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """Send ``sig`` (SIGTERM by default) and wait for the exit; SIGKILL and fail on a hang."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        """Wait for the process to exit and return its exit code (SIGKILL it on a hang)."""
        assert self.proc is not None, "not started"
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"broker did not exit within {timeout} s:\n{self.stderr}") from None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def stderr(self) -> str:
        """Everything the broker wrote to stderr so far."""
        self._stderr_file.flush()
        return os.pread(self._stderr_file.fileno(), 1 << 22, 0).decode(errors="replace")

    def close(self) -> None:
        """Make sure the process is gone (SIGKILL if still running); for fixtures' teardown."""
        if self.running:
            self.kill9()
        self._stderr_file.close()

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- a client for these suites ---------------------------------------------------------------------
class Peer(Client):
    """A STOMP 1.2 connection (receipts, a stash for frames read early) plus /control counts."""

    def count(self, queue: str) -> int:
        """``num-messages`` of ``/control/count-msgs/queue/<queue>`` (ready + unacked, from the store)."""
        return int(self.request("SEND", {"destination": f"/control/count-msgs/queue/{queue}"})["num-messages"])

    def sync_without_commit(self) -> RawFrame:
        """Prove every frame sent so far was handled, without asking the store for a commit.

        Every receipt asks the store to commit now, so a receipt cannot show that write-behind
        works.  An ACK naming no delivery is answered with an ERROR, in order, and nothing else:
        the broker has handled everything before it.  The connection is closed afterwards.
        """
        self.frame("ACK", {"id": "no-such-delivery"})
        while True:
            frame = self.next()
            if frame.command == "ERROR":
                break
        self.assert_closed()
        self.close()
        return frame
