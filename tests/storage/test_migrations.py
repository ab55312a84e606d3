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

from stompmq.storage.migrate import alembic_config, head_revision, upgrade_to_head
from stompmq.storage.schema import metadata
from stompmq.storage.sqlite import SQLiteBackend

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
            conn.execute("INSERT INTO bindings (exchange, queue, weight, routing_key) VALUES ('ex', 'q', 1, 'a.b')")
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


def test_head_read_from_the_scripts_as_text_is_alembics_head() -> None:
    assert head_revision() == HEAD


def test_the_store_migrates_an_older_file_when_it_opens(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    command.upgrade(alembic_config(url(path)), "0012")
    backend = SQLiteBackend(str(path))
    try:
        backend.open()
    finally:
        backend.close()
    assert revision(path) == HEAD


def test_a_current_file_opens_without_importing_alembic(tmp_path: Path) -> None:
    """Alembic and SQLAlchemy cost most of a start's CPU: a schema at head must not load them."""
    path = tmp_path / "s.db"
    upgrade_to_head(url(path))
    script = (
        "import sys\n"
        "from stompmq.storage.sqlite import SQLiteBackend\n"
        f"backend = SQLiteBackend({str(path)!r})\n"
        "backend.open()\n"
        "backend.close()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'sqlalchemy')))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


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
        # seq is the rowid: no separate primary-key index; the delivered and expiry indexes are partial.
        assert sorted(conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages'"
        ).fetchall()) == [
            ("ix_messages_delivered", "CREATE INDEX ix_messages_delivered ON messages (seq) WHERE delivered = 1"),
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


def test_0007_puts_existing_rows_in_the_default_vhost_and_downgrades(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    command.upgrade(alembic_config(url(path)), "0006")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("""INSERT INTO queues (id, name, options) VALUES (1, 'q', '{"max-length": "5"}')""")
        conn.execute("INSERT INTO exchanges (name, type, options) VALUES ('ex', 'direct', '{}')")
        conn.execute("INSERT INTO bindings (exchange, queue, weight, routing_key) VALUES ('ex', 'q', 1, 'k')")
        conn.execute("INSERT INTO streams (name, options) VALUES ('s', '{}')")
    conn.close()
    upgrade_to_head(url(path))
    conn = sqlite3.connect(path)
    try:
        for table in ("queues", "exchanges", "bindings", "streams"):
            assert conn.execute(f"SELECT vhost FROM {table}").fetchall() == [("/",)], table
        assert conn.execute("SELECT name FROM vhosts").fetchall() == [("/",)]
        with conn:  # the same names in another vhost are other rows
            conn.execute("INSERT INTO queues (id, vhost, name) VALUES (2, 'dev', 'q')")
            conn.execute(
                "INSERT INTO messages (seq, queue_id, priority, headers, body, delivered, ack_timeout,"
                " redeliveries, timestamp) VALUES (7, 2, 4, '{}', x'00', 0, NULL, 0, 7)"
            )
            conn.execute("INSERT INTO exchanges (vhost, name, type, options) VALUES ('dev', 'ex', 'direct', '{}')")
            conn.execute("INSERT INTO streams (vhost, name, options) VALUES ('dev', 's', '{}')")
            conn.execute(
                "INSERT INTO delayed_messages (seq, queue_id, priority, headers, body, timestamp, deliver_at)"
                " VALUES (8, 2, 4, '{}', x'00', 7, 9)"
            )
    finally:
        conn.close()
    command.downgrade(alembic_config(url(path)), "0006")
    conn = sqlite3.connect(path)
    try:
        # the other vhost's rows go; the default vhost's declaration stays
        assert conn.execute("SELECT name, options FROM queues").fetchall() == [("q", '{"max-length": "5"}')]
        assert conn.execute("SELECT seq FROM messages").fetchall() == []
        assert conn.execute("SELECT seq FROM delayed_messages").fetchall() == []
        assert conn.execute("SELECT exchange, queue FROM bindings").fetchall() == [("ex", "q")]
    finally:
        conn.close()


def test_0008_gives_existing_streams_their_counters_and_downgrades(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    command.upgrade(alembic_config(url(path)), "0007")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("INSERT INTO streams (id, name, options) VALUES (1, 'full', '{}')")
        conn.execute("""INSERT INTO streams (id, name, options) VALUES (2, 'purged', '{"first-offset": "9"}')""")
        conn.execute("INSERT INTO streams (id, name, options) VALUES (3, 'empty', '{}')")
        for position in (3, 4, 5):  # retention dropped 0-2; bodies of 2 bytes
            conn.execute(
                "INSERT INTO stream_messages (stream_id, position, seq, priority, timestamp, headers, body,"
                " bytes_before) VALUES (1, ?, ?, 4, ?, '{}', x'0000', ?)",
                (position, position, 100 + position, 2 * position),
            )
    conn.close()
    upgrade_to_head(url(path))
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT name, first_offset, next_offset, end_bytes, last_ts FROM streams ORDER BY id")
        assert rows.fetchall() == [("full", 3, 6, 12, 105), ("purged", 9, 9, 0, 0), ("empty", 0, 0, 0, 0)]
    finally:
        conn.close()
    command.downgrade(alembic_config(url(path)), "0007")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT name FROM streams ORDER BY id").fetchall() == [("full",), ("purged",), ("empty",)]
    finally:
        conn.close()
