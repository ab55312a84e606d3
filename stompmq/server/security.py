"""What a broker exposed to a network needs besides STOMP: TLS contexts, users, admission, logins.

One ``Security`` object per broker is built from the settings before anything
listens, so unreadable or mismatched files fail the start with one line
(``SecurityError``, exit code 2).  ``reload`` re-reads the certificate and the
users file in place: a TLS context that loads a new certificate chain uses it for
every later handshake, and connections already open keep theirs.  A reload that
fails logs the reason and keeps what was loaded before, so a typo in a running
broker's files never locks everybody out.  ``watch`` reloads whenever one of
the files changes (checked every ``WATCH_SECONDS``); SIGHUP reloads at once.

Admission (``admit``) happens before a connection is served, so a refused one never counts
against ``--max-connections``: its source address must be under
``--max-connections-per-address`` and the login budget (``logins.py``) must have room.
Password checks (``check_password``) are throttled per (address, login) and at most
``CHECKS_PER_KEY`` of one key run at once, so a burst of guesses at one login costs that
many hashes before the throttle sees their failures, while a pool of clients logging in
together is not made to queue one by one.
"""

from __future__ import annotations

import logging
import math
import os
import ssl
import time
from collections.abc import Iterable
from pathlib import Path

import trio

from .auth import AddressCounter, User, Users, UsersFileError
from .logins import Key, LoginBudget, LoginThrottle
from .settings import ServerSettings
from .tokens import (
    REFETCH_SECONDS,
    REFRESH_TOKEN,
    TOKEN_HEADER,
    TokenError,
    TokenLease,
    TokenVerifier,
    UnknownKey,
    scoped_user,
)

log = logging.getLogger(__name__)

#: Seconds between checks of the certificate and users files for changes.
WATCH_SECONDS = 2.0
#: Password checks of one (address, login) that may run at once (see the module docstring).
CHECKS_PER_KEY = 4


class SecurityError(Exception):
    """A TLS or users setting cannot be used (one line, for the operator)."""


