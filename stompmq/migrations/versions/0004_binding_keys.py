"""Bindings carry a routing key: direct and topic exchanges bind a queue once per key.

Revision ID: 0004
Revises: 0003
Create Date: 2025-11-28

The key joins the primary key, so the table is rebuilt (batch mode on SQLite);
existing (consistent-hash) bindings get the empty key.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("bindings", recreate="always") as batch:
        batch.add_column(sa.Column("routing_key", sa.String(255), nullable=False, server_default=""))
        batch.drop_constraint("pk_bindings", type_="primary")
        batch.create_primary_key("pk_bindings", ["exchange", "queue", "routing_key"])


def downgrade() -> None:
    op.execute("DELETE FROM bindings WHERE routing_key <> ''")
    with op.batch_alter_table("bindings", recreate="always") as batch:
        batch.drop_constraint("pk_bindings", type_="primary")
        batch.create_primary_key("pk_bindings", ["exchange", "queue"])
        batch.drop_column("routing_key")
