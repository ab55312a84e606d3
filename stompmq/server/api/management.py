"""``Management``: what every resource part of the management API shares.

The engines, the runtime, the open connections, the rates, and the three ways a handler acts on
an engine (``answer``, ``administer``, ``change``).  The parts (``queues.py``, ``exchanges.py``,
...) are built over it, and ``app.ManagementApp``, which builds them, is one: so the parts
import this module and never the app that routes to them.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ...broker import Broker
from ...broker.control import Deferred
from ..auth import required_permissions
from ..connection import Connection
from ..runtime import Runtime
from ..security import Security
from ..settings import ServerSettings
from .rates import Rates
from .requests import authorise, query_vhost

#: The ``broker`` of the counters on a store of one broker (which has no node id).
SINGLE_BROKER = "local"


class Management:
    """One broker's engines and runtime, and the server's open connections, as the parts see them."""

    def __init__(self, runtime: Runtime, settings: ServerSettings, connections: dict[str, Connection],
                 security: Security | None = None) -> None:
        self.runtime = runtime
        self.engines = runtime.engines
        self.settings = settings
        self.connections = connections
        self.security = security
        self.rates = Rates(self.engines, connections)
        self.started = time.time()
        #: whose counters this API and /metrics show (see the package docstring)
        self.broker_id = runtime.store.node_id or SINGLE_BROKER
        self.store_metrics = runtime.store_metrics

    def engine(self, request: Request) -> Broker:
        """The engine of the request's ``vhost`` parameter (default ``/``); 404 if there is none."""
        vhost = query_vhost(request)
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

