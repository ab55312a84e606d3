"""Consistent-hash exchanges through the real broker, on every store.

The routing algorithm itself is tested in tests/broker/test_hashring.py; here
the broker must route each SEND exactly as ``HashRing`` does for the exchange's
bindings, keep its statistical properties end to end (uniformity, weights,
minimal key movement), and handle declarations, bindings, errors, exchange
subscriptions, restarts and the definitions file.

Bulk publishing writes many SEND frames with one ``sendall`` and asks for a
receipt on the last one only: a connection's frames are handled in order, so
that receipt covers them all.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from stompmq.broker import BrokerConfig
from stompmq.broker.hashring import HashRing
from stompmq.storage.memory import MemoryStore

from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client, control
from ..support.stores import make_store_factory
from ..support.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
KEYS_100K = [str(i) for i in range(100_000)]


# ---------------------------------------------------------------------------- helpers


def declare(c: Client, name: str, **options: str) -> None:
    control(c, f"declare/exchange/{name}", **options)


def bind(c: Client, exchange: str, queue: str, weight: int | None = None) -> None:
    headers = {"queue": "/queue/" + queue}
    if weight is not None:
        headers["weight"] = str(weight)
    control(c, f"bind/exchange/{exchange}", **headers)


def unbind(c: Client, exchange: str, queue: str) -> None:
    control(c, f"unbind/exchange/{exchange}", queue="/queue/" + queue)


def bindings(c: Client, exchange: str) -> dict[str, int]:
    """list-bindings as {queue name: weight}, checking the listing is sorted by name."""
    r = control(c, f"list-bindings/exchange/{exchange}")
    n = int(r["num-bindings"])
    listed = [(r[f"binding-{i}-queue"], int(r[f"binding-{i}-weight"])) for i in range(n)]
    assert f"binding-{n}-queue" not in r.headers
    assert [q for q, _ in listed] == sorted(q for q, _ in listed)
    assert all(q.startswith("/queue/") for q, _ in listed)
    return {q[len("/queue/") :]: w for q, w in listed}


def stats(c: Client, exchange: str) -> dict[str, int]:
    r = control(c, f"stats/exchange/{exchange}")
    return {k: int(r[k]) for k in ("num-routed", "num-unhashed", "num-bindings")}


def count_msgs(c: Client, queue: str) -> int:
    return int(control(c, f"count-msgs/queue/{queue}")["num-messages"])


def publish(
    c: Client,
    keys,
    destination,
    headers=None,
) -> None:
    """SEND one message per key in one write, a receipt on the last; wait for it.

    ``destination(key)`` and ``headers(key)`` give each frame's destination and extra
    headers; every message carries its key in a ``key`` header.
    """
    frames = []
    keys = list(keys)
    for i, key in enumerate(keys):
        lines = [b"SEND", b"destination:" + destination(key).encode(), b"key:" + key.encode()]
        for name, value in (headers(key) if headers else {}).items():
            lines.append(f"{name}:{value}".encode())
        if i == len(keys) - 1:
            lines.append(b"receipt:bulk-done")
        frames.append(b"\n".join(lines) + b"\n\n\x00")
    c.send(b"".join(frames))
    c.wait_receipt("bulk-done", timeout=30)


def publish_keys(c: Client, exchange: str, keys, headers=None) -> None:
    publish(c, keys, lambda k: f"/exchange/{exchange}/{k}", headers)


class Consumer(Client):
    """Auto-ack subscriptions to queues; maps each received message's ``key`` to its queue."""

    def __init__(self, port: int, queues=()) -> None:
        super().__init__(port)
        for q in queues:
            self.watch(q)

    def watch(self, queue: str) -> None:
        self.subscribe("/queue/" + queue, queue, ack="auto")

    def routes(self, n: int) -> dict[str, str]:
        got: dict[str, str] = {}
        for _ in range(n):
            m = self.message(timeout=10)
            assert m.headers["key"] not in got, f"key {m['key']} delivered twice"
            got[m["key"]] = m["destination"][len("/queue/") :]
        return got


def route_through(c: Client, consumer: Consumer, exchange: str, keys, headers=None) -> dict[str, str]:
    keys = list(keys)
    publish_keys(c, exchange, keys, headers)
    routes = consumer.routes(len(keys))
    consumer.expect_nothing()
    return routes


def expected_routes(exchange: str, binds: dict[str, int], keys) -> dict[str, str]:
    ring = HashRing(exchange, binds.items())
    return {k: ring.route(k) for k in keys}


def chi_squared(counts: list[int]) -> float:
    expected = sum(counts) / len(counts)
    return sum((n - expected) ** 2 / expected for n in counts)


# ---------------------------------------------------------------------------- distribution


