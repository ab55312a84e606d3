"""``stomp://`` URLs: one parser, and the two meanings its callers give a URL's path.

Every STOMP URL in stompmq goes through ``split_url``, so the scheme, the port (61613 by
default, 1 to 65535), the percent-decoded user and password (``%40`` for ``@``, ``%3A`` for
``:``) and the masking of the password in every message are the same everywhere.  What the
*path* means is the caller's, and there are two meanings:

* ``StompURL`` (the blocking client ``sync_client.py``, Spark, Dramatiq, Taskiq, Celery):
  ``stomp://USER:PASS@HOST:PORT[/VHOST]``: a framework's broker object connects to one virtual
  host and names destinations per call, so the path names the vhost, sent as CONNECT's ``host``
  header (without one the host name is sent, which stompmq maps to its default vhost ``/``).
* ``client.StompUrl`` (the trio client of ``stompmq shovel`` and ``admin import-rabbitmq``):
  ``stomp://USER:PASS@HOST:PORT[/DESTINATION][?vhost=VHOST]``: a shovel's end *is* a
  destination, so the path names it and the vhost goes in the query.

Both meanings are documented to users (docs/task-queues/index.md, docs/shovels.md); a new caller
picks one of them rather than a third.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from .logs import masked

DEFAULT_PORT = 61613


class StompmqError(ValueError):
    """A problem the user can fix (a bad URL, a refused login, a lost broker): the message names
    the setting.  The root of the blocking client's errors; a ``ValueError`` so that a framework
    that reports bad configuration as one shows it as such."""


class BadURL(StompmqError):
    """A URL that is not ``stomp://host[:port]...``; the message never shows the password."""


@dataclass(frozen=True, slots=True)
class URLParts:
    """A ``stomp://`` URL taken apart, the user information percent-decoded."""

    host: str
    port: int
    login: str | None
    passcode: str | None
    #: percent-decoded, with its leading ``/`` ("" when the URL has none)
    path: str
    #: the raw query string (after ``?``), "" when none
    query: str


def split_url(text: str, form: str) -> URLParts:
    """The parts of ``text``; ``BadURL`` naming ``form`` (the shape the caller expects, e.g.
    ``stomp://host[:port]/destination``) if it is not a ``stomp://`` URL with a host."""
    parts = urlsplit(text)
    shown = masked(text)
    if parts.scheme != "stomp" or not parts.hostname:
        raise BadURL(f"bad URL {shown!r}: expected {form}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise BadURL(f"bad URL {shown!r}: the port must be a number from 1 to 65535") from None
    return URLParts(
        host=parts.hostname,
        port=port,
        login=None if parts.username is None else unquote(parts.username),
        passcode=None if parts.password is None else unquote(parts.password),
        path=unquote(parts.path),
        query=parts.query,
    )


@dataclass(frozen=True, slots=True)
class StompURL:
    """Where a blocking client or a task-queue broker connects: the path names the vhost."""

    host: str
    port: int
    login: str | None
    passcode: str | None
    #: CONNECT's ``host`` header: the vhost of the URL's path, else the host name.
    vhost: str

    FORM = "stomp://USER:PASS@HOST:PORT[/VHOST]"

    @classmethod
    def parse(cls, url: str) -> StompURL:
        parts = split_url(url, cls.FORM)
        return cls(parts.host, parts.port, parts.login, parts.passcode, parts.path.strip("/") or parts.host)

    def connect_headers(self, heart_beat_ms: int = 0) -> dict[str, str]:
        """CONNECT's headers: STOMP 1.2, heart-beats each way every ``heart_beat_ms`` (0: none),
        the login if the URL has one."""
        headers = {"accept-version": "1.2", "host": self.vhost, "heart-beat": f"{heart_beat_ms},{heart_beat_ms}"}
        if self.login is not None:
            headers["login"] = self.login
        if self.passcode is not None:
            headers["passcode"] = self.passcode
        return headers

    def __str__(self) -> str:
        """The URL without its password, for messages and logs."""
        user = f"{self.login}@" if self.login else ""
        return f"stomp://{user}{self.host}:{self.port}"
