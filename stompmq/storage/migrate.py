"""Run the store's alembic migrations from inside the broker.

The broker migrates its database itself at start (``alembic upgrade head``), so
an operator never has to remember a separate step.  The migration scripts ship
inside the package (``stompmq/migrations``) and are located from this file, not
from the working directory, so an installed broker finds them anywhere.  This
is blocking code: the SQLite backend calls it on the database thread.

Alembic and SQLAlchemy are imported only when a migration must run: together they
were about 0.75 s of CPU at every start, before the first delivery, just to learn
that the schema was current.  A backend reads the stored revision itself
(``alembic_version``) and compares it with ``head_revision()``, which reads the
scripts' ``revision``/``down_revision`` lines as text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
#: The table alembic keeps the applied revision in, and how a backend reads it.
VERSION_SQL = "SELECT version_num FROM alembic_version"

_REVISION = re.compile(r"^(down_revision|revision)\b[^=\n]*=\s*(?:[\"']([^\"']+)[\"']|None)", re.MULTILINE)


def alembic_config(url: str) -> Config:
    """An alembic ``Config`` for the packaged migrations, aimed at ``url``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    # Passed through attributes, not sqlalchemy.url, so that it wins over $STOMPMQ_STORE_URL
    # and a '%' in a password is not taken for ini interpolation.
    config.attributes["url"] = url
    return config


@functools.cache
def head_revision() -> str | None:
    """The newest revision of the packaged scripts, or None if the text does not name exactly
    one (then alembic, which reads the scripts properly, decides)."""
    revisions: set[str] = set()
    replaced: set[str] = set()
    for script in MIGRATIONS_DIR.joinpath("versions").glob("*.py"):
        for name, value in _REVISION.findall(script.read_text(encoding="utf-8")):
            if value:
                (revisions if name == "revision" else replaced).add(value)
    heads = revisions - replaced
    return heads.pop() if len(heads) == 1 else None


def is_current(stored: Sequence[str]) -> bool:
    """Whether the revisions read from ``alembic_version`` are exactly the packaged head."""
    head = head_revision()
    return head is not None and list(stored) == [head]


def upgrade_to_head(url: str) -> None:
    """Bring the database at ``url`` (a SQLAlchemy URL) to the newest schema."""
    from alembic import command

    command.upgrade(alembic_config(url), "head")
