"""Initial schema: queues, messages (with the paging index), exchanges, bindings.

Revision ID: 0001
Revises:
Create Date: 2025-11-21

Written by hand to match stompmq/storage/schema.py of its time; constraint names
follow schema.NAMING_CONVENTION spelled out, since ``op`` does not see that metadata.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "queues",
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_queues"),
        sa.UniqueConstraint("name", name="uq_queues_name"),
    )
    op.create_table(
        "messages",
        # INTEGER on SQLite so that seq is the rowid; BIGINT elsewhere.
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            autoincrement=False,
        ),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("headers", sa.Text(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("delivered", sa.Boolean(), nullable=False),
        sa.Column("ack_timeout", sa.Float(), nullable=True),
        sa.Column("redeliveries", sa.Integer(), nullable=False),
        sa.Column("timestamp", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_messages"),
        sa.ForeignKeyConstraint(["queue_id"], ["queues.id"], name="fk_messages_queue_id_queues"),
    )
    op.create_index(
        "ix_messages_queue_order",
        "messages",
        ["queue_id", sa.text("priority DESC"), "seq"],
    )
    op.create_table(
        "exchanges",
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("options", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_exchanges"),
    )
    op.create_table(
        "bindings",
        sa.Column("exchange", sa.String(255), nullable=False),
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("exchange", "queue", name="pk_bindings"),
        sa.ForeignKeyConstraint(
            ["exchange"], ["exchanges.name"], name="fk_bindings_exchange_exchanges"
        ),
    )


def downgrade() -> None:
    op.drop_table("bindings")
    op.drop_table("exchanges")
    op.drop_index("ix_messages_queue_order", table_name="messages")
    op.drop_table("messages")
    op.drop_table("queues")