def test_uniform_over_ten_queues(broker):
    """100,000 keys over 10 equal queues: chi-squared below the p = 0.01 critical value
    (df = 9: 21.666), and the per-queue counts are exactly HashRing's."""
    queues = [f"u{i}" for i in range(10)]
    with Client(broker.port) as c:
        declare(c, "uniform")
        for q in queues:
            bind(c, "uniform", q)
        assert bindings(c, "uniform") == {q: 1 for q in queues}
        publish(c, KEYS_100K, lambda k: f"/exchange/uniform/{k}")
        counts = [count_msgs(c, q) for q in queues]
        assert sum(counts) == 100_000
        assert chi_squared(counts) < 21.666, counts
        ring = HashRing("uniform", [(q, 1) for q in queues])
        expected = Counter(ring.route(k) for k in KEYS_100K)
        assert counts == [expected[q] for q in queues]
        assert stats(c, "uniform") == {"num-routed": 100_000, "num-unhashed": 0, "num-bindings": 10}


def test_weights_1_1_2_2(broker):
    """Shares within 2% *relative* of 1/6, 1/6, 1/3, 1/3 over 100,000 keys."""
    weights = {"w1": 1, "w2": 1, "w3": 2, "w4": 2}
    with Client(broker.port) as c:
        declare(c, "weighted")
        for q, w in weights.items():
            bind(c, "weighted", q, w)
        assert bindings(c, "weighted") == weights
        publish(c, KEYS_100K, lambda k: f"/exchange/weighted/{k}")
        counts = {q: count_msgs(c, q) for q in weights}
    total = sum(weights.values())
    for q, w in weights.items():
        share, expected = counts[q] / 100_000, w / total
        assert abs(share - expected) <= 0.02 * expected, (q, share, expected)
    ring = HashRing("weighted", weights.items())
    assert counts == dict(Counter(ring.route(k) for k in KEYS_100K))


# ---------------------------------------------------------------------------- key movement


MOVEMENT_KEYS = [f"k{i}" for i in range(4000)]


def test_key_movement_on_add_remove_and_reweight(broker):
    """Route the same 4,000 keys through the broker before and after each change: keys move
    only to an added queue, only from a removed one (first, middle or last), only to a
    queue whose weight rose and only from one whose weight fell; never between two
    unchanged queues.  The shares moved are about w / W, and every route is HashRing's."""
    all_queues = [f"m{i}" for i in range(6)]
    with Client(broker.port) as c, Consumer(broker.port, all_queues) as consumer:
        declare(c, "movement")
        state = {f"m{i}": 1 for i in range(5)}
        for q in state:
            bind(c, "movement", q)

        def routes() -> dict[str, str]:
            got = route_through(c, consumer, "movement", MOVEMENT_KEYS)
            assert got == expected_routes("movement", state, MOVEMENT_KEYS)
            assert bindings(c, "movement") == state
            return got

        before = routes()
        steps = [
            ("add", "m5", 1, 1 / 6),
            ("remove", "m5", None, 1 / 6),
            ("remove", "m0", None, 1 / 5),  # first
            ("add", "m0", 1, 1 / 5),
            ("remove", "m2", None, 1 / 5),  # middle
            ("add", "m2", 1, 1 / 5),
            ("remove", "m4", None, 1 / 5),  # last
            ("add", "m4", 1, 1 / 5),
            ("weight", "m1", 3, 3 / 7 - 1 / 5),  # raised
            ("weight", "m1", 1, 3 / 7 - 1 / 5),  # lowered back
        ]
        for change, queue, weight, expected_share in steps:
            if change == "remove":
                unbind(c, "movement", queue)
                del state[queue]
            else:
                bind(c, "movement", queue, weight)
                rose = weight > state.get(queue, 0)
                state[queue] = weight
            after = routes()
            moved = {k for k in MOVEMENT_KEYS if before[k] != after[k]}
            if change == "remove":
                assert moved == {k for k in MOVEMENT_KEYS if before[k] == queue}, change
            elif rose:
                assert all(after[k] == queue for k in moved), (change, queue)
            else:
                assert all(before[k] == queue for k in moved), (change, queue)
            share = len(moved) / len(MOVEMENT_KEYS)
            assert abs(share - expected_share) < 0.03, (change, queue, share, expected_share)
            before = after
        # back to the starting bindings: back to the starting routes
        assert state == {f"m{i}": 1 for i in range(5)}


# ---------------------------------------------------------------------------- hash input


