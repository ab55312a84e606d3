"""Give each stream a counter row: the offsets and sizes the PostgreSQL store numbers appends from.

Several brokers on one PostgreSQL database append to one stream: an append is numbered in the
commit from ``streams.next_offset`` (the row's lock held to the commit orders the appenders,
so offsets are dense and commit in order), ``end_bytes`` gives the entries' ``bytes_before``
and ``last_ts`` keeps their timestamps non-decreasing; ``first_offset`` is the first retained
offset (a purge moves it to the end, so a stream with no entries keeps its next offset).  The
SQLite store (one broker) numbers appends in its engine and does not use them.

Existing streams get their values from the two ends of their entries (and from the
``first-offset`` option a purge stored before this revision).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

COLUMNS = ("first_offset", "next_offset", "end_bytes", "last_ts")


def upgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        for column in COLUMNS:
            batch.add_column(sa.Column(column, sa.BigInteger(), nullable=False, server_default="0"))
    conn = op.get_bind()
    for stream_id, options in conn.execute(sa.text("SELECT id, options FROM streams")).fetchall():
        floor = int(json.loads(options).get("first-offset", 0))
        ends = conn.execute(
            sa.text(
                "SELECT (SELECT MIN(position) FROM stream_messages WHERE stream_id = :s),"
                " (SELECT MAX(position) FROM stream_messages WHERE stream_id = :s)"
            ),
            {"s": stream_id},
        ).one()
        first, last = ends
        values = {"s": stream_id, "first": floor, "next": floor, "bytes": 0, "ts": 0}
        if last is not None:
            row = conn.execute(
                sa.text(
                    "SELECT bytes_before + LENGTH(body), timestamp FROM stream_messages"
                    " WHERE stream_id = :s AND position = :p"
                ),
                {"s": stream_id, "p": last},
            ).one()
            values.update(first=max(first, floor), next=max(last + 1, floor), bytes=row[0], ts=row[1])
        conn.execute(
            sa.text(
                "UPDATE streams SET first_offset = :first, next_offset = :next, end_bytes = :bytes,"
                " last_ts = :ts WHERE id = :s"
            ),
            values,
        )


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        for column in COLUMNS:
            batch.drop_column(column)
