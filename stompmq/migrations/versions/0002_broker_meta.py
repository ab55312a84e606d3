"""Add broker_meta, a name-value table, seeded with last_seq.

Revision ID: 0002
Revises: 0001
Create Date: 2025-11-21

Before this revision the highest seq was only ``MAX(messages.seq)``, which goes
back down when the newest messages are acked; ``broker_meta.last_seq`` keeps the
high-water mark so seqs never repeat across restarts.  The seed is the best a
0001 database knows: its current maximum.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "broker_meta",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_broker_meta"),
    )
    op.execute(
        "INSERT INTO broker_meta (name, value) "
        "SELECT 'last_seq', CAST(COALESCE(MAX(seq), 0) AS VARCHAR(20)) FROM messages"
    )


def downgrade() -> None:
    op.drop_table("broker_meta")
