"""The listeners besides plain TCP (STOMP over TLS, over WebSocket and over WebSocket on TLS), and
the HTTP server's socket.

Each wraps trio's TCP listeners (TLS with ``trio.SSLListener``, WebSocket with
``WebSocketListener``) and hands the same ``handle`` the resulting stream, so a
``Connection`` never knows which transport it is on.  All share the broker's one
``ssl.SSLContext``, which ``Security.reload`` updates in place; the task that
watches the certificate and users files for changes is started here too.  The WebSocket
module (and wsproto) is imported only when a WebSocket port is configured.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .security import Security
from .settings import ServerSettings
from .vhosts import machine_names

log = logging.getLogger(__name__)


async def open_secure_listeners(
    nursery: trio.Nursery,
    handle: Callable[[Any], Awaitable[None]],
    settings: ServerSettings,
    security: Security,
) -> list[trio.abc.Listener[Any]]:
    """Open the TLS / WebSocket listeners the settings ask for, serve them in ``nursery``."""
    opened: list[trio.abc.Listener[Any]] = []

    async def tcp(port: int) -> list[trio.SocketListener]:
        return await trio.open_tcp_listeners(port, host=settings.host)

    def tls(listener: trio.SocketListener) -> trio.SSLListener[trio.SocketStream]:
        assert security.tls is not None
        return trio.SSLListener(listener, security.tls)

    groups: list[tuple[str, list[trio.abc.Listener[Any]], list[trio.SocketListener]]] = []
    if settings.tls_port is not None:
        sockets = await tcp(settings.tls_port)
        groups.append(("STOMP over TLS", [tls(s) for s in sockets], sockets))
    if settings.ws_port is not None or settings.wss_port is not None:
        from .websocket import WebSocketListener, allowed_origins

        origins = allowed_origins(settings.ws_allowed_origins)
        names = machine_names(settings.host_names)
    if settings.ws_port is not None:
        sockets = await tcp(settings.ws_port)
        groups.append(("STOMP over WebSocket (ws://…/ws)", [WebSocketListener(s, origins, names=names) for s in sockets],
                       sockets))
    if settings.wss_port is not None:
        sockets = await tcp(settings.wss_port)
        groups.append(("STOMP over WebSocket on TLS (wss://…/ws)",
                       [WebSocketListener(tls(s), origins, tls=True, names=names) for s in sockets], sockets))
    for what, listeners, sockets in groups:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        for sock in sockets:
            log.info("listening for %s on %s", what, sock.socket.getsockname())
        opened += listeners
    if security.files():
        nursery.start_soon(security.watch)
    return opened


def listener_port(listener: trio.abc.Listener[Any]) -> int:
    """The TCP port under a (possibly wrapped) listener."""
    while not isinstance(listener, trio.SocketListener):
        listener = listener.transport_listener  # type: ignore[attr-defined]
    return int(listener.socket.getsockname()[1])


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket for the HTTP server (bound here, so port 0 works and errors are ours)."""
    try:
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as e:
        raise OSError(e.errno, os.strerror(e.errno) if e.errno else str(e), f"{host}:{port} (HTTP)") from None
    sock.set_inheritable(True)
    return sock
