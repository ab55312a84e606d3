"""Run a broker: open its store, listen, serve connections, shut down cleanly.

``serve`` reports readiness through ``task_status`` with the listening
sockets, so tests and the command line know when the port is open.
Shutdown (cancellation, SIGINT/SIGTERM via ``run_until_signal``) closes every
connection first, so their unacked messages are requeued, and only then closes
the store, which commits everything still buffered.
"""

from __future__ import annotations

import functools
import logging
import signal
from typing import Any

import trio

from ..broker import Broker
from ..broker.hashring import NATIVE
from .connection import Connection
from .listeners import open_secure_listeners
from .runtime import Runtime
from .security import Security
from .settings import ServerSettings

log = logging.getLogger(__name__)


async def serve(
    broker: Broker,
    settings: ServerSettings,
    *,
    security: Security | None = None,
    task_status: trio.TaskStatus[list[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Open the broker and serve clients until cancelled; the store is closed on the way out.

    ``task_status`` gets the plain TCP listeners first, then the TLS and WebSocket ones.
    """
    security = security or Security(settings)
    runtime = Runtime(broker)
    await runtime.open()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            listeners = await trio.open_tcp_listeners(settings.port, host=settings.host)

            async def handle(stream: trio.abc.Stream) -> None:
                await Connection(stream, runtime, settings, security).run()

            async with trio.open_nursery() as connections:
                connections.start_soon(trio.serve_listeners, handle, listeners)
                for listener in listeners:
                    log.info("listening on %s", listener.socket.getsockname())
                secure = await open_secure_listeners(connections, handle, settings, security)
                if not NATIVE:
                    log.warning(
                        "the native router (stompmq.broker._rendezvous) is not built: consistent-hash "
                        "exchanges route in pure Python, 10-25x slower; reinstall with a C compiler"
                    )
                task_status.started([*listeners, *secure])
                await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await runtime.close()
            log.info("store closed")


async def run_until_signal(broker: Broker, settings: ServerSettings) -> None:
    """Serve until SIGINT or SIGTERM, then shut down gracefully; SIGHUP reloads certificates and users."""
    security = Security(settings)  # before the store opens: bad TLS or users files fail the start
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(serve, broker, settings, security=security))
            async for signum in signals:
                if signum == signal.SIGHUP:
                    security.reload()
                    continue
                log.info("received %s, shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
