"""Exchanges at ``/api/exchanges/{vhost}/{name}``, as RabbitMQ names them, and the older
``?vhost=`` forms kept for a release: real HTTP and STOMP on a real broker."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable

import pytest

from stompmq.cli import main
from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from .test_http import Api


@pytest.fixture
def api(make_memory_broker: Callable[..., BrokerThread]) -> tuple[BrokerThread, Api]:
    port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=port))
    Api(port).call("PUT", "/api/vhosts/dev")
    return broker, Api(port)


def _deprecation(api: Api, method: str, path: str, body: object = None) -> tuple[int, str | None]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(api.base + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.headers.get("deprecation")


def test_an_exchange_of_a_vhost_is_declared_bound_and_routed_through_its_path(api: tuple[BrokerThread, Api]) -> None:
    broker, http = api
    status, ex = http.call("PUT", "/api/exchanges/dev/events", {"type": "direct"})
    assert status == 201 and ex["type"] == "direct"
    status, ex = http.call("POST", "/api/exchanges/dev/events/bindings", {"queue": "audit", "routing_key": "orders"})
    assert status == 201 and ex["bindings"] == [{"queue": "audit", "routing_key": "orders"}]
    with Client(broker.port, host="dev") as c:
        c.send_to("/exchange/events/orders", "routed")
        c.subscribe("/queue/audit")
        assert c.message().body == b"routed"
    assert http.call("GET", "/api/exchanges/%2F/events")[0] == 404  # the default vhost has none of that name
    assert http.call("GET", "/api/exchanges/dev/events")[1]["bindings"] == [{"queue": "audit", "routing_key": "orders"}]
    assert http.call("DELETE", "/api/exchanges/dev/events/bindings/audit?routing_key=orders")[1]["bindings"] == []
    assert http.call("DELETE", "/api/exchanges/dev/events") == (200, {"deleted": "events"})
    assert http.call("GET", "/api/exchanges/dev/events")[0] == 404
    assert http.call("GET", "/api/exchanges/nowhere/events")[1]["error"] == "no vhost 'nowhere'"


def test_each_name_is_one_percent_encoded_segment(api: tuple[BrokerThread, Api]) -> None:
    _, http = api
    http.call("PUT", "/api/vhosts/team%2Fa")
    assert http.call("PUT", "/api/exchanges/team%2Fa/odd%20name%20%C3%A9", {"type": "fanout"})[0] == 201
    assert http.call("GET", "/api/exchanges/team%2Fa/odd%20name%20%C3%A9")[1]["name"] == "odd name é"
    assert [e["name"] for e in http.get("/api/exchanges?vhost=team%2Fa")["items"] if e["type"] == "fanout"] == [
        "amq.fanout", "odd name é"]


def test_the_older_query_forms_still_work_and_say_they_are_deprecated(api: tuple[BrokerThread, Api]) -> None:
    _, http = api
    assert _deprecation(http, "PUT", "/api/exchanges/old?vhost=dev", {"type": "direct"}) == (201, "true")
    assert _deprecation(http, "POST", "/api/exchanges/old/bindings?vhost=dev", {"queue": "q", "routing_key": "k"}) \
        == (201, "true")
    assert _deprecation(http, "GET", "/api/exchanges/dev/old") == (200, None)
    assert http.call("GET", "/api/exchanges/dev/old")[1]["bindings"] == [{"queue": "q", "routing_key": "k"}]
    assert _deprecation(http, "DELETE", "/api/exchanges/old/bindings/q?vhost=dev&routing_key=k") == (200, "true")
    assert _deprecation(http, "GET", "/api/exchanges/old?vhost=dev") == (200, "true")
    status, answer = http.call("GET", "/api/exchanges/dev/old?vhost=dev")
    assert status == 400 and "not both" in answer["error"]
    assert _deprecation(http, "DELETE", "/api/exchanges/old?vhost=dev") == (200, "true")


def test_admin_bind_takes_a_routing_key(api: tuple[BrokerThread, Api], capsys: pytest.CaptureFixture[str]) -> None:
    broker, http = api
    url = http.base

    def admin(*args: str) -> int:
        code = main(["admin", "--url", url, "--vhost", "dev", *args])
        capsys.readouterr()
        return code

    assert admin("declare", "prices", "--option", "type=topic") == 0
    assert admin("bind", "prices", "eu", "--routing-key", "eu.*") == 0
    assert http.call("GET", "/api/exchanges/dev/prices")[1]["bindings"] == [{"queue": "eu", "routing_key": "eu.*"}]
    with Client(broker.port, host="dev") as c:
        c.send_to("/exchange/prices/eu.fr", "bonjour")
        c.send_to("/exchange/prices/us.ny", "hi")
        c.subscribe("/queue/eu")
        assert c.message().body == b"bonjour"
        c.expect_nothing()
    assert http.call("DELETE", "/api/exchanges/dev/prices/bindings/eu?routing_key=eu.*")[0] == 200
