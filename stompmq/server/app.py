"""Run a broker: open its store, listen, serve connections, shut down cleanly.

``serve`` reports readiness through ``task_status`` with the listening
sockets, so tests and the command line know when the port is open.
Shutdown (cancellation, SIGINT/SIGTERM via ``run_until_signal``) closes every
connection first, so their unacked messages are requeued, and only then closes
the store, which commits everything still buffered.

File descriptors: at start the soft open-file limit is raised to the hard one,
and at most ``max_connections`` clients are served at once (by default the
limit minus ``RESERVED_FDS`` for the store, the listeners and logging, and minus
``--max-http-connections`` when the management API is on); a
client beyond that gets an ERROR frame at once instead of a connection that
never answers.  If accepting fails anyway (the process or the system is out of
descriptors or memory), the listener retries every ``ACCEPT_RETRY_SECONDS``
and logs one warning per episode, not a traceback per retry.

Start-up order: the STOMP listeners accept (after recovery) before the HTTP side is
imported: hypercorn, Starlette and prometheus-client are ~0.4 s of CPU, imported on a worker
thread while the first clients are served, and the broker reports itself ready once the
management API listens too.

Garbage collection (``tune_gc``, called once by the command line before the
broker starts): messages are freed by reference counting, but the cyclic
collector still runs every 700 net allocations of containers and, while a
backlog builds, keeps re-traversing the messages buffered for the store and
held in ready windows as they age through its generations: with the default
thresholds it took ~30 % of the broker's CPU with a queue backlog on disk and
~12 % with none (measured with ``benchmarks/engine.py``).  Startup objects are
frozen out of the collector's sight and the first generation is collected
every ``GC_THRESHOLDS[0]`` allocations instead.
"""

from __future__ import annotations

import errno
import functools
import gc
import logging
import resource
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from .. import __version__
from ..broker import Broker
from ..broker import build as engine_build
from ..broker.hashring import NATIVE
from ..logs import CONNECTION
from ..protocol import native as native_codec
from .alarms import ResourceAlarms
from .connection import Connection
from .heartbeats import HeartBeats, tick_for
from .listeners import bind_socket, listener_port, open_secure_listeners
from .parking import Parking
from .runtime import Runtime
from .security import Security, peer_address
from .settings import ServerSettings
from .tracing import tracing_from_environment
from .transport import refuse
from .vhosts import machine_names

if TYPE_CHECKING:
    from .otel import Tracing

log = logging.getLogger(__name__)

Handler = Callable[[trio.SocketStream], Awaitable[None]]

#: Descriptors kept back from clients: the store's files (SQLite: database, WAL, shared memory,
#: a reader), the listeners, the log, and refusing a client (which needs its socket briefly).
RESERVED_FDS = 32
#: Seconds between attempts to accept while the process is out of descriptors or memory.
ACCEPT_RETRY_SECONDS = 0.1
#: accept() errors that mean "no capacity now", not "this listener is broken" (trio's list).
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


#: gc.set_threshold for a running broker (the defaults are 700, 10, 10): see the module docstring.
GC_THRESHOLDS = (50_000, 20, 10)


