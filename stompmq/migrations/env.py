"""Alembic environment for the store schema, shared by SQLite and PostgreSQL.

The URL comes, first match wins, from ``config.attributes["url"]`` (set by
``stompmq.storage.migrate`` when the broker migrates itself at start), from
``alembic -x url=...``, from ``$STOMPMQ_STORE_URL``, then from ``alembic.ini``.
The programmatic URL wins over the environment so a broker started with an
explicit ``--store`` never migrates some other database.

On PostgreSQL the whole upgrade runs under a transaction-scoped advisory lock,
so several broker processes starting on one database migrate it once.  SQLite
needs no lock here: the store holds its own file lock while it migrates.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context

from stompmq.storage.schema import metadata

# Arbitrary constant shared by every stompmq process: "stompmq schema migration".
MIGRATION_LOCK_KEY = 0x53544F4D50

config = context.config


def store_url() -> str:
    url = (
        config.attributes.get("url")
        or context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("STOMPMQ_STORE_URL")
        or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise RuntimeError("no database URL: use -x url=..., $STOMPMQ_STORE_URL or sqlalchemy.url")
    return str(url)


def run_migrations_offline() -> None:
    context.configure(url=store_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = sa.create_engine(store_url(), poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=metadata,
                # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
                render_as_batch=connection.dialect.name == "sqlite",
            )
            with context.begin_transaction():
                if connection.dialect.name == "postgresql":
                    connection.execute(
                        sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
                    )
                context.run_migrations()
    finally:
        engine.dispose()


# Only the alembic command line has an ini file with logging sections; the broker keeps its own.
if config.config_file_name is not None:
    fileConfig(config.config_file_name)

if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
