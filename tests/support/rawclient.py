"""A minimal raw-socket STOMP client for end-to-end tests.

It deliberately does not use stompmq's own parser: received frames are split
by a few lines of independent code, so a parser bug cannot hide itself.
Every read has a timeout, so a broker that fails to answer fails the test
instead of hanging it.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

TIMEOUT = 5.0

#: Every client socket opened since the last ``close_left_open()``, held so that one a test
#: drops without closing is closed at the test's end (tests/conftest.py), not found unclosed by
#: the garbage collector (a ResourceWarning, an error under the suite's filterwarnings).
_OPENED: list[socket.socket] = []


def close_left_open() -> None:
    """Close the client sockets opened so far (closing one twice is harmless)."""
    while _OPENED:
        _OPENED.pop().close()


@dataclass
class RawFrame:
    command: str
    headers: dict[str, str]
    body: bytes

    def __getitem__(self, name: str) -> str:
        return self.headers[name]


class RawClient:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        self.buffer = b""

    @property
    def sock(self) -> socket.socket:
        return self._sock

    @sock.setter
    def sock(self, sock: socket.socket) -> None:
        """Every socket a client is given is closed at the end of the test at the latest."""
        self._sock = sock
        _OPENED.append(sock)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        """Send a frame (header values written as given: no escaping)."""
        lines = [command] + [f"{k}:{v}" for k, v in (headers or {}).items()]
        self.send(("\n".join(lines) + "\n\n").encode() + body + b"\x00")

    def connect(self, version: str = "1.2", **headers: str) -> RawFrame:
        h = {"accept-version": version, "host": "localhost"}
        h.update({k.replace("_", "-"): v for k, v in headers.items()})
        self.frame("CONNECT", h)
        reply = self.recv()
        assert reply.command == "CONNECTED", reply
        return reply

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no frame from the broker in time")
        self.sock.settimeout(remaining)
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self.buffer += chunk
        return True

    def recv(self, timeout: float = TIMEOUT, skip_heartbeats: bool = True) -> RawFrame:
        """The next frame; raises TimeoutError, or EOFError if the broker closed first."""
        deadline = time.monotonic() + timeout
        while True:
            if skip_heartbeats:
                self.buffer = self.buffer.lstrip(b"\r\n")
            head_end = self.buffer.find(b"\n\n")
            if head_end >= 0:
                head = self.buffer[:head_end].decode()
                lines = head.replace("\r\n", "\n").split("\n")
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers.setdefault(name, value)
                start = head_end + 2
                if "content-length" in headers:
                    end = start + int(headers["content-length"])
                    if len(self.buffer) > end:
                        assert self.buffer[end : end + 1] == b"\x00", "frame not NUL-terminated"
                        frame = RawFrame(lines[0], headers, self.buffer[start:end])
                        self.buffer = self.buffer[end + 1 :]
                        return frame
                else:
                    end = self.buffer.find(b"\x00", start)
                    if end >= 0:
                        frame = RawFrame(lines[0], headers, self.buffer[start:end])
                        self.buffer = self.buffer[end + 1 :]
                        return frame
            if not self._fill(deadline):
                raise EOFError(f"broker closed the connection; unparsed: {self.buffer[:200]!r}")

    def expect_error(self, timeout: float = TIMEOUT) -> RawFrame:
        """Read until an ERROR frame, then check the broker closes the connection."""
        while True:
            frame = self.recv(timeout)
            if frame.command == "ERROR":
                break
        self.assert_closed(timeout)
        return frame

    def assert_closed(self, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        try:
            while self._fill(deadline):
                pass
        except (ConnectionResetError, BrokenPipeError):
            pass

    def no_frame(self, wait: float = 0.3) -> bool:
        """True if no frame arrives within ``wait`` seconds."""
        try:
            self.recv(wait)
        except TimeoutError:
            return True
        return False
