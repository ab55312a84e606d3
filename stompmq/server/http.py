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
without a CORS preflight this server never grants), and on a loopback address
only loopback host names are accepted (no DNS rebinding).

Every queue, exchange and topic route takes ``?vhost=NAME`` (default ``/``; an unknown
vhost is a 404) and works on that vhost's engine; ``/api/vhosts`` lists and declares vhosts.
``/api/cluster`` lists the brokers sharing a PostgreSQL database (``Store.brokers``).

Rates are derived here, not counted in the engine: ``Rates`` samples the
engine's plain counters every ``SAMPLE_SECONDS`` and a rate is the change
since the older of the last two samples (a 5-10 s window).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from .. import __version__
from ..broker import Broker, ClientError
from ..broker.control import MAX_PAGE, Deferred
from ..protocol import native as native_codec
from ..storage.base import DEFAULT_VHOST, StoreError, vhost_name_error
from .connection import Connection
from .http_auth import BasicAuth
from .metrics import StoreMetrics, metrics_route
from .runtime import Runtime
from .security import Security
from .settings import ServerSettings

log = logging.getLogger(__name__)

#: Seconds between two samples of the counters the rates are computed from.
SAMPLE_SECONDS = 5.0
#: Items in a page when the client does not say.
DEFAULT_PAGE = 100
#: The dashboard's static files (no build step, nothing fetched from outside).
DASHBOARD = Path(__file__).parent / "dashboard"

#: Host names a loopback-bound API answers to.
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")

Counters = tuple[int, int, int]  # published, delivered, acked
QueueKey = tuple[str, str]  # (vhost, queue)


