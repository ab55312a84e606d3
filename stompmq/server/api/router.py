"""A route matched on the raw path, one percent-encoded segment per name.

Why: Starlette matches the decoded path, where the vhost ``/`` (``%2F``) of
``/api/permissions/%2F/alice`` is a separator like any other and the route cannot be found.
RabbitMQ's API names a resource as ``/api/{kind}/{vhost}/{name}`` with each name one
percent-encoded segment, so a ``RawRoute`` compares the raw path's segments with its
template's: a literal must be equal, ``{x}`` takes one segment (decoded), ``{x:path}`` one or
more (decoded, joined by ``/``).  The handler finds them in ``request.path_params`` as usual.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

from starlette.routing import Match, Route
from starlette.types import Scope


def _segments(raw: bytes) -> list[str] | None:
    """The decoded segments of a raw path, None if one is not percent-encoded UTF-8."""
    try:
        return [urllib.parse.unquote(part.decode("ascii"), errors="strict") for part in raw.strip(b"/").split(b"/")]
    except UnicodeDecodeError:
        return None


def match_template(template: list[str], segments: list[str]) -> dict[str, str] | None:
    """The parameters of ``segments`` read by ``template`` (one item per segment), or None."""
    rest = next((i for i, part in enumerate(template) if part.endswith(":path}")), None)
    if rest is None:
        if len(segments) != len(template):
            return None
        pairs = list(zip(template, segments))
    else:
        after = len(template) - rest - 1
        if len(segments) < len(template):
            return None
        middle = "/".join(segments[rest:len(segments) - after])
        pairs = [*zip(template[:rest], segments[:rest]), (template[rest].removesuffix(":path}") + "}", middle),
                 *zip(template[rest + 1:], segments[len(segments) - after:])]
    params: dict[str, str] = {}
    for part, segment in pairs:
        if part.startswith("{"):
            if not segment:
                return None
            params[part[1:-1]] = segment
        elif part != segment:
            return None
    return params


class RawRoute(Route):
    """One method of one path of ``ROUTES``, matched on the raw path (see the module docstring)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], method: str) -> None:
        super().__init__(path, endpoint, methods=[method])
        self.template = path.strip("/").split("/")

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        segments = _segments(scope.get("raw_path") or scope["path"].encode())
        params = None if segments is None else match_template(self.template, segments)
        if params is None:
            return Match.NONE, {}
        child = {"endpoint": self.endpoint, "path_params": {**scope.get("path_params", {}), **params}}
        if self.methods and scope["method"] not in self.methods:
            return Match.PARTIAL, child
        return Match.FULL, child
