"""Restart after kill -9 with a huge backlog: time to the first MESSAGE and the broker's RSS.

Builds a SQLite store holding --messages messages in one queue by writing the file directly
(the broker's own migrations make the schema; rows go in with journaling off, about a minute
for 5M), the first --delivered of them marked delivered as if they were out for delivery when
the broker died.  Then, --repeats times: start a broker on the file, subscribe (client ack, so
the prefetch window stays delivered), time the first MESSAGE from the start of the process,
read VmRSS, VmHWM and the CPU time the broker used, and kill -9 it (so the next start recovers that window too).

  python -m benchmarks.backlog --messages 5000000 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

from benchmarks.proc import cpu_seconds, rss_kib
from stompmq.storage.migrate import upgrade_to_head
from tests.support.broker_process import free_port

QUEUE = "backlog"
TIMEOUT = 120.0
BUILD_BATCH = 50_000


def build(path: str, messages: int, delivered: int, body_size: int) -> None:
    """Write ``messages`` rows into queue QUEUE of a fresh store at ``path``."""
    upgrade_to_head(f"sqlite:///{path}")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("BEGIN")
    queue_id = conn.execute("INSERT INTO queues (vhost, name) VALUES ('/', ?)", (QUEUE,)).lastrowid
    body = b"x" * body_size
    now = int(time.time() * 1000)
    for start in range(1, messages + 1, BUILD_BATCH):
        conn.executemany(
            "INSERT INTO messages (seq, queue_id, priority, headers, body, delivered, redeliveries, timestamp)"
            " VALUES (?, ?, 4, '{}', ?, ?, 0, ?)",
            ((seq, queue_id, body, int(seq <= delivered), now) for seq in range(start, min(start + BUILD_BATCH, messages + 1))),
        )
    conn.execute("INSERT OR REPLACE INTO broker_meta (name, value) VALUES ('last_seq', ?)", (str(messages),))
    conn.execute("COMMIT")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()


def first_message(port: int, t0: float) -> tuple[float, float]:
    """Connect as soon as the port opens, subscribe, wait for a MESSAGE: (connected, first) seconds."""
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
            break
        except OSError:
            if time.monotonic() - t0 > TIMEOUT:
                raise
            time.sleep(0.005)
    with sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
        buf = b""
        while b"\x00" not in buf:
            buf += sock.recv(65536)
        connected = time.monotonic() - t0
        sock.sendall(f"SUBSCRIBE\nid:0\ndestination:/queue/{QUEUE}\nack:client-individual\n\n\x00".encode())
        buf = b""
        while b"MESSAGE" not in buf:
            data = sock.recv(65536)
            if not data:
                raise EOFError("broker closed the connection")
            buf += data
        return connected, time.monotonic() - t0


def restart(path: str) -> None:
    port = free_port()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompmq.cli", "--store", f"sqlite:///{path}", "--port", str(port), "--http-port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        connected, first = first_message(port, t0)
        rss, hwm, cpu = rss_kib(proc.pid, "VmRSS"), rss_kib(proc.pid, "VmHWM"), cpu_seconds(proc.pid)
        print(
            f"connected {connected:.2f} s, first MESSAGE {first:.2f} s after start ({cpu:.2f} s of CPU);"
            f" RSS {rss / 1024:.0f} MiB (peak {hwm / 1024:.0f} MiB); load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--delivered", type=int, default=1000, help="rows out for delivery at the crash")
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--db", help="reuse (or build once at) this path instead of a temporary file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or os.path.join(tmp, "backlog.db")
        if not os.path.exists(path):
            t0 = time.monotonic()
            build(path, args.messages, args.delivered, args.body_size)
            size = os.path.getsize(path) / 1024**2
            print(f"built {args.messages} messages ({size:.0f} MiB) in {time.monotonic() - t0:.0f} s", flush=True)
        for _ in range(args.repeats):
            restart(path)


if __name__ == "__main__":
    main()
