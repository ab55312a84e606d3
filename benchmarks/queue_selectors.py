"""Selectors on a queue: a backlog nobody matches against the matches behind it, and their cost.

Three SQLite stores are built directly in their files (as backlog.py does): *mixed*, --messages
queued messages of which one in --every carries ``kind:hit`` (the rest ``kind:miss``), spread
evenly; *hits*, only those hits.  For each case a broker process (``python -m stompmq.cli``,
default window) starts on a fresh copy, a client-individual consumer subscribes (prefetch 1,000,
acking each message) and the time from SUBSCRIBE to its last expected MESSAGE is taken, with the
broker's peak RSS (VmHWM) and CPU:

* ``selector on mixed``: ``selector:kind = 'hit'`` on the mixed store: its hits;
* ``plain on hits``: no selector on the hits-only store: the same messages, nothing to sift;
* ``plain on mixed``: no selector on the mixed store, as many messages as there are hits;
* ``plain drains mixed``: no selector on the mixed store, every message: the broker reads the
  whole backlog through its window, as the selector's consumer makes it do (the memory
  comparison: the same backlog read without selectors).

Then the selector's own cost: ``Selector.matches`` of a three-clause selector on a message it
matches and one it rejects at the first clause, in microseconds per call (timeit, best of 5).

  python -m benchmarks.queue_selectors --messages 100000 --every 100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import timeit

from benchmarks.proc import cpu_seconds, rss_kib
from stompmq.broker.selectors import compile_selector
from stompmq.storage.base import StoredMessage
from stompmq.storage.migrate import upgrade_to_head
from tests.support.broker_process import free_port

QUEUE = "work"
TIMEOUT = 300.0
THREE_CLAUSES = "kind = 'hit' AND price > 5 AND region IN ('eu', 'us')"


def build(path: str, seqs: list[int], every: int, body_size: int) -> None:
    """A store whose queue QUEUE holds ``seqs``: a hit where ``seq % every == 0``, else a miss."""
    upgrade_to_head(f"sqlite:///{path}")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("BEGIN")
    queue_id = conn.execute("INSERT INTO queues (vhost, name) VALUES ('/', ?)", (QUEUE,)).lastrowid
    body = b"x" * body_size
    now = int(time.time() * 1000)
    headers = {kind: json.dumps({"kind": kind, "price": "7", "region": "eu"}) for kind in ("hit", "miss")}
    conn.executemany(
        "INSERT INTO messages (seq, queue_id, priority, headers, body, delivered, redeliveries, timestamp)"
        " VALUES (?, ?, 4, ?, ?, 0, 0, ?)",
        ((seq, queue_id, headers["hit" if seq % every == 0 else "miss"], body, now) for seq in seqs),
    )
    conn.execute("INSERT OR REPLACE INTO broker_meta (name, value) VALUES ('last_seq', ?)", (str(max(seqs)),))
    conn.execute("COMMIT")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()


def _frames(sock: socket.socket, buf: bytearray) -> list[bytes]:
    data = sock.recv(1 << 20)
    if not data:
        raise EOFError("broker closed the connection")
    buf += data
    frames = []
    while (end := buf.find(b"\x00")) >= 0:
        frames.append(bytes(buf[:end]).lstrip(b"\r\n"))
        del buf[: end + 1]
    return frames


def consume(port: int, selector: str | None, expect: int) -> float:
    """Subscribe, ACK each MESSAGE, return seconds from SUBSCRIBE to the ``expect``-th."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    with sock:
        buf = bytearray()
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
        while not _frames(sock, buf):
            pass
        extra = f"selector:{selector}\n" if selector else ""
        t0 = time.monotonic()
        sock.sendall(f"SUBSCRIBE\nid:0\ndestination:/queue/{QUEUE}\nack:client-individual\nprefetch:1000\n{extra}\n"
                     "\x00".encode())
        got = 0
        while got < expect:
            acks = []
            for frame in _frames(sock, buf):
                if frame.startswith(b"ERROR"):
                    raise RuntimeError(frame.decode(errors="replace"))
                if frame.startswith(b"MESSAGE"):
                    got += 1
                    ack = next(line for line in frame.split(b"\n") if line.startswith(b"ack:"))
                    acks.append(b"ACK\nid:" + ack[4:] + b"\n\n\x00")
            if acks:
                sock.sendall(b"".join(acks))
        return time.monotonic() - t0


def run(path: str, selector: str | None, expect: int, label: str) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompmq.cli", "--store", f"sqlite:///{path}", "--port", str(port), "--http-port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        seconds = consume(port, selector, expect)
        hwm, cpu = rss_kib(proc.pid, "VmHWM"), cpu_seconds(proc.pid)
        print(f"{label:<20} {expect} messages in {seconds * 1000:7.1f} ms ({expect / seconds:8.0f} msg/s);"
              f" peak RSS {hwm / 1024:.0f} MiB; broker CPU {cpu:.2f} s", flush=True)
    finally:
        proc.kill()
        proc.wait()


def evaluation() -> None:
    selector = compile_selector(THREE_CLAUSES)
    assert selector is not None
    for label, headers in (("matched", {"kind": "hit", "price": "7", "region": "us"}),
                           ("rejected at clause 1", {"kind": "miss", "price": "7", "region": "us"})):
        msg = StoredMessage(1, QUEUE, 4, headers, b"", 0)
        calls = 200_000
        best = min(timeit.repeat(lambda: selector.matches(msg), number=calls, repeat=5))  # noqa: B023
        print(f"selector evaluation, 3 clauses, {label}: {best / calls * 1e6:.2f} us per message", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=100, help="one message in EVERY matches")
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    hits = args.messages // args.every
    with tempfile.TemporaryDirectory() as tmp:
        mixed, only = os.path.join(tmp, "mixed.db"), os.path.join(tmp, "hits.db")
        build(mixed, list(range(1, args.messages + 1)), args.every, args.body_size)
        build(only, list(range(args.every, args.messages + 1, args.every)), args.every, args.body_size)
        fresh = os.path.join(tmp, "run.db")
        for _ in range(args.repeats):
            for source, selector, label, expect in ((mixed, "kind = 'hit'", "selector on mixed", hits),
                                                    (only, None, "plain on hits", hits),
                                                    (mixed, None, "plain on mixed", hits),
                                                    (mixed, None, "plain drains mixed", args.messages)):
                for suffix in ("", "-wal", "-shm"):
                    if os.path.exists(fresh + suffix):
                        os.remove(fresh + suffix)
                shutil.copy(source, fresh)
                run(fresh, selector, expect, label)
    evaluation()


if __name__ == "__main__":
    main()