class _JsonMutationsOnly(BaseHTTPMiddleware):
    """Refuse a POST/PUT/DELETE without a JSON content type (see the module docstring)."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
                return JSONResponse({"error": "send content-type: application/json", "status": 415}, status_code=415)
        return await call_next(request)


class Rates:
    """Messages per second from samples of the engines' counters (every vhost's)."""

    def __init__(self, engines: dict[str, Broker]) -> None:
        self.engines = engines
        self._older: tuple[float, dict[QueueKey, Counters]] = (time.monotonic(), {})
        self._newer = self._older

    def sample(self) -> None:
        counters = {
            (vhost, name): (s.published, s.delivered, s.acked)
            for vhost, engine in self.engines.items()
            for name, s in engine.queue_stats.items()
        }
        self._older, self._newer = self._newer, (time.monotonic(), counters)

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
    after = request.query_params.get("after", "")
    try:
        limit = int(request.query_params.get("limit", DEFAULT_PAGE))
    except ValueError:
        raise HTTPException(400, "limit must be a number") from None
    if not 1 <= limit <= MAX_PAGE:
        raise HTTPException(400, f"limit must be 1-{MAX_PAGE}")
    return after, limit


def _queue_name(name: str) -> str:
    """``orders`` and ``/queue/orders`` name the same queue."""
    return name.removeprefix("/queue/")


class ManagementApp:
    """The routes, over one broker and the server's open connections."""

    def __init__(self, runtime: Runtime, settings: ServerSettings, connections: dict[str, Connection],
                 security: Security | None = None) -> None:
        self.runtime = runtime
        self.engines = runtime.engines
        self.settings = settings
        self.connections = connections
        self.rates = Rates(self.engines)
        self.started = time.time()
        self.store_metrics = StoreMetrics()
        runtime.store.on_group_committed = self.store_metrics.observe

        routes: list[BaseRoute] = [
            Route("/healthz", self.healthz),
            Route("/readyz", self.readyz),
            Route("/metrics", metrics_route(self)),
            Route("/api/overview", self.overview),
            Route("/api/cluster", self.cluster),
            Route("/api/vhosts", self.list_vhosts),
            Route("/api/vhosts/{name:path}", self.declare_vhost, methods=["PUT"]),
            Route("/api/queues", self.list_queues),
            Route("/api/queues/{name:path}/purge", self.purge_queue, methods=["POST"]),
            Route("/api/queues/{name:path}", self.get_queue, methods=["GET"]),
            Route("/api/queues/{name:path}", self.delete_queue, methods=["DELETE"]),
            Route("/api/exchanges", self.list_exchanges),
            Route("/api/exchanges/{name}/bindings/{queue:path}", self.unbind, methods=["DELETE"]),
            Route("/api/exchanges/{name}/bindings", self.bind, methods=["POST"]),
            Route("/api/exchanges/{name}", self.get_exchange, methods=["GET"]),
            Route("/api/exchanges/{name}", self.declare_exchange, methods=["PUT"]),
            Route("/api/exchanges/{name}", self.delete_exchange, methods=["DELETE"]),
            Route("/api/topics", self.list_topics),
            Route("/api/connections", self.list_connections),
            Route("/api/connections/{id}", self.close_connection, methods=["DELETE"]),
        ]
        if DASHBOARD.is_dir():
            routes.append(Mount("/", StaticFiles(directory=DASHBOARD, html=True)))
        middleware = [Middleware(_JsonMutationsOnly)]
        if security is not None and security.users is not None:
            middleware.insert(0, Middleware(BasicAuth, security=security))
        if settings.http_host in LOOPBACK:
            middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(LOOPBACK)))
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
        vhost = request.query_params.get("vhost", DEFAULT_VHOST)
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
        self.runtime.tick()
        return engine.administer(path, headers)

    # -- health ---------------------------------------------------------------------------------
    async def healthz(self, request: Request) -> Response:
        """Alive: the event loop answers."""
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """Ready for traffic: the store keeps up (a load balancer should go elsewhere if not)."""
        store = self.runtime.store
        backlog = store.backlog()
        if store.full():
            return JSONResponse({"status": "store behind", "backlog": backlog}, status_code=503)
        return JSONResponse({"status": "ready", "backlog": backlog})

    # -- overview -------------------------------------------------------------------------------
    async def overview(self, request: Request) -> Response:
        engines = self.engines.values()
        stats = [s for engine in engines for s in engine.queue_stats.values()]
        totals = {
            key: sum(getattr(s, key) for s in stats)
            for key in ("published", "delivered", "acked", "redelivered", "dead_lettered")
        }
        return JSONResponse({
            "version": __version__,
            "frame_codec": "native" if native_codec.NATIVE else "python",
            "uptime": round(time.time() - self.started, 1),
            "store": self.settings.store_shown,
            "connections": len(self.connections),
            "vhosts": len(self.engines),
            "queues_in_use": len(stats),
            "queues_active": sum(len(engine.queues) for engine in engines),
            "exchanges": sum(len(engine.exchanges) for engine in engines),
            "totals": totals,
            "rates": self.rates.total(),
        })

    async def cluster(self, request: Request) -> Response:
        """Every broker on a shared store's database: lease, last renewal, claims, version (a store
        of one broker has no cluster: an empty list)."""
        store = self.runtime.store
        items = [
            {
                "id": lease.id,
                "this": lease.id == store.node_id,
                "epoch": lease.epoch,
                "lease_until": _iso(lease.lease_until),
                "last_renewal": None if lease.renewed is None else _iso(lease.renewed),
                "claimed": lease.claimed,
                "unacked": lease.unacked,
                "version": lease.version,
            }
            for lease in await store.brokers()
        ]
        return JSONResponse({"shared": store.shared, "items": items})

    # -- vhosts ---------------------------------------------------------------------------------
    async def list_vhosts(self, request: Request) -> Response:
        by_vhost: dict[str, int] = {}
        for conn in self.connections.values():
            if conn.session is not None:
                by_vhost[conn.vhost] = by_vhost.get(conn.vhost, 0) + 1
        return JSONResponse({"items": [
            {"name": vhost, "connections": by_vhost.get(vhost, 0), "queues_in_use": len(engine.queue_stats),
             "queues_active": len(engine.queues), "exchanges": len(engine.exchanges)}
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
                "oldest_age": _age(row.oldest_ms),
            }
            item.update(row.stats.as_dict() if row.stats is not None else {})
            item["rates"] = self.rates.of(vhost, row.name)
            items.append(item)
        return JSONResponse({"items": items, "next_after": page.next_after})

    async def get_queue(self, request: Request) -> Response:
        name = _queue_name(request.path_params["name"])
        engine = self.engine(request)
        counts = await self.answer(engine, self.administer(engine, "count-msgs/queue/" + name))
        subscribers = self.administer(engine, "count-subscribers/queue/" + name)
        stats = engine.queue_stats.get(name)
        return JSONResponse({
            "name": name,
            "vhost": request.query_params.get("vhost", DEFAULT_VHOST),
            "ready": int(counts["num-ready"]),
            "unacked": int(counts["num-unacked"]),
            "consumers": int(subscribers["num-subscribers"]),
            **(stats.as_dict() if stats is not None else {}),
            "rates": self.rates.of(request.query_params.get("vhost", DEFAULT_VHOST), name),
        })

    async def purge_queue(self, request: Request) -> Response:
        name = _queue_name(request.path_params["name"])
        self.administer(self.engine(request), "purge/queue/" + name)
        log.info("queue %s purged through the management API", name)
        return JSONResponse({"purged": name})

    async def delete_queue(self, request: Request) -> Response:
        name = _queue_name(request.path_params["name"])
        self.administer(self.engine(request), "delete/queue/" + name)
        log.info("queue %s deleted through the management API", name)
        return JSONResponse({"deleted": name})

    # -- exchanges ------------------------------------------------------------------------------
    def _exchange_json(self, engine: Broker, name: str) -> dict[str, Any]:
        exchange = engine.exchanges.get(name)
        if exchange is None:
            raise HTTPException(404, f"no exchange {name!r}")
        return {
            "name": exchange.name,
            "options": exchange.options,
            "bindings": [{"queue": q, "weight": w} for q, w in sorted(exchange.bindings.items())],
            "routed": exchange.routed,
            "unhashed": exchange.unhashed,
        }

    async def list_exchanges(self, request: Request) -> Response:
        after, limit = _page_args(request)
        engine = self.engine(request)
        names = sorted(n for n in engine.exchanges if n > after)[:limit]
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
        self.administer(engine, "declare/exchange/" + name, {k: str(v) for k, v in options.items()})
        return JSONResponse(self._exchange_json(engine, name), status_code=201)

    async def delete_exchange(self, request: Request) -> Response:
        name = request.path_params["name"]
        engine = self.engine(request)
        self._exchange_json(engine, name)  # 404 if absent
        self.administer(engine, "delete/exchange/" + name)
        return JSONResponse({"deleted": name})

    async def bind(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await _json_object(request)
        if "queue" not in body:
            raise HTTPException(400, "a binding needs a queue")
        headers = {"queue": "/queue/" + _queue_name(str(body["queue"]))}
        if "weight" in body:
            headers["weight"] = str(body["weight"])
        engine = self.engine(request)
        self._exchange_json(engine, name)
        self.administer(engine, "bind/exchange/" + name, headers)
        return JSONResponse(self._exchange_json(engine, name), status_code=201)

    async def unbind(self, request: Request) -> Response:
        name = request.path_params["name"]
        engine = self.engine(request)
        self._exchange_json(engine, name)
        queue = "/queue/" + _queue_name(request.path_params["queue"])
        self.administer(engine, "unbind/exchange/" + name, {"queue": queue})
        return JSONResponse(self._exchange_json(engine, name))

    # -- topics ---------------------------------------------------------------------------------
    async def list_topics(self, request: Request) -> Response:
        after, limit = _page_args(request)
        patterns = sorted(p for p in self.engine(request).topics.patterns() if p[0] > after)[:limit]
        return JSONResponse({
            "items": [{"topic": p, "subscriptions": n} for p, n in patterns],
            "next_after": patterns[-1][0] if len(patterns) == limit else None,
        })

    # -- connections ----------------------------------------------------------------------------
    async def list_connections(self, request: Request) -> Response:
        after, limit = _page_args(request)
        key = int(after) if after.isdigit() else 0
        ids = sorted(int(i) for i in self.connections if int(i) > key)[:limit]
        items = [_connection_json(self.connections[str(i)]) for i in ids]
        return JSONResponse({"items": items, "next_after": str(ids[-1]) if len(ids) == limit else None})

    async def close_connection(self, request: Request) -> Response:
        conn = self.connections.get(request.path_params["id"])
        if conn is None:
            raise HTTPException(404, f"no connection {request.path_params['id']!r}")
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


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return JSONResponse({"error": exc.detail, "status": exc.status_code}, status_code=exc.status_code)


async def _client_error(request: Request, exc: ClientError) -> Response:
    return JSONResponse({"error": exc.message, "status": 400}, status_code=400)


def _iso(seconds: float) -> str:
    """Epoch seconds as an ISO 8601 UTC time (milliseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


async def _store_error(request: Request, exc: StoreError) -> Response:
    return JSONResponse({"error": f"store error: {exc}", "status": 503}, status_code=503)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket for the HTTP server (bound here, so port 0 works and errors are ours)."""
    try:
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as e:
        raise OSError(e.errno, os.strerror(e.errno) if e.errno else str(e), f"{host}:{port} (HTTP)") from None
    sock.set_inheritable(True)
    return sock


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
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.errorlog = hypercorn_log = logging.getLogger("stompmq.http.hypercorn")
    hypercorn_log.setLevel(logging.WARNING)  # its "Running on" line repeats our start-up line
    async with trio.open_nursery() as nursery:
        nursery.start_soon(management.rates.run)
        await nursery.start(_serve, management.app, config)
        task_status.started()


async def _serve(app: Starlette, config: HypercornConfig, *, task_status: trio.TaskStatus[None]) -> None:
    trigger: Callable[[], Awaitable[None]] = trio.sleep_forever
    await hypercorn_serve(app, config, shutdown_trigger=trigger, task_status=task_status)  # type: ignore[arg-type]
