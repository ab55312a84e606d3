"""Run the store's alembic migrations from inside the broker.

The broker migrates its database itself at start (``alembic upgrade head``), so
an operator never has to remember a separate step.  The migration scripts ship
inside the package (``stompmq/migrations``) and are located from this file, not
from the working directory, so an installed broker finds them anywhere.  This
is blocking code: the SQLite backend calls it on the database thread.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(url: str) -> Config:
    """An alembic ``Config`` for the packaged migrations, aimed at ``url``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    # Passed through attributes, not sqlalchemy.url, so that it wins over $STOMPMQ_STORE_URL
    # and a '%' in a password is not taken for ini interpolation.
    config.attributes["url"] = url
    return config


def upgrade_to_head(url: str) -> None:
    """Bring the database at ``url`` (a SQLAlchemy URL) to the newest schema."""
    command.upgrade(alembic_config(url), "head")
