"""Fencing tokens for several brokers on one database: a lease epoch per broker and per claim.

A broker that stopped renewing its lease (paused, cut off) and comes back must not act on
claims another broker has taken over since.  ``brokers.epoch`` numbers each lease a broker
holds: a broker registering anew, or renewing a lease that had lapsed, gets a new one from the
``lease_epoch`` sequence.  ``messages.owner_epoch`` is the epoch under which ``owner`` claimed
the row.  ``brokers.renewed_at`` and ``brokers.version`` say when a broker last renewed and what
it runs (the management API's cluster list).  The statements that claim, mark delivered and delete a row name the claimant's
current epoch, so a broker's writes under an epoch that ended touch nothing.  SQLite (one
broker) gets the columns too, always 0 / NULL, so one history serves both.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("brokers") as batch:
        batch.add_column(sa.Column("epoch", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("version", sa.String(64), nullable=True))
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("owner_epoch", sa.BigInteger(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE SEQUENCE lease_epoch START WITH 1")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP SEQUENCE lease_epoch")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("owner_epoch")
    with op.batch_alter_table("brokers") as batch:
        batch.drop_column("version")
        batch.drop_column("renewed_at")
        batch.drop_column("epoch")
