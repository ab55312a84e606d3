"""The management API's policies and operator policies (server/policies.py holds them).

``/api/policies`` and ``/api/operator-policies`` list them (``?vhost=`` for one vhost's);
``/api/policies/{vhost}/{name}`` is one: ``GET``, ``PUT`` with a JSON body of RabbitMQ's
fields (``pattern``, ``apply-to``, ``priority``, ``definition``), ``DELETE``.  The vhost and
the name are each one percent-encoded path segment (``/`` is ``%2F``, ``router.py``).
Policies are the broker's configuration, not a vhost's resources: administrators set them (RabbitMQ's ``policymaker`` is not a tag here), monitoring users read them.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...broker import ClientError
from ...broker.policy_match import Policy
from ..runtime import Runtime
from .requests import json_object

#: The two collections, by whether they hold operator policies.
PREFIXES = {False: "/api/policies", True: "/api/operator-policies"}


def _json(policy: Policy, vhost: str) -> dict[str, Any]:
    return {"vhost": vhost, **policy.record()}


class PolicyApi:
    """The handlers of the policy routes."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.policies = runtime.policies
        self.engines = runtime.engines

    @staticmethod
    def _operator(request: Request) -> bool:
        return request.url.path.startswith(PREFIXES[True])

    def _target(self, request: Request) -> tuple[bool, str, str]:
        """(operator?, vhost, name) of ``PREFIX/VHOST/NAME``; 404 for no vhost."""
        vhost, name = request.path_params["vhost"], request.path_params["name"]
        if vhost not in self.engines:
            raise HTTPException(404, f"no vhost {vhost!r}")
        return self._operator(request), vhost, name

    async def list_policies(self, request: Request) -> Response:
        """Every policy (of the path's vhost, or ``?vhost=``, if given), by vhost and name."""
        operator = self._operator(request)
        wanted = request.path_params.get("vhost") or request.query_params.get("vhost")
        vhosts = [wanted] if wanted is not None else self.policies.vhosts()
        return JSONResponse({"items": [_json(p, v) for v in vhosts for p in self.policies.of(v, operator)]})

    async def get_policy(self, request: Request) -> Response:
        operator, vhost, name = self._target(request)
        policy = self.policies.policies.get((operator, vhost, name))
        if policy is None:
            raise HTTPException(404, f"no {'operator policy' if operator else 'policy'} {name!r} in vhost {vhost!r}")
        return JSONResponse(_json(policy, vhost))

    async def put_policy(self, request: Request) -> Response:
        """Set the policy: applied to the vhost's queues at once, stored with the next commit."""
        operator, vhost, name = self._target(request)
        body = await json_object(request)
        body = {k: v for k, v in body.items() if not (k in ("name", "vhost") and v in (name, vhost))}
        self.runtime.tick()
        try:
            policy, created = self.policies.put(vhost, name, body, operator)
        except ClientError as e:
            raise HTTPException(400, e.message) from None
        return JSONResponse(_json(policy, vhost), status_code=201 if created else 200)

    async def delete_policy(self, request: Request) -> Response:
        operator, vhost, name = self._target(request)
        self.runtime.tick()
        if not self.policies.delete(vhost, name, operator):
            raise HTTPException(404, f"no {'operator policy' if operator else 'policy'} {name!r} in vhost {vhost!r}")
        return JSONResponse({"deleted": name, "vhost": vhost})
