"""``GET /api/definitions`` (export) and ``POST /api/definitions`` (import), as RabbitMQ's.

The export is the definitions document (definitions_export.py); ``?secrets=true`` adds the
users' password hashes and the shovels' passwords, for administrators only.  The import takes
the same document as JSON, checks it whole and applies it (definitions_apply.py); with
``?dry_run=true`` it answers the steps it would take and changes nothing.  A bad document is a
400 naming the entry and the key.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...broker.definitions import DefinitionsError
from .. import definitions_apply
from ..auth import User
from ..definitions_export import export_definitions
from ..runtime import Runtime
from ..security import Security
from .basic_auth import USER_SCOPE
from .requests import json_object


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false")
    if value not in ("true", "false"):
        raise HTTPException(400, f"{name} must be true or false, not {value!r}")
    return value == "true"


class DefinitionsApi:
    def __init__(self, runtime: Runtime, security: Security | None, users_file: str | None) -> None:
        self.runtime = runtime
        self.security = security
        self.users_file = users_file

    async def export(self, request: Request) -> Response:
        secrets = _flag(request, "secrets")
        user: User | None = request.scope.get(USER_SCOPE)
        if secrets and user is not None and "administrator" not in user.tags:
            raise HTTPException(403, f"access refused: user {user.name} is no administrator: secrets=true needs one")
        users = self.security.users if self.security is not None and self.users_file else None
        return JSONResponse(export_definitions(self.runtime, users, secrets))

    async def import_(self, request: Request) -> Response:
        dry_run = _flag(request, "dry_run")
        data = await json_object(request)
        try:
            steps = definitions_apply.plan(self.runtime, data, "definitions", self.users_file)
        except DefinitionsError as e:
            raise HTTPException(400, str(e)) from None
        if not dry_run:
            definitions_apply.apply(self.runtime, steps)
            if self.security is not None and self.users_file and any(s.what.startswith("users ") for s in steps):
                self.security.reload({self.users_file})  # (it would notice within seconds anyway)
        return JSONResponse({"dry_run": dry_run, "steps": [step.what for step in steps]})
