"""Fencing tokens for delayed messages: ``delayed_messages.owner_epoch``.

As ``messages.owner_epoch`` (migration 0010): the lease epoch under which ``owner`` claimed a
delayed row.  A broker paused past its lease whose delayed rows another broker took over must
not promote them too: the claim of a delayed row and its delete (promotion, expiry) name the
claimant's current epoch.  SQLite (one broker) gets the column too, always NULL.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("delayed_messages") as batch:
        batch.add_column(sa.Column("owner_epoch", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("delayed_messages") as batch:
        batch.drop_column("owner_epoch")
