"""A vhost's exchanges and their bindings: ``/api/exchanges/{vhost}/{name}`` as in RabbitMQ.

The list is ``/api/exchanges?vhost=V`` (default ``/``); the older ``/api/exchanges/{name}?vhost=V``
forms still work for a release (``ApiRoute.deprecated``).

Consistent-hash exchanges bind with weights; direct, fanout and topic ones with routing keys
(the built-in ``amq.*`` ones are listed too).  Declare, delete, bind and unbind run the same
``/control`` verbs a STOMP client can send (``Management.change``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...broker import Broker
from ...broker.exchanges import EXCHANGE_TYPE, ROUTING_KEY_HEADER
from ...vhost_names import DEFAULT_VHOST
from .requests import json_object, listed_vhost, page_args, query_vhost, queue_name

if TYPE_CHECKING:
    from .management import Management


class ExchangeApi:
    def __init__(self, app: Management) -> None:
        self.app = app

    def _target(self, request: Request) -> tuple[str, Broker, str]:
        """(vhost, its engine, exchange name) of the path form or the older ``?vhost=`` one."""
        params = request.path_params
        if "name" not in params:  # GET /api/exchanges/NAME, read by list_exchanges as the older form
            vhost, name = request.query_params.get("vhost", DEFAULT_VHOST), params["vhost"]
        elif "vhost" not in params:
            vhost, name = query_vhost(request), params["name"]
        elif "vhost" in request.query_params:
            raise HTTPException(400, "give the vhost in the path (/api/exchanges/VHOST/NAME) or ?vhost=, not both")
        else:
            vhost, name = params["vhost"], params["name"]
        engine = self.app.engines.get(vhost)
        if engine is None:
            raise HTTPException(404, f"no vhost {vhost!r}")
        return vhost, engine, name

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
        if not listed_vhost(request, self.app.engines):  # the older GET /api/exchanges/NAME (?vhost=)
            response = await self.get_exchange(request)
            response.headers["deprecation"] = "true"
            return response
        after, limit = page_args(request)
        engine = self.app.engine(request)
        names = sorted(n for n in (*engine.exchanges, *engine.key_exchanges) if n > after)[:limit]
        return JSONResponse({
            "items": [self._exchange_json(engine, n) for n in names],
            "next_after": names[-1] if len(names) == limit else None,
        })

    async def get_exchange(self, request: Request) -> Response:
        _, engine, name = self._target(request)
        return JSONResponse(self._exchange_json(engine, name))

    async def declare_exchange(self, request: Request) -> Response:
        vhost, engine, name = self._target(request)
        options = await json_object(request)
        self.app.change(request, vhost, engine, "declare/exchange/" + name, {k: str(v) for k, v in options.items()})
        return JSONResponse(self._exchange_json(engine, name), status_code=201)

    async def delete_exchange(self, request: Request) -> Response:
        vhost, engine, name = self._target(request)
        self._exchange_json(engine, name)  # 404 if absent
        self.app.change(request, vhost, engine, "delete/exchange/" + name)
        return JSONResponse({"deleted": name})

    async def bind(self, request: Request) -> Response:
        vhost, engine, name = self._target(request)
        body = await json_object(request)
        if "queue" not in body:
            raise HTTPException(400, "a binding needs a queue")
        headers = {"queue": "/queue/" + queue_name(str(body["queue"]))}
        if "weight" in body:
            headers["weight"] = str(body["weight"])
        if "routing_key" in body:
            headers[ROUTING_KEY_HEADER] = str(body["routing_key"])
        self._exchange_json(engine, name)
        self.app.change(request, vhost, engine, "bind/exchange/" + name, headers)
        return JSONResponse(self._exchange_json(engine, name), status_code=201)

    async def unbind(self, request: Request) -> Response:
        """``?routing_key=K``: the binding with that key (a direct or topic exchange's)."""
        vhost, engine, name = self._target(request)
        self._exchange_json(engine, name)
        headers = {"queue": "/queue/" + queue_name(request.path_params["queue"])}
        if "routing_key" in request.query_params:
            headers[ROUTING_KEY_HEADER] = request.query_params["routing_key"]
        self.app.change(request, vhost, engine, "unbind/exchange/" + name, headers)
        return JSONResponse(self._exchange_json(engine, name))
