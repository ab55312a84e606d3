"""What the management API's handlers read from a request and check against its user.

Shared by ``http.py`` and the handlers beside it (``http_schedules.py``): query parameters
and the vhost permission check, which acts on the resource a request names (RabbitMQ's rule).
"""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ..broker.destinations import parse_destination
from ..broker.resources import resource
from .auth import User
from .http_auth import USER_SCOPE

log = logging.getLogger("stompmq.server.http")  # (the API's log, as before these moved here)


def count_param(request: Request, name: str, default: int, most: int) -> int:
    """Query parameter ``name``: a number from 1 to ``most`` (400 otherwise), ``default`` if absent."""
    try:
        value = int(request.query_params.get(name, default))
    except ValueError:
        raise HTTPException(400, f"{name} must be a number") from None
    if not 1 <= value <= most:
        raise HTTPException(400, f"{name} must be 1-{most}")
    return value



def queue_resource(name: str) -> str:
    """The resource queue ``name`` is, as a STOMP frame naming ``/queue/NAME`` acts on it."""
    return resource(parse_destination("/queue/" + name))



def authorise(request: Request, vhost: str, wanted: list[tuple[str, str]]) -> None:
    """403 unless the request's user may do each (action, resource) on ``vhost``, whatever its
    tag (an administrator too: RabbitMQ's rule).  Without a users file the API is open: nothing
    to check."""
    user: User | None = request.scope.get(USER_SCOPE)
    if user is None:
        return
    permission = user.permissions.get(vhost)
    for action, target in wanted:
        if permission is None or not permission.allows(action, target):
            log.warning("management API: access refused: %s %s for user %r (%s on %s in vhost %r)", request.method,
                        request.url.path, user.name, action, target, vhost)
            raise HTTPException(403, f"access refused: user {user.name} has no {action} permission on {target} "
                                     f"in vhost {vhost}")
