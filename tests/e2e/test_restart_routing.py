"""Routing stability across a crash, with the broker as a real process.

The consistent-hash routing is a function of the exchange's set of bindings
alone (docs/consistent-hash.md): the same keys must land in the same queues
after the broker is killed with SIGKILL and restarted on the same database, and
when the same bindings are made in another order on a fresh database.  The
broker runs as ``python -m stompmq.cli`` so nothing of the first process (hash
salt, in-memory state) survives into the second.
"""

from __future__ import annotations

from pathlib import Path

from stompmq.broker.hashring import HashRing

from ..support.broker_process import BrokerProcess
from ..support.stompclient import Client, control

KEYS = [f"key-{i}" for i in range(2000)]
QUEUES = {"r0": 1, "r1": 2, "r2": 1, "r3": 3, "r4": 1}


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
    with BrokerProcess(db).start() as first:
        setup_exchange(first.port, list(QUEUES.items()))
        publish(first.port, KEYS, "before")
        before = consume(first.port, len(KEYS), "before")
        assert before == expected
        publish(first.port, KEYS[:500], "unconsumed")  # receipted: must survive the crash
        first.kill9()
    with BrokerProcess(db).start() as second:
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
        with BrokerProcess(tmp_path / f"{name}.db").start() as broker:
            setup_exchange(broker.port, order)
            publish(broker.port, KEYS, name)
            results.append(consume(broker.port, len(KEYS), name))
    assert results[0] == results[1] == {k: ring.route(k) for k in KEYS}
