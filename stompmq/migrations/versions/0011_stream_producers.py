"""Add ``stream_producers``: each idempotent producer's highest sequence number on a stream.

A SEND to a stream with ``x-producer-id`` and ``x-producer-seq`` is appended only if its number
is above the producer's stored one; the store writes the new number in the commit of the entry,
so an entry and its producer's position are never one without the other.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "stream_producers",
        sa.Column("stream_id", sa.Integer(), sa.ForeignKey("streams.id"), primary_key=True),
        sa.Column("producer", sa.String(200), primary_key=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("stream_producers")
