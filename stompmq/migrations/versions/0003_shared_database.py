"""Several brokers on one database: a lease per broker, an owner per message row, a sequence.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

* ``brokers``: one row per live broker, whose lease (``lease_until``) it renews on the
  database's clock; a broker whose lease lapsed is dead and its claims are free.
* ``messages.owner``: the broker holding the row in memory (its ready window or in flight);
  NULL = free for any broker's next page read.  On PostgreSQL a partial index over the
  claimed rows makes freeing a dead broker's claims touch only its rows.  Unused (always NULL)
  on SQLite, which one broker owns: no index there, so inserts pay nothing for it.
* ``message_seq`` (PostgreSQL only): sequence numbers for every broker on the database, handed
  out in blocks of 65,536 (its increment), starting above any seq already stored.
* ``topic_relay`` (PostgreSQL only): topic messages too large for a NOTIFY payload, kept a
  minute for the other brokers to fetch by id.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

#: Seqs per nextval() of message_seq (stompmq.storage.pg_sql.SEQ_BLOCK).
SEQ_BLOCK = 65536


def upgrade() -> None:
    op.create_table(
        "brokers",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_brokers"),
    )
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("owner", sa.String(64), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE INDEX ix_messages_owner ON messages (owner) WHERE owner IS NOT NULL")
        op.execute(
            "CREATE TABLE topic_relay (id BIGSERIAL PRIMARY KEY, topic TEXT NOT NULL, headers TEXT NOT NULL,"
            " body BYTEA NOT NULL, created TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        op.execute(
            f"CREATE SEQUENCE message_seq INCREMENT BY {SEQ_BLOCK} START WITH 1"
        )
        op.execute(
            "SELECT setval('message_seq', GREATEST((SELECT COALESCE(MAX(seq), 0) FROM messages),"
            " (SELECT COALESCE(MAX(CAST(value AS BIGINT)), 0) FROM broker_meta WHERE name = 'last_seq')) + 1,"
            " false)"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TABLE topic_relay")
        op.execute("DROP SEQUENCE message_seq")
        op.drop_index("ix_messages_owner", table_name="messages")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("owner")
    op.drop_table("brokers")
