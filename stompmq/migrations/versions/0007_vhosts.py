"""Add vhosts and key queues, exchanges, bindings and streams by (vhost, name).

Every existing row goes to the default vhost "/" (the columns' server default), so a
database from before vhosts opens with everything where its clients expect it.  The message
lifecycle's tables need no column of their own: queue declarations are ``queues.options``
(keyed with the queue), and ``delayed_messages`` and ``messages`` name their queue by id.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def _vhost() -> sa.Column[str]:
    return sa.Column("vhost", sa.String(255), nullable=False, server_default="/")


def upgrade() -> None:
    op.create_table("vhosts", sa.Column("name", sa.String(255), nullable=False),
                    sa.PrimaryKeyConstraint("name", name="pk_vhosts"))
    op.execute("INSERT INTO vhosts (name) VALUES ('/')")
    for table in ("queues", "streams"):  # unique per (vhost, name)
        with op.batch_alter_table(table) as batch:
            batch.add_column(_vhost())
            batch.drop_constraint(f"uq_{table}_name", type_="unique")
            batch.create_unique_constraint(f"uq_{table}_vhost", ["vhost", "name"])
    # The binding's foreign key names the exchange's primary key: drop it before changing that key.
    with op.batch_alter_table("bindings") as batch:
        batch.drop_constraint("fk_bindings_exchange_exchanges", type_="foreignkey")
    with op.batch_alter_table("exchanges") as batch:
        batch.add_column(_vhost())
        batch.drop_constraint("pk_exchanges", type_="primary")
        batch.create_primary_key("pk_exchanges", ["vhost", "name"])
    with op.batch_alter_table("bindings") as batch:
        batch.add_column(_vhost())
        batch.drop_constraint("pk_bindings", type_="primary")
        batch.create_primary_key("pk_bindings", ["vhost", "exchange", "queue", "routing_key"])
        batch.create_foreign_key("fk_bindings_vhost_exchanges", "exchanges", ["vhost", "exchange"],
                                 ["vhost", "name"])


def downgrade() -> None:
    # Every vhost but "/" goes, with its messages (delayed ones too) and stream entries.
    for table in ("messages", "delayed_messages"):
        op.execute(f"DELETE FROM {table} WHERE queue_id IN (SELECT id FROM queues WHERE vhost <> '/')")  # noqa: S608
    op.execute("DELETE FROM stream_messages WHERE stream_id IN (SELECT id FROM streams WHERE vhost <> '/')")
    for table in ("bindings", "exchanges", "streams", "queues"):
        op.execute(f"DELETE FROM {table} WHERE vhost <> '/'")  # noqa: S608 - fixed table names
    with op.batch_alter_table("bindings") as batch:
        batch.drop_constraint("fk_bindings_vhost_exchanges", type_="foreignkey")
        batch.drop_constraint("pk_bindings", type_="primary")
        batch.create_primary_key("pk_bindings", ["exchange", "queue", "routing_key"])
        batch.drop_column("vhost")
    with op.batch_alter_table("exchanges") as batch:
        batch.drop_constraint("pk_exchanges", type_="primary")
        batch.create_primary_key("pk_exchanges", ["name"])
        batch.drop_column("vhost")
    with op.batch_alter_table("bindings") as batch:
        batch.create_foreign_key("fk_bindings_exchange_exchanges", "exchanges", ["exchange"], ["name"])
    for table in ("streams", "queues"):
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"uq_{table}_vhost", type_="unique")
            batch.create_unique_constraint(f"uq_{table}_name", ["name"])
            batch.drop_column("vhost")
    op.drop_table("vhosts")
