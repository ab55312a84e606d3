"""The management API, /metrics and the dashboard: Starlette served by Hypercorn's trio worker.

Theory of operation
-------------------
The HTTP server runs in the broker's own trio process, as one more task of
``serve``: its handlers run on the same thread as the engine, so they read the
engine's state directly (through ``Broker``'s public methods, never its
modules) and need no locks.  A handler never blocks the loop for long: lists
are paged (``after``/``limit``, at most ``MAX_PAGE`` items) and reads of the
store go through the store's own database thread, like the engine's.

Mutations (purge, delete, declare, bind) run the same ``/control`` verbs a
STOMP client can send (``Broker.administer``), so both surfaces behave
identically; they are applied at once and committed with the next commit
group (within ``--flush-interval``).

With a users file the API needs HTTP basic credentials (``server/http_auth.py``).  Either
way, two guards keep a web page the operator happens to visit from driving it: a request that changes something must carry
``content-type: application/json`` (which a cross-site form cannot send
without a CORS preflight this server never grants), and only a ``Host`` that is one of the
broker's names is answered (``vhosts.own_host``: no DNS rebinding), as on the WebSocket listeners.

A queue is a resource at ``/api/queues/{vhost}/{name}`` (each one percent-encoded path
segment; ``queue_target``), with ``/purge``, ``/consumers``, ``/messages`` (a peek), ``/get``,
``/move`` and ``/publish`` under it; anything unknown (a vhost, a queue, an action) is a 404
with a reason, never an empty success.  Get and move take messages through the engine as a
consumer of their own does (``broker/take.py``), then read the store, so they answer once what
they did is committed.  ``ROUTES`` is every route with what it needs: with a users file, a tag
(``http_auth.py``) and, for a route that shows or moves messages or changes something in a
vhost, the user's permissions there, whatever its tag, resolved as resources like a STOMP
frame's (docs/security.md has the table).  A
publish while a resource alarm is set is refused (503): a publisher is held back, an HTTP
request should not hang.  The exchange and topic routes and the queue list take
``?vhost=NAME`` (default ``/``), as does ``/api/streams`` (offsets and consumer groups' lag);
``/api/vhosts`` lists and declares vhosts.
``/api/cluster`` lists the brokers sharing a PostgreSQL database (``Store.brokers``), each with
the counters it wrote at its last lease renewal, and their totals over the live ones.

Whose numbers: a queue's counters (published, delivered, ...) and the rates are this broker's
own, since it started, so every counter answer names the broker (``broker``: its node id, or
``SINGLE_BROKER`` on a store of one broker); ready and unacked come from the store, which on
PostgreSQL is every broker's.
``/api/shovels`` lists, declares and deletes the shovels the broker runs (``server/shovels.py``).

Rates are derived here, not counted in the engine: ``Rates`` samples the
engine's plain counters every ``SAMPLE_SECONDS`` and a rate is the change
since the older of the last two samples (a 5-10 s window).  Each sample also adds a point
to the last hour's history the dashboard charts (``server/history.py``, ``/api/history``).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import socket
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar

import trio
from hypercorn.config import Config as HypercornConfig
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from .. import __version__
from ..broker import Broker, ClientError
from ..broker.control import MAX_PAGE, Deferred
from ..broker.exchanges import EXCHANGE_TYPE, ROUTING_KEY_HEADER
from ..broker.policy_match import header_text, unknown_key
from ..broker.queue_settings import SETTING_KEYS
from ..broker.stats import TOTALS
from ..broker.take import Take
from ..client import ClientError as ShovelError
from ..protocol import native as native_codec
from ..shovel import Declaration
from ..storage.ages import older
from ..storage.base import StoredMessage, StoreError
from ..vhost_names import DEFAULT_VHOST, vhost_name_error
from .connection import Connection
from .alarms import CHECK_SECONDS
from .api_definitions import DefinitionsApi
from .api_policies import PREFIXES as POLICY_PREFIXES, PolicyApi
from .auth import User, required_permissions
from .history import COARSE_EVERY, HOUR_RANGE, RANGES, Counters, Point, QueueKey, RateHistory
from .http_listener import serve_bounded
from .http_auth import OPEN_PATHS, READ_METHODS, USER_SCOPE, BasicAuth
from .http_requests import authorise, count_param, queue_resource
from .http_schedules import ScheduleRoutes
from .trace_api import TRACE_RESOURCE, TraceApi
from .metrics import metrics_route
from .runtime import Runtime
from .security import Security
from .settings import ServerSettings
from .shovels import Shovels
from .vhosts import machine_names, own_host

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds between two samples of the counters the rates are computed from.
SAMPLE_SECONDS = 5.0
#: Items in a page when the client does not say.
DEFAULT_PAGE = 100
#: The dashboard's static files (no build step, nothing fetched from outside).
DASHBOARD = Path(__file__).parent / "dashboard"

#: The ``broker`` of the counters on a store of one broker (which has no node id).
SINGLE_BROKER = "local"



@dataclass(frozen=True, slots=True)
class ApiRoute:
    """One method of one path of the API and what a caller needs for it (docs/security.md's table).

    The tag follows from the method (``http_auth.py``): GET and HEAD need ``monitoring`` or
    ``administrator``, anything else ``administrator``, the probes nothing.  ``needs`` are the
    permissions on the vhost of the resource, whatever the tag, as ``ACTION RESOURCE`` with the
    request's names in capitals (``/queue/NAME``; ``TO`` and ``QUEUE`` are a body's or the
    path's other queue): a route that reads or moves messages or declares, deletes or binds
    something needs them as a STOMP frame doing the same would (RabbitMQ's rule, administrators
    included); a route without them shows counts, names and settings, never a message.
    ``vhost`` says where the request names its vhost: ``path``, ``query`` (``?vhost=``,
    default ``/``) or ``""`` (broker-wide)."""

    method: str
    path: str
    handler: str  # the ManagementApp method (or ``part.method``: ``ManagementApp.schedules``'s)
    needs: tuple[str, ...] = ()
    vhost: str = ""

    @property
    def tag(self) -> str:
        """The tag a caller needs: ``none``, ``monitoring`` (or administrator) or ``administrator``."""
        if self.path in OPEN_PATHS:
            return "none"
        return "monitoring" if self.method in READ_METHODS else "administrator"


#: The queue resource's path; its actions are ``QUEUE_PATH/ACTION``.
QUEUE_PATH = "/api/queues/{vhost}/{name}"
#: A resource's path under its collection, each segment percent-encoded, routed on the raw path.
VHOST_NAME, RAW_TAIL = "/{vhost}/{name}", "/{rest:path}"
#: The ``handler`` of the dashboard's static files (a mount, not a method).
DASHBOARD_ROUTE = "dashboard"
_QUEUE_CONFIGURE = ("configure /queue/NAME",)
_EXCHANGE_CONFIGURE = ("configure /exchange/NAME",)
_BINDING = ("configure /exchange/NAME", "configure /queue/QUEUE")
#: Every route of the API, the one list the server is built from and the tests walk.
ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute("GET", "/healthz", "healthz"),
    ApiRoute("GET", "/readyz", "readyz"),
    ApiRoute("GET", "/metrics", "metrics"),
    ApiRoute("GET", "/api/overview", "overview"),
    ApiRoute("GET", "/api/history", "total_history"),
    ApiRoute("GET", "/api/alarms", "get_alarms"),
    ApiRoute("PUT", "/api/alarms", "set_alarm_limits"),
    ApiRoute("GET", "/api/cluster", "cluster"),
    ApiRoute("GET", "/api/vhosts", "list_vhosts"),
    ApiRoute("PUT", "/api/vhosts/{name:path}", "declare_vhost"),
    ApiRoute("DELETE", "/api/vhosts/{name:path}", "delete_vhost"),
    ApiRoute("GET", "/api/queues", "list_queues", vhost="query"),
    ApiRoute("GET", QUEUE_PATH, "get_queue", vhost="path"),
    ApiRoute("PUT", QUEUE_PATH, "declare_queue", _QUEUE_CONFIGURE, "path"),
    ApiRoute("DELETE", QUEUE_PATH, "delete_queue", _QUEUE_CONFIGURE, "path"),
    ApiRoute("POST", QUEUE_PATH + "/purge", "purge_queue", _QUEUE_CONFIGURE, "path"),
    ApiRoute("GET", QUEUE_PATH + "/consumers", "queue_consumers", vhost="path"),
    ApiRoute("GET", QUEUE_PATH + "/messages", "peek_messages", ("read /queue/NAME",), "path"),
    ApiRoute("POST", QUEUE_PATH + "/publish", "publish_message", ("write /queue/NAME",), "path"),
    ApiRoute("POST", QUEUE_PATH + "/get", "get_messages", ("read /queue/NAME",), "path"),
    ApiRoute("POST", QUEUE_PATH + "/move", "move_messages", ("read /queue/NAME", "write /queue/TO"), "path"),
    ApiRoute("GET", QUEUE_PATH + "/history", "queue_history", vhost="path"),
    ApiRoute("GET", "/api/exchanges", "list_exchanges", vhost="query"),
    ApiRoute("DELETE", "/api/exchanges/{name}/bindings/{queue:path}", "unbind", _BINDING, "query"),
    ApiRoute("POST", "/api/exchanges/{name}/bindings", "bind", _BINDING, "query"),
    ApiRoute("GET", "/api/exchanges/{name}", "get_exchange", vhost="query"),
    ApiRoute("PUT", "/api/exchanges/{name}", "declare_exchange", _EXCHANGE_CONFIGURE, "query"),
    ApiRoute("DELETE", "/api/exchanges/{name}", "delete_exchange", _EXCHANGE_CONFIGURE, "query"),
    ApiRoute("GET", "/api/topics", "list_topics", vhost="query"),
    ApiRoute("GET", "/api/streams", "list_streams", vhost="query"),
    ApiRoute("GET", "/api/schedules/{vhost:path}", "schedules.list_schedules", vhost="path"),
    ApiRoute("DELETE", "/api/schedules/{vhost:path}/{id}", "schedules.cancel_schedule", ("configure /queue/QUEUE",),
             "path"),
    ApiRoute("GET", "/api/trace", "trace.get", vhost="query"),
    ApiRoute("PUT", "/api/trace", "trace.put", ("configure " + TRACE_RESOURCE,), "query"),
    ApiRoute("GET", "/api/trace/events", "trace.events", ("read " + TRACE_RESOURCE,), "query"),
    ApiRoute("GET", "/api/shovels", "list_shovels"),
    ApiRoute("GET", "/api/shovels/{name}", "get_shovel"),
    ApiRoute("PUT", "/api/shovels/{name}", "declare_shovel"),
    ApiRoute("DELETE", "/api/shovels/{name}", "delete_shovel"),
    *(ApiRoute(method, path, "policy_api." + handler) for prefix in POLICY_PREFIXES.values()
      for method, path, handler in (("GET", prefix, "list_policies"), ("GET", prefix + VHOST_NAME, "get_policy"),
                                    ("PUT", prefix + VHOST_NAME, "put_policy"),
                                    ("DELETE", prefix + VHOST_NAME, "delete_policy"))),
    ApiRoute("GET", "/api/definitions", "definitions_api.export"),
    ApiRoute("POST", "/api/definitions", "definitions_api.import_"),
    ApiRoute("GET", "/api/connections", "list_connections"),
    ApiRoute("GET", "/api/connections/{id}", "get_connection"),
    ApiRoute("DELETE", "/api/connections/{id}", "close_connection"),
    ApiRoute("GET", "/{file:path}", DASHBOARD_ROUTE),
)


class _JsonMutationsOnly(BaseHTTPMiddleware):
    """Refuse a POST/PUT/DELETE without a JSON content type (see the module docstring)."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
                return JSONResponse({"error": "send content-type: application/json", "status": 415}, status_code=415)
        return await call_next(request)


class _OwnHostOnly(BaseHTTPMiddleware):
    """400 for a ``Host`` that is none of the broker's names (``vhosts.own_host``: no DNS rebinding)."""

    def __init__(self, app: ASGIApp, names: frozenset[str]) -> None:
        super().__init__(app)
        self.names = names

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        host = request.headers.get("host")
        if not own_host(host, self.names):
            log.info("management API: refused a request to host %r, not a name of this broker (--host-names)", host)
            return JSONResponse({"error": f"host {host!r} is not a name of this broker (--host-names)",
                                 "status": 400}, status_code=400)
        return await call_next(request)


class Rates:
    """Messages per second from samples of the engines' counters (every vhost's), and bytes and
    frames per second of the open connections."""

    def __init__(self, engines: dict[str, Broker], connections: dict[str, Connection]) -> None:
        self.engines = engines
        self.connections = connections
        self._older: tuple[float, dict[QueueKey, Counters]] = (time.monotonic(), {})
        self._newer = self._older
        self.history = RateHistory()
        self._older_connections: dict[str, Counters] = {}
        self._newer_connections: dict[str, Counters] = {}

    def sample(self) -> None:
        counters = {
            (vhost, name): (s.published, s.delivered, s.acked)
            for vhost, engine in self.engines.items()
            for name, s in engine.queue_stats.items()
        }
        previous = self._newer
        self._older, self._newer = previous, (time.monotonic(), counters)
        self.history.record(time.time(), self._newer[0] - previous[0], previous[1], counters)
        self._older_connections, self._newer_connections = self._newer_connections, {
            conn.id: (conn.bytes_in, conn.bytes_out, conn.frames_in) for conn in self.connections.values()}

    def of_connection(self, conn: Connection) -> dict[str, float]:
        """Bytes in and out and frames in per second (since the connection opened, while it is
        younger than the samples)."""
        then = self._older[0]
        before = self._older_connections.get(conn.id)
        if before is None:
            before, then = (0, 0, 0), time.monotonic() - (time.time() - conn.since)
        elapsed = max(time.monotonic() - then, 1e-3)
        now = (conn.bytes_in, conn.bytes_out, conn.frames_in)
        keys = ("bytes_in", "bytes_out", "frames_in")
        return {k: round(max(0, n - b) / elapsed, 1) for k, n, b in zip(keys, now, before)}

    def of(self, vhost: str, name: str) -> dict[str, float]:
        engine = self.engines.get(vhost)
        stats = engine.queue_stats.get(name) if engine is not None else None
        then, counters = self._older
        before = counters.get((vhost, name), (0, 0, 0))
        now = (stats.published, stats.delivered, stats.acked) if stats is not None else (0, 0, 0)
        return _per_second(now, before, time.monotonic() - then)

    def total(self) -> dict[str, float]:
        then, counters = self._older
        before = [sum(c[i] for c in counters.values()) for i in range(3)]
        stats = [s for engine in self.engines.values() for s in engine.queue_stats.values()]
        now = (sum(s.published for s in stats), sum(s.delivered for s in stats), sum(s.acked for s in stats))
        return _per_second(now, tuple(before), time.monotonic() - then)  # type: ignore[arg-type]

    async def run(self) -> None:
        while True:
            await trio.sleep(SAMPLE_SECONDS)
            self.sample()


def _per_second(now: Counters, before: Counters, elapsed: float) -> dict[str, float]:
    elapsed = max(elapsed, 1e-3)
    keys = ("publish", "deliver", "ack")
    return {k: round(max(0, n - b) / elapsed, 1) for k, n, b in zip(keys, now, before)}


def _page_args(request: Request) -> tuple[str, int]:
    return request.query_params.get("after", ""), count_param(request, "limit", DEFAULT_PAGE, MAX_PAGE)




def _queue_name(name: str) -> str:
    """``orders`` and ``/queue/orders`` name the same queue (in a binding)."""
    return name.removeprefix("/queue/")


QueueHandler = Callable[[Broker, str, str, tuple[int, int], Request], Awaitable[Response]]
#: Messages a peek shows when the client does not say, and at most.
DEFAULT_PEEK, MAX_PEEK = 10, 100
#: Messages one get takes at most, and one move moves at most (also at most --max-prefetch).
MAX_GET, MAX_MOVE = 1000, 10_000
#: Seconds a get or move waits for the store's pages of the queue before it settles what it has,
#: and how often it looks meanwhile (the engine has no callback for a page that brought nothing).
TAKE_SECONDS, TAKE_POLL = 10.0, 0.01
#: What no header name or value may hold (a frame's line structure), nor ':' in a name.
_BAD_HEADER = re.compile("[\r\n\0]")


def queue_target(request: Request, actions: set[str]) -> tuple[str, str, str | None]:
    """(vhost, queue, action) of ``/api/queues/VHOST/NAME[/ACTION]``, from the raw path.

    Each of VHOST and NAME is one percent-encoded path segment (``/`` is ``%2F``), so a name
    holding ``/`` is never read as a route: the decoded path cannot tell them apart, hence the
    raw one.  ``/api/queues/NAME`` (one segment) is a shortcut for the queue in the vhost of
    ``?vhost=`` (default ``/``); with two or more segments ``?vhost=`` would be a second
    answer to the same question, and is refused.
    """
    raw = request.scope.get("raw_path") or request.url.path.encode()
    prefix = b"/api/queues/"
    try:
        segments = [urllib.parse.unquote(part.decode("ascii"), errors="strict")
                    for part in raw[len(prefix):].split(b"/")] if raw.startswith(prefix) else []
    except UnicodeDecodeError:
        raise HTTPException(400, "a queue path must be percent-encoded UTF-8") from None
    query_vhost = request.query_params.get("vhost")
    if len(segments) == 1 and segments[0]:
        return query_vhost if query_vhost is not None else DEFAULT_VHOST, segments[0], None
    if query_vhost is not None:
        raise HTTPException(400, "give the vhost in the path (/api/queues/VHOST/NAME) or ?vhost=, not both")
    if len(segments) in (2, 3) and all(segments) and (len(segments) == 2 or segments[2] in actions):
        return segments[0], segments[1], segments[2] if len(segments) == 3 else None
    raise HTTPException(404, "not a queue path: use /api/queues/VHOST/NAME[/" + "|".join(sorted(actions)) + "] with "
                             "VHOST and NAME percent-encoded (/ is %2F)")


class ManagementApp:
    """The routes, over one broker and the server's open connections."""

    def __init__(self, runtime: Runtime, settings: ServerSettings, connections: dict[str, Connection],
                 security: Security | None = None) -> None:
        self.runtime = runtime
        self.engines = runtime.engines
        self.settings = settings
        self.connections = connections
        self.rates = Rates(self.engines, connections)
        self.started = time.time()
        #: whose counters this API and /metrics show (see the module docstring)
        self.broker_id = runtime.store.node_id or SINGLE_BROKER
        self.store_metrics = runtime.store_metrics
        self.metrics = metrics_route(self)
        self.schedules = ScheduleRoutes(self)  # /api/schedules: handlers "schedules.NAME"
        self.trace = TraceApi(self)  # /api/trace: handlers "trace.NAME"

        #: (action after the queue's path or None, method) -> handler
        self.queue_actions: dict[tuple[str | None, str], QueueHandler] = {
            (route.path.removeprefix(QUEUE_PATH).removeprefix("/") or None, route.method): attrgetter(route.handler)(self)
            for route in ROUTES if route.path.startswith(QUEUE_PATH)
        }
        self.policy_api = PolicyApi(runtime)
        self.definitions_api = DefinitionsApi(runtime, security, settings.users_file)
        routes: list[BaseRoute] = [
            Route(route.path.replace(VHOST_NAME, RAW_TAIL), attrgetter(route.handler)(self), methods=[route.method])
            for route in ROUTES if not route.path.startswith(QUEUE_PATH) and route.handler != DASHBOARD_ROUTE
        ]
        routes.append(Route("/api/queues/{rest:path}", self.queue_resource,
                            methods=sorted({m for _, m in self.queue_actions})))
        if DASHBOARD.is_dir():
            routes.append(Mount("/", StaticFiles(directory=DASHBOARD, html=True), name=DASHBOARD_ROUTE))
        middleware = [Middleware(_JsonMutationsOnly)]
        if security is not None and security.users is not None:
            middleware.insert(0, Middleware(BasicAuth, security=security))
        middleware.append(Middleware(_OwnHostOnly, names=machine_names(settings.host_names)))
        self.app = Starlette(
            routes=routes,
            middleware=middleware,
            exception_handlers={
                HTTPException: _http_error,  # type: ignore[dict-item]
                ClientError: _client_error,  # type: ignore[dict-item]
                StoreError: _store_error,  # type: ignore[dict-item]
            },
        )

    def engine(self, request: Request) -> Broker:
        """The engine of the request's ``vhost`` parameter (default ``/``); 404 if there is none."""
        vhost = _query_vhost(request)
        engine = self.engines.get(vhost)
        if engine is None:
            raise HTTPException(404, f"no vhost {vhost!r}")
        return engine

    async def answer(self, engine: Broker, answer: Any) -> Any:
        """The value of an engine answer, reading the store first when it is ``Deferred``."""
        if isinstance(answer, Deferred):
            result = await answer.fetch(engine.store)
            return answer.answer(result)
        return answer

    def administer(self, engine: Broker, path: str, headers: dict[str, str] | None = None) -> Any:
        """Run ``/control/PATH`` unchecked: the counts every route may show."""
        self.runtime.tick()
        return engine.administer(path, headers)

    def change(self, request: Request, vhost: str, engine: Broker, path: str,
               headers: dict[str, str] | None = None) -> Any:
        """Run ``/control/PATH`` if the request's user may: the permissions a STOMP client's SEND to
        it needs (``required_permissions``), on ``vhost``, so both surfaces grant the same."""
        authorise(request, vhost, required_permissions("SEND", {**(headers or {}), "destination": "/control/" + path}))
        return self.administer(engine, path, headers)

    # -- health ---------------------------------------------------------------------------------
    async def healthz(self, request: Request) -> Response:
        """Alive: the event loop answers."""
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """Ready for traffic: the store accepts writes and keeps up (a load balancer should go
        elsewhere if not)."""
        store = self.runtime.store
        backlog = store.backlog()
        if store.unavailable:
            return JSONResponse({"status": "store unavailable", "backlog": backlog}, status_code=503)
        if store.full():
            return JSONResponse({"status": "store behind", "backlog": backlog}, status_code=503)
        return JSONResponse({"status": "ready", "backlog": backlog})

    # -- overview -------------------------------------------------------------------------------
    async def overview(self, request: Request) -> Response:
        engines = self.engines.values()
        return JSONResponse({
            "broker": self.broker_id,
            "version": __version__,
            "frame_codec": "native" if native_codec.NATIVE else "python",
            "uptime": round(time.time() - self.started, 1),
            "store": self.settings.store_shown,
            "connections": len(self.connections),
            "vhosts": len(self.engines),
            "queues_in_use": sum(len(engine.queue_stats) for engine in engines),
            "queues_active": sum(len(engine.queues) for engine in engines),
            "exchanges": sum(len(engine.exchanges) for engine in engines),
            "totals": self.runtime.counter_totals(),
            "rates": self.rates.total(),
            "alarms": self.runtime.alarms.describe()["alarms"],
            "node": self._node(),
        })

    def _node(self) -> dict[str, Any]:
        """The broker process and its machine, as the dashboard's node panel shows them."""
        alarms = self.runtime.alarms
        try:
            fds: int | None = len(os.listdir("/proc/self/fd"))
        except OSError:  # no /proc (not Linux)
            fds = None
        return {"memory_used": alarms.memory_used, "memory_limit": alarms.memory_limit,
                "disk_free": alarms.disk_free, "disk_free_limit": alarms.disk_free_limit,
                "store_bytes": self.runtime.store.disk_bytes(), "open_fds": fds}

    async def total_history(self, request: Request) -> Response:
        """The rates over every queue, the last ``?range=`` seconds (``server/history.py``)."""
        return _history_json(*self.rates.history.of(None, _history_range(request)))

    # -- resource alarms ------------------------------------------------------------------------
    async def get_alarms(self, request: Request) -> Response:
        """The alarms set now, their limits and the latest measurements."""
        return JSONResponse(self.runtime.alarms.describe())

    async def set_alarm_limits(self, request: Request) -> Response:
        """``{"disk_free_limit": BYTES|null, "memory_high_watermark": FRACTION|BYTES|null}``: new
        limits until the broker restarts (null: that alarm off; a field left out keeps its limit)."""
        body = await _json_object(request)
        alarms = self.runtime.alarms
        unknown = sorted(set(body) - {"disk_free_limit", "memory_high_watermark"})
        if unknown:
            raise HTTPException(400, f"unknown field {unknown[0]!r}: the limits are disk_free_limit and "
                                     "memory_high_watermark")
        disk = body.get("disk_free_limit", alarms.disk_free_limit)
        memory = body.get("memory_high_watermark", alarms.memory_limit)
        if disk is not None and (not isinstance(disk, int) or isinstance(disk, bool) or disk < 1):
            raise HTTPException(400, "disk_free_limit must be a positive number of bytes or null")
        if memory is not None and (not isinstance(memory, (int, float)) or isinstance(memory, bool) or memory <= 0):
            raise HTTPException(400, "memory_high_watermark must be a fraction of RAM (at most 1), bytes, or null")
        self.runtime.tick()
        alarms.set_limits(disk, memory)
        log.info("resource limits set through the management API: disk free %s, memory %s", disk, memory)
        return JSONResponse(alarms.describe())

    async def cluster(self, request: Request) -> Response:
        """Every broker on a shared store's database: lease, last renewal, claims, version and the
        counters it wrote at that renewal; ``totals`` sums those of every broker listed and of every
        broker that left the database before (stored: cumulative across restarts; a store of one
        broker has no cluster: no brokers, no totals).  Ages are on this broker's clock."""
        store = self.runtime.store
        now = time.time()
        leases = await store.brokers()
        brokers = [
            {
                "id": lease.id,
                "this": lease.id == store.node_id,
                "live": lease.live,
                "epoch": lease.epoch,
                "lease_until": _iso(lease.lease_until),
                "lease_remaining": round(lease.lease_until - now, 1),
                "last_renewal": None if lease.renewed is None else _iso(lease.renewed),
                "renewal_age": None if lease.renewed is None else round(now - lease.renewed, 1),
                "claimed": lease.claimed,
                "unacked": lease.unacked,
                "version": lease.version,
                "counters": {key: lease.counters.get(key, 0) for key in TOTALS},
            }
            for lease in leases
        ]
        departed = store.departed_counters()
        totals = {key: departed.get(key, 0) + sum(lease.counters.get(key, 0) for lease in leases) for key in TOTALS}
        return JSONResponse({"shared": store.shared, "brokers": brokers, "totals": totals if store.shared else None})

    # -- vhosts ---------------------------------------------------------------------------------
    async def list_vhosts(self, request: Request) -> Response:
        by_vhost: dict[str, int] = {}
        for conn in self.connections.values():
            if conn.session is not None:
                by_vhost[conn.vhost] = by_vhost.get(conn.vhost, 0) + 1
        return JSONResponse({"items": [
            {"name": vhost, "connections": by_vhost.get(vhost, 0),
             "queues": len(engine.queue_stats.keys() | engine.declared_queues().keys()),
             "queues_declared": len(engine.declared_queues()), "queues_in_use": len(engine.queue_stats),
             "queues_active": len(engine.queues),
             "exchanges": len(engine.exchange_names())}
            for vhost, engine in sorted(self.engines.items())
        ]})

    async def declare_vhost(self, request: Request) -> Response:
        name = request.path_params["name"]
        error = vhost_name_error(name)
        if error is not None:
            raise HTTPException(400, error)
        created = name not in self.engines
        self.runtime.tick()
        self.runtime.declare(name)
        return JSONResponse({"name": name}, status_code=201 if created else 200)

    async def delete_vhost(self, request: Request) -> Response:
        """Delete a vhost with everything in it (its connections are closed first); not ``/``."""
        name = request.path_params["name"]
        if name == DEFAULT_VHOST:
            raise HTTPException(400, "the default vhost / cannot be deleted")
        if name not in self.engines:
            raise HTTPException(404, f"no vhost {name!r}")
        for conn in list(self.connections.values()):
            if conn.session is not None and conn.vhost == name:
                conn.close(f"vhost {name} deleted")
        self.runtime.delete(name)
        return JSONResponse({"deleted": name})

    # -- queues ---------------------------------------------------------------------------------
    async def list_queues(self, request: Request) -> Response:
        after, limit = _page_args(request)
        engine = self.engine(request)
        vhost = request.query_params.get("vhost", DEFAULT_VHOST)
        page = await self.answer(engine, engine.list_queues(after, limit))
        items = []
        for row in page.rows:
            item = {
                "name": row.name,
                "ready": row.ready,
                "unacked": row.unacked,
                "consumers": row.consumers,
                "oldest_age": _age(older(row.oldest_ready_ms, row.oldest_unacked_ms)),
                "oldest_ready_age": _age(row.oldest_ready_ms),
                "oldest_unacked_age": _age(row.oldest_unacked_ms),
                "broker": self.broker_id,
            }
            item.update(row.stats.as_dict() if row.stats is not None else {})
            item["rates"] = self.rates.of(vhost, row.name)
            items.append(item)
        return JSONResponse({"items": items, "next_after": page.next_after})

    async def queue_resource(self, request: Request) -> Response:
        """``/api/queues/{vhost}/{name}[/ACTION]``: route on the raw path (see ``queue_target``)."""
        vhost, name, action = queue_target(request, {a for a, _ in self.queue_actions if a is not None})
        handler = self.queue_actions.get((action, request.method))
        if handler is None:
            allowed = ", ".join(sorted(m for a, m in self.queue_actions if a == action))
            hint = ""
            if action is None and (name, request.method) in self.queue_actions:  # the old /api/queues/NAME/ACTION
                hint = f"; {name} of queue {vhost!r} in vhost '/' is /api/queues/%2F/{urllib.parse.quote(vhost, safe='')}/{name}"
            raise HTTPException(405, f"{request.method} is not allowed here (allowed: {allowed}){hint}")
        engine = self.engines.get(vhost)
        if engine is None:
            raise HTTPException(404, f"no vhost {vhost!r} (the queue routes are /api/queues/VHOST/NAME, "
                                     "each percent-encoded, e.g. /api/queues/%2F/orders)")
        counts = await self._queue_counts(engine, name)
        if counts is None and not (action is None and request.method == "PUT"):  # (a PUT declares it)
            raise HTTPException(404, f"no queue {name!r} in vhost {vhost!r}")
        return await handler(engine, vhost, name, counts or (0, 0), request)

    async def _queue_counts(self, engine: Broker, name: str) -> tuple[int, int] | None:
        """(ready, unacked) of queue ``name``, or None if there is no such queue: one this broker
        neither uses nor declared, of which the store holds no message."""
        counts = await self.answer(engine, self.administer(engine, "count-msgs/queue/" + name))
        ready, unacked = int(counts["num-ready"]), int(counts["num-unacked"])
        if not engine.knows_queue(name) and ready + unacked == 0:
            return None
        return ready, unacked

    async def get_queue(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                        request: Request, status: int = 200) -> Response:
        stats = engine.queue_stats.get(name)
        oldest_ready, oldest_unacked = await self.answer(engine, engine.queue_ages(name))
        return JSONResponse({
            "name": name,
            "vhost": vhost,
            "ready": counts[0],
            "unacked": counts[1],
            "oldest_ready_age": _age(oldest_ready),
            "oldest_unacked_age": _age(oldest_unacked),
            "consumers": engine.consumer_count(name),
            "broker": self.broker_id,
            **(stats.as_dict() if stats is not None else {}),
            "rates": self.rates.of(vhost, name),
            "settings": engine.queue_settings(name),
        }, status_code=status)

    async def purge_queue(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                          request: Request) -> Response:
        """Drop the ready messages; ``purged`` is how many were ready as the purge began (counted
        by the read just before it: a message sent meanwhile may be purged too)."""
        self.change(request, vhost, engine, "purge/queue/" + name)
        log.info("queue %s of vhost %s purged through the management API (%d messages)", name, vhost, counts[0])
        return JSONResponse({"name": name, "vhost": vhost, "purged": counts[0]})

    async def declare_queue(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                            request: Request) -> Response:
        """``{"arguments": {KEY: VALUE}}``: declare the queue with these settings (queue_settings.py),
        replacing an earlier declaration; 201 if it was not declared."""
        body = await _json_object(request)
        _only_fields(body, {"arguments"}, "a queue declaration has arguments")
        arguments = body.get("arguments", {})
        if not isinstance(arguments, dict):
            raise HTTPException(400, "arguments must be an object of queue settings, e.g. {\"message-ttl\": 60000}")
        try:
            unknown_key(arguments, SETTING_KEYS, "a queue argument")
        except ClientError as e:
            raise HTTPException(400, e.message) from None
        created = name not in engine.declared_queues()
        self.change(request, vhost, engine, "declare/queue/" + name, {k: header_text(v) for k, v in arguments.items()})
        log.info("queue %s of vhost %s declared through the management API: %s", name, vhost, arguments)
        return await self.get_queue(engine, vhost, name, (await self._queue_counts(engine, name)) or counts, request,
                                    201 if created else 200)

    async def delete_queue(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                           request: Request) -> Response:
        self.change(request, vhost, engine, "delete/queue/" + name)
        log.info("queue %s of vhost %s deleted through the management API", name, vhost)
        return JSONResponse({"name": name, "vhost": vhost, "deleted": True, "purged": counts[0]})

    async def peek_messages(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                            request: Request) -> Response:
        """``?count=N`` (default 10): the first ready messages, in delivery order, consuming none."""
        count = count_param(request, "count", DEFAULT_PEEK, MAX_PEEK)
        authorise(request, vhost, [("read", queue_resource(name))])
        messages = await self.answer(engine, engine.peek(name, count))
        return JSONResponse({"items": [_message_json(msg) for msg in messages]})

    async def get_messages(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                           request: Request) -> Response:
        """``{"count": N}``: take up to N ready messages and acknowledge them (gone for good), in
        delivery order; answered once the deletes are committed."""
        body = await _json_object(request)
        _only_fields(body, {"count"}, "a get has count")
        count = _json_count(body, "count", None, MAX_GET)
        authorise(request, vhost, [("read", queue_resource(name))])
        messages = await self._take(engine, name, count, Take.ack)
        log.info("%d messages of queue %s of vhost %s taken through the management API", len(messages), name, vhost)
        return JSONResponse({"items": [_message_json(msg) for msg in messages]})

    async def move_messages(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                            request: Request) -> Response:
        """``{"to": QUEUE, "count": N}``: move up to N ready messages (default: all, at most
        ``MAX_MOVE`` a request) to another queue of the vhost, each insert committed with its
        delete; ``stopped`` says why fewer moved if the target refused (reject-publish, full)."""
        body = await _json_object(request)
        _only_fields(body, {"to", "count"}, "a move has to and count")
        target = body.get("to")
        if not isinstance(target, str) or not _queue_name(target):
            raise HTTPException(400, "to must name a queue of the same vhost")
        target = _queue_name(target)
        if target == name:
            raise HTTPException(400, "to names the queue itself: move to another queue")
        count = _json_count(body, "count", MAX_MOVE, MAX_MOVE)
        authorise(request, vhost, [("read", queue_resource(name)), ("write", queue_resource(target))])
        moved, stopped = await self._take(engine, name, count, lambda take: take.move(target))
        log.info("%d messages of queue %s of vhost %s moved to queue %s through the management API", moved, name,
                 vhost, target)
        answer: dict[str, Any] = {"name": name, "vhost": vhost, "to": target, "moved": moved}
        if stopped is not None:
            answer["stopped"] = stopped
        return JSONResponse(answer)

    async def _take(self, engine: Broker, name: str, count: int, settle: Callable[[Take], T]) -> T:
        """Take up to ``count`` ready messages of queue ``name`` (``Broker.take``), wait until the
        take has what it can have (at most ``TAKE_SECONDS``), ``settle`` it, then read the store:
        a read runs behind every write buffered before it, in a group that holds none back, so
        the answer comes once the settlement is committed (or is a 503 if it was not)."""
        self.runtime.tick()
        take = engine.take(name, count)
        try:
            with trio.move_on_after(TAKE_SECONDS):
                while not take.complete:
                    await trio.sleep(TAKE_POLL)
            self.runtime.tick()
            result = settle(take)
        finally:
            self.runtime.tick()
            take.close()
        await engine.store.count(name)
        return result

    async def publish_message(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                              request: Request) -> Response:
        """``{"body": TEXT, "headers": {NAME: VALUE}}``: a message as a SEND without receipt would
        put it (stored within --flush-interval; priority, ttl, delay headers apply)."""
        authorise(request, vhost, [("write", queue_resource(name))])
        message = await _json_object(request)
        body, headers = message.get("body", ""), message.get("headers", {})
        unknown = sorted(set(message) - {"body", "headers"})
        if unknown:
            raise HTTPException(400, f"unknown field {unknown[0]!r}: a message has body and headers")
        if not isinstance(body, str):
            raise HTTPException(400, "body must be a string (sent as UTF-8)")
        if not isinstance(headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and k and not _BAD_HEADER.search(k + v) and ":" not in k
                for k, v in headers.items()):
            raise HTTPException(400, "headers must map names to string values, without ':' in a name or "
                                     "CR, LF or NUL anywhere")
        alarms = self.runtime.alarms.active
        if alarms:  # a STOMP publisher is held back; an HTTP request is told to come back
            raise HTTPException(503, f"{' and '.join(sorted(alarms))} alarm set: publishing is blocked until it "
                                     "clears (GET /api/alarms)", headers={"retry-after": str(int(CHECK_SECONDS))})
        self.runtime.tick()
        user: User | None = request.scope.get(USER_SCOPE)
        engine.publish(name, headers, body.encode(), None if user is None else user.name)
        log.info("a message published to queue %s of vhost %s through the management API", name, vhost)
        return JSONResponse({"name": name, "vhost": vhost, "published": True}, status_code=201)

    async def queue_history(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                            request: Request) -> Response:
        """The queue's rates, the last ``?range=`` seconds, if it is one of those with a history."""
        return _history_json(*self.rates.history.of((vhost, name), _history_range(request)))

    async def queue_consumers(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                              request: Request) -> Response:
        """The subscriptions of this broker's connections to the queue."""
        items = []
        for conn in self.connections.values():
            session = conn.session
            if session is None or conn.vhost != vhost:
                continue
            for sub in session.subscriptions.values():
                queue = sub.queue
                if queue is not None and queue.name == name:
                    items.append({"connection": conn.id, "peer": conn.peer, "login": session.login,
                                  "subscription": sub.id, "ack": sub.ack_mode.value, "prefetch": sub.prefetch,
                                  "unacked": len(sub.unacked)})
        return JSONResponse({"items": items})

    # -- exchanges ------------------------------------------------------------------------------
    def _exchange_json(self, engine: Broker, name: str) -> dict[str, Any]:
        """A consistent-hash exchange (bindings with weights) or a direct, fanout or topic one
        (bindings with routing keys); 404 if there is neither."""
        keyed = engine.key_exchanges.get(name)
        if keyed is not None:
            return {
                "name": keyed.name,
                "type": keyed.type,
                "options": {},
                "bindings": [{"queue": q, "routing_key": k} for q, k in sorted(keyed.bindings)],
                "routed": keyed.routed,
                "unroutable": keyed.unroutable,
            }
        exchange = engine.exchanges.get(name)
        if exchange is None:
            raise HTTPException(404, f"no exchange {name!r}")
        return {
            "name": exchange.name,
            "type": EXCHANGE_TYPE,
            "options": exchange.options,
            "bindings": [{"queue": q, "weight": w} for q, w in sorted(exchange.bindings.items())],
            "routed": exchange.routed,
            "unhashed": exchange.unhashed,
        }

    async def list_exchanges(self, request: Request) -> Response:
        after, limit = _page_args(request)
        engine = self.engine(request)
        names = sorted(n for n in (*engine.exchanges, *engine.key_exchanges) if n > after)[:limit]
        return JSONResponse({
            "items": [self._exchange_json(engine, n) for n in names],
            "next_after": names[-1] if len(names) == limit else None,
        })

    async def get_exchange(self, request: Request) -> Response:
        return JSONResponse(self._exchange_json(self.engine(request), request.path_params["name"]))

    async def declare_exchange(self, request: Request) -> Response:
        name = request.path_params["name"]
        engine = self.engine(request)
        options = await _json_object(request)
        self.change(request, _query_vhost(request), engine, "declare/exchange/" + name,
                    {k: str(v) for k, v in options.items()})
        return JSONResponse(self._exchange_json(engine, name), status_code=201)

    async def delete_exchange(self, request: Request) -> Response:
        name = request.path_params["name"]
        engine = self.engine(request)
        self._exchange_json(engine, name)  # 404 if absent
        self.change(request, _query_vhost(request), engine, "delete/exchange/" + name)
        return JSONResponse({"deleted": name})

    async def bind(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await _json_object(request)
        if "queue" not in body:
            raise HTTPException(400, "a binding needs a queue")
        headers = {"queue": "/queue/" + _queue_name(str(body["queue"]))}
        if "weight" in body:
            headers["weight"] = str(body["weight"])
        if "routing_key" in body:
            headers[ROUTING_KEY_HEADER] = str(body["routing_key"])
        engine = self.engine(request)
        self._exchange_json(engine, name)
        self.change(request, _query_vhost(request), engine, "bind/exchange/" + name, headers)
        return JSONResponse(self._exchange_json(engine, name), status_code=201)

    async def unbind(self, request: Request) -> Response:
        name = request.path_params["name"]
        engine = self.engine(request)
        self._exchange_json(engine, name)
        headers = {"queue": "/queue/" + _queue_name(request.path_params["queue"])}
        if "routing_key" in request.query_params:
            headers[ROUTING_KEY_HEADER] = request.query_params["routing_key"]
        self.change(request, _query_vhost(request), engine, "unbind/exchange/" + name, headers)
        return JSONResponse(self._exchange_json(engine, name))

    # -- topics ---------------------------------------------------------------------------------
    async def list_topics(self, request: Request) -> Response:
        after, limit = _page_args(request)
        patterns = sorted(p for p in self.engine(request).topics.patterns() if p[0] > after)[:limit]
        return JSONResponse({
            "items": [{"topic": p, "subscriptions": n} for p, n in patterns],
            "next_after": patterns[-1][0] if len(patterns) == limit else None,
        })

    # -- streams --------------------------------------------------------------------------------
    async def list_streams(self, request: Request) -> Response:
        """Streams by name with their offsets and consumer groups (committed offset, lag = the
        stream's next offset - the committed one, lag_seconds: broker/ages.py)."""
        after, limit = _page_args(request)
        streams = (engine := self.engine(request)).streams_by_name
        names = sorted(name for name in streams if name > after)[:limit]
        items = []
        for name in names:
            stream = streams[name]
            items.append({
                "name": name, "first_offset": stream.first, "next_offset": stream.next, "bytes": stream.size,
                "subscribers": len(stream.subscribers),
                "groups": [{"name": lag.group, "committed_offset": lag.committed, "lag": lag.entries,
                            "lag_seconds": _age(lag.oldest_ms) or 0.0} for lag in engine.stream_group_lags(name)],
            })
        return JSONResponse({"items": items, "next_after": names[-1] if len(names) == limit else None})
    # -- shovels -------------------------------------------------------------------------------
    @property
    def shovels(self) -> Shovels:
        return self.runtime.shovels

    async def list_shovels(self, request: Request) -> Response:
        """Every declared shovel: its URLs (passwords masked), state, last error, moved, rate."""
        return JSONResponse({"items": [s.describe() for _, s in sorted(self.shovels.shovels.items())]})

    async def get_shovel(self, request: Request) -> Response:
        name = request.path_params["name"]
        running = self.shovels.shovels.get(name)
        if running is None:
            raise HTTPException(404, f"no shovel {name!r}")
        return JSONResponse(running.describe())

    async def declare_shovel(self, request: Request) -> Response:
        """``{"from": URL, "to": URL, "prefetch"?: N, "ack_mode"?: "on-confirm"}``: run it, stored
        (the users file's administrators only: http_auth.py)."""
        name = request.path_params["name"]
        try:
            declaration = Declaration.parse(name, await _json_object(request))
        except ShovelError as e:
            raise HTTPException(400, str(e)) from None
        created = name not in self.shovels.shovels
        self.shovels.declare(declaration)
        return JSONResponse(self.shovels.shovels[name].describe(), status_code=201 if created else 200)

    async def delete_shovel(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not self.shovels.delete(name):
            raise HTTPException(404, f"no shovel {name!r}")
        return JSONResponse({"deleted": name})

    # -- connections ----------------------------------------------------------------------------
    async def list_connections(self, request: Request) -> Response:
        after, limit = _page_args(request)
        key = int(after) if after.isdigit() else 0
        ids = sorted(int(i) for i in self.connections if int(i) > key)[:limit]
        items = [_connection_json(self.connections[str(i)]) for i in ids]
        return JSONResponse({"items": items, "next_after": str(ids[-1]) if len(ids) == limit else None})

    def _connection(self, request: Request) -> Connection:
        conn = self.connections.get(request.path_params["id"])
        if conn is None:
            raise HTTPException(404, f"no connection {request.path_params['id']!r}")
        return conn

    async def get_connection(self, request: Request) -> Response:
        """One connection with its subscriptions and its rates."""
        conn = self._connection(request)
        session = conn.session
        subscriptions = [] if session is None else [
            {"id": sub.id, "destination": sub.destination, "queue": sub.queue.name if sub.queue is not None else None,
             "ack": sub.ack_mode.value, "prefetch": sub.prefetch, "unacked": len(sub.unacked),
             "selector": None if sub.selector is None else sub.selector.text}
            for sub in session.subscriptions.values()]
        reason = conn.gate.reason  # why its reader waits, if it does ("held": the store or an alarm)
        return JSONResponse({**_connection_json(conn), "held": conn.held,
                             "held_by": None if reason is None else reason.value, "subscriptions": subscriptions,
                             "rates": self.rates.of_connection(conn)})

    async def close_connection(self, request: Request) -> Response:
        conn = self._connection(request)
        conn.close("closed by an administrator")
        log.info("connection %s from %s closed through the management API", conn.id, conn.peer)
        return JSONResponse({"closed": conn.id})


def _connection_json(conn: Connection) -> dict[str, Any]:
    session = conn.session
    return {
        "id": conn.id,
        "peer": conn.peer,
        "login": session.login if session is not None else None,
        "vhost": conn.vhost if session is not None else None,
        "version": session.version if session is not None else None,
        "since": round(conn.since, 3),
        "subscriptions": len(session.subscriptions) if session is not None else 0,
        "bytes_in": conn.bytes_in,
        "bytes_out": conn.bytes_out,
        "frames_in": conn.frames_in,
    }


def _history_range(request: Request) -> int:
    """The ``?range=`` of a history request, in seconds (one of ``RANGES``; default an hour)."""
    text = request.query_params.get("range", str(HOUR_RANGE))
    if not text.isdigit() or int(text) not in RANGES:
        raise HTTPException(400, f"range must be one of {', '.join(map(str, RANGES))} seconds, not {text!r}")
    return int(text)


def _history_json(points: list[Point], coarse: bool) -> Response:
    interval = SAMPLE_SECONDS * COARSE_EVERY if coarse else SAMPLE_SECONDS
    return JSONResponse({"interval": interval, "columns": ["time", "publish", "deliver", "ack"],
                         "points": points})


def _message_json(msg: StoredMessage) -> dict[str, Any]:
    """A peeked message: the body as text (``body_base64`` when it is not UTF-8)."""
    item: dict[str, Any] = {"headers": msg.headers or {}, "priority": msg.priority,
                            "redelivery_count": msg.redeliveries, "age": _age(msg.timestamp)}
    try:
        item["body"] = msg.body.decode()
    except UnicodeDecodeError:
        item["body_base64"] = base64.b64encode(msg.body).decode()
    return item


def _age(oldest_ms: int | None) -> float | None:
    return None if oldest_ms is None else round(max(0.0, time.time() - oldest_ms / 1000), 3)


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise HTTPException(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return body


def _only_fields(body: dict[str, Any], known: set[str], what: str) -> None:
    unknown = sorted(set(body) - known)
    if unknown:
        raise HTTPException(400, f"unknown field {unknown[0]!r}: {what}")


def _json_count(body: dict[str, Any], name: str, default: int | None, most: int) -> int:
    """Field ``name`` of a JSON body: a whole number from 1 to ``most`` (400 otherwise; absent,
    ``default``, or 400 if there is none)."""
    value = body.get(name, default)
    if value is None:
        raise HTTPException(400, f"{name} is missing: a number from 1 to {most}")
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise HTTPException(400, f"{name} must be a number from 1 to {most}, not {value!r}")
    return value


def _query_vhost(request: Request) -> str:
    """The vhost of a route that takes it as ``?vhost=`` (default ``/``)."""
    return request.query_params.get("vhost", DEFAULT_VHOST)






async def _http_error(request: Request, exc: HTTPException) -> Response:
    return JSONResponse({"error": exc.detail, "status": exc.status_code}, status_code=exc.status_code,
                        headers=exc.headers)


async def _client_error(request: Request, exc: ClientError) -> Response:
    return JSONResponse({"error": exc.message, "status": 400}, status_code=400)


def _iso(seconds: float) -> str:
    """Epoch seconds as an ISO 8601 UTC time (milliseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


async def _store_error(request: Request, exc: StoreError) -> Response:
    return JSONResponse({"error": f"store error: {exc}", "status": 503}, status_code=503)


async def serve_http(
    runtime: Runtime,
    settings: ServerSettings,
    connections: dict[str, Connection],
    sock: socket.socket,
    security: Security | None = None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the management API on ``sock`` until cancelled."""
    management = ManagementApp(runtime, settings, connections, security)
    config = HypercornConfig()
    config.accesslog = None
    config.errorlog = hypercorn_log = logging.getLogger("stompmq.http.hypercorn")
    hypercorn_log.setLevel(logging.WARNING)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(management.rates.run)
        await nursery.start(serve_bounded, management.app, config, sock, settings.max_http_connections,
                            runtime.broker.config.limit_hits)
        task_status.started()
