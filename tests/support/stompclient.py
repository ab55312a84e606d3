"""A slightly higher-level raw-socket STOMP client for the end-to-end suites.

``Client`` builds on ``RawClient`` (independent frame splitting, a timeout on
every read) and adds what nearly every end-to-end test needs: waiting for a
particular RECEIPT while keeping the MESSAGEs that arrive meanwhile, ACK/NACK
spelled the way the session's version wants, and "nothing more arrives"
checks that also look at frames already buffered.  Any ERROR frame met while
waiting for something else fails the test with the broker's message.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
from collections import deque

from .rawclient import TIMEOUT, RawClient, RawFrame

_receipts = itertools.count(1)


class BrokerError(AssertionError):
    """The broker answered ERROR where the test expected something else."""


class Client(RawClient):
    def __init__(
        self,
        port: int,
        version: str | None = "1.2",
        *,
        connect: bool = True,
        rcvbuf: int | None = None,
        **headers: str,
    ) -> None:
        if rcvbuf is None:
            super().__init__(port)
        else:  # a small receive buffer must be set before connecting to take effect
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.settimeout(TIMEOUT)
            self.sock.connect(("127.0.0.1", port))
            self.buffer = b""
        self.stash: deque[RawFrame] = deque()
        self.version = version or "1.0"
        self.connected: RawFrame | None = None
        if connect:
            h = {"host": "localhost"}
            if version is not None:
                h["accept-version"] = version
            h.update({k.replace("_", "-"): v for k, v in headers.items()})
            self.frame("CONNECT", h)
            reply = self.recv()
            assert reply.command == "CONNECTED", reply
            self.connected = reply

    @property
    def session_id(self) -> str:
        assert self.connected is not None
        return self.connected["session"]

    # -- reading --------------------------------------------------------------
    def next(self, timeout: float = TIMEOUT) -> RawFrame:
        """The next frame, buffered ones first."""
        if self.stash:
            return self.stash.popleft()
        return self.recv(timeout)

    def wait_receipt(self, receipt_id: str, timeout: float = TIMEOUT) -> RawFrame:
        """Read until RECEIPT ``receipt_id``; other frames are kept for later."""
        for frame in list(self.stash):
            if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == receipt_id:
                self.stash.remove(frame)
                return frame
        while True:
            frame = self.recv(timeout)
            if frame.command == "ERROR":
                raise BrokerError(f"ERROR while waiting for receipt {receipt_id!r}: {frame}")
            if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == receipt_id:
                return frame
            self.stash.append(frame)  # arrival order is kept for message()/next()

    def message(self, timeout: float = TIMEOUT) -> RawFrame:
        """The next MESSAGE (RECEIPTs before it are dropped, an ERROR fails)."""
        while True:
            frame = self.next(timeout)
            if frame.command == "MESSAGE":
                return frame
            if frame.command == "ERROR":
                raise BrokerError(f"ERROR while waiting for a MESSAGE: {frame}")

    def messages(self, n: int, timeout: float = TIMEOUT) -> list[RawFrame]:
        return [self.message(timeout) for _ in range(n)]

    def expect_nothing(self, wait: float = 0.03, *, sync: bool = True) -> None:
        """Assert that no MESSAGE/ERROR arrives: none before a round trip, none ``wait`` s after.

        The broker dispatches synchronously while it handles a frame, so
        anything it would send in reaction to earlier frames is queued before
        the round trip's RECEIPTs; the short wait covers asynchronous paths
        (store paging, timers).
        """
        if sync:
            self.sync()
        pending = [f for f in self.stash if f.command != "RECEIPT"]
        assert not pending, f"unexpected frames: {pending}"
        try:
            frame = self.recv(wait)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected frame: {frame}")

    # -- writing --------------------------------------------------------------
    def sync(self, timeout: float = TIMEOUT) -> None:
        """A round trip: everything sent before has been handled by the broker."""
        rid = f"sync-{next(_receipts)}"
        self.frame("BEGIN", {"transaction": rid, "receipt": rid + "-b"})
        self.frame("ABORT", {"transaction": rid, "receipt": rid})
        self.wait_receipt(rid + "-b", timeout)
        self.wait_receipt(rid, timeout)

    def request(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> RawFrame:
        """Send a frame with a fresh ``receipt`` header and wait for its RECEIPT."""
        rid = f"r-{next(_receipts)}"
        h = dict(headers or {})
        h["receipt"] = rid
        self.frame(command, h, body)
        return self.wait_receipt(rid)

    def subscribe(
        self, destination: str, sub_id: str | None = None, ack: str | None = None, *, receipt: bool = True, **headers: str
    ) -> str:
        h = {"destination": destination}
        if sub_id is None and self.version != "1.0":
            sub_id = f"sub-{next(_receipts)}"
        if sub_id is not None:
            h["id"] = sub_id
        if ack is not None:
            h["ack"] = ack
        h.update({k.replace("_", "-"): v for k, v in headers.items()})
        if receipt:
            self.request("SUBSCRIBE", h)
        else:
            self.frame("SUBSCRIBE", h)
        return sub_id if sub_id is not None else destination

    def unsubscribe(self, sub_id: str) -> None:
        self.request("UNSUBSCRIBE", {"id": sub_id})

    def send_to(
        self, destination: str, body: bytes | str = b"", *, receipt: bool = True, headers: dict[str, str] | None = None
    ) -> None:
        h = {"destination": destination}
        h.update(headers or {})
        data = body.encode() if isinstance(body, str) else body
        self._send("SEND", h, data, receipt)

    def _send(self, command: str, headers: dict[str, str], body: bytes, receipt: bool) -> None:
        """Send a frame; with ``receipt``, return once the broker handled it.  A transactional
        frame's RECEIPT waits for its COMMIT or ABORT, so a round trip stands in for it."""
        if not receipt:
            self.frame(command, headers, body)
        elif "transaction" in headers:
            self.frame(command, headers, body)
            self.sync()
        else:
            self.request(command, headers, body)

    def ack_headers(self, msg: RawFrame) -> dict[str, str]:
        """The headers that name ``msg`` in an ACK/NACK for this session's version."""
        if self.version == "1.2":
            return {"id": msg["ack"]}
        if self.version == "1.1":
            return {"message-id": msg["message-id"], "subscription": msg["subscription"]}
        return {"message-id": msg["message-id"]}

    def ack(self, msg: RawFrame, *, receipt: bool = True, **headers: str) -> None:
        h = self.ack_headers(msg)
        h.update(headers)
        self._send("ACK", h, b"", receipt)

    def nack(self, msg: RawFrame, *, receipt: bool = True, **headers: str) -> None:
        h = self.ack_headers(msg)
        h.update(headers)
        self._send("NACK", h, b"", receipt)

    def disconnect(self) -> None:
        """DISCONNECT with a receipt, wait for it, then for the broker to close."""
        rid = f"bye-{next(_receipts)}"
        self.frame("DISCONNECT", {"receipt": rid})
        self.wait_receipt(rid)
        self.assert_closed()
        self.close()

    def abort_connection(self) -> None:
        """Die without DISCONNECT: an RST, as a crashed client would leave behind."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def raw_bytes(self, wait: float) -> bytes:
        """Whatever bytes arrive within ``wait`` seconds (plus the unparsed buffer)."""
        deadline = time.monotonic() + wait
        data, self.buffer = self.buffer, b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return data
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return data
            if not chunk:
                return data
            data += chunk


def control(c: Client, path: str, **headers: str) -> RawFrame:
    """A request to the broker's ``/control/`` destinations (``path`` follows the prefix); its RECEIPT."""
    return c.request("SEND", {"destination": "/control/" + path, **headers})
