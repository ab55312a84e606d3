"""Routing stability across a crash, with the broker as a real process.

The consistent-hash routing is a function of the exchange's set of bindings
alone (docs/consistent-hash.md): the same keys must land in the same queues
after the broker is killed with SIGKILL and restarted on the same database, and
when the same bindings are made in another order on a fresh database.  The
broker runs as ``python -m stompmq.cli`` so nothing of the first process (hash
salt, in-memory state) survives into the second.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stompmq.broker.hashring import HashRing

from .stompclient import Client

REPO_ROOT = Path(__file__).resolve().parents[1]
KEYS = [f"key-{i}" for i in range(2000)]
QUEUES = {"r0": 1, "r1": 2, "r2": 1, "r3": 3, "r4": 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    def __init__(self, db: Path) -> None:
        self.db = db
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stompmq.cli",
                "--port",
                str(self.port),
                "--store",
                f"sqlite:///{db}",
                "--log-level",
                "WARNING",
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONHASHSEED": "random"},
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"broker exited with {self.proc.returncode}: {self.proc.stderr.read().decode()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                assert time.monotonic() < deadline, "broker did not start listening in time"
                time.sleep(0.05)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stderr.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if not self.proc.stderr.closed:
            self.proc.stderr.close()


@contextmanager
def broker_process(db: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(db)
    try:
        yield broker
    finally:
        broker.stop()


def control(c: Client, path: str, **headers: str):
    return c.request("SEND", {"destination": "/control/" + path, **headers})


def setup_exchange(port: int, bindings: list[tuple[str, int]]) -> None:
    with Client(port) as c:
        control(c, "declare/exchange/stable")
        for queue, weight in bindings:
            control(c, "bind/exchange/stable", queue="/queue/" + queue, weight=str(weight))


def publish(port: int, keys: list[str], tag: str) -> None:
    """Every SEND with a receipt; all receipts awaited."""
    with Client(port) as c:
        frames = [
            b"SEND\ndestination:/exchange/stable/%s\nkey:%s\nreceipt:%s-%d\n\n%s\x00"
            % (k.encode(), k.encode(), tag.encode(), i, tag.encode())
            for i, k in enumerate(keys)
        ]
        c.send(b"".join(frames))
        for i in range(len(keys)):
            r = c.recv(timeout=30)
            assert (r.command, r.headers.get("receipt-id")) == ("RECEIPT", f"{tag}-{i}"), r


def consume(port: int, n: int, tag: str) -> dict[str, str]:
    """Drain every queue of the exchange; map each ``tag`` message's key to its queue."""
    routes: dict[str, str] = {}
    with Client(port) as c:
        for queue in QUEUES:
            c.subscribe("/queue/" + queue, queue, ack="auto")
        while len(routes) < n:
            m = c.message(timeout=10)
            if m.body.decode() != tag:
                continue
            assert m["key"] not in routes, f"{m['key']} delivered twice"
            routes[m["key"]] = m["destination"][len("/queue/") :]
        c.expect_nothing()
        for queue in QUEUES:
            r = control(c, f"count-msgs/queue/{queue}")
            assert r["num-messages"] == "0"
            # Unsubscribe before closing: until the broker notices the close, an auto-ack
            # subscription would take (and lose) messages published meanwhile.
            c.unsubscribe(queue)
    return routes


def test_routing_survives_kill_9_and_restart(tmp_path: Path):
    db = tmp_path / "broker.db"
    ring = HashRing("stable", QUEUES.items())
    expected = {k: ring.route(k) for k in KEYS}
    with broker_process(db) as first:
        setup_exchange(first.port, list(QUEUES.items()))
        publish(first.port, KEYS, "before")
        before = consume(first.port, len(KEYS), "before")
        assert before == expected
        publish(first.port, KEYS[:500], "unconsumed")  # receipted: must survive the crash
        first.kill9()
    with broker_process(db) as second:
        with Client(second.port) as c:
            listing = control(c, "list-bindings/exchange/stable")
            assert int(listing["num-bindings"]) == len(QUEUES)
        survived = consume(second.port, 500, "unconsumed")
        assert survived == {k: expected[k] for k in KEYS[:500]}
        publish(second.port, KEYS, "after")
        after = consume(second.port, len(KEYS), "after")
    assert after == before
    assert len(set(after.values())) == len(QUEUES)


def test_routing_does_not_depend_on_binding_order(tmp_path: Path):
    ring = HashRing("stable", QUEUES.items())
    results = []
    for order, name in ((list(QUEUES.items()), "forward"), (list(reversed(QUEUES.items())), "reverse")):
        with broker_process(tmp_path / f"{name}.db") as broker:
            setup_exchange(broker.port, order)
            publish(broker.port, KEYS, name)
            results.append(consume(broker.port, len(KEYS), name))
    assert results[0] == results[1] == {k: ring.route(k) for k in KEYS}
