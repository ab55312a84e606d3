"""Index the SQLite rows out for delivery, so start-up after a crash does not scan the backlog.

At start the SQLite store makes every delivered-but-unacknowledged row ready again; without an
index that UPDATE read all of ``messages`` (seconds for millions of queued messages).  The index
is partial (``WHERE delivered = 1``): it holds only the rows out for delivery, bounded by the
subscriptions' prefetch.  PostgreSQL recovers a crashed broker's rows through ``owner``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("CREATE INDEX ix_messages_delivered ON messages (seq) WHERE delivered = 1")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.drop_index("ix_messages_delivered", table_name="messages")
