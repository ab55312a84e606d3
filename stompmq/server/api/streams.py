"""A vhost's streams (offsets and consumer groups' lag; ``/api/streams/{vhost}/{name}`` one of
them, as in RabbitMQ) and its topic subscriptions' patterns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .requests import age, page_args, query_vhost

if TYPE_CHECKING:
    from ...broker import Broker
    from .management import Management


class StreamApi:
    def __init__(self, app: Management) -> None:
        self.app = app

    async def list_topics(self, request: Request) -> Response:
        after, limit = page_args(request)
        patterns = sorted(p for p in self.app.engine(request).topics.patterns() if p[0] > after)[:limit]
        return JSONResponse({
            "items": [{"topic": p, "subscriptions": n} for p, n in patterns],
            "next_after": patterns[-1][0] if len(patterns) == limit else None,
        })

    # -- streams --------------------------------------------------------------------------------
    def _stream_json(self, engine: Broker, name: str) -> dict[str, Any]:
        """A stream with its offsets, retention settings (with where each came from, as a queue's)
        and consumer groups (committed offset, lag = the stream's next offset - the committed one,
        lag_seconds: broker/ages.py): an item of the list and the single-stream route alike."""
        stream = engine.streams_by_name[name]
        return {
            "name": name, "first_offset": stream.first, "next_offset": stream.next, "bytes": stream.size,
            "subscribers": len(stream.subscribers), "settings": engine.stream_settings(name),
            "groups": [{"name": lag.group, "committed_offset": lag.committed, "lag": lag.entries,
                        "lag_seconds": age(lag.oldest_ms) or 0.0} for lag in engine.stream_group_lags(name)],
        }

    async def list_streams(self, request: Request) -> Response:
        """The vhost's streams by name (``_stream_json``), a page at a time."""
        after, limit = page_args(request)
        engine = self.app.engine(request)
        names = sorted(name for name in engine.streams_by_name if name > after)[:limit]
        return JSONResponse({"items": [self._stream_json(engine, name) for name in names],
                             "next_after": names[-1] if len(names) == limit else None})

    async def get_stream(self, request: Request) -> Response:
        """``GET /api/streams/{vhost}/{name}``: one stream as the list shows it; 404 if the vhost
        has no such stream."""
        engine, name = self.app.engine(request), request.path_params["name"]
        if name not in engine.streams_by_name:
            raise HTTPException(404, f"no stream {name!r} in vhost {query_vhost(request)!r}")
        return JSONResponse(self._stream_json(engine, name))
