"""``/api/vhosts``: list the vhosts with their counts, declare one, delete one with everything in it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...vhost_names import DEFAULT_VHOST, vhost_name_error

if TYPE_CHECKING:
    from .management import Management


class VhostApi:
    def __init__(self, app: Management) -> None:
        self.app = app

    async def list_vhosts(self, request: Request) -> Response:
        by_vhost: dict[str, int] = {}
        for conn in self.app.connections.values():
            if conn.session is not None:
                by_vhost[conn.vhost] = by_vhost.get(conn.vhost, 0) + 1
        return JSONResponse({"items": [
            {"name": vhost, "connections": by_vhost.get(vhost, 0),
             "queues": len(engine.queue_stats.keys() | engine.declared_queues().keys()),
             "queues_declared": len(engine.declared_queues()), "queues_in_use": len(engine.queue_stats),
             "queues_active": len(engine.queues),
             "exchanges": len(engine.exchange_names())}
            for vhost, engine in sorted(self.app.engines.items())
        ]})

    async def declare_vhost(self, request: Request) -> Response:
        name = request.path_params["name"]
        error = vhost_name_error(name)
        if error is not None:
            raise HTTPException(400, error)
        runtime = self.app.runtime
        created = name not in self.app.engines
        runtime.tick()
        runtime.declare(name)
        return JSONResponse({"name": name}, status_code=201 if created else 200)

    async def delete_vhost(self, request: Request) -> Response:
        """Delete a vhost with everything in it (its connections are closed first); not ``/``."""
        name = request.path_params["name"]
        if name == DEFAULT_VHOST:
            raise HTTPException(400, "the default vhost / cannot be deleted")
        if name not in self.app.engines:
            raise HTTPException(404, f"no vhost {name!r}")
        for conn in list(self.app.connections.values()):
            if conn.session is not None and conn.vhost == name:
                conn.close(f"vhost {name} deleted")
        self.app.runtime.delete(name)
        return JSONResponse({"deleted": name})
