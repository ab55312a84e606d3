"""Add streams and stream_messages: append-only logs addressed by offset.

Revision ID: 0005
Revises: 0004
Create Date: 2025-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "streams",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("options", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_streams"),
        sa.UniqueConstraint("name", name="uq_streams_name"),
    )
    op.create_table(
        "stream_messages",
        sa.Column("stream_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("timestamp", sa.BigInteger(), nullable=False),
        sa.Column("headers", sa.Text(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("bytes_before", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], name="fk_stream_messages_stream_id_streams"),
        sa.PrimaryKeyConstraint("stream_id", "position", name="pk_stream_messages"),
    )


def downgrade() -> None:
    op.drop_table("stream_messages")
    op.drop_table("streams")