def test_routing_key_in_path_or_header(broker):
    keys = [f"rk-{i}" for i in range(300)]
    with Client(broker.port) as c, Consumer(broker.port, ["rk1", "rk2", "rk3"]) as consumer:
        declare(c, "rk")
        for q in ("rk1", "rk2", "rk3"):
            bind(c, "rk", q)
        by_path = route_through(c, consumer, "rk", keys)
        publish(c, keys, lambda k: "/exchange/rk", lambda k: {"routing-key": k})
        by_header = consumer.routes(len(keys))
        # the path's key wins over the header
        publish(c, keys, lambda k: f"/exchange/rk/{k}", lambda k: {"routing-key": "ignored"})
        both = consumer.routes(len(keys))
        assert stats(c, "rk")["num-unhashed"] == 0
    assert by_path == by_header == both == expected_routes("rk", {"rk1": 1, "rk2": 1, "rk3": 1}, keys)


def test_hash_header_routes_by_that_header(broker):
    customers = [f"customer-{i}" for i in range(400)]
    with Client(broker.port) as c, Consumer(broker.port, ["hh1", "hh2", "hh3"]) as consumer:
        declare(c, "hh", **{"hash-header": "customer-id"})
        for q, w in (("hh1", 1), ("hh2", 2), ("hh3", 1)):
            bind(c, "hh", q, w)
        # the path carries the message's own key; the exchange hashes customer-id instead
        publish(c, customers, lambda k: f"/exchange/hh/{k}-{hash(k) % 7}", lambda k: {"customer-id": k})
        got = consumer.routes(len(customers))
        assert stats(c, "hh") == {"num-routed": 400, "num-unhashed": 0, "num-bindings": 3}
    assert got == expected_routes("hh", {"hh1": 1, "hh2": 2, "hh3": 1}, customers)
    assert len(set(got.values())) == 3


@pytest.mark.parametrize(
    "prop, header",
    [("correlation-id", "correlation-id"), ("message-id", "amqp-message-id"), ("timestamp", "timestamp")],
)
def test_hash_property(broker, prop, header):
    values = [f"{prop}-{i}" if prop != "timestamp" else str(1_700_000_000_000 + 7919 * i) for i in range(300)]
    queues = {"hp1": 1, "hp2": 1, "hp3": 1}
    with Client(broker.port) as c, Consumer(broker.port, queues) as consumer:
        declare(c, "hp", **{"hash-property": prop})
        for q in queues:
            bind(c, "hp", q)
        publish(c, values, lambda v: "/exchange/hp/same-key-for-all", lambda v: {header: v})
        got = consumer.routes(len(values))
        assert stats(c, "hp")["num-unhashed"] == 0
    assert got == expected_routes("hp", queues, values)
    assert len(set(got.values())) == 3


@pytest.mark.parametrize("options", [{}, {"hash-header": "customer-id"}, {"hash-property": "correlation-id"}])
def test_missing_hash_input_goes_to_one_fixed_queue_and_is_counted(broker, options):
    queues = {f"mi{i}": 1 for i in range(5)}
    ring = HashRing("mi", queues.items())
    fixed = ring.route(None)
    assert fixed == ring.route("")
    with Client(broker.port) as c, Consumer(broker.port, queues) as consumer:
        declare(c, "mi", **options)
        for q in queues:
            bind(c, "mi", q)
        # nothing to hash: no key in the path (or a key the options ignore), no header
        destination = (lambda k: "/exchange/mi") if not options else (lambda k: f"/exchange/mi/{k}")
        publish(c, [f"x{i}" for i in range(50)], destination)
        got = consumer.routes(50)
        assert set(got.values()) == {fixed}
        assert stats(c, "mi") == {"num-routed": 50, "num-unhashed": 50, "num-bindings": 5}
        # an empty trailing key is no key either
        if not options:
            publish(c, ["y"], lambda k: "/exchange/mi/")
            assert set(consumer.routes(1).values()) == {fixed}
            assert stats(c, "mi")["num-unhashed"] == 51


def test_missing_hash_input_rejected_with_on_missing_reject(broker):
    with Client(broker.port) as c:
        declare(c, "rej", **{"hash-header": "customer-id", "on-missing": "reject"})
        bind(c, "rej", "rej1")
        c.send_to("/exchange/rej/k", "ok", headers={"customer-id": "7"})
        assert count_msgs(c, "rej1") == 1
        c.frame("SEND", {"destination": "/exchange/rej/k", "receipt": "r"})
        error = c.expect_error()
    assert "rej" in error["message"] and "hash input" in error["message"]
    assert error["receipt-id"] == "r"


