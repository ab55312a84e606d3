"""What a broker exposed to a network needs besides STOMP: TLS contexts, users, login throttling.

One ``Security`` object per broker is built from the settings before anything
listens, so unreadable or mismatched files fail the start with one line
(``SecurityError``, exit code 2).  ``reload`` re-reads the certificate and the
users file in place: a TLS context that loads a new certificate chain uses it for
every later handshake, and connections already open keep theirs.  A reload that
fails logs the reason and keeps what was loaded before, so a typo in a running
broker's files never locks everybody out.  ``watch`` reloads whenever one of
the files changes (checked every ``WATCH_SECONDS``); SIGHUP reloads at once.
"""

from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path

import trio

from .auth import AddressCounter, LoginThrottle, User, Users, UsersFileError
from .settings import ServerSettings

log = logging.getLogger(__name__)

#: Seconds between checks of the certificate and users files for changes.
WATCH_SECONDS = 2.0


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
        self.throttle = LoginThrottle()
        self.connections = AddressCounter(settings.max_connections_per_address)
        self._stamps = self._file_stamps()

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

    def reload(self) -> None:
        """Re-read the certificate chain and the users file; keep the old ones on any error."""
        self._stamps = self._file_stamps()
        settings = self.settings
        if self.tls is not None:
            try:
                _load_chain(self.tls, settings)
                if settings.tls_ca:
                    self.tls.load_verify_locations(cafile=settings.tls_ca)
                log.info("TLS certificate reloaded from %s", settings.tls_cert)
            except (SecurityError, OSError, ssl.SSLError) as e:
                log.error("TLS certificate not reloaded, keeping the previous one: %s", e)
        if settings.users_file:
            try:
                self.users = Users.load(Path(settings.users_file))
                log.info("users reloaded from %s (%d users)", settings.users_file, len(self.users.users))
            except UsersFileError as e:
                log.error("users not reloaded, keeping the previous ones: %s", e)

    async def watch(self) -> None:
        """Reload whenever a file changed (a SIGHUP-less deployment still picks changes up)."""
        while True:
            await trio.sleep(WATCH_SECONDS)
            if self._file_stamps() != self._stamps:
                self.reload()


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