def make_tls_context(settings: ServerSettings) -> ssl.SSLContext:
    """A server context with modern defaults (TLS 1.2+) and, with a CA, client certificates."""
    if not settings.tls_cert or not settings.tls_key:
        raise SecurityError("TLS needs both --tls-cert and --tls-key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, settings)
    if settings.tls_ca:
        try:
            context.load_verify_locations(cafile=settings.tls_ca)
        except (OSError, ssl.SSLError) as e:
            raise SecurityError(f"cannot load --tls-ca {settings.tls_ca}: {_reason(e)}") from None
        context.verify_mode = ssl.CERT_REQUIRED if settings.tls_verify_client else ssl.CERT_OPTIONAL
    elif settings.tls_verify_client:
        raise SecurityError("--tls-verify-client needs --tls-ca")
    return context


def _load_chain(context: ssl.SSLContext, settings: ServerSettings) -> None:
    assert settings.tls_cert and settings.tls_key
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as e:
        raise SecurityError(f"cannot load --tls-cert {settings.tls_cert} / --tls-key {settings.tls_key}: "
                            f"{_reason(e)}") from None


def _reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason or str(e)
    if isinstance(e, OSError):
        return e.strerror or str(e)
    return str(e)


def certificate_login(stream: trio.abc.Stream) -> str | None:
    """The CN of the verified client certificate under ``stream`` (through any wrapping), if any."""
    layer: trio.abc.Stream | None = stream
    while layer is not None:
        stream = layer
        if isinstance(stream, trio.SSLStream):
            try:
                cert = stream.getpeercert()
            except ValueError:  # handshake not done
                return None
            for rdn in (cert or {}).get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        return str(value)
            return None
        layer = getattr(stream, "transport_stream", None)
    return None


class LoginThrottled(Exception):
    """This (address, login) failed too often lately: refused without checking the password."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"too many failed logins, retry in {math.ceil(seconds)} s")
        self.message = str(self)
        self.seconds = seconds


class Admission:
    """A served connection's hold on its address's count and on the login budget; each is
    given back once (the budget at CONNECTED or at the close, whichever comes first)."""

    def __init__(self, security: Security, address: str) -> None:
        self._security = security
        self._address = address
        self._logging_in = True
        self._user: str | None = None

    def count_user(self, login: str) -> bool:
        """Count this connection against ``login``'s --max-connections-per-user; False (and
        nothing counted) when that user has as many open already."""
        if not self._security.user_connections.admit(login):
            return False
        self._user = login
        return True

    def logged_in(self) -> None:
        if self._logging_in:
            self._logging_in = False
            self._security.logins.release()

    def close(self) -> None:
        self.logged_in()
        self._security.connections.release(self._address)
        if self._user is not None:
            self._security.user_connections.release(self._user)
            self._user = None


class Security:
    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.tls: ssl.SSLContext | None = None
        if settings.tls_port is not None or settings.wss_port is not None:
            self.tls = make_tls_context(settings)
        self.users: Users | None = None
        if settings.users_file:
            try:
                self.users = Users.load(settings.users_file)
            except UsersFileError as e:
                raise SecurityError(str(e)) from None
        elif settings.login is not None and settings.passcode is not None:
            self.users = Users.single(settings.login, settings.passcode)
        self.tokens: TokenVerifier | None = None
        if settings.oauth_jwks:
            try:
                self.tokens = TokenVerifier(settings.oauth_jwks, settings.oauth_resource_server_id,
                                            now=time.monotonic() - REFETCH_SECONDS)
            except ImportError:
                raise SecurityError("--oauth-jwks needs PyJWT: pip install 'stompmq[oauth]'") from None
            except Exception as e:  # noqa: BLE001 (unreadable, not JSON, no usable key: said at start)
                raise SecurityError(f"--oauth-jwks {settings.oauth_jwks}: {e}") from None
            if self.users is None:
                self.users = Users()  # token logins only: no anonymous access
        self.throttle = LoginThrottle()
        self._checking: dict[Key, tuple[trio.Semaphore, list[int]]] = {}  # key -> (its checks, waiters)
        self.connections = AddressCounter(settings.max_connections_per_address)
        self.user_connections = AddressCounter(settings.max_connections_per_user)  # per login of the users
        self.logins = LoginBudget(settings.max_login_bytes)
        self._stamps = self._file_stamps()

    def admit(self, address: str) -> Admission | str:
        """Admit a new connection from ``address``, or say why it is refused (then nothing is held)."""
        if not self.connections.admit(address):
            return f"too many connections from {address}"
        if not self.logins.reserve():
            self.connections.release(address)
            return "too many connections logging in, retry later"
        return Admission(self, address)

    async def check_password(self, address: str, login: str | None, passcode: str | None) -> User | None:
        """The user, or None for a bad login or passcode (alike); raises ``LoginThrottled`` while
        this (address, login) is backing off after failures.  The scrypt hash runs in a worker
        thread: 50 ms of CPU must not stall every other connection."""
        key = (address, login or "")
        checks, waiting = self._checking.get(key) or self._checking.setdefault(
            key, (trio.Semaphore(CHECKS_PER_KEY), [0]))
        waiting[0] += 1
        try:
            async with checks:
                wait = self.throttle.delay(key, trio.current_time())
                if wait:
                    raise LoginThrottled(wait)
                user = None
                try:
                    user = await trio.to_thread.run_sync(self.authenticate, login, passcode)
                finally:
                    if user is None:
                        self.throttle.failed(key, trio.current_time())
                    else:
                        self.throttle.succeeded(key)
                return user
        finally:
            waiting[0] -= 1
            if not waiting[0]:
                del self._checking[key]

    async def check_token(self, token: str, vhosts: Iterable[str]) -> tuple[User, TokenLease]:
        """The user a token logs in (its scopes' permissions on ``vhosts``) and its lease;
        TokenError if it logs nobody in.  On the event loop, but for an unknown ``kid``: its
        JWKS refetch (``TokenVerifier``) blocks, so it runs in a worker thread."""
        tokens = self.tokens
        assert tokens is not None
        try:
            verified = tokens.verify(token, time.monotonic(), fetch=False)
        except UnknownKey:
            verified = await trio.to_thread.run_sync(tokens.verify, token, time.monotonic())
        user = scoped_user(verified.subject, verified.scopes, tokens.resource_server_id, vhosts)
        return user, TokenLease.start(verified, time.time(), trio.current_time())

    async def refresh_token(self, lease: TokenLease | None, token: str | None,
                            vhosts: Iterable[str]) -> tuple[User, TokenLease]:
        """The user and lease a fresh token gives a token session (``lease``); TokenError if
        the session is no token login, the token is bad, or it is another subject's."""
        if lease is None or token is None or self.tokens is None:
            raise TokenError(f"{REFRESH_TOKEN} needs a token login and a {TOKEN_HEADER} header")
        user, fresh = await self.check_token(token, vhosts)
        return user, lease.refreshed(fresh)

    def authenticate(self, login: str | None, passcode: str | None) -> User | None:
        """The user, or None; without users every client is let in (anonymous access)."""
        assert self.users is not None
        return self.users.authenticate(login, passcode)

    def files(self) -> list[str]:
        """The files a reload re-reads."""
        s = self.settings
        return [f for f in (s.tls_cert, s.tls_key, s.tls_ca, s.users_file) if f]

    def _file_stamps(self) -> dict[str, tuple[float, int] | None]:
        stamps: dict[str, tuple[float, int] | None] = {}
        for path in self.files():
            try:
                st = os.stat(path)
                stamps[path] = (st.st_mtime, st.st_size)
            except OSError:
                stamps[path] = None
        return stamps

    def reload(self, changed: set[str] | None = None) -> None:
        """Re-read the certificate chain and the users file (only those of them in ``changed``,
        when given); keep the old ones on any error."""
        self._stamps = self._file_stamps()
        settings = self.settings
        tls_files = {settings.tls_cert, settings.tls_key, settings.tls_ca}
        if self.tls is not None and (changed is None or changed & tls_files):
            try:
                _load_chain(self.tls, settings)
                if settings.tls_ca:
                    self.tls.load_verify_locations(cafile=settings.tls_ca)
                log.info("TLS certificate reloaded from %s", settings.tls_cert)
            except (SecurityError, OSError, ssl.SSLError) as e:
                log.error("TLS certificate not reloaded, keeping the previous one: %s", e)
        if settings.users_file and (changed is None or settings.users_file in changed):
            try:
                self.users = Users.load(Path(settings.users_file))
                log.info("users reloaded from %s (%d users)", settings.users_file, len(self.users.users))
            except UsersFileError as e:
                log.error("users not reloaded, keeping the previous ones: %s", e)

    def reload_changed(self) -> None:
        """Reload the files that changed since the last look (what ``watch`` does every few seconds)."""
        stamps = self._file_stamps()
        changed = {path for path, stamp in stamps.items() if self._stamps.get(path) != stamp}
        if changed:
            self.reload(changed)

    async def watch(self) -> None:
        """Reload whenever a file changed (a SIGHUP-less deployment still picks changes up)."""
        while True:
            await trio.sleep(WATCH_SECONDS)
            self.reload_changed()


def peer_address(stream: trio.abc.Stream) -> str:
    """The client's IP address (the throttle's key), through TLS and WebSocket wrappers."""
    layer: trio.abc.Stream | None = stream
    while layer is not None:
        stream = layer
        sock = getattr(stream, "socket", None)
        if sock is not None:
            try:
                return str(sock.getpeername()[0])
            except (OSError, IndexError):
                return "?"
        layer = getattr(stream, "transport_stream", None)
    return "?"
