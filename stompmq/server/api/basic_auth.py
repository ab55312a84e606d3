"""HTTP basic authentication of the management API over the broker's users (``--users-file``).

Theory of operation
-------------------
With a users file, every request but the probes (``/healthz``, ``/readyz``, which a load
balancer calls without credentials and which reveal nothing) needs HTTP basic credentials of
a user with a tag: ``administrator`` may do everything, ``monitoring`` may only read (GET and
HEAD: the API, ``/metrics``, the dashboard).  Reading, taking or publishing messages and
changing a vhost's queues and exchanges also need the user's permissions on that vhost, an
administrator's too (``http.py``, ``ROUTES``): the user is left in the request's scope for that.  Without a users file the API is open, as before
(loopback by default).

A password check is scrypt (~50 ms of CPU), so it runs in a worker thread, like a STOMP login,
and the outcome of good credentials is remembered (``VERIFIED_MAX`` entries, keyed by a
SHA-256 of login and password, forgotten whenever the users file is reloaded): a dashboard
polling every few seconds costs one scrypt, not one per request.  Failed checks share the
STOMP logins' throttle per (source address, login), so the API is no faster way to guess a
password; while it backs off, the answer is 429 with ``Retry-After``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import math

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp

from ..auth import User, Users
from ..security import LoginThrottled, Security
from .gate import RequestGate

log = logging.getLogger(__name__)

#: Paths answered without credentials: liveness and readiness probes.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
#: Methods a ``monitoring`` user may use.
READ_METHODS = frozenset({"GET", "HEAD"})
#: Verified credentials remembered (a bound: a flood of distinct good logins cannot grow it).
VERIFIED_MAX = 1000
#: The ASGI scope key holding the request's ``User`` (the handlers check queue permissions on it).
USER_SCOPE = "user"


class BasicAuth(RequestGate):
    """401 without good credentials, 403 for a user whose tags do not allow the request."""

    def __init__(self, app: ASGIApp, security: Security) -> None:
        super().__init__(app)
        self.security = security
        self._verified: dict[bytes, str] = {}  # digest of "login:password" -> login
        self._users: Users | None = None  # the users the cache was filled from

    async def refuse(self, request: Request) -> Response | None:
        users = self.security.users
        if users is None or request.url.path in OPEN_PATHS:
            return None
        credentials = _credentials(request.headers.get("authorization"))
        try:
            user = None if credentials is None else await self._user(users, request, *credentials)
        except LoginThrottled as e:
            return JSONResponse({"error": e.message, "status": 429}, status_code=429,
                                headers={"retry-after": str(math.ceil(e.seconds))})
        if user is None:
            return JSONResponse({"error": "authentication required", "status": 401}, status_code=401,
                                headers={"www-authenticate": 'Basic realm="stompmq"'})
        if "administrator" in user.tags or ("monitoring" in user.tags and request.method in READ_METHODS):
            request.scope[USER_SCOPE] = user
            return None
        log.warning("management API: access refused: %s %s for user %r from %s", request.method,
                    request.url.path, user.name, _address(request))
        return JSONResponse({"error": f"user {user.name} may not {request.method} {request.url.path} "
                                      "(needs the administrator tag, or monitoring to read)", "status": 403},
                            status_code=403)

    async def _user(self, users: Users, request: Request, login: str, password: str) -> User | None:
        if users is not self._users:  # reloaded: what was verified may not hold any more
            self._verified.clear()
            self._users = users
        key = hashlib.sha256(f"{login}:{password}".encode()).digest()
        known = self._verified.get(key)
        if known is not None:
            return users.users.get(known)
        address = _address(request)
        user = await self.security.check_password(address, login, password)
        if user is None:
            log.warning("management API: failed login %r from %s", login, address)
            return None
        if len(self._verified) >= VERIFIED_MAX:
            self._verified.clear()
        self._verified[key] = user.name
        return user


def _credentials(header: str | None) -> tuple[str, str] | None:
    """(login, password) of a basic ``Authorization`` header, None if it is absent or malformed."""
    scheme, _, encoded = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    login, colon, password = decoded.partition(":")
    return (login, password) if colon else None


def _address(request: Request) -> str:
    return request.client.host if request.client is not None else "?"