def test_no_bound_queue(broker):
    with Client(broker.port) as c:
        declare(c, "dropper", **{"on-unroutable": "drop"})
        c.send_to("/exchange/dropper/k", "lost")  # dropped, not an error
        assert stats(c, "dropper") == {"num-routed": 0, "num-unhashed": 0, "num-bindings": 0}
        declare(c, "empty")
        bind(c, "empty", "e1")
        unbind(c, "empty", "e1")
        c.frame("SEND", {"destination": "/exchange/empty/k", "receipt": "r"})
        error = c.expect_error()
    assert "empty" in error["message"] and "no bound queue" in error["message"]


# ---------------------------------------------------------------------------- bad requests


def _bind(exchange: str, **headers: str) -> dict[str, str]:
    return {"destination": f"/control/bind/exchange/{exchange}", **headers}


BAD_REQUESTS = {
    # declarations
    "both-hash-options": ("SEND", {"destination": "/control/declare/exchange/b1", "hash-header": "h", "hash-property": "message-id"}, ["hash-header", "hash-property"]),
    "unknown-property": ("SEND", {"destination": "/control/declare/exchange/b1", "hash-property": "user-id"}, ["hash-property", "user-id"]),
    "unknown-type": ("SEND", {"destination": "/control/declare/exchange/b1", "type": "headers"}, ["type", "headers"]),
    "empty-hash-header": ("SEND", {"destination": "/control/declare/exchange/b1", "hash-header": ""}, ["hash-header"]),
    "bad-on-missing": ("SEND", {"destination": "/control/declare/exchange/b1", "on-missing": "ignore"}, ["on-missing", "ignore"]),
    "bad-on-unroutable": ("SEND", {"destination": "/control/declare/exchange/b1", "on-unroutable": "x"}, ["on-unroutable"]),
    "slash-in-name": ("SEND", {"destination": "/control/declare/exchange/a/b"}, ["a/b"]),
    "redeclare-other-options": ("SEND", {"destination": "/control/declare/exchange/bx", "hash-header": "h"}, ["bx", "other options"]),
    # bindings
    "weight-not-a-number": ("SEND", _bind("bx", queue="/queue/q", weight="abc"), ["weight", "abc"]),
    "weight-fraction": ("SEND", _bind("bx", queue="/queue/q", weight="1.5"), ["weight", "1.5"]),
    "weight-empty": ("SEND", _bind("bx", queue="/queue/q", weight=""), ["weight"]),
    "weight-negative": ("SEND", _bind("bx", queue="/queue/q", weight="-1"), ["weight", "-1"]),
    "weight-0": ("SEND", _bind("bx", queue="/queue/q", weight="0"), ["weight", "'0'"]),
    "weight-10001": ("SEND", _bind("bx", queue="/queue/q", weight="10001"), ["weight", "10001"]),
    "weight-superscript-digit": ("SEND", _bind("bx", queue="/queue/q", weight="²"), ["weight"]),
    "weight-5000-digits": ("SEND", _bind("bx", queue="/queue/q", weight="9" * 5000), ["weight"]),
    "weight-5000-zeros": ("SEND", _bind("bx", queue="/queue/q", weight="0" * 4999 + "1"), ["weight"]),
    "bind-a-topic": ("SEND", _bind("bx", queue="/topic/x"), ["queue", "/topic/x"]),
    "bind-without-queue": ("SEND", _bind("bx", weight="2"), ["queue"]),
    "bind-unknown-exchange": ("SEND", _bind("nope", queue="/queue/q"), ["exchange", "nope"]),
    "unbind-unknown-exchange": ("SEND", {"destination": "/control/unbind/exchange/nope", "queue": "/queue/q"}, ["exchange", "nope"]),
    "unbind-not-bound": ("SEND", {"destination": "/control/unbind/exchange/bx", "queue": "/queue/q9"}, ["q9", "not bound", "bx"]),
    "list-unknown-exchange": ("SEND", {"destination": "/control/list-bindings/exchange/nope"}, ["exchange", "nope"]),
    "stats-unknown-exchange": ("SEND", {"destination": "/control/stats/exchange/nope"}, ["exchange", "nope"]),
    "delete-unknown-exchange": ("SEND", {"destination": "/control/delete/exchange/nope"}, ["exchange", "nope"]),
    # use
    "send-unknown-exchange": ("SEND", {"destination": "/exchange/nope/key"}, ["exchange", "nope"]),
    "subscribe-unknown-exchange": ("SUBSCRIBE", {"destination": "/exchange/nope/1", "id": "s"}, ["exchange", "nope"]),
    "subscribe-weight-0": ("SUBSCRIBE", {"destination": "/exchange/bx/0", "id": "s"}, ["weight", "'0'"]),
    "subscribe-weight-text": ("SUBSCRIBE", {"destination": "/exchange/bx/heavy", "id": "s"}, ["weight", "heavy"]),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_declarations_and_bindings_are_errors_naming_the_problem(memory_broker, case):
    command, headers, words = BAD_REQUESTS[case]
    with Client(memory_broker.port) as c:
        declare(c, "bx")
        bind(c, "bx", "q", 3)
        c.frame(command, {**headers, "receipt": "bad"})
        error = c.expect_error()
    assert error.headers.get("receipt-id") == "bad"
    assert error["message"] != "internal error"
    for word in words:
        assert word in error["message"], (case, error["message"])
    # and nothing was changed by the refused request
    with Client(memory_broker.port) as c:
        assert bindings(c, "bx") == {"q": 3}


def test_declare_is_idempotent_and_rebinding_updates_the_weight(broker):
    with Client(broker.port) as c:
        declare(c, "idem", **{"hash-header": "h"})
        declare(c, "idem", **{"hash-header": "h"})  # same options: a no-op
        bind(c, "idem", "a")  # weight defaults to 1
        bind(c, "idem", "b", 10_000)
        assert bindings(c, "idem") == {"a": 1, "b": 10_000}
        bind(c, "idem", "a", 250)
        assert bindings(c, "idem") == {"a": 250, "b": 10_000}
        publish(c, [str(i) for i in range(200)], lambda k: "/exchange/idem", lambda k: {"h": k})
        ring = HashRing("idem", [("a", 250), ("b", 10_000)])
        expected = Counter(ring.route(str(i)) for i in range(200))
        assert {q: count_msgs(c, q) for q in ("a", "b")} == {q: expected[q] for q in ("a", "b")}
        control(c, "delete/exchange/idem")
        c.frame("SEND", {"destination": "/exchange/idem/k", "receipt": "gone"})
        error = c.expect_error()
    assert "idem" in error["message"]
    with Client(broker.port) as c:
        declare(c, "idem")  # a new exchange of that name starts without bindings
        assert bindings(c, "idem") == {}


# ---------------------------------------------------------------------------- exchange subscriptions


@pytest.mark.parametrize("ending", ["unsubscribe", "disconnect"])
def test_subscribe_to_exchange_binds_a_private_queue(broker, ending):
    keys = [f"s{i}" for i in range(1000)]
    with Client(broker.port) as c:
        declare(c, "subx")
        bind(c, "subx", "shared")
        sub = Client(broker.port)
        sub.subscribe("/exchange/subx/2", "mine", ack="auto")
        binds = bindings(c, "subx")
        private = [q for q in binds if q != "shared"]
        assert len(private) == 1 and binds[private[0]] == 2
        assert private[0].startswith("amq.gen.subx.")
        # the private queue is not the client's to bind or unbind
        with Client(broker.port) as other:
            other.frame("SEND", {**_bind("subx", queue="/queue/" + private[0]), "receipt": "r"})
            assert "private" in other.expect_error()["message"]
        with Client(broker.port) as other:
            other.frame("SEND", {"destination": "/control/unbind/exchange/subx", "queue": "/queue/" + private[0], "receipt": "r"})
            assert "not bound" in other.expect_error()["message"]
        publish_keys(c, "subx", keys)
        expected = expected_routes("subx", {"shared": 1, private[0]: 2}, keys)
        mine = {k for k, q in expected.items() if q == private[0]}
        got = sub.messages(len(mine))
        sub.expect_nothing()
        assert {m["key"] for m in got} == mine
        assert {m["destination"] for m in got} == {"/exchange/subx/2"}  # what it subscribed to
        assert {m["subscription"] for m in got} == {"mine"}
        assert count_msgs(c, "shared") == len(keys) - len(mine)
        if ending == "unsubscribe":
            sub.unsubscribe("mine")
            assert bindings(c, "subx") == {"shared": 1}
            sub.close()
        else:
            sub.close()
            wait_until(lambda: bindings(c, "subx") == {"shared": 1}, "the private binding to go")
        publish_keys(c, "subx", keys)
        assert count_msgs(c, "shared") == 2 * len(keys) - len(mine)
        assert count_msgs(c, private[0]) == 0


def test_private_queue_is_deleted_with_its_messages(broker):
    with Client(broker.port) as c, Client(broker.port) as sub:
        declare(c, "subp")
        sub.subscribe("/exchange/subp/1", "p", ack="client-individual", prefetch="1")
        private = next(iter(bindings(c, "subp")))
        publish_keys(c, "subp", [str(i) for i in range(10)])
        sub.message()  # one held, nine ready
        assert count_msgs(c, private) == 10
        sub.unsubscribe("p")
        assert count_msgs(c, private) == 0
        assert bindings(c, "subp") == {}
        c.frame("SEND", {"destination": "/exchange/subp/k", "receipt": "r"})
        assert "no bound queue" in c.expect_error()["message"]


# ---------------------------------------------------------------------------- restart


def test_exchanges_and_bindings_survive_a_restart(tmp_path: Path):
    make = make_store_factory("sqlite", tmp_path)
    keys = [f"r{i}" for i in range(1000)]
    weights = {"ra": 1, "rb": 2, "rc": 3, "rd": 1}
    with BrokerThread(make).start() as thread:
        with Client(thread.port) as c, Consumer(thread.port, weights) as consumer:
            declare(c, "rx")
            for q, w in {**weights, "gone": 5}.items():
                bind(c, "rx", q, w)
            unbind(c, "rx", "gone")
            bind(c, "rx", "rb", 1)
            bind(c, "rx", "rb", 2)  # re-weighted twice: the last weight is stored
            declare(c, "rh", **{"hash-header": "customer", "on-missing": "reject"})
            bind(c, "rh", "ra")
            bind(c, "rh", "rb")
            declare(c, "deleted")
            bind(c, "deleted", "ra")
            control(c, "delete/exchange/deleted")
            before = route_through(c, consumer, "rx", keys)
    assert before == expected_routes("rx", weights, keys)
    with BrokerThread(make).start() as thread:
        with Client(thread.port) as c, Consumer(thread.port, weights) as consumer:
            assert bindings(c, "rx") == weights
            assert bindings(c, "rh") == {"ra": 1, "rb": 1}
            after = route_through(c, consumer, "rx", keys)
            assert after == before
            declare(c, "rh", **{"hash-header": "customer", "on-missing": "reject"})  # same options
            c.frame("SEND", {"destination": "/exchange/rh/k", "receipt": "r"})  # options kept: reject
            assert "hash input" in c.expect_error()["message"]
        with Client(thread.port) as c:
            c.frame("SEND", {"destination": "/exchange/deleted/k", "receipt": "r"})
            assert "deleted" in c.expect_error()["message"]


# ---------------------------------------------------------------------------- definitions file


DEFINITIONS_TOML = """
[[exchanges]]
name = "orders"
type = "consistent-hash"
hash-header = "customer-id"

[[exchanges]]
name = "plain"

[[queues]]
name = "o1"

[[bindings]]
exchange = "orders"
queue = "/queue/o1"
weight = 1

[[bindings]]
exchange = "orders"
queue = "o2"
weight = 3

[[bindings]]
exchange = "plain"
queue = "/queue/p1"
"""

DEFINITIONS_JSON = {
    "exchanges": [{"name": "orders", "type": "consistent-hash", "hash-header": "customer-id"}, {"name": "plain"}],
    "queues": [{"name": "o1"}],
    "bindings": [
        {"exchange": "orders", "queue": "/queue/o1", "weight": 1},
        {"exchange": "orders", "queue": "o2", "weight": 3},
        {"exchange": "plain", "queue": "/queue/p1"},
    ],
}


def write_definitions(tmp_path: Path, fmt: str) -> Path:
    path = tmp_path / f"definitions.{fmt}"
    path.write_text(DEFINITIONS_TOML if fmt == "toml" else json.dumps(DEFINITIONS_JSON))
    return path


@pytest.mark.parametrize("fmt", ["toml", "json"])
def test_definitions_file_declares_exchanges_and_bindings(broker_store_dir, fmt):
    store_kind, directory = broker_store_dir
    path = write_definitions(directory, fmt)
    customers = [f"c{i}" for i in range(400)]
    for start in range(2 if store_kind == "sqlite" else 1):  # applying it again is a no-op
        with BrokerThread(make_store_factory(store_kind, directory), config=BrokerConfig(definitions=str(path))).start() as thread:
            with Client(thread.port) as c, Consumer(thread.port, ["o1", "o2", "p1"]) as consumer:
                assert bindings(c, "orders") == {"o1": 1, "o2": 3}
                assert bindings(c, "plain") == {"p1": 1}
                publish(c, customers, lambda k: "/exchange/orders", lambda k: {"customer-id": k})
                got = consumer.routes(len(customers))
                assert got == expected_routes("orders", {"o1": 1, "o2": 3}, customers)
                if start == 0:
                    # changed over STOMP: the file sets its weight again at the next start
                    bind(c, "orders", "o2", 9)


@pytest.fixture(params=["memory", "sqlite"])
def broker_store_dir(request, tmp_path):
    return request.param, tmp_path


BAD_DEFINITIONS = {
    "toml-syntax": ("toml", "[[exchanges]\nname = ", ["cannot read"]),
    "json-syntax": ("json", '{"exchanges": [', ["cannot read"]),
    "unknown-section": ("toml", '[[exchange]]\nname = "x"\n', ["exchanges", "bindings"]),
    "exchange-without-name": ("toml", '[[exchanges]]\ntype = "consistent-hash"\n', ["exchanges[0]", "name"]),
    "both-hash-options": ("json", json.dumps({"exchanges": [{"name": "e", "hash-header": "h", "hash-property": "message-id"}]}), ["exchanges[0]", "hash-header", "hash-property"]),
    "unknown-property": ("toml", '[[exchanges]]\nname = "e"\nhash-property = "user-id"\n', ["exchanges[0]", "user-id"]),
    "unknown-exchange": ("toml", '[[bindings]]\nexchange = "nope"\nqueue = "q"\n', ["bindings[0]", "nope"]),
    "weight-0": ("toml", '[[exchanges]]\nname = "e"\n[[bindings]]\nexchange = "e"\nqueue = "q"\nweight = 0\n', ["bindings[0]", "weight"]),
    "weight-10001": ("json", json.dumps({"exchanges": [{"name": "e"}], "bindings": [{"exchange": "e", "queue": "q", "weight": 1}, {"exchange": "e", "queue": "q2", "weight": 10001}]}), ["bindings[1]", "weight", "10001"]),
    "bind-a-topic": ("toml", '[[exchanges]]\nname = "e"\n[[bindings]]\nexchange = "e"\nqueue = "/topic/t"\n', ["bindings[0]", "/topic/t"]),
    "misspelt-exchange-option": ("toml", '[[exchanges]]\nname = "e"\nhash_header = "h"\n', ["exchanges[0]", "hash_header"]),
    "misspelt-binding-weight": ("json", json.dumps({"exchanges": [{"name": "e"}], "bindings": [{"exchange": "e", "queue": "q", "wieght": 3}]}), ["bindings[0]", "wieght"]),
    "slash-in-exchange-name": ("toml", '[[exchanges]]\nname = "a/b"\n', ["exchanges[0]", "a/b"]),
    "empty-exchange-name": ("toml", '[[exchanges]]\nname = ""\n', ["exchanges[0]", "''"]),
    "conflicting-redeclaration": ("toml", '[[exchanges]]\nname = "e"\n[[exchanges]]\nname = "e"\nhash-header = "h"\n', ["exchanges[1]", "other options"]),
    "queue-a-topic": ("toml", '[[queues]]\nname = "/topic/t"\n', ["queues[0]", "/topic/t"]),
    "queue-bad-overflow": ("toml", '[[queues]]\nname = "q"\noverflow = "drop-tail"\n', ["queues[0]", "overflow", "drop-tail"]),
    "queue-negative-max-length": ("json", json.dumps({"queues": [{"name": "q", "max-length": -1}]}), ["queues[0]", "max-length", "-1"]),
    "queue-misspelt-ttl": ("toml", '[[queues]]\nname = "q"\nmessage_ttl = 5\n', ["queues[0]", "message_ttl"]),
    "missing-file": ("toml", None, ["cannot read"]),
}


def _definitions_error(error: BaseException):
    """The DefinitionsError a failed start raised, wherever it is in the chain or group."""
    from stompmq.broker.definitions import DefinitionsError

    seen = [error]
    while seen:
        e = seen.pop()
        if isinstance(e, DefinitionsError):
            return e
        if isinstance(e, BaseExceptionGroup):
            seen.extend(e.exceptions)
        for linked in (e.__cause__, e.__context__):
            if linked is not None:
                seen.append(linked)
    return None


@pytest.mark.parametrize("case", list(BAD_DEFINITIONS))
def test_bad_definitions_file_fails_the_start(tmp_path, case):
    fmt, text, words = BAD_DEFINITIONS[case]
    path = tmp_path / f"bad.{fmt}"
    if text is not None:
        path.write_text(text)
    thread = BrokerThread(MemoryStore, config=BrokerConfig(definitions=str(path)))
    with pytest.raises(RuntimeError) as info:
        thread.start()
    error = _definitions_error(info.value)
    assert error is not None, info.value
    message = str(error)
    assert str(path) in message
    for word in words:
        assert word in message, (case, message)


def test_bad_definitions_file_fails_the_command_line_start(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[[exchanges]]\nname = "e"\n[[bindings]]\nexchange = "e"\nqueue = "q"\nweight = 0\n')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-m", "stompmq.cli", "--store", "memory", "--port", str(port), "--definitions", str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert str(path) in result.stderr and "bindings[0]" in result.stderr and "weight" in result.stderr, result.stderr


# ---------------------------------------------------------------------------- transactions


def test_exchange_sends_in_a_transaction_route_at_commit(broker):
    keys = [f"t{i}" for i in range(50)]
    with Client(broker.port) as c:
        declare(c, "txx")
        bind(c, "txx", "tx1")
        bind(c, "txx", "tx2")
        c.request("BEGIN", {"transaction": "t"})
        for k in keys:
            c.send_to(f"/exchange/txx/{k}", k, receipt=False, headers={"transaction": "t"})
        c.sync()
        assert count_msgs(c, "tx1") + count_msgs(c, "tx2") == 0
        c.request("COMMIT", {"transaction": "t"})
        expected = Counter(expected_routes("txx", {"tx1": 1, "tx2": 1}, keys).values())
        assert {q: count_msgs(c, q) for q in ("tx1", "tx2")} == dict(expected)


@pytest.mark.parametrize("problem", ["unknown-exchange", "no-bound-queue", "missing-hash-input"])
def test_transaction_with_an_unroutable_exchange_send_applies_nothing(broker, problem):
    """COMMIT is all or nothing: an exchange SEND that cannot be routed fails the COMMIT
    before any of the transaction's frames is applied."""
    with Client(broker.port) as c:
        declare(c, "txe", **{"hash-header": "h", "on-missing": "reject"})
        if problem != "no-bound-queue":
            bind(c, "txe", "txe-q")
        send_all_in = [
            ("/queue/tx-plain", {}),
            ("/exchange/txe/k", {"h": "1"}),
            {
                "unknown-exchange": ("/exchange/nope/k", {}),
                "no-bound-queue": ("/exchange/txe/k", {"h": "2"}),
                "missing-hash-input": ("/exchange/txe/k", {}),
            }[problem],
            ("/queue/tx-plain", {}),
        ]
        c.request("BEGIN", {"transaction": "t"})
        for destination, headers in send_all_in:
            c.send_to(destination, "x", receipt=False, headers={"transaction": "t", **headers})
        c.frame("COMMIT", {"transaction": "t", "receipt": "commit"})
        error = c.expect_error()
    assert error["receipt-id"] == "commit"
    with Client(broker.port) as c:
        assert count_msgs(c, "tx-plain") == 0
        assert count_msgs(c, "txe-q") == 0


def test_failed_start_releases_the_store_and_changes_nothing(tmp_path):
    """A start refused for a bad definitions file closes the store it opened (the database
    lock is not left held) and stores nothing of the file, not even its valid entries."""
    path = tmp_path / "defs.toml"
    path.write_text('[[exchanges]]\nname = "e"\n[[bindings]]\nexchange = "e"\nqueue = "q"\nweight = 0\n')
    make = make_store_factory("sqlite", tmp_path)
    with pytest.raises(RuntimeError):
        BrokerThread(make, config=BrokerConfig(definitions=str(path))).start()
    with BrokerThread(make).start() as thread:
        with Client(thread.port) as c:
            c.frame("SEND", {"destination": "/control/list-bindings/exchange/e", "receipt": "r"})
            assert "no exchange" in c.expect_error()["message"]
    path.write_text('[[exchanges]]\nname = "e"\n[[bindings]]\nexchange = "e"\nqueue = "q"\nweight = 2\n')
    with BrokerThread(make, config=BrokerConfig(definitions=str(path))).start() as thread:
        with Client(thread.port) as c:
            assert bindings(c, "e") == {"q": 2}


async def _store_orphan(path: Path, queue: str) -> None:
    """What a kill -9 leaves behind: a stored message of a subscription's private queue."""
    from stompmq.storage.base import StoredMessage
    from stompmq.storage.sqlite import SQLiteStore

    store = SQLiteStore(str(path))
    await store.open()
    store.insert(StoredMessage(1, queue, 4, {}, b"orphan", 0))
    store.insert(StoredMessage(2, "kept", 4, {}, b"user queue", 0))
    await store.close()


def test_private_queues_left_by_a_crash_are_purged_at_start(tmp_path):
    """A private queue dies with its subscription; one orphaned by a crash must not wait on disk
    for a later subscription that happens to get the same name."""
    import trio

    trio.run(_store_orphan, tmp_path / "broker.db", "amq.gen.e.1.0")
    with BrokerThread(make_store_factory("sqlite", tmp_path)).start() as thread:
        with Client(thread.port) as c:
            assert count_msgs(c, "amq.gen.e.1.0") == 0
            assert count_msgs(c, "kept") == 1


@pytest.mark.parametrize("native", [True, False], ids=["native", "fallback"])
def test_start_warns_only_when_the_native_router_is_missing(make_memory_broker, monkeypatch, caplog, native):
    monkeypatch.setattr("stompmq.server.app.NATIVE", native)
    with caplog.at_level("WARNING", logger="stompmq.server.app"):
        make_memory_broker()
    warned = [r for r in caplog.records if "native router" in r.getMessage()]
    assert len(warned) == (0 if native else 1)
