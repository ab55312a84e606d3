"""The management API's Starlette app: its resource parts, the guards around them, serving.

``ManagementApp`` is the ``Management`` (``management.py``) that every resource part
(``queues.py``, ``exchanges.py``, ...) is built over, and the routes to those parts.  The app is
built from ``ROUTES`` (``routes.py``) alone: each entry names its handler as ``part.method``.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from operator import attrgetter
from pathlib import Path

import trio
from hypercorn.config import Config as HypercornConfig
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from ...broker import ClientError
from ...storage.base import StoreError
from ..connection import Connection
from ..runtime import Runtime
from ..security import Security
from ..settings import ServerSettings
from ..vhosts import machine_names, own_host
from .alarms import AlarmApi
from .basic_auth import BasicAuth
from .cluster import ClusterApi
from .connections import ConnectionApi
from .definitions import DefinitionsApi
from .exchanges import ExchangeApi
from .gate import RequestGate
from .health import HealthApi, OverviewApi
from .listener import serve_bounded
from .management import Management
from .messages import MessageApi
from .policies import PolicyApi
from .queues import QueueApi
from .requests import request_user
from .router import RawRoute
from .routes import DASHBOARD_ROUTE, QUEUE_PATH, ROUTES, ApiRoute
from .schedules import ScheduleRoutes
from .shovels import ShovelApi
from .streams import StreamApi
from .trace import TraceApi
from .users import UserApi
from .vhosts import VhostApi

log = logging.getLogger("stompmq.server.http")

#: The dashboard's static files (no build step, nothing fetched from outside).
DASHBOARD = Path(__file__).parents[1] / "dashboard"
Endpoint = Callable[[Request], Awaitable[Response]]


class _JsonMutationsOnly(RequestGate):
    """Refuse a POST/PUT/DELETE without a JSON content type (see the package docstring)."""

    async def refuse(self, request: Request) -> Response | None:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
                return JSONResponse({"error": "send content-type: application/json", "status": 415}, status_code=415)
        return None


class _OwnHostOnly(RequestGate):
    """400 for a ``Host`` that is none of the broker's names (``vhosts.own_host``: no DNS rebinding)."""

    def __init__(self, app: ASGIApp, names: frozenset[str]) -> None:
        super().__init__(app)
        self.names = names

    async def refuse(self, request: Request) -> Response | None:
        host = request.headers.get("host")
        if not own_host(host, self.names):
            log.info("management API: refused a request to host %r, not a name of this broker (--host-names)", host)
            return JSONResponse({"error": f"host {host!r} is not a name of this broker (--host-names)",
                                 "status": 400}, status_code=400)
        return None


class ManagementApp(Management):
    """The routes, over one broker and the server's open connections."""

    def __init__(self, runtime: Runtime, settings: ServerSettings, connections: dict[str, Connection],
                 security: Security | None = None) -> None:
        super().__init__(runtime, settings, connections, security)
        # The resource parts ROUTES names its handlers in.
        self.health_api = HealthApi(self)
        self.overview_api = OverviewApi(self)
        self.alarm_api = AlarmApi(self)
        self.cluster_api = ClusterApi(self)
        self.vhost_api = VhostApi(self)
        self.queue_api = QueueApi(self)
        self.message_api = MessageApi(self)
        self.exchange_api = ExchangeApi(self)
        self.stream_api = StreamApi(self)
        self.schedule_api = ScheduleRoutes(self)
        self.trace_api = TraceApi(self)
        self.shovel_api = ShovelApi(self)
        self.policy_api = PolicyApi(runtime)
        self.definitions_api = DefinitionsApi(runtime, security, settings.users_file)
        self.connection_api = ConnectionApi(self)
        self.user_api = UserApi(self)
        self.queue_api.actions_from(ROUTES)

        routes: list[BaseRoute] = [
            self._raw_route(route)
            for route in ROUTES if not route.path.startswith(QUEUE_PATH) and route.handler != DASHBOARD_ROUTE
        ]
        routes.append(Route("/api/queues/{rest:path}", self.queue_api.route,
                            methods=sorted({m for _, m in self.queue_api.actions})))
        routes.append(Route("/api/{rest:path}", _no_route, methods=["GET", "PUT", "POST", "DELETE"]))
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

    def _raw_route(self, route: ApiRoute) -> RawRoute:
        handler = attrgetter(route.handler)(self)
        if route.admin:
            handler = _administrators_only(handler)
        if route.deprecated:
            handler = _deprecated(handler)
        if route.listing:
            handler = _deprecated(handler, only_with="vhost")
        return RawRoute(route.path, handler, route.method)


def _administrators_only(handler: Endpoint) -> Endpoint:
    """``handler`` behind a check that the request's user has the ``administrator`` tag (an
    ``ApiRoute.admin`` route, read or not); without a users file there is nobody to check."""

    async def checked(request: Request) -> Response:
        user = request_user(request)
        if user is not None and "administrator" not in user.tags:
            log.warning("management API: access refused: %s %s for user %r (not an administrator)", request.method,
                        request.url.path, user.name)
            raise HTTPException(403, f"access refused: user {user.name} may not {request.method} {request.url.path} "
                                     "(needs the administrator tag)")
        return await handler(request)

    return checked


def _deprecated(handler: Endpoint, only_with: str | None = None) -> Endpoint:
    """``handler`` answering ``Deprecation: true`` (RFC 9745): its route has a newer form; with
    ``only_with``, only a request giving that query parameter is of the older form (a list route
    whose ``?vhost=`` is a path segment now, ``ApiRoute.listing``)."""

    async def marked(request: Request) -> Response:
        response = await handler(request)
        if only_with is None or only_with in request.query_params:
            response.headers["deprecation"] = "true"
        return response

    return marked


async def _no_route(request: Request) -> Response:
    """404 for a path under /api that no route has, naming those of its collection."""
    collection = "/".join(request.url.path.split("/")[:3])
    shapes = [f"{r.method} {r.path}" for r in ROUTES if r.path == collection or r.path.startswith(collection + "/")]
    hint = (f": use {', '.join(shapes)}, each name one percent-encoded path segment (/ is %2F)" if shapes
            else " (docs/operations.md lists the routes)")
    raise HTTPException(404, f"not a route of {collection}{hint}")


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return JSONResponse({"error": exc.detail, "status": exc.status_code}, status_code=exc.status_code,
                        headers=exc.headers)


async def _client_error(request: Request, exc: ClientError) -> Response:
    return JSONResponse({"error": exc.message, "status": 400}, status_code=400)


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
