"""``RequestGate``: a pure ASGI middleware that answers some HTTP requests itself and hands the
rest on untouched (the management API's host, content-type and login checks).

Starlette's ``BaseHTTPMiddleware`` passes every response through an async generator of its own,
which, under trio, can be left for the garbage collector to close ("Exception ignored in
... body_stream").  A check that only decides whether to answer needs none of that: it reads the
request's headers and either sends its own response or calls the app with the ASGI call as it
came."""

from __future__ import annotations

from abc import ABC, abstractmethod

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send


class RequestGate(ABC):
    """Answer an HTTP request with ``refuse``'s response, or pass it on when that is None."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            response = await self.refuse(Request(scope, receive))
            if response is not None:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @abstractmethod
    async def refuse(self, request: Request) -> Response | None:
        """The response that ends ``request`` here, or None to pass it on (``request.scope`` is
        the scope the app gets, so what is set there reaches the handlers)."""
