"""``stompmq backup``: a consistent copy of a live SQLite store, taken under receipted load."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stompmq.cli import main

from ..support.broker_process import ROOT, BrokerProcess
from ..support.stompclient import Client
from ..support.waiting import wait_until


def test_backup_under_load_keeps_every_receipted_message(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "live.db").start()
    receipted: list[int] = []
    stop = threading.Event()

    def produce() -> None:
        with Client(broker.port) as producer:
            n = 0
            while not stop.is_set():
                producer.send_to("/queue/load", str(n))  # waits for its RECEIPT
                receipted.append(n)
                n += 1

    producer = threading.Thread(target=produce)
    try:
        producer.start()
        wait_until(lambda: len(receipted) >= 200, "200 receipted messages", 60)
        before = len(receipted)  # every one of these was receipted before the backup began
        copy = tmp_path / "copy.db"
        done = subprocess.run(
            [sys.executable, "-m", "stompmq.cli", "backup", str(copy), "--store", f"sqlite:///{broker.db_path}"],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
        )
        assert done.returncode == 0, done.stderr
    finally:
        stop.set()
        producer.join(30)
        broker.terminate()
        broker.close()

    restored = BrokerProcess(copy).start()
    try:
        with Client(restored.port) as consumer:
            consumer.subscribe("/queue/load")
            bodies = {int(m.body) for m in consumer.messages(before)}
        assert bodies >= set(range(before))
    finally:
        restored.terminate()
        restored.close()


def test_backup_refuses_other_stores(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "stompmq.cli", "backup", str(tmp_path / "x.db"), "--store", "memory"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "only SQLite" in done.stderr


def _store(path: Path) -> str:
    """A small SQLite database to back up (any database will do)."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (42)")
    db.close()
    return f"sqlite:///{path}"


def test_an_existing_dest_is_refused_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _store(tmp_path / "live.db")
    dest = tmp_path / "copy.db"
    dest.write_text("the last good backup")
    assert main(["backup", str(dest), "--store", store]) == 2
    err = capsys.readouterr().err
    assert str(dest) in err and "--force" in err
    assert dest.read_text() == "the last good backup"
    assert main(["backup", str(dest), "--store", store, "--force"]) == 0
    with sqlite3.connect(dest) as db:
        assert db.execute("SELECT x FROM t").fetchall() == [(42,)]
    db.close()


def test_every_error_names_its_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _store(tmp_path / "live.db")
    dest = tmp_path / "no-such-dir" / "copy.db"
    assert main(["backup", str(dest), "--store", store]) == 2
    assert str(dest) in capsys.readouterr().err
    assert not list(tmp_path.glob("**/*.partial"))
    assert main(["backup", str(tmp_path / "c.db"), "--store", f"sqlite:///{tmp_path / 'missing.db'}"]) == 2
    assert str(tmp_path / "missing.db") in capsys.readouterr().err
    assert main(["backup", str(tmp_path), "--store", store]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_help_describes_every_argument(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["backup", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert all(word in out for word in ("DEST", "--force", "--store", "--data-dir", "--config", "consistent copy"))
