"""The STOMP client every benchmark drives load with: raw sockets, pre-built frames, bulk reads.

Standard library only, so the load generators run against any STOMP broker (stompmq,
RabbitMQ's STOMP plugin, ActiveMQ, ...) on any machine, and deliberately independent of
stompmq's own parser.  A load client must stay cheaper than the broker it loads: frames are
bytes built once and written many per ``sendall``; incoming frames are cut from large ``recv``
chunks by ``content-length`` (``FrameReader``) and handed out as ``(command, header_block,
body)`` tuples, headers parsed only when asked (``header_value``, ``headers_dict``).

``Client`` is one connection: CONNECT (CRLF framing detected on CONNECTED), optional TLS and
STOMP over WebSocket, pipelined frames flushed with one receipt (``queue``/``flush``), and
waits that always end (every socket operation has a timeout).  An ERROR frame raises
``BrokerError``; any other failure ``LoadError``.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

#: Seconds any single socket operation or wait may take before the run fails.
TIMEOUT = 60.0
#: Bytes asked of the kernel per read: large, so frames are parsed many per call.
READ_SIZE = 1 << 20

#: A received frame: command, raw header block (command line included), body (None unless wanted).
Frame = tuple[bytes, "bytes | bytearray", "bytes | None"]


class LoadError(Exception):
    """A failure that aborts the run (timeout, connection problem, protocol problem)."""


class BrokerError(LoadError):
    """The broker sent an ERROR frame."""


# ----------------------------------------------------------------------------- framing


def build_frame(command: str, headers: Iterable[tuple[str, str]] | dict[str, str] = (), body: bytes = b"") -> bytes:
    """A frame's bytes (header values written as given: no escaping)."""
    items = headers.items() if isinstance(headers, dict) else headers
    head = command + "\n" + "".join(f"{k}:{v}\n" for k, v in items) + "\n"
    return head.encode() + body + b"\0"


def send_frame(destination: str, body: bytes, headers: bytes = b"") -> bytes:
    """A SEND with ``content-length`` (``headers``: extra raw header lines, each ending in a newline)."""
    return b"SEND\ndestination:%s\n%scontent-length:%d\n\n%s\0" % (destination.encode(), headers, len(body), body)


def header_value(hdr: bytes, name: bytes) -> bytes | None:
    """First value of header ``name`` in a raw header block (command line included)."""
    key = b"\n" + name + b":"
    i = hdr.find(key)
    if i < 0:
        return None
    i += len(key)
    j = hdr.find(b"\n", i)
    v = hdr[i:] if j < 0 else hdr[i:j]
    return bytes(v.rstrip(b"\r"))


def headers_dict(hdr: bytes) -> dict[str, str]:
    d: dict[str, str] = {}
    for line in bytes(hdr).split(b"\n")[1:]:
        line = line.rstrip(b"\r")
        if b":" in line:
            k, v = line.split(b":", 1)
            d.setdefault(k.decode(errors="replace"), v.decode(errors="replace"))
    return d


