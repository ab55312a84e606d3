"""Logging for operators: text or one JSON object per line, and alembic kept quiet.

Alembic logs several INFO lines (plugins, DDL mode) every time the broker opens
its store; only the lines saying that a migration actually runs are worth an
operator's attention, so the rest are filtered out.
"""

from __future__ import annotations

import json
import logging
import sys

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (``--log-format json``), for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
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
