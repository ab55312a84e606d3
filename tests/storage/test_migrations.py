"""The alembic history: from nothing, from the previous revision, and equal to schema.py."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from stompmq.storage.migrate import alembic_config, upgrade_to_head
from stompmq.storage.schema import metadata

REPO = Path(__file__).resolve().parents[2]


def url(path: Path) -> str:
    return f"sqlite:///{path}"


def revision(path: Path) -> str | None:
    engine = sa.create_engine(url(path))
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


#: The newest revision of the packaged history.
HEAD = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def test_0002_bindings_get_the_empty_routing_key(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    command.upgrade(alembic_config(url(path)), "0002")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("INSERT INTO exchanges (name, type, options) VALUES ('ex', 'consistent-hash', '{}')")
        conn.execute("INSERT INTO bindings (exchange, queue, weight) VALUES ('ex', 'q', 3)")
    conn.close()
    upgrade_to_head(url(path))
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT exchange, queue, weight, routing_key FROM bindings").fetchall() == [
            ("ex", "q", 3, "")
        ]
        with conn:  # one queue, two keys
            conn.execute("INSERT INTO bindings VALUES ('ex', 'q', 1, 'a.b')")
    finally:
        conn.close()


def test_empty_database_migrates_to_head(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    upgrade_to_head(url(path))
    assert revision(path) == HEAD
    upgrade_to_head(url(path))  # idempotent
    assert revision(path) == HEAD


def test_previous_revision_migrates_to_head_keeping_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    command.upgrade(alembic_config(url(path)), "0001")
    assert revision(path) == "0001"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("INSERT INTO queues (id, name) VALUES (1, 'q')")
        conn.execute(
            "INSERT INTO messages (seq, queue_id, priority, headers, body, delivered,"
            " ack_timeout, redeliveries, timestamp) VALUES (42, 1, 4, '{}', x'00ff', 0, 1.5, 0, 7)"
        )
    conn.close()

    upgrade_to_head(url(path))

    assert revision(path) == HEAD
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT seq, body, ack_timeout FROM messages").fetchall() == [
            (42, b"\x00\xff", 1.5)
        ]
        # 0002 seeds the high-water mark from what the old database knew.
        assert conn.execute("SELECT value FROM broker_meta WHERE name = 'last_seq'").fetchall() == [
            ("42",)
        ]
    finally:
        conn.close()


def test_head_matches_schema_metadata(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    upgrade_to_head(url(path))
    engine = sa.create_engine(url(path))
    try:
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    finally:
        engine.dispose()


def test_paging_index_has_the_queue_order(tmp_path: Path) -> None:
    """compare_metadata ignores index column direction on SQLite, so check it here."""
    path = tmp_path / "s.db"
    upgrade_to_head(url(path))
    conn = sqlite3.connect(path)
    try:
        columns = [
            (name, desc)
            for _, _, name, desc, _, key in conn.execute(
                "PRAGMA index_xinfo(ix_messages_queue_order)"
            )
            if key
        ]
        assert columns == [("queue_id", 0), ("priority", 1), ("seq", 0)]
        # seq is the rowid: no separate primary-key index; the expiry index is partial.
        assert sorted(conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages'"
        ).fetchall()) == [
            ("ix_messages_expires", "CREATE INDEX ix_messages_expires ON messages (expires, seq) WHERE expires IS NOT NULL"),
            ("ix_messages_queue_order", conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'ix_messages_queue_order'").fetchone()[0]),
        ]
    finally:
        conn.close()


def test_alembic_command_line_from_the_repo_root(tmp_path: Path) -> None:
    path = tmp_path / "cli.db"
    env = {**os.environ, "STOMPMQ_STORE_URL": url(path)}
    subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
    )
    assert revision(path) == HEAD
    other = tmp_path / "x.db"
    subprocess.run(
        [sys.executable, "-m", "alembic", "-x", f"url={url(other)}", "upgrade", "0001"],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
    )
    assert revision(other) == "0001"