class FrameReader:
    """Incremental STOMP frame parser over a socket.

    ``read()`` does one ``recv`` (of up to 1 MiB) and returns the complete frames as
    ``(command, raw_header_block, body_or_None)`` tuples.  Bodies are only copied out when
    ``want_body`` is set.  ERROR frames raise ``BrokerError``.
    """

    def __init__(self, sock: socket.socket | WebSocketSocket, want_body: bool = False):
        self.sock = sock
        self.buf = bytearray()
        self.want_body = want_body
        self.sep = b"\n\n"
        # frames parsed by read_until() that it did not consume (e.g. MESSAGEs arriving in
        # the same chunk as a SUBSCRIBE receipt); handed out first by read()
        self.pending: list[Frame] = []
        #: time.monotonic_ns() when the last read's data arrived (before parsing it): the
        #: receive instant of every frame that read returns
        self.recv_ns = 0

    def detect_crlf(self, data: bytes) -> None:
        nl = data.find(b"\n")
        if nl > 0 and data[nl - 1 : nl] == b"\r":
            self.sep = b"\r\n\r\n"

    def recv(self) -> bool:
        try:
            data = self.sock.recv(READ_SIZE)
        except TimeoutError:
            raise
        except OSError as e:
            raise LoadError(f"recv failed: {e}") from e
        if not data:
            return False
        self.recv_ns = time.monotonic_ns()
        self.buf += data
        return True

    def parse(self) -> list[Frame]:
        buf = self.buf
        n = len(buf)
        pos = 0
        sep = self.sep
        seplen = len(sep)
        want_body = self.want_body
        out: list[Frame] = []
        while True:
            while pos < n and (buf[pos] == 10 or buf[pos] == 13):
                pos += 1  # heart-beats / EOLs between frames
            if pos >= n:
                break
            he = buf.find(sep, pos)
            if he < 0:
                break
            hdr = buf[pos:he]
            bs = he + seplen
            ci = hdr.find(b"\ncontent-length:")
            if ci >= 0:
                ce = hdr.find(b"\n", ci + 16)
                length = int(hdr[ci + 16 : ce if ce >= 0 else len(hdr)].strip())
                be = bs + length
                if be >= n:
                    break
                if buf[be] != 0:
                    raise LoadError("frame body not terminated by NUL after content-length")
            else:
                be = buf.find(b"\0", bs)
                if be < 0:
                    break
            cmd_end = hdr.find(b"\n")
            cmd = bytes(hdr if cmd_end < 0 else hdr[:cmd_end]).rstrip(b"\r")
            if cmd == b"ERROR":
                h = headers_dict(hdr)
                raise BrokerError(
                    f"ERROR frame: message={h.get('message', '')!r} "
                    f"body={bytes(buf[bs:be]).decode(errors='replace')[:500]!r} headers={h}"
                )
            out.append((cmd, hdr, bytes(buf[bs:be]) if want_body else None))  # hdr: a bytearray, not copied again
            pos = be + 1
        if pos:
            del buf[:pos]
        return out

    def read(self) -> list[Frame]:
        """One recv + parse.  Raises on EOF, socket.timeout propagates."""
        if self.pending:
            out, self.pending = self.pending, []
            self.recv_ns = time.monotonic_ns()
            return out
        if not self.recv():
            # parse whatever is left (maybe an ERROR frame) before reporting EOF
            self.parse()
            raise LoadError("connection closed by broker")
        return self.parse()

    def read_until(self, pred: Callable[[Frame], bool], timeout: float, what: str) -> Frame:
        """Read frames until pred(frame) is true; returns that frame.  MESSAGEs read meanwhile
        are kept for ``read()``, other unmatched frames dropped."""
        deadline = time.monotonic() + timeout
        while True:
            frames, self.pending = self.pending + self.parse(), []
            for i, f in enumerate(frames):
                if pred(f):
                    self.pending += frames[i + 1 :]
                    return f
                if f[0] == b"MESSAGE":
                    self.pending.append(f)
            left = deadline - time.monotonic()
            if left <= 0:
                raise LoadError(f"timeout waiting for {what}")
            self.sock.settimeout(left)
            try:
                if not self.recv():
                    self.parse()
                    raise LoadError(f"connection closed by broker while waiting for {what}")
            except TimeoutError:
                raise LoadError(f"timeout ({timeout:g}s) waiting for {what}") from None


# ----------------------------------------------------------------------------- transports


