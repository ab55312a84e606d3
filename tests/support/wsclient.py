"""A blocking STOMP-over-WebSocket test client on wsproto's client side.

It sends exactly the WebSocket messages a test asks for (text or binary, whole
or in fragments), so framing corner cases can be produced on purpose, and it
returns what the broker sent message by message.  Received STOMP bytes are
split into frames by RawClient's independent code.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections import deque

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)

from .rawclient import TIMEOUT, RawClient
from .stompclient import Client


class WSClient(RawClient):
    def __init__(
        self,
        port: int,
        subprotocols: list[str] | None = None,
        *,
        path: str = "/ws",
        context: ssl.SSLContext | None = None,
        origin: str | None = None,
        host: str = "localhost",
        headers: dict[str, str] | None = None,
    ) -> None:
        """``origin``: the Origin header a browser would send (None: none, as other programs);
        ``headers``: more handshake headers (such as Authorization)."""
        sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.sock = context.wrap_socket(sock, server_hostname="localhost") if context else sock
        self.buffer = b""
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.events: list[Event] = []  # control events and handshake answers, in order
        self.messages: list[bytes | str] = []  # data (parts of) messages as received (str = text)
        extra = [(b"origin", origin.encode())] if origin is not None else []
        extra += [(name.encode(), value.encode()) for name, value in (headers or {}).items()]
        self.sock.sendall(self.ws.send(Request(host=host, target=path, subprotocols=subprotocols or ["v12.stomp"],
                                               extra_headers=extra)))
        self.handshake = self._next_event((AcceptConnection, RejectConnection))

    def _pump(self) -> bool:
        data = self.sock.recv(65536)
        self.ws.receive_data(data or None)
        for event in self.ws.events():
            if isinstance(event, (TextMessage, BytesMessage)):
                self.messages.append(event.data)
                self.buffer += event.data.encode() if isinstance(event.data, str) else bytes(event.data)
            else:
                self.events.append(event)
        return bool(data)

    def _next_event(self, kinds: tuple[type, ...]) -> Event:
        while True:
            for event in self.events:
                if isinstance(event, kinds):
                    self.events.remove(event)
                    return event
            if not self._pump():
                raise EOFError("connection closed")

    def _fill(self, deadline: float) -> bool:  # RawClient reads STOMP bytes through this
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no frame from the broker in time")
        self.sock.settimeout(remaining)
        return self._pump()

    def send(self, data: bytes) -> None:
        """RawClient's frames go out as one text message each."""
        self.send_message(data.decode())

    def send_message(self, data: str | bytes, *, finished: bool = True) -> None:
        event = TextMessage(data, message_finished=finished) if isinstance(data, str) else \
            BytesMessage(data, message_finished=finished)
        self.sock.sendall(self.ws.send(event))

    def ping(self, payload: bytes = b"hi") -> bytes:
        self.sock.sendall(self.ws.send(Ping(payload)))
        pong = self._next_event((Pong,))
        assert isinstance(pong, Pong)
        return bytes(pong.payload)

    def close_code(self) -> int:
        close = self._next_event((CloseConnection,))
        assert isinstance(close, CloseConnection)
        return close.code


class WSStompClient(WSClient, Client):
    """``Client``'s conveniences (receipts, subscriptions, acks) over a WebSocket, logged in."""

    def __init__(self, port: int, *, context: ssl.SSLContext | None = None) -> None:
        WSClient.__init__(self, port, context=context)
        self.stash = deque()
        self.version = "1.2"
        self.connected = self.connect()
