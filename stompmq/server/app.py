"""Run a broker: open its store, listen, serve connections, shut down cleanly.

``serve`` reports readiness through ``task_status`` with the listening
sockets, so tests and the command line know when the port is open.
Shutdown (cancellation, SIGINT/SIGTERM via ``run_until_signal``) closes every
connection first, so their unacked messages are requeued, and only then closes
the store, which commits everything still buffered.
"""

from __future__ import annotations

import logging
import signal

import trio

from .. import __version__
from ..broker import Broker
from ..broker.hashring import NATIVE
from .connection import Connection
from .http import bind_socket, serve_http
from .runtime import Runtime
from .settings import ServerSettings

log = logging.getLogger(__name__)


async def serve(
    broker: Broker,
    settings: ServerSettings,
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Open the broker and serve clients until cancelled; the store is closed on the way out."""
    runtime = Runtime(broker)
    await runtime.open()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            listeners = await trio.open_tcp_listeners(settings.port, host=settings.host)
            http_socket = bind_socket(settings.http_host, settings.http_port) if settings.http_port is not None else None
            open_connections: dict[str, Connection] = {}  # what the management API lists

            async def handle(stream: trio.SocketStream) -> None:
                connection = Connection(stream, runtime, settings)
                open_connections[connection.id] = connection
                try:
                    await connection.run()
                finally:
                    del open_connections[connection.id]

            async with trio.open_nursery() as connections:
                connections.start_soon(trio.serve_listeners, handle, listeners)
                shown = [f"stomp://{_address(listener.socket.getsockname())}" for listener in listeners]
                if http_socket is not None:
                    shown.append(f"http://{_address(http_socket.getsockname())}")
                    if settings.http_host not in ("127.0.0.1", "::1", "localhost"):
                        log.warning("the management API on %s has no authentication yet: anyone who can reach "
                                    "it can purge and delete queues", settings.http_host)
                    await connections.start(serve_http, runtime, settings, open_connections, http_socket)
                # Shown even at --log-level WARNING: an operator always learns what runs where.
                log.log(max(logging.INFO, log.getEffectiveLevel()), "stompmq %s ready: store %s, listening on %s",
                        __version__, settings.store_shown or "?", ", ".join(shown))
                if not NATIVE:
                    log.warning(
                        "the native router (stompmq.broker._rendezvous) is not built: consistent-hash "
                        "exchanges route in pure Python, 10-25x slower; reinstall with a C compiler"
                    )
                task_status.started(listeners)
                await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await runtime.close()
            log.info("store closed")


def _address(sockname: tuple[str, int] | tuple[str, int, int, int]) -> str:
    host, port = sockname[0], sockname[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def run_until_signal(broker: Broker, settings: ServerSettings) -> None:
    """Serve until SIGINT or SIGTERM, then shut down gracefully."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, broker, settings)
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
