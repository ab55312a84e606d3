"""Logging for operators: text or one JSON object per line, and alembic kept quiet.

Alembic logs several INFO lines (plugins, DDL mode) every time the broker opens
its store; only the lines saying that a migration actually runs are worth an
operator's attention, so the rest are filtered out.

A JSON line carries the client connection it was logged for as fields of its
own (``conn``, ``peer``, ``login``, ``vhost``), so a log shipper can select one
client's lines without parsing messages.  The server sets ``CONNECTION`` in each
connection's task (a context variable: trio copies it into the tasks that
connection starts), and every record logged there is tagged, whoever logs it.
Times are ISO 8601 in UTC with the zone written out.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Protocol

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``: a store or shovel URL as logs and answers show it.

    Parsed as ``urllib.parse`` parses it for the connection (the user information ends at the
    last ``@`` of the authority), never matched with a pattern, so a password holding ``@``,
    ``:`` or ``%`` is hidden whole.  A raw ``/`` in a password ends the authority early for the
    parser too; then everything from the user's ``:`` to the URL's last ``@`` is hidden."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    if "@" not in authority and ":" in authority and "@" in path:  # a raw "/" in the password
        authority, path = authority + slash + path, ""
        slash = ""
        userinfo, _, host = authority.rpartition("@")
        if "/" in host:
            host, slash, path = host.partition("/")
    else:
        userinfo, _, host = authority.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    if not colon:
        return url
    return f"{scheme}://{user}:***@{host}{slash}{path}"


class _LoggedSession(Protocol):
    @property
    def login(self) -> str | None: ...


class LoggedConnection(Protocol):
    """What a log line says about the connection it was logged for (server/connection.py)."""

    @property
    def id(self) -> str: ...
    @property
    def peer(self) -> str: ...
    @property
    def login(self) -> str | None: ...  # the authenticated user (a users file or certificate)
    @property
    def vhost(self) -> str: ...
    @property
    def session(self) -> _LoggedSession | None: ...  # its login: CONNECT's, checked or not


#: The client connection the running task serves, if any.
CONNECTION: ContextVar[LoggedConnection | None] = ContextVar("stompmq_log_connection", default=None)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (``--log-format json``), for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        created = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, Any] = {
            "time": created.isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        conn = CONNECTION.get()
        if conn is not None:
            session = conn.session
            entry.update(conn=conn.id, peer=conn.peer, login=session.login if session is not None else conn.login,
                         vhost=conn.vhost)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _migration_lines_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING or record.getMessage().startswith("Running ")


def setup_logging(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("alembic.runtime.migration", "alembic.runtime.plugins", "alembic"):
        logging.getLogger(name).addFilter(_migration_lines_only)