class WebSocketSocket:
    """The socket calls a Client makes, over STOMP-over-WebSocket (RFC 6455, path /ws).

    Each sendall is one binary message.  The mask is all zeros: legal, and it spares the
    generator an XOR over every byte it sends (it must stay cheaper than the broker).
    """

    def __init__(self, sock: socket.socket, host: str):
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall((f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                      "Sec-WebSocket-Protocol: v12.stomp\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise LoadError("connection closed during the WebSocket handshake")
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise LoadError(f"WebSocket handshake refused: {head.splitlines()[0]!r}")
        self.sock = sock
        self.raw = bytearray(rest)

    def settimeout(self, t: float | None) -> None:
        self.sock.settimeout(t)

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def sendall(self, data: bytes) -> None:
        n = len(data)
        if n < 126:
            header = bytes([0x82, 0x80 | n])
        elif n < 65536:
            header = bytes([0x82, 0x80 | 126]) + n.to_bytes(2, "big")
        else:
            header = bytes([0x82, 0x80 | 127]) + n.to_bytes(8, "big")
        self.sock.sendall(header + b"\0\0\0\0" + data)

    def recv(self, n: int) -> bytes:
        while True:
            payload, closed = self._payloads()
            if payload or closed:
                return payload
            chunk = self.sock.recv(n)
            if not chunk:
                return b""
            self.raw += chunk

    def _payloads(self) -> tuple[bytes, bool]:
        """The data of every complete server frame buffered (server frames are unmasked)."""
        raw, out, pos, closed = self.raw, [], 0, False
        while len(raw) - pos >= 2:
            opcode, length, start = raw[pos] & 0x0F, raw[pos + 1] & 0x7F, pos + 2
            if length == 126:
                if len(raw) - pos < 4:
                    break
                length, start = int.from_bytes(raw[pos + 2:pos + 4], "big"), pos + 4
            elif length == 127:
                if len(raw) - pos < 10:
                    break
                length, start = int.from_bytes(raw[pos + 2:pos + 10], "big"), pos + 10
            if len(raw) < start + length:
                break
            if opcode in (0, 1, 2):
                out.append(bytes(raw[start:start + length]))
            elif opcode == 8:
                closed = True
            pos = start + length
        del raw[:pos]
        return b"".join(out), closed


# ----------------------------------------------------------------------------- connection

#: accept-version per version asked for: the client also takes anything older.
ACCEPT_VERSIONS = {"1.1": "1.0,1.1", "1.2": "1.0,1.1,1.2"}


class Client:
    """One STOMP connection for load generation.

    ``version`` "1.0" sends a bare CONNECT; "1.1"/"1.2" send accept-version, ``vhost`` as host
    and heart-beat 0,0.  ``retry_until`` (a ``time.monotonic()`` instant) retries a refused
    connection until then (a broker that is restarting).  ``source`` binds the client's end
    to that loopback address.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 61613,
        *,
        login: str | None = None,
        passcode: str | None = None,
        vhost: str = "/",
        version: str = "1.2",
        timeout: float = TIMEOUT,
        want_body: bool = True,
        tls: bool = False,
        tls_ca: str | None = None,
        ws: bool = False,
        retry_until: float | None = None,
        source: str | None = None,
    ) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.sock = self._connect(tls, tls_ca, ws, retry_until, source)
        self.reader = FrameReader(self.sock, want_body)
        self.version = "1.0"
        self.queued: list[bytes] = []
        self.receipts = 0
        self.unread: deque[Frame] = deque()
        self.connected = self._handshake(login, passcode, vhost, version)

    def _connect(
        self, tls: bool, tls_ca: str | None, ws: bool, retry_until: float | None, source: str | None
    ) -> socket.socket | WebSocketSocket:
        while True:
            try:
                s = socket.create_connection(
                    (self.host, self.port), timeout=self.timeout, source_address=(source, 0) if source else None
                )
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                break
            except OSError as e:
                if retry_until is not None and time.monotonic() < retry_until:
                    time.sleep(0.01)
                    continue
                raise LoadError(f"connect to {self.host}:{self.port} failed: {e}") from e
        if tls:
            context = ssl.create_default_context(cafile=tls_ca)
            if tls_ca is None:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            s = context.wrap_socket(s, server_hostname=self.host)
        return WebSocketSocket(s, self.host) if ws else s

    def _handshake(self, login: str | None, passcode: str | None, vhost: str, version: str) -> Frame:
        hs = []
        if version != "1.0":
            hs += [("accept-version", ACCEPT_VERSIONS[version]), ("host", vhost), ("heart-beat", "0,0")]
        if login is not None:
            hs.append(("login", login))
        if passcode is not None:
            hs.append(("passcode", passcode))
        self.send(build_frame("CONNECT", hs))
        # detect CRLF framing on the CONNECTED frame
        self.sock.settimeout(self.timeout)
        deadline = time.monotonic() + self.timeout
        while b"\n" not in self.reader.buf.lstrip(b"\r\n"):
            if time.monotonic() > deadline:
                raise LoadError("timeout waiting for CONNECTED")
            try:
                if not self.reader.recv():
                    self.reader.parse()
                    raise LoadError("connection closed by broker during CONNECT")
            except TimeoutError:
                raise LoadError(f"timeout ({self.timeout:g}s) waiting for CONNECTED") from None
        self.reader.detect_crlf(bytes(self.reader.buf.lstrip(b"\r\n")))
        f = self.reader.read_until(lambda f: True, self.timeout, "CONNECTED")
        if f[0] != b"CONNECTED":
            raise LoadError(f"expected CONNECTED, got {f[0]!r}")
        v = header_value(f[1], b"version")
        self.version = v.decode() if v else "1.0"
        return f

    def settimeout(self, timeout: float) -> None:
        """The limit of every later socket operation and wait on this connection."""
        self.timeout = timeout
        self.sock.settimeout(timeout)

    # -- writing ---------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """Write bytes (one or many frames); a broker that closed with an ERROR raises it."""
        self.sock.settimeout(self.timeout)
        try:
            self.sock.sendall(data)
        except TimeoutError:
            raise LoadError(f"timeout ({self.timeout:g}s) sending to broker") from None
        except OSError as e:
            # the broker may have sent an ERROR frame before closing: surface it
            try:
                self.sock.settimeout(1.0)
                until = time.monotonic() + 2.0
                while time.monotonic() < until and self.reader.recv():
                    self.reader.parse()
                self.reader.parse()
            except BrokerError:
                raise
            except Exception:
                pass
            raise LoadError(f"send failed: {e}") from e

    def queue(self, frame: bytes) -> None:
        """Keep ``frame`` for the next ``flush``."""
        self.queued.append(frame)

    def flush(self, wait: bool = True) -> None:
        """Send everything queued in one write, the last frame carrying a receipt; with ``wait``,
        return once its RECEIPT came (the broker has handled every frame before it)."""
        if not self.queued:
            return
        self.receipts += 1
        rid = b"flush-%d" % self.receipts
        last = self.queued[-1]
        cut = last.index(b"\n") + 1
        self.queued[-1] = last[:cut] + b"receipt:" + rid + b"\n" + last[cut:]
        self.send(b"".join(self.queued))
        self.queued.clear()
        if wait:
            self.wait_receipt(rid.decode(), "the receipt of a flush")

    def subscribe(
        self, dest: str, sub_id: str, ack: str = "auto", prefetch: int | None = None, extra: Iterable[tuple[str, str]] = ()
    ) -> None:
        """SUBSCRIBE (``prefetch`` in the spellings of stompmq, ActiveMQ and RabbitMQ) and wait for its receipt."""
        hs = [("id", sub_id), ("destination", dest), ("ack", ack)]
        if prefetch is not None:
            p = str(prefetch)
            hs += [("prefetch", p), ("activemq.prefetchSize", p), ("prefetch-count", p)]
        hs += list(extra)
        hs.append(("receipt", "sub-" + sub_id))
        self.send(build_frame("SUBSCRIBE", hs))
        self.wait_receipt("sub-" + sub_id, f"receipt for SUBSCRIBE {dest}")

    def ack(self, hdr: bytes) -> bytes:
        """The ACK frame for the MESSAGE with header block ``hdr`` (STOMP 1.2: by its ``ack`` header)."""
        return b"ACK\nid:" + (header_value(hdr, b"ack") or b"") + b"\n\n\0"

    # -- reading ---------------------------------------------------------------
    def read_frame(self) -> Frame:
        """The next frame (waiting at most the connection's timeout: ``socket.timeout``)."""
        if not self.unread:
            self.sock.settimeout(self.timeout)
            self.unread.extend(self.reader.read())
        return self.unread.popleft()

    def frames(self) -> Iterator[Frame]:
        """Every frame as it arrives, until the connection's timeout passes without one."""
        while True:
            try:
                yield self.read_frame()
            except TimeoutError:
                return

    def message(self) -> Frame:
        """The next MESSAGE (other frames before it are dropped)."""
        while True:
            frame = self.read_frame()
            if frame[0] == b"MESSAGE":
                return frame

    def wait_receipt(self, rid: str, what: str) -> Frame:
        """Read until RECEIPT ``rid``; MESSAGEs read meanwhile are kept for ``read_frame``."""
        self.reader.pending[:0] = self.unread
        self.unread.clear()
        key = rid.encode()
        return self.reader.read_until(
            lambda f: f[0] == b"RECEIPT" and header_value(f[1], b"receipt-id") == key, self.timeout, what
        )

    def disconnect(self) -> None:
        """DISCONNECT with a receipt (it comes once the broker has read everything sent), then close."""
        try:
            self.send(build_frame("DISCONNECT", [("receipt", "bye")]))
            self.wait_receipt("bye", "receipt for DISCONNECT")
        finally:
            self.close()

    def close(self) -> None:
        """Close without DISCONNECT (unacked messages go back to their queue)."""
        try:
            self.sock.close()
        except OSError:
            pass
