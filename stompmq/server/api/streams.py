"""A vhost's streams (offsets and consumer groups' lag) and its topic subscriptions' patterns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .requests import age, page_args

if TYPE_CHECKING:
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
    async def list_streams(self, request: Request) -> Response:
        """Streams by name with their offsets, retention settings (with where each came from, as a
        queue's) and consumer groups (committed offset, lag = the stream's next offset - the
        committed one, lag_seconds: broker/ages.py)."""
        after, limit = page_args(request)
        streams = (engine := self.app.engine(request)).streams_by_name
        names = sorted(name for name in streams if name > after)[:limit]
        items = []
        for name in names:
            stream = streams[name]
            items.append({
                "name": name, "first_offset": stream.first, "next_offset": stream.next, "bytes": stream.size,
                "subscribers": len(stream.subscribers), "settings": engine.stream_settings(name),
                "groups": [{"name": lag.group, "committed_offset": lag.committed, "lag": lag.entries,
                            "lag_seconds": age(lag.oldest_ms) or 0.0} for lag in engine.stream_group_lags(name)],
            })
        return JSONResponse({"items": items, "next_after": names[-1] if len(names) == limit else None})
