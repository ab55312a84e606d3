"""``stompmq admin import-rabbitmq``: a RabbitMQ definitions file becomes the same routing on a
real broker (the plan, the users file, and messages published through every binding)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stompmq.admin import main as admin_main
from stompmq.rabbitmq_import import LOCKED, plan, translate
from stompmq.server import ServerSettings
from stompmq.server.auth import Users, verify_password
from stompmq.server.users_cli import users_main

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import BrokerError, Client
from ..support.stores import make_store_factory
from .test_http import Api

#: What ``rabbitmqctl export_definitions`` writes, with every kind the importer maps and a few it cannot.
DEFINITIONS = {
    "rabbit_version": "3.13.7",
    "users": [
        {"name": "alice", "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
         "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["administrator"], "limits": {}},
        {"name": "bob", "password_hash": "x", "hashing_algorithm": "rabbit_password_hashing_sha256",
         "tags": "monitoring,management"},
    ],
    "vhosts": [{"name": "/"}, {"name": "staging", "limits": []}],
    "permissions": [
        {"user": "alice", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
        {"user": "alice", "vhost": "staging", "configure": ".*", "write": ".*", "read": ".*"},
        {"user": "bob", "vhost": "/", "configure": "", "write": "^orders$", "read": "^q\\.(eu|us)$"},
    ],
    "topic_permissions": [],
    "parameters": [{"value": {"src-uri": "amqp://"}, "vhost": "/", "component": "shovel", "name": "s1"}],
    "global_parameters": [{"name": "cluster_name", "value": "rabbit@old"}],
    "policies": [{"vhost": "/", "name": "ttl", "pattern": "^q\\.", "apply-to": "classic_queues",
                  "definition": {"message-ttl": 600000, "dead-letter-exchange": "dlx", "ha-mode": "all"},
                  "priority": 1},
                 {"vhost": "/", "name": "mirrors", "pattern": ".*", "apply-to": "all",
                  "definition": {"ha-mode": "all"}, "priority": 0},
                 {"vhost": "/", "name": "retain", "pattern": "^events$", "apply-to": "streams", "priority": 0,
                  "definition": {"max-age": "7D", "max-length-bytes": 10**9, "message-ttl": 5,
                                 "stream-max-segment-size-bytes": 500000000}},
                 {"vhost": "/", "name": "ae", "pattern": ".*", "apply-to": "exchanges", "priority": 0,
                  "definition": {"alternate-exchange": "unrouted"}}],
    "operator_policies": [{"vhost": "/", "name": "caps", "pattern": ".*", "apply-to": "queues",
                           "definition": {"max-length": 100000, "consumer-timeout": 1800000}, "priority": 0}],
    "queues": [
        {"name": "q.eu", "vhost": "/", "durable": True, "auto_delete": False,
         "arguments": {"x-message-ttl": 600000, "x-dead-letter-exchange": "dlx"}},
        {"name": "q.us", "vhost": "/", "durable": True, "auto_delete": False,
         "arguments": {"x-queue-type": "quorum", "x-single-active-consumer": True}},
        {"name": "q.errors", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}},
        {"name": "q.all", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}},
        {"name": "q.fan1", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}},
        {"name": "q.fan2", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}},
        {"name": "q.s1", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}},
        {"name": "q.s2", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}},
        {"name": "q.stocks", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}},
        {"name": "q.small", "vhost": "/", "durable": True, "auto_delete": False,
         "arguments": {"x-max-length": 2, "x-overflow": "reject-publish"}},
        {"name": "events", "vhost": "/", "durable": True, "auto_delete": False,
         "arguments": {"x-queue-type": "stream", "x-max-age": "7D", "x-stream-max-segment-size-bytes": 1000}},
        {"name": "q.staging", "vhost": "staging", "durable": True, "auto_delete": False, "arguments": {}},
    ],
    "exchanges": [
        {"name": "orders", "vhost": "/", "type": "direct", "durable": True, "auto_delete": False,
         "internal": False, "arguments": {}},
        {"name": "logs", "vhost": "/", "type": "topic", "durable": True, "auto_delete": False,
         "internal": False, "arguments": {}},
        {"name": "broadcast", "vhost": "/", "type": "fanout", "durable": True, "auto_delete": False,
         "internal": False, "arguments": {}},
        {"name": "shards", "vhost": "/", "type": "x-consistent-hash", "durable": True, "auto_delete": False,
         "internal": False, "arguments": {"hash-header": "customer"}},
        {"name": "by-headers", "vhost": "/", "type": "headers", "durable": True, "auto_delete": False,
         "internal": False, "arguments": {}},
        {"name": "jobs", "vhost": "staging", "type": "direct", "durable": True, "auto_delete": False,
         "internal": False, "arguments": {}},
    ],
    "bindings": [
        {"source": "orders", "vhost": "/", "destination": "q.eu", "destination_type": "queue",
         "routing_key": "eu", "arguments": {}},
        {"source": "orders", "vhost": "/", "destination": "q.us", "destination_type": "queue",
         "routing_key": "us", "arguments": {}},
        {"source": "logs", "vhost": "/", "destination": "q.errors", "destination_type": "queue",
         "routing_key": "*.error", "arguments": {}},
        {"source": "logs", "vhost": "/", "destination": "q.all", "destination_type": "queue",
         "routing_key": "#", "arguments": {}},
        {"source": "broadcast", "vhost": "/", "destination": "q.fan1", "destination_type": "queue",
         "routing_key": "", "arguments": {}},
        {"source": "broadcast", "vhost": "/", "destination": "q.fan2", "destination_type": "queue",
         "routing_key": "", "arguments": {}},
        {"source": "shards", "vhost": "/", "destination": "q.s1", "destination_type": "queue",
         "routing_key": "1", "arguments": {}},
        {"source": "shards", "vhost": "/", "destination": "q.s2", "destination_type": "queue",
         "routing_key": "2", "arguments": {}},
        {"source": "shards", "vhost": "/", "destination": "events", "destination_type": "queue",
         "routing_key": "1", "arguments": {}},
        {"source": "amq.topic", "vhost": "/", "destination": "q.stocks", "destination_type": "queue",
         "routing_key": "stock.#", "arguments": {}},
        {"source": "logs", "vhost": "/", "destination": "broadcast", "destination_type": "exchange",
         "routing_key": "#", "arguments": {}},
        {"source": "by-headers", "vhost": "/", "destination": "q.all", "destination_type": "queue",
         "routing_key": "", "arguments": {"x-match": "all"}},
        {"source": "jobs", "vhost": "staging", "destination": "q.staging", "destination_type": "queue",
         "routing_key": "run", "arguments": {}},
    ],
}


def test_plan_lists_everything_it_cannot_map():
    result = plan(DEFINITIONS, {"alice": "s3cret"})
    text = result.text()
    for unmapped in ("type headers", "exchange-to-exchange", "'by-headers' -> 'q.all'", "tag management",
                     "key ha-mode", "'mirrors' on /: none of its keys", "parameter:", "x-stream-max-segment-size-bytes",
                     "key stream-max-segment-size-bytes", "key message-ttl: not a setting of streams",
                     "'ae' on /: apply-to exchanges"):
        assert any(unmapped in line for line in result.unmapped), unmapped
    assert not any("cluster_name" in line for line in result.unmapped)
    assert any("DLQ.q.eu" in line for line in result.differs)
    assert any("quorum" in line for line in result.differs)
    assert "/control/declare/stream/events max-age=604800" in text
    assert "/control/declare/queue/q.small max-length=2 overflow=reject-publish" in text
    assert "/control/declare/exchange/shards hash-header=customer" in text
    assert "/control/bind/exchange/shards queue=/stream/events weight=1" in text
    assert result.vhosts["staging"][0].destination == "/control/declare/vhost/staging"
    assert [(p.name, p.operator, p.body) for p in result.policies] == [
        ("ttl", False, {"pattern": "^q\\.", "apply-to": "queues", "priority": 1,
                        "definition": {"message-ttl": 600000, "dead-letter": True}}),
        ("retain", False, {"pattern": "^events$", "apply-to": "streams", "priority": 0,
                           "definition": {"max-age": 604800, "max-length-bytes": 10**9}}),
        ("caps", True, {"pattern": ".*", "apply-to": "queues", "priority": 0,
                        "definition": {"max-length": 100000, "ack-timeout": 1800}})]
    assert any("apply-to classic_queues" in line for line in result.differs)
    assert result.locked == ["bob"] and not verify_password("", LOCKED)
    assert verify_password("s3cret", result.users["alice"].password)


def test_entries_without_a_vhost_go_to_the_one_given():
    result = plan({"queues": [{"name": "q", "durable": True, "arguments": {}}]}, {}, "staging")
    assert [s.destination for s in result.vhosts["staging"]] == ["/control/declare/vhost/staging",
                                                                 "/control/declare/queue/q"]


@pytest.mark.parametrize("pattern, allowed, refused", [
    ("^orders$", ["/queue/orders", "/exchange/orders", "/topic/orders"],
     ["/queue/orders2", "/queue/my-orders", "/exchange/orders2", "/queue/x/orders"]),
    ("^q\\.(eu|us)$", ["/queue/q.eu", "/stream/q.us"], ["/queue/q.eux", "/queue/xq.eu"]),
    ("^amq\\.gen|^tmp[.^]", ["/queue/amq.gen-x", "/queue/tmp.1", "/temp-queue/tmp^"],
     ["/queue/a.tmp.1", "/queue/tmpx"]),
    ("error", ["/topic/app.error", "/queue/errors", "/reply-queue/error"], ["/queue/warn"]),
    ("", [], ["/queue/a", "/exchange/x"]),
    ("^[^$]x$", ["/queue/ax"], ["/queue/$x", "/queue/abx"]),
])
def test_permission_patterns_match_the_same_names(pattern, allowed, refused):
    translated = translate(pattern)
    assert all(re.search(translated, d) for d in allowed), translated
    assert not any(re.search(translated, d) for d in refused), translated


def _count(c: Client, queue: str) -> int:
    return int(c.request("SEND", {"destination": "/control/count-msgs/queue/" + queue})["num-messages"])


def test_import_routes_every_binding_like_rabbitmq(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    definitions = tmp_path / "definitions.json"
    definitions.write_text(json.dumps(DEFINITIONS))
    passwords = tmp_path / "passwords"
    passwords.write_text("alice:s3cret\n")
    users_file = tmp_path / "users.toml"
    http_port = free_port()
    settings = ServerSettings(port=0, http_port=http_port)
    with BrokerThread(make_store_factory("sqlite", tmp_path), settings=settings).start() as broker:
        argv = ["import-rabbitmq", str(definitions), "--broker", f"stomp://127.0.0.1:{broker.port}",
                "--users-file", str(users_file), "--password-file", str(passwords),
                "--url", f"http://127.0.0.1:{http_port}"]
        assert admin_main([*argv, "--dry-run"]) == 0
        assert "not mapped:" in capsys.readouterr().out
        with Client(broker.port) as c:  # the dry run declared nothing
            assert c.request("SEND", {"destination": "/control/list-bindings/exchange/amq.topic"})[
                "num-bindings"] == "0"
        assert admin_main(argv) == 0
        assert Users.load(users_file).users["bob"].password == LOCKED
        assert users_main(["--users-file", str(users_file), "passwd", "bob", "--password", "b0b"]) == 0
        assert admin_main(argv) == 0  # idempotent, and bob keeps the password set since
        with Client(broker.port) as p:
            sends = {
                "/exchange/orders/eu": 1, "/exchange/orders/us": 1, "/exchange/orders/asia": 1,
                "/exchange/logs/app.error": 1, "/exchange/logs/app.info": 1, "/exchange/broadcast/x": 1,
                "/topic/stock.nyse": 1, "/topic/weather": 1,
            }
            for destination, n in sends.items():
                for _ in range(n):
                    p.send_to(destination, destination)
            for customer in range(30):
                p.send_to("/exchange/shards", "c", headers={"customer": f"c{customer % 10}"})
            expected = {"q.eu": 1, "q.us": 1, "q.errors": 1, "q.all": 2, "q.fan1": 1, "q.fan2": 1,
                        "q.stocks": 1}
            assert {q: _count(p, q) for q in expected} == expected
            shards = _count(p, "q.s1"), _count(p, "q.s2")
            offsets = p.request("SEND", {"destination": "/control/stream-offsets/stream/events"})
            in_stream = int(offsets["next-offset"]) - int(offsets["first-offset"])
            assert sum(shards) + in_stream == 30 and all(n % 3 == 0 for n in (*shards, in_stream))
            p.send_to("/queue/q.small", "1")
            p.send_to("/queue/q.small", "2")
            with pytest.raises(BrokerError, match="q.small"):
                p.send_to("/queue/q.small", "3")  # x-max-length 2, x-overflow reject-publish
        queue = Api(http_port).get("/api/queues/%2F/q.errors")  # the policies, applied
        assert queue["settings"]["max-length"] == {"value": 100000, "source": "operator-policy", "policy": "caps"}
        assert queue["settings"]["dead-letter"] == {"value": True, "source": "policy", "policy": "ttl"}
        s1, s2 = Client(broker.port), Client(broker.port)  # x-single-active-consumer: only the first
        s1.subscribe("/queue/q.us", ack="client")
        s2.subscribe("/queue/q.us", ack="client")
        assert s1.message().body == b"/exchange/orders/us"
        s2.expect_nothing()
        with Client(broker.port, host="staging") as staging:
            staging.send_to("/exchange/jobs/run", "job")
            assert _count(staging, "q.staging") == 1
    users = Users.load(users_file)
    assert users.authenticate("bob", "b0b") is not None
    assert users.authenticate("alice", "s3cret") is not None
    bob = users.users["bob"].permissions["/"]
    assert bob.allows("write", "/exchange/orders") and not bob.allows("write", "/queue/q.eu")
    assert bob.allows("read", "/queue/q.eu") and not bob.allows("configure", "/queue/q.eu")


def test_imported_permissions_guard_the_same_names(tmp_path: Path, make_memory_broker):
    """bob had RabbitMQ write ``^orders$``, read ``^q\\.(eu|us)$``: the broker enforces the same names;
    alice, an administrator, imports into the secured broker (over STOMP alone: no policies)."""
    definitions = tmp_path / "definitions.json"
    definitions.write_text(json.dumps({k: v for k, v in DEFINITIONS.items() if not k.endswith("policies")}))
    passwords = tmp_path / "passwords"
    passwords.write_text("alice:a1ice\nbob:b0b\n")
    users_file = tmp_path / "users.toml"

    def run(port: int, credentials: str = "") -> int:
        return admin_main(["import-rabbitmq", str(definitions), "--broker", f"stomp://{credentials}127.0.0.1:{port}",
                           "--users-file", str(users_file), "--password-file", str(passwords)])

    assert run(make_memory_broker().port) == 0  # writes the users file
    secured = make_memory_broker(settings=ServerSettings(port=0, users_file=str(users_file)))
    assert run(secured.port, "bob:b0b@") == 1  # bob may not declare
    assert run(secured.port, "alice:a1ice@") == 0
    with Client(secured.port, login="bob", passcode="b0b") as bob:
        bob.send_to("/exchange/orders/eu", "allowed")
        bob.subscribe("/amq/queue/q.eu")  # /queue/q.eu: readable
        assert bob.message().body == b"allowed"
    for command, destination in (("SEND", "/queue/q.eu"), ("SUBSCRIBE", "/queue/q.all"), ("SEND", "/exchange/logs/x")):
        with Client(secured.port, login="bob", passcode="b0b") as bob:
            with pytest.raises(BrokerError, match="access refused"):
                bob.request(command, {"destination": destination, "id": "s"})


@pytest.mark.parametrize("content", ["not json", "[]", '{"queues": {"q": 1}}',
                                     '{"queues": [{"name": "q", "arguments": "oops"}]}'])
def test_bad_definitions_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str):
    definitions = tmp_path / "definitions.json"
    definitions.write_text(content)
    assert admin_main(["import-rabbitmq", str(definitions), "--dry-run"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