def tune_gc() -> None:
    """Freeze what exists now (modules, settings) out of the cyclic collector and collect less
    often; for a broker process, not for a library user's (tests serve in their own process)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    log.debug("garbage collector: %d start-up objects frozen, thresholds %s", gc.get_freeze_count(),
             "/".join(map(str, GC_THRESHOLDS)))


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as far as the OS allows); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # macOS refuses RLIM_INFINITY: keep the soft limit
            target = soft
        soft = target
    return soft


def max_connections(settings: ServerSettings, open_files: int) -> int:
    """The configured limit, or the open-file limit minus the reserve (at least 1)."""
    if settings.max_connections is not None:
        return settings.max_connections
    http = settings.max_http_connections if settings.http_port is not None else 0  # api/listener.py's bound
    return max(1, open_files - RESERVED_FDS - http)


async def _accept(listener: trio.SocketListener, nursery: trio.Nursery, handle: Handler) -> None:
    """Accept clients until cancelled, then close the listening socket; a lack of descriptors
    pauses accepting with one warning."""
    failures = 0
    where = listener.socket.getsockname()
    try:
        while True:
            try:
                stream = await listener.accept()
            except OSError as e:
                if e.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                if not failures:
                    log.warning("cannot accept connections on %s: %s; retrying every %.1f s",
                                where, e.strerror or e, ACCEPT_RETRY_SECONDS)
                failures += 1
                await trio.sleep(ACCEPT_RETRY_SECONDS)
                continue
            if failures:
                log.warning("accepting connections on %s again after %d failed attempts", where, failures)
                failures = 0
            nursery.start_soon(handle, stream)
    finally:
        listener.socket.close()  # cancelled at shutdown: the port is free again at once


async def serve(
    broker: Broker,
    settings: ServerSettings,
    *,
    security: Security | None = None,
    tracing: Tracing | None = None,
    task_status: trio.TaskStatus[list[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Open the broker and serve clients until cancelled; the store is closed on the way out.

    ``task_status`` gets the plain TCP listeners first, then the TLS and WebSocket ones.
    ``tracing``: OpenTelemetry spans of queue messages (None: as ``OTEL_*`` variables say).
    """
    security = security or Security(settings)
    open_files = raise_open_file_limit()
    limit = max_connections(settings, open_files)
    log.info("open-file limit %d; serving at most %d connections", open_files, limit)
    machine_names(settings.host_names)  # looked up once, now: getfqdn may ask DNS, which must not stall a CONNECT
    alarms = ResourceAlarms(settings.disk_path, settings.disk_free_limit, settings.memory_high_watermark)
    runtime = Runtime(broker, alarms, tracing if tracing is not None else tracing_from_environment())
    await runtime.open()
    parking = Parking()
    http_socket: socket.socket | None = None  # closed here at the end: serve_http only serves on it
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            heart_beats = HeartBeats(tick_for(settings.heart_beat[0]))
            await nursery.start(heart_beats.run)
            await nursery.start(parking.run)
            listeners = await trio.open_tcp_listeners(settings.port, host=settings.host)
            http_socket = bind_socket(settings.http_host, settings.http_port) if settings.http_port is not None else None
            open_connections: dict[str, Connection] = {}  # what the management API lists

            active = refused = 0  # refusals are logged once per episode, like accept errors

            async def handle(stream: trio.abc.Stream) -> None:
                nonlocal active, refused
                if active >= limit:
                    if not refused:
                        log.warning("refusing connections: %d served already (--max-connections)", active)
                    refused += 1
                    await refuse(stream, f"too many connections (at most {limit})")
                    return
                if refused:
                    log.warning("accepting connections again after refusing %d", refused)
                    refused = 0
                admission = security.admit(peer_address(stream))
                if isinstance(admission, str):  # refused before it is served: not counted above
                    log.info("refusing a connection from %s: %s", peer_address(stream), admission)
                    await refuse(stream, admission)
                    return
                active += 1
                connection = Connection(stream, runtime, settings, security, admission, heart_beats=heart_beats,
                                        parking=parking)
                CONNECTION.set(connection)  # this task's log lines name it (logs.py)
                open_connections[connection.id] = connection
                try:
                    await connection.run()
                finally:
                    active -= 1
                    admission.close()
                    del open_connections[connection.id]

            async with trio.open_nursery() as connections:
                for listener in listeners:
                    connections.start_soon(_accept, listener, connections, handle)
                secure = await open_secure_listeners(connections, handle, settings, security)
                shown = [f"stomp://{_address(listener.socket.getsockname())}" for listener in listeners]
                shown += [f"{type(listener).__name__} on port {listener_port(listener)}" for listener in secure]
                if http_socket is not None:
                    shown.append(f"http://{_address(http_socket.getsockname())}")
                    if settings.http_host not in ("127.0.0.1", "::1", "localhost") and security.users is None:
                        log.warning("the management API on %s has no authentication without --users-file: anyone "
                                    "who can reach it can purge and delete queues", settings.http_host)
                    serve_http = await trio.to_thread.run_sync(_http_server)
                    await connections.start(serve_http, runtime, settings, open_connections, http_socket, security)
                # Shown even at --log-level WARNING: an operator always learns what runs where.
                log.log(max(logging.INFO, log.getEffectiveLevel()),
                        "stompmq %s ready: store %s, listening on %s, frame codec %s, engine %s",
                        __version__, settings.store_shown or "?", ", ".join(shown), native_codec.describe(),
                        engine_build.describe())
                if not NATIVE:
                    log.warning(
                        "the native router (stompmq.broker._rendezvous) is not built: consistent-hash "
                        "exchanges route in pure Python, 10-25x slower; reinstall with a C compiler"
                    )
                connections.start_soon(runtime.shovels.run)  # a shovel may read from this broker
                task_status.started([*listeners, *secure])
                await trio.sleep_forever()
    finally:
        parking.close()
        if http_socket is not None:
            http_socket.close()
        with trio.CancelScope(shield=True):
            await runtime.close()
            log.info("store closed")
            if runtime.tracing is not None:  # the spans buffered are exported, within their timeout
                await trio.to_thread.run_sync(runtime.tracing.shutdown)


def _http_server() -> Callable[..., Awaitable[None]]:
    """``http.serve_http``, imported on first use (see "Start-up order" in the module docstring)."""
    from .api.app import serve_http

    return serve_http


def _address(sockname: tuple[str, int] | tuple[str, int, int, int]) -> str:
    host, port = sockname[0], sockname[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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
