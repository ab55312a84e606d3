"""STOMP over WebSocket (RabbitMQ's web-stomp): a trio stream of STOMP bytes over wsproto.

Theory of operation
-------------------
``WebSocketStream`` wraps any trio stream (TCP, or TLS for ``wss://``) and turns
it back into a byte stream, so the same ``Connection`` serves it: the STOMP
parser is incremental, so WebSocket message boundaries do not matter — several
STOMP frames in one message and one frame over several messages (or over
fragments of one) parse alike, and a lone EOL is a heart-beat as on TCP.

The opening handshake happens on the first ``receive_some`` (as ``SSLStream``
does its handshake), inside the connection's CONNECT deadline, so a slow or
silent client never holds up the accept loop.  Only the path ``/ws`` is served;
the subprotocol is the first of ``SUBPROTOCOLS`` the client offers (none is
accepted too, as browsers' STOMP clients always offer one anyway).

**Origin.**  A browser sends ``Origin`` with every handshake and lets any page open a
WebSocket to any server, with the user's cookies and client certificate: without a
check, a page of evil.example could talk STOMP as the user.  So a handshake with an
Origin is accepted only from the broker's own origin (the Origin's host:port is the
Host header's, the port defaulting to 80/443 by scheme and listener) or from one of
``--ws-allowed-origins`` (``*``: any); others get HTTP 403.  A handshake without
Origin comes from no browser (a program can send any headers it likes: Origin
protects users of browsers, not the broker) and is accepted.

**Host.**  Origin alone does not stop DNS rebinding: a page of evil.example whose name
is made to resolve to the broker's address opens ``ws://evil.example:PORT/ws``, and its
Origin is then the Host it sent, the broker's "own" origin.  So the Host must first be one of
the broker's names (``vhosts.own_host``: localhost, an IP address, the machine's names,
``--host-names``), as for the management API; any other gets HTTP 403.

Until the handshake is done the stream reads at most what the connection asks for,
so a client that has not logged in buffers no more here than there.

Outgoing data is one WebSocket message per write: a text message when it is
valid UTF-8 (what browser clients expect), binary otherwise.  Pings are
answered from the reading side; a lock keeps that Pong and the connection's
writer from sending at once.  ``send_eof`` sends a Close (1000), which is how a
WebSocket peer is told that nothing more follows.  A peer that goes away without a
Close is an ordinary end of stream (one DEBUG line), not an error.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Container, Iterable
from typing import Any

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from .vhosts import LOOPBACK_NAMES, own_host

log = logging.getLogger(__name__)

PATH = "/ws"
#: In order of preference, as RabbitMQ's web-stomp.
SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp", "stomp")
RECEIVE_BYTES = 256 * 1024  # as Connection asks of TCP: many frames per parse
#: The port an Origin or Host without one means, by scheme.
DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}
#: ``--ws-allowed-origins`` entries that are not origins: any origin, and the opaque one
#: (sandboxed frames, file:// pages).
ANY_ORIGIN, OPAQUE_ORIGIN = "*", "null"


def normal_origin(origin: str) -> str | None:
    """``scheme://host:port`` (lower case, port explicit) of a serialised origin, or None if it
    is not one (``null``, a path, an unknown scheme)."""
    try:
        parts = urllib.parse.urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username is not None:
        return None
    host = parts.hostname  # lowercased, an IPv6 address without its brackets
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme.lower()}://{host}:{port or DEFAULT_PORTS[parts.scheme.lower()]}"


def allowed_origins(entries: Iterable[str]) -> tuple[str, ...]:
    """``--ws-allowed-origins`` made comparable; ValueError names an entry that is no origin."""
    allowed = []
    for entry in entries:
        normal = entry if entry in (ANY_ORIGIN, OPAQUE_ORIGIN) else normal_origin(entry)
        if normal is None:
            raise ValueError(f"not an origin (scheme://host[:port], null or *): {entry!r}")
        allowed.append(normal)
    return tuple(allowed)


def origin_allowed(origin: str | None, host: str, allowed: tuple[str, ...], tls: bool) -> bool:
    """Whether a handshake with this Origin and Host may open a WebSocket (see the module docstring)."""
    if origin is None or ANY_ORIGIN in allowed:
        return True
    normal = normal_origin(origin)
    if normal is None:
        return origin.strip() in allowed  # "null"
    if normal in allowed:
        return True
    own = normal_origin(f"{'https' if tls else 'http'}://{host}")
    return own is not None and own.split("://")[1] == normal.split("://")[1]


def choose_subprotocol(offered: list[str]) -> str | None:
    """The best STOMP subprotocol the client offers, or None."""
    for protocol in SUBPROTOCOLS:
        if protocol in offered:
            return protocol
    return None


class WebSocketStream(trio.abc.HalfCloseableStream):
    def __init__(self, transport_stream: trio.abc.Stream, allowed: tuple[str, ...] = (), tls: bool = False,
                 names: Container[str] = LOOPBACK_NAMES) -> None:
        self.transport_stream = transport_stream
        self._allowed = allowed  # normalised --ws-allowed-origins
        self._names = names  # the broker's names (the Host check)
        self._tls = tls  # the Host header's port defaults to 443, not 80
        self._ws = WSConnection(ConnectionType.SERVER)
        self.bearer: str | None = None  # the handshake's Authorization: Bearer token
        self._open = False  # the handshake was accepted
        self._closed = False  # a Close was sent or received: no more data
        self._pending: list[bytes] = []
        self._send_lock = trio.Lock()
        self.subprotocol: str | None = None

    async def _send_events(self, *events: Event) -> None:
        data = b"".join(self._ws.send(event) for event in events)
        async with self._send_lock:
            await self.transport_stream.send_all(data)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._pending:
            if self._closed:
                return b""
            data = await self.transport_stream.receive_some(min(max_bytes or RECEIVE_BYTES, RECEIVE_BYTES))
            try:
                self._ws.receive_data(bytes(data) or None)  # a bad handshake raises here
                for event in self._ws.events():
                    await self._on_event(event)
            except RemoteProtocolError as e:
                log.info("websocket: protocol error from a client: %s", e)
                self._closed = True
                if e.event_hint is not None and not self._open:
                    await self._reply(e.event_hint)
                return b""
            if not data:
                self._closed = True
        data = b"".join(self._pending)
        self._pending.clear()
        if max_bytes is not None and len(data) > max_bytes:
            self._pending.append(data[max_bytes:])
            data = data[:max_bytes]
        return data

    async def _reply(self, event: Event) -> None:
        """Best-effort answer (a rejection) to a peer that is going away."""
        try:
            await self._send_events(event)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _on_event(self, event: Event) -> None:
        if isinstance(event, Request):
            if event.target.split("?")[0] != PATH:
                await self._reply(RejectConnection(status_code=404))
                self._closed = True
                return
            origin = next((value.decode("latin-1") for name, value in event.extra_headers
                           if name.lower() == b"origin"), None)
            if not own_host(event.host, self._names):
                log.info("websocket: refused a handshake to host %r, not a name of this broker (--host-names)",
                         event.host)
                await self._reply(RejectConnection(status_code=403))
                self._closed = True
                return
            if not origin_allowed(origin, event.host, self._allowed, self._tls):
                log.info("websocket: refused a handshake from origin %r to host %r (--ws-allowed-origins)",
                         origin, event.host)
                await self._reply(RejectConnection(status_code=403))
                self._closed = True
                return
            authorization = next((value.decode("latin-1") for name, value in event.extra_headers
                                  if name.lower() == b"authorization"), "")
            if authorization[:7].lower() == "bearer ":  # a token login's token (server/tokens.py)
                self.bearer = authorization[7:].strip()
            self.subprotocol = choose_subprotocol(event.subprotocols)
            await self._send_events(AcceptConnection(subprotocol=self.subprotocol))
            self._open = True
        elif isinstance(event, TextMessage):
            self._pending.append(event.data.encode())
        elif isinstance(event, BytesMessage):
            self._pending.append(bytes(event.data))
        elif isinstance(event, Ping):
            await self._send_events(event.response())
        elif isinstance(event, CloseConnection):
            if self._ws.state is ConnectionState.REMOTE_CLOSING:  # a Close frame: answer it
                await self._reply(event.response())
            else:  # the peer went away without one (wsproto reports 1006): nothing to answer
                log.debug("websocket: the peer closed the connection without a close frame")
            self._closed = True

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if not self._open or self._closed:
            raise trio.BrokenResourceError("websocket not open")
        raw = bytes(data)
        try:
            message: Event = TextMessage(raw.decode())
        except UnicodeDecodeError:
            message = BytesMessage(raw)
        await self._send_events(message)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        if self._open and not self._closed:
            self._closed = True
            await self._send_events(CloseConnection(code=1000))

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


class WebSocketListener(trio.abc.Listener[WebSocketStream]):
    """Accepts on ``transport_listener`` (TCP or TLS) and wraps each stream."""

    def __init__(self, transport_listener: trio.abc.Listener[Any], allowed: tuple[str, ...] = (),
                 tls: bool = False, names: Container[str] = LOOPBACK_NAMES) -> None:
        self.transport_listener = transport_listener
        self._allowed = allowed
        self._tls = tls
        self._names = names

    async def accept(self) -> WebSocketStream:
        return WebSocketStream(await self.transport_listener.accept(), self._allowed, self._tls, self._names)

    async def aclose(self) -> None:
        await self.transport_listener.aclose()
