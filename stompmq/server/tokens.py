"""Token logins: an OAuth 2.0 access token (a JWT) in place of a password.

Why: single sign-on deployments hand clients short-lived tokens from an identity provider, not
broker passwords; RabbitMQ's OAuth 2 backend is the model, so its tokens and scopes work here.

* A CONNECT whose ``passcode`` is a JWT (or, on the WebSocket listener, a handshake with
  ``Authorization: Bearer JWT`` and a CONNECT without passcode) logs in the token's ``sub``
  when ``--oauth-jwks`` is set: the signature is checked against the JWKS (a file or an
  ``http(s)://`` URL), ``exp`` must lie ahead and ``aud`` must name ``--oauth-resource-server-id``.
* An unknown ``kid`` (the provider rotated its keys) refetches the JWKS, at most once every
  ``REFETCH_SECONDS``, so a stream of made-up ``kid``s cannot make the broker hammer the
  provider; a fetch that fails keeps the keys known before.
* Scopes map to permissions as RabbitMQ maps them: ``RS.read:VHOST/NAME``, ``RS.write:...``
  and ``RS.configure:...`` (``RS`` the resource server id; ``*`` a wildcard in either part, the
  vhost percent-decoded so ``%2F`` is ``/``) allow that action on the resources named NAME of
  any kind (``/queue/NAME``, ``/exchange/NAME``...) in the vhosts matching VHOST;
  ``RS.tag:TAG`` is a tag if a users file knows it (``auth.KNOWN_TAGS``).  Scopes of other resource
  servers are ignored.
* ``TokenLease`` is the pure timing: the session lasts until the token's ``exp``, counted on the
  server's clock (trio's, so tests run it in virtual time); a fresh token for the same subject
  sent to ``REFRESH_TOKEN`` in its ``token`` header before then extends it
  (docs/decisions/token-logins.md).

``jwt`` (PyJWT with ``cryptography``, the ``oauth`` extra) is imported only when a verifier is
made, so a broker without token logins does not need it.
"""

from __future__ import annotations

import re
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .auth import KNOWN_TAGS, Permission, User

#: The SEND destination of a fresh token (in its ``token`` header) for an open session.
REFRESH_TOKEN = "/control/refresh-token"
TOKEN_HEADER = "token"
#: An unknown ``kid`` refetches the JWKS at most this often (seconds).
REFETCH_SECONDS = 10.0
#: Seconds a JWKS URL may take to answer.
FETCH_TIMEOUT = 5.0
ACTIONS = ("configure", "write", "read")
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


class TokenError(Exception):
    """A token that logs nobody in; the message says why, for the ERROR frame."""


class UnknownKey(TokenError):
    """The token's ``kid`` is not among the keys known, and ``verify`` was told not to fetch."""


def looks_like_jwt(text: str | None) -> bool:
    """Whether ``text`` has a compact JWS's shape (three base64url parts, a JSON header)."""
    return text is not None and _JWT.fullmatch(text) is not None


def _glob(pattern: str) -> str:
    """A RabbitMQ wildcard pattern (``*`` any text) as a regular expression body."""
    return ".*".join(re.escape(part) for part in pattern.split("*"))


def scoped_user(name: str, scopes: Iterable[str], resource_server_id: str, vhosts: Iterable[str]) -> User:
    """The user a token's scopes make, with permissions on each of ``vhosts`` a scope names."""
    prefix = resource_server_id + "."
    tags: list[str] = []
    found: dict[str, dict[str, list[str]]] = {}
    known = list(vhosts)
    for scope in scopes:
        if not scope.startswith(prefix):
            continue
        action, colon, target = scope[len(prefix):].partition(":")
        if action == "tag" and colon and target in KNOWN_TAGS and target not in tags:
            tags.append(target)
            continue
        vhost_glob, slash, name_glob = target.partition("/")
        if action not in ACTIONS or not colon or not slash:
            continue
        matching = re.compile(_glob(urllib.parse.unquote(vhost_glob)))
        for vhost in known:
            if matching.fullmatch(vhost):
                found.setdefault(vhost, {}).setdefault(action, []).append(f"^/[^/]+/{_glob(name_glob)}$")
    permissions = {
        vhost: Permission(**{action: "|".join(actions.get(action, [])) or "^$" for action in ACTIONS})
        for vhost, actions in found.items()
    }
    return User(name, "", tags, permissions)


