"""``/api/shovels``: list, declare and delete the shovels the broker runs (``server/shovels.py``).

Shovels are the broker's, not a vhost's: their URLs name the brokers and vhosts they move between
(docs/decisions/shovels-broker-wide.md).
Declaring one is for the users file's administrators only (``basic_auth.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...client import ClientError as ShovelError
from ...transfer import Declaration
from ..shovels import Shovels
from .requests import json_object

if TYPE_CHECKING:
    from .management import Management


class ShovelApi:
    def __init__(self, app: Management) -> None:
        self.app = app

    @property
    def shovels(self) -> Shovels:
        return self.app.runtime.shovels

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
        (the users file's administrators only: basic_auth.py)."""
        name = request.path_params["name"]
        try:
            declaration = Declaration.parse(name, await json_object(request))
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
