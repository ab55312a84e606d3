"""Policies through the management API and ``stompmq admin``, on real brokers and stores.

The timing figures are in virtual time (tests/broker/test_policies.py); here: the routes and
the CLI, a policy's TTL reaching messages already stored in a SQLite file, a policy surviving a
restart, and a change on one broker applied by another sharing a PostgreSQL database.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stompmq.cli import main
from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stores import make_store_factory
from ..support.waiting import send_all, wait_until
from .test_http import Api

TTL = {"pattern": "^orders\\.", "apply-to": "queues", "priority": 1, "definition": {"message-ttl": 200}}


def ready(api: Api, queue: str) -> int:
    status, body = api.call("GET", f"/api/queues/%2F/{queue}")
    return int(body["ready"]) if status == 200 else -1


def stream_settings(api: Api, stream: str) -> dict[str, Any] | None:
    return next((s["settings"] for s in api.get("/api/streams")["items"] if s["name"] == stream), None)


def started(store: Callable[[], Any], http_port: int) -> BrokerThread:
    return BrokerThread(store, settings=ServerSettings(port=0, http_port=http_port)).start()


@pytest.fixture
def sqlite_broker(tmp_path: Path) -> Iterator[tuple[Callable[[], Any], int, list[BrokerThread]]]:
    running: list[BrokerThread] = []
    try:
        yield make_store_factory("sqlite", tmp_path), free_port(), running
    finally:
        for broker in running:
            broker.stop()


def test_a_policy_set_over_the_api_expires_stored_messages_and_survives_a_restart(sqlite_broker) -> None:
    store, http_port, running = sqlite_broker
    broker = started(store, http_port)
    running.append(broker)
    api = Api(http_port)
    send_all(broker.port, "/queue/orders.eu", [str(i) for i in range(50)])
    wait_until(lambda: ready(api, "orders.eu") == 50, "the messages stored")
    status, body = api.call("PUT", "/api/policies/%2F/short", TTL)
    assert status == 201, body
    assert api.call("PUT", "/api/policies/%2F/short", TTL)[0] == 200  # the same again: changed, not created
    wait_until(lambda: ready(api, "orders.eu") == 0, "the waiting messages expired", timeout=10)
    queue = api.get("/api/queues/%2F/orders.eu")
    assert queue["settings"] == {"message-ttl": {"value": 200, "source": "policy", "policy": "short"}}
    broker.stop()
    running.remove(broker)
    broker = started(store, http_port)
    running.append(broker)
    assert api.get("/api/policies") == {"items": [{"vhost": "/", "name": "short", **TTL}]}
    send_all(broker.port, "/queue/orders.us", ["late"])
    wait_until(lambda: ready(api, "orders.us") == 0, "a new message expired under the stored policy", timeout=10)
    assert api.call("DELETE", "/api/policies/%2F/short")[0] == 200
    assert api.call("DELETE", "/api/policies/%2F/short")[0] == 404
    send_all(broker.port, "/queue/orders.us", ["kept"])
    wait_until(lambda: ready(api, "orders.us") == 1, "a message kept without the policy")


@pytest.mark.parametrize(("path", "body", "status", "reason"), [
    ("/api/policies/%2F/p", {"pattern": ".*", "definition": {"mesage-ttl": 1}}, 400, "did you mean 'message-ttl'"),
    ("/api/policies/%2F/p", {"pattern": ".*", "definition": {"max-length": "many"}}, 400, "max-length must be"),
    ("/api/operator-policies/%2F/p", {"pattern": ".*", "definition": {"dead-letter": True}}, 400, "cap numbers"),
    ("/api/policies/%2F/p", {"pattern": ".*", "apply-to": "exchanges", "definition": {"alternate-exchange": "x"}},
     400, "exchanges have no settings a policy can give"),
    ("/api/policies/%2F/p", {"pattern": ".*", "apply-to": "streams", "definition": {"max-lenght-bytes": 1}}, 400,
     "did you mean 'max-length-bytes'"),
    ("/api/policies/nowhere/p", {"pattern": ".*", "definition": {"max-length": 1}}, 404, "no vhost"),
    ("/api/policies/p", {"pattern": ".*", "definition": {"max-length": 1}}, 404, "not a route of /api/policies: use"),
])
def test_a_bad_policy_is_refused_with_a_reason(make_memory_broker: Callable[..., BrokerThread], path: str,
                                              body: dict[str, Any], status: int, reason: str) -> None:
    http_port = free_port()
    make_memory_broker(settings=ServerSettings(port=0, http_port=http_port))
    answer = Api(http_port).call("PUT", path, body)
    assert answer[0] == status and reason in answer[1]["error"], answer


def test_the_cli_sets_lists_and_clears_policies_and_operator_policies(
        make_memory_broker: Callable[..., BrokerThread], capsys: pytest.CaptureFixture[str]) -> None:
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port))
    url = f"http://127.0.0.1:{http_port}"

    def admin(*args: str) -> tuple[int, str, str]:
        code = main(["admin", "--url", url, *args])
        out, err = capsys.readouterr()
        return code, out, err

    assert admin("set-policy", "bound", "--pattern", "^jobs$", "--definition", "max-length=5",
                 "--definition", "dead-letter=true")[0] == 0
    assert admin("set-policy", "cap", "--operator", "--pattern", ".*", "--definition", "max-length=2")[0] == 0
    code, _, err = admin("set-policy", "bad", "--pattern", ".*", "--definition", "max-lenght=5")
    assert code == 1 and "did you mean 'max-length'" in err
    code, out, _ = admin("list-policies")
    header, row = out.splitlines()
    assert header.split()[:3] == ["VHOST", "NAME", "PATTERN"] and row.split()[:3] == ["/", "bound", "^jobs$"]
    send_all(broker.port, "/queue/jobs", ["a"])
    queue = Api(http_port).get("/api/queues/%2F/jobs")
    assert queue["settings"]["max-length"] == {"value": 2, "source": "operator-policy", "policy": "cap"}
    assert queue["settings"]["dead-letter"] == {"value": True, "source": "policy", "policy": "bound"}
    assert json.loads(admin("--json", "list-policies", "--operator")[1])[0]["name"] == "cap"
    assert admin("clear-policy", "--operator", "cap")[0] == 0
    assert admin("clear-policy", "--operator", "cap")[0] == 1
    assert Api(http_port).get("/api/queues/%2F/jobs")["settings"]["max-length"]["value"] == 5


@pytest.mark.postgres
def test_a_policy_set_on_one_broker_applies_on_every_broker_sharing_the_database(tmp_path: Path) -> None:
    store = make_store_factory("postgres", tmp_path)
    ports = [free_port(), free_port()]
    brokers = [started(store, port) for port in ports]
    try:
        first, second = (Api(port) for port in ports)
        send_all(brokers[1].port, "/queue/orders.shared", ["x"])
        wait_until(lambda: ready(second, "orders.shared") == 1, "stored")
        assert first.call("PUT", "/api/policies/%2F/short", TTL)[0] == 201
        wait_until(lambda: second.get("/api/policies")["items"] != [], "the other broker has the policy", timeout=10)
        assert second.get("/api/queues/%2F/orders.shared")["settings"]["message-ttl"]["policy"] == "short"
        wait_until(lambda: ready(second, "orders.shared") == 0, "expired", timeout=10)
        assert first.call("DELETE", "/api/policies/%2F/short")[0] == 200
        wait_until(lambda: second.get("/api/policies")["items"] == [], "cleared on the other broker too", timeout=10)
        send_all(brokers[1].port, "/stream/events.shared", ["e"])
        retain = {"pattern": "^events\\.", "apply-to": "streams", "definition": {"max-age": 60}}
        assert first.call("PUT", "/api/policies/%2F/retain", retain)[0] == 201
        wait_until(lambda: stream_settings(second, "events.shared") == {
            "max-age": {"value": 60, "source": "policy", "policy": "retain"}}, "the stream's retention", timeout=10)
        assert first.call("DELETE", "/api/policies/%2F/retain")[0] == 200
        wait_until(lambda: stream_settings(second, "events.shared") == {}, "the stream's retention cleared",
                   timeout=10)
    finally:
        for broker in brokers:
            broker.stop()