def _scopes(claims: dict[str, Any]) -> list[str]:
    """``scope`` as a space-separated string (RFC 8693) or a list."""
    scope = claims.get("scope", "")
    if isinstance(scope, str):
        return scope.split()
    if isinstance(scope, list):
        return [s for s in scope if isinstance(s, str)]
    return []


def read_jwks(source: str) -> bytes:
    """The JWKS document at ``source``: an ``http(s)://`` URL or a file."""
    if source.startswith(("http://", "https://")):
        with urllib.request.urlopen(source, timeout=FETCH_TIMEOUT) as response:  # noqa: S310 (scheme checked)
            return bytes(response.read())
    return Path(source).read_bytes()


@dataclass(frozen=True, slots=True)
class Verified:
    """A token that checked out: whose it is, what it allows, when it expires (epoch seconds)."""

    subject: str
    scopes: tuple[str, ...]
    expires: float


class TokenVerifier:
    """Checks tokens against a JWKS, refetching it (rate-limited) on an unknown ``kid``.

    ``verify`` checks a signature in microseconds (RSA and EC verification are cheap), so the
    server calls it on the event loop with ``fetch=False``, and only for an unknown ``kid`` again
    in a worker thread, where the refetch may block.  ``now`` is the monotonic time the refetch
    rate is counted in, passed in for tests.
    """

    def __init__(self, source: str, resource_server_id: str, fetch: Callable[[str], bytes] = read_jwks,
                 now: float = 0.0) -> None:
        import jwt  # the oauth extra, needed only here

        self._jwt = jwt
        self.source = source
        self.resource_server_id = resource_server_id
        self._fetch = fetch
        self._lock = threading.Lock()
        self._keys: dict[str | None, Any] = {}
        self.fetches = 0
        self._fetched_at = now
        self._load()  # at start: an unreadable JWKS is the operator's error, said at once

    def _load(self) -> None:
        jwks = self._jwt.PyJWKSet.from_json(self._fetch(self.source).decode())
        self._keys = {key.key_id: key for key in jwks.keys}
        self.fetches += 1

    def _key(self, kid: str | None, now: float, fetch: bool) -> Any:
        with self._lock:
            key = self._keys.get(kid)
            if key is None and not fetch:
                raise UnknownKey(f"unknown signing key {kid!r}")
            if key is None and now - self._fetched_at >= REFETCH_SECONDS:
                self._fetched_at = now
                try:
                    self._load()
                except Exception as e:  # noqa: BLE001 (any fetch or parse failure keeps the old keys)
                    raise TokenError(f"unknown signing key {kid!r} (the JWKS could not be fetched: {e})") from None
                key = self._keys.get(kid)
            if key is None:
                raise TokenError(f"unknown signing key {kid!r}")
            return key

    def verify(self, token: str, now: float, fetch: bool = True) -> Verified:
        """The token's subject, scopes and expiry; TokenError if it logs nobody in (UnknownKey,
        without ``fetch``, for a ``kid`` a refetch might bring)."""
        jwt = self._jwt
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError as e:
            raise TokenError(f"malformed token: {e}") from None
        key = self._key(kid, now, fetch)
        try:
            claims = jwt.decode(token, key.key, algorithms=[key.algorithm_name], audience=self.resource_server_id,
                                options={"require": ["exp", "sub"]})
        except jwt.ExpiredSignatureError:
            raise TokenError("token expired") from None
        except jwt.PyJWTError as e:
            raise TokenError(f"token refused: {e}") from None
        return Verified(str(claims["sub"]), tuple(_scopes(claims)), float(claims["exp"]))


@dataclass(frozen=True, slots=True)
class TokenLease:
    """How long a token session lasts: until ``deadline`` on the server's clock."""

    subject: str
    deadline: float

    @classmethod
    def start(cls, verified: Verified, wall_now: float, clock_now: float) -> TokenLease:
        """The lease of a token checked at wall time ``wall_now``, clock time ``clock_now``."""
        return cls(verified.subject, clock_now + max(0.0, verified.expires - wall_now))

    def refreshed(self, fresh: TokenLease) -> TokenLease:
        """The lease a fresh token gives; TokenError if it is another subject's."""
        if fresh.subject != self.subject:
            raise TokenError(f"the fresh token is for {fresh.subject!r}, not {self.subject!r}")
        return fresh

    def expired(self, now: float) -> bool:
        return now >= self.deadline


EXPIRED_MESSAGE = (f"access token expired: send a fresh one to {REFRESH_TOKEN} (header {TOKEN_HEADER}) before "
                   "its predecessor expires to keep the session")
