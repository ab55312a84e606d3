"""The probes (``/healthz``, ``/readyz``), ``/metrics`` and the broker's overview and totals.

The probes need no credentials (``basic_auth.OPEN_PATHS``) and reveal nothing; the overview
is what the dashboard's first page shows: counts, totals, rates, alarms and the node.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ... import __version__
from ...protocol import native as native_codec
from ..metrics import metrics_route
from .rates import history_json, history_range

if TYPE_CHECKING:
    from .management import Management


class HealthApi:
    """Liveness, readiness and the Prometheus scrape."""

    def __init__(self, app: Management) -> None:
        self.app = app
        self.metrics = metrics_route(app)

    async def healthz(self, request: Request) -> Response:
        """Alive: the event loop answers."""
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """Ready for traffic: the store accepts writes and keeps up (a load balancer should go
        elsewhere if not)."""
        store = self.app.runtime.store
        health = store.health()
        backlog = health.backlog
        if health.unavailable:
            return JSONResponse({"status": "store unavailable", "backlog": backlog}, status_code=503)
        if store.full():
            return JSONResponse({"status": "store behind", "backlog": backlog}, status_code=503)
        return JSONResponse({"status": "ready", "backlog": backlog})


class OverviewApi:
    """``/api/overview`` and ``/api/history`` (the rates over every queue)."""

    def __init__(self, app: Management) -> None:
        self.app = app

    async def overview(self, request: Request) -> Response:
        app = self.app
        engines = app.engines.values()
        return JSONResponse({
            "broker": app.broker_id,
            "version": __version__,
            "frame_codec": "native" if native_codec.NATIVE else "python",
            "uptime": round(time.time() - app.started, 1),
            "store": app.settings.store_shown,
            "connections": len(app.connections),
            "vhosts": len(app.engines),
            "queues_in_use": sum(len(engine.queue_stats) for engine in engines),
            "queues_active": sum(len(engine.queues) for engine in engines),
            "exchanges": sum(len(engine.exchanges) for engine in engines),
            "totals": app.runtime.counter_totals(),
            "rates": app.rates.total(),
            "alarms": app.runtime.alarms.describe()["alarms"],
            "node": self._node(),
        })

    def _node(self) -> dict[str, Any]:
        """The broker process and its machine, as the dashboard's node panel shows them."""
        alarms = self.app.runtime.alarms
        try:
            fds: int | None = len(os.listdir("/proc/self/fd"))
        except OSError:  # no /proc (not Linux)
            fds = None
        return {"memory_used": alarms.memory_used, "memory_limit": alarms.memory_limit,
                "disk_free": alarms.disk_free, "disk_free_limit": alarms.disk_free_limit,
                "store_bytes": self.app.runtime.store.health().disk_bytes, "open_fds": fds}

    async def total_history(self, request: Request) -> Response:
        """The rates over every queue, the last ``?range=`` seconds (``server/history.py``)."""
        return history_json(*self.app.rates.history.of(None, history_range(request)))
