"""Add ``stream_groups``: each named consumer group's committed offset on a stream.

A stream SUBSCRIBE with ``x-stream-group`` and no ``x-stream-offset`` resumes from the group's
committed offset; an ACK commits the entry's offset + 1 (buffered, in the next commit group).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "stream_groups",
        sa.Column("stream_id", sa.Integer(), sa.ForeignKey("streams.id"), primary_key=True),
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("committed", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("stream_groups")
