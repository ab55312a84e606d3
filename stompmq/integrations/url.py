"""``stomp://USER:PASS@HOST:PORT[/VHOST]``: where a framework's broker object connects.

One parser for every integration, so a URL means the same to Dramatiq and Taskiq: the user
and password are percent-decoded (a ``@`` or ``:`` in a password is written ``%40``, ``%3A``),
the port defaults to 61613, and a path names the virtual host, sent as CONNECT's ``host``
header (without one the host name is sent, which the broker maps to its default vhost ``/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..logs import masked

DEFAULT_PORT = 61613


class StompmqError(Exception):
    """A problem with the broker or its use: a bad URL, a refused connection or frame."""


class ConnectionLost(StompmqError):
    """The connection failed or broke; what was sent on it may or may not have arrived."""


@dataclass(frozen=True, slots=True)
class StompURL:
    host: str
    port: int
    login: str | None
    passcode: str | None
    #: CONNECT's ``host`` header: the vhost of the URL's path, else the host name.
    vhost: str

    @classmethod
    def parse(cls, url: str) -> StompURL:
        parts = urlsplit(url)
        if parts.scheme != "stomp" or not parts.hostname:
            raise StompmqError(f"a stompmq URL looks like stomp://USER:PASS@HOST:PORT, not {masked(url)!r}")
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise StompmqError(f"bad port in {masked(url)!r}") from None
        path = unquote(parts.path.strip("/"))
        return cls(
            host=parts.hostname,
            port=port,
            login=None if parts.username is None else unquote(parts.username),
            passcode=None if parts.password is None else unquote(parts.password),
            vhost=path or parts.hostname,
        )

    def connect_headers(self) -> dict[str, str]:
        """CONNECT's headers: STOMP 1.2, no heart-beats, the login if the URL has one."""
        headers = {"accept-version": "1.2", "host": self.vhost, "heart-beat": "0,0"}
        if self.login is not None:
            headers["login"] = self.login
        if self.passcode is not None:
            headers["passcode"] = self.passcode
        return headers

    def __str__(self) -> str:
        """The URL without its password, for messages and logs."""
        user = f"{self.login}@" if self.login else ""
        return f"stomp://{user}{self.host}:{self.port}"
