"""``stompmq backup``: a consistent copy of a live SQLite store, taken under receipted load."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from ..support.broker_process import ROOT, BrokerProcess
from ..support.stompclient import Client


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
        while len(receipted) < 200:
            threading.Event().wait(0.01)
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

    restored = BrokerProcess(copy).start()
    try:
        with Client(restored.port) as consumer:
            consumer.subscribe("/queue/load")
            bodies = {int(m.body) for m in consumer.messages(before)}
        assert bodies >= set(range(before))
    finally:
        restored.terminate()


def test_backup_refuses_other_stores(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "stompmq.cli", "backup", str(tmp_path / "x.db"), "--store", "memory"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "only SQLite" in done.stderr
