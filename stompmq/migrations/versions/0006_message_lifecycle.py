"""Message lifecycle: expiry, delayed delivery, queue declarations.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23

* ``messages.expires`` (epoch ms, NULL = never) with a partial index, so the expiry sweep
  reads the earliest expired rows without scanning any queue.
* ``delayed_messages``: messages sent with a delay wait here until due, indexed by
  (deliver_at, seq), apart from the ready rows that queues page through.
* ``queues.options``: the JSON of a ``/control/declare/queue`` declaration (NULL: none).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("queues") as batch:
        batch.add_column(sa.Column("options", sa.Text(), nullable=True))
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("expires", sa.BigInteger(), nullable=True))
    op.create_index(
        "ix_messages_expires", "messages", ["expires", "seq"],
        sqlite_where=sa.text("expires IS NOT NULL"), postgresql_where=sa.text("expires IS NOT NULL"),
    )
    seq_type = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "delayed_messages",
        sa.Column("seq", seq_type, autoincrement=False, nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("headers", sa.Text(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("ack_timeout", sa.Float(), nullable=True),
        sa.Column("timestamp", sa.BigInteger(), nullable=False),
        sa.Column("expires", sa.BigInteger(), nullable=True),
        sa.Column("deliver_at", sa.BigInteger(), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.ForeignKeyConstraint(["queue_id"], ["queues.id"], name="fk_delayed_messages_queue_id_queues"),
        sa.PrimaryKeyConstraint("seq", name="pk_delayed_messages"),
    )
    op.create_index("ix_delayed_messages_deliver_at", "delayed_messages", ["deliver_at", "seq"])


def downgrade() -> None:
    op.drop_index("ix_delayed_messages_deliver_at", table_name="delayed_messages")
    op.drop_table("delayed_messages")
    op.drop_index("ix_messages_expires", table_name="messages")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("expires")
    with op.batch_alter_table("queues") as batch:
        batch.drop_column("options")
