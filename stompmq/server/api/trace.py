"""The management API of a vhost's durable message trace (broker/tracestream.py).

``GET /api/trace?vhost=V`` says whether the vhost traces; ``PUT`` with ``{"on": true,
"body_bytes": N}`` turns it on (N body bytes kept per entry, 0 by default) or off; ``GET
/api/trace/events?vhost=V&after=OFFSET&limit=N`` reads the trace stream from ``after`` on (what
``stompmq admin trace tail`` polls).  Changing the trace needs ``configure`` on
``/stream/stompmq.trace`` in the vhost, reading it ``read`` there, as a STOMP client's
declaration and SUBSCRIBE would: the entries hold the messages' headers."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...broker.tracestream import MAX_BODY_BYTES, TRACE_STREAM, TraceState, set_trace, trace_entries, trace_state
from .requests import authorise, json_object

if TYPE_CHECKING:
    from .management import Management

#: The trace stream as a permission names it.
TRACE_RESOURCE = "/stream/" + TRACE_STREAM
MAX_EVENTS = 1000


class TraceApi:
    def __init__(self, management: Management) -> None:
        self.management = management

    async def get(self, request: Request) -> Response:
        return JSONResponse(_state(trace_state(self.management.engine(request))))

    async def put(self, request: Request) -> Response:
        management = self.management
        engine = management.engine(request)
        authorise(request, request.query_params.get("vhost", "/"), [("configure", TRACE_RESOURCE)])
        body = await json_object(request)
        if set(body) - {"on", "body_bytes"} or not isinstance(body.get("on"), bool):
            raise HTTPException(400, 'the body is {"on": true or false, "body_bytes": N} (body_bytes optional)')
        body_bytes = body.get("body_bytes", 0)
        if not isinstance(body_bytes, int) or isinstance(body_bytes, bool) or not 0 <= body_bytes <= MAX_BODY_BYTES:
            raise HTTPException(400, f"body_bytes must be a whole number from 0 to {MAX_BODY_BYTES}")
        management.runtime.tick()
        return JSONResponse(_state(set_trace(engine, body["on"], body_bytes)))

    async def events(self, request: Request) -> Response:
        management = self.management
        engine = management.engine(request)
        authorise(request, request.query_params.get("vhost", "/"), [("read", TRACE_RESOURCE)])
        after = _whole(request, "after", 0, 2**62)
        limit = _whole(request, "limit", 100, MAX_EVENTS)
        entries = await management.answer(engine, trace_entries(engine, after, limit))
        return JSONResponse({
            "items": [{"offset": e.offset, "timestamp": e.timestamp, "headers": e.headers, **_body(e.body)}
                      for e in entries],
            "next": entries[-1].offset + 1 if entries else after,
        })


def _state(state: TraceState) -> dict[str, Any]:
    return {"on": state.on, "body_bytes": state.body_bytes, "stream": TRACE_RESOURCE, "next_offset": state.next_offset}


def _body(body: bytes) -> dict[str, str]:
    """A body as text when it is UTF-8, else as base64 (``body_base64``)."""
    try:
        return {"body": body.decode()}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode()}


def _whole(request: Request, name: str, default: int, most: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    if not (value.isascii() and value.isdigit()) or int(value) > most:
        raise HTTPException(400, f"{name} must be a whole number from 0 to {most}")
    return int(value)
