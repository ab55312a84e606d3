"""Add ``brokers.counters``: what each broker counted, for the cluster-wide totals.

Each broker on a shared database writes its message counters since it started (published,
delivered, acked, redelivered, dead-lettered, over all its queues; JSON text) with every lease
renewal, so any broker's ``/api/cluster`` can list every broker's counters and their totals.
SQLite (one broker) gets the column too, always NULL, so one history serves both.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("brokers") as batch:
        batch.add_column(sa.Column("counters", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("brokers") as batch:
        batch.drop_column("counters")
