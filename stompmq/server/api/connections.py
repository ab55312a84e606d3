"""``/api/connections``: this broker's open connections, one with its subscriptions and rates, closed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..connection import Connection
from .requests import log, page_args

if TYPE_CHECKING:
    from .management import Management


class ConnectionApi:
    def __init__(self, app: Management) -> None:
        self.app = app

    async def list_connections(self, request: Request) -> Response:
        after, limit = page_args(request)
        key = int(after) if after.isdigit() else 0
        ids = sorted(int(i) for i in self.app.connections if int(i) > key)[:limit]
        items = [connection_json(self.app.connections[str(i)]) for i in ids]
        return JSONResponse({"items": items, "next_after": str(ids[-1]) if len(ids) == limit else None})

    def _connection(self, request: Request) -> Connection:
        conn = self.app.connections.get(request.path_params["id"])
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
        return JSONResponse({**connection_json(conn), "held": conn.held,
                             "held_by": None if reason is None else reason.value, "subscriptions": subscriptions,
                             "rates": self.app.rates.of_connection(conn)})

    async def close_connection(self, request: Request) -> Response:
        conn = self._connection(request)
        conn.close("closed by an administrator")
        log.info("connection %s from %s closed through the management API", conn.id, conn.peer)
        return JSONResponse({"closed": conn.id})


def connection_json(conn: Connection) -> dict[str, Any]:
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
