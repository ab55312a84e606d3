"""What the management API's handlers read from a request and check against its user.

Shared by every resource module of ``server/api/``: query parameters, JSON bodies, the raw
path's percent-encoded segments, and the vhost permission check, which acts on the resource a
request names (RabbitMQ's rule).
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Container
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ...broker.control import MAX_PAGE
from ...broker.destinations import parse_destination
from ...broker.resources import resource
from ...vhost_names import DEFAULT_VHOST
from ..auth import User
from .basic_auth import USER_SCOPE

log = logging.getLogger("stompmq.server.http")  # the API's one log, whichever module handles the route

#: Items in a page when the client does not say.
DEFAULT_PAGE = 100


def count_param(request: Request, name: str, default: int, most: int) -> int:
    """Query parameter ``name``: a number from 1 to ``most`` (400 otherwise), ``default`` if absent."""
    try:
        value = int(request.query_params.get(name, default))
    except ValueError:
        raise HTTPException(400, f"{name} must be a number") from None
    if not 1 <= value <= most:
        raise HTTPException(400, f"{name} must be 1-{most}")
    return value


def page_args(request: Request) -> tuple[str, int]:
    """``?after=NAME&limit=N`` of a paged list."""
    return request.query_params.get("after", ""), count_param(request, "limit", DEFAULT_PAGE, MAX_PAGE)


def listed_vhost(request: Request, vhosts: Container[str]) -> bool:
    """Does ``/api/KIND/{vhost}`` name a vhost to list?  Not when it is the older
    ``/api/KIND/NAME`` (``?vhost=`` given, or no such vhost): RabbitMQ's form wins where both read."""
    vhost = request.path_params.get("vhost")
    return vhost is None or ("vhost" not in request.query_params and vhost in vhosts)


def query_vhost(request: Request) -> str:
    """The vhost of a list route: its path's (``/api/KIND/{vhost}``), else the older ``?vhost=``
    (default ``/``)."""
    return request.path_params.get("vhost") or request.query_params.get("vhost", DEFAULT_VHOST)


def raw_segments(request: Request, prefix: str, what: str) -> list[str]:
    """The decoded segments of the raw path after ``prefix`` (which ends in ``/``).

    Each segment is one percent-encoded name (``/`` is ``%2F``), so a name holding ``/`` is
    never read as a route: the decoded path cannot tell them apart, hence the raw one."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    start = prefix.encode()
    if not raw.startswith(start):
        return []
    try:
        return [urllib.parse.unquote(part.decode("ascii"), errors="strict") for part in raw[len(start):].split(b"/")]
    except UnicodeDecodeError:
        raise HTTPException(400, f"a {what} path must be percent-encoded UTF-8") from None


async def json_object(request: Request) -> dict[str, Any]:
    """The request's JSON object body (``{}`` when empty); 400 for anything else."""
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise HTTPException(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return body


def only_fields(body: dict[str, Any], known: set[str], what: str) -> None:
    """400 naming the first field of ``body`` outside ``known``."""
    unknown = sorted(set(body) - known)
    if unknown:
        raise HTTPException(400, f"unknown field {unknown[0]!r}: {what}")


def json_count(body: dict[str, Any], name: str, default: int | None, most: int) -> int:
    """Field ``name`` of a JSON body: a whole number from 1 to ``most`` (400 otherwise; absent,
    ``default``, or 400 if there is none)."""
    value = body.get(name, default)
    if value is None:
        raise HTTPException(400, f"{name} is missing: a number from 1 to {most}")
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise HTTPException(400, f"{name} must be a number from 1 to {most}, not {value!r}")
    return value


def age(oldest_ms: int | None) -> float | None:
    """Seconds since an epoch-milliseconds time (None for none)."""
    return None if oldest_ms is None else round(max(0.0, time.time() - oldest_ms / 1000), 3)


def queue_resource(name: str) -> str:
    """The resource queue ``name`` is, as a STOMP frame naming ``/queue/NAME`` acts on it."""
    return resource(parse_destination("/queue/" + name))


def request_user(request: Request) -> User | None:
    """The request's user (``basic_auth.py``), None without a users file."""
    user: User | None = request.scope.get(USER_SCOPE)
    return user


def authorise(request: Request, vhost: str, wanted: list[tuple[str, str]]) -> None:
    """403 unless the request's user may do each (action, resource) on ``vhost``, whatever its
    tag (an administrator too: RabbitMQ's rule).  Without a users file the API is open: nothing
    to check."""
    user = request_user(request)
    if user is None:
        return
    permission = user.permissions.get(vhost)
    for action, target in wanted:
        if permission is None or not permission.allows(action, target):
            log.warning("management API: access refused: %s %s for user %r (%s on %s in vhost %r)", request.method,
                        request.url.path, user.name, action, target, vhost)
            raise HTTPException(403, f"access refused: user {user.name} has no {action} permission on {target} "
                                     f"in vhost {vhost}")


def queue_name(name: str) -> str:
    """``orders`` and ``/queue/orders`` name the same queue (in a binding, a move's target)."""
    return name.removeprefix("/queue/")
