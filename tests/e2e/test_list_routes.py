"""Lists by vhost at ``/api/{kind}/{vhost}``, as RabbitMQ names them, with the older
``/api/{kind}?vhost=`` kept for a release (it says ``Deprecation: true``): real HTTP and STOMP
on a real broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from .test_exchange_routes import _deprecation
from .test_http import Api

KINDS = ("queues", "exchanges", "topics", "streams", "policies", "operator-policies")


@pytest.fixture
def api(make_memory_broker: Callable[..., BrokerThread]) -> Iterator[Api]:
    """A broker with one of each kind in vhost ``team/a`` and nothing of them in ``/``."""
    port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=port))
    http = Api(port)
    http.call("PUT", "/api/vhosts/team%2Fa")
    assert http.call("PUT", "/api/queues/team%2Fa/jobs", {"arguments": {"max-length": 5}})[0] == 201
    assert http.call("PUT", "/api/exchanges/team%2Fa/events", {"type": "direct"})[0] == 201
    for prefix in ("policies", "operator-policies"):
        assert http.call("PUT", f"/api/{prefix}/team%2Fa/p", {"pattern": "^x$", "definition": {"max-length": 1}})[0] == 201
    with Client(broker.port, host="team/a") as c:
        c.send_to("/stream/log", "entry", receipt="r")
        c.subscribe("/topic/prices.*")
        yield http  # (the topic subscription lives while the test runs)


def names(page: dict[str, Any]) -> list[str]:
    return [item.get("name") or item.get("topic") for item in page["items"]]


@pytest.mark.parametrize("kind", KINDS)
def test_a_vhost_lists_at_its_path_as_the_older_query_form_did(api: Api, kind: str) -> None:
    by_path, by_query = api.get(f"/api/{kind}/team%2Fa"), api.get(f"/api/{kind}?vhost=team%2Fa")
    assert by_path == by_query and names(by_path), kind
    assert set(names(by_path)) - set(names(api.get(f"/api/{kind}/%2F"))), kind  # the default vhost's differ
    assert _deprecation(api, "GET", f"/api/{kind}/team%2Fa") == (200, None)
    assert _deprecation(api, "GET", f"/api/{kind}?vhost=team%2Fa") == (200, "true")
    assert _deprecation(api, "GET", f"/api/{kind}") == (200, None)  # the default vhost (policies: every vhost)


def test_where_a_segment_is_no_vhost_the_older_single_resource_forms_still_answer(api: Api) -> None:
    api.call("PUT", "/api/queues/%2F/orders")
    assert api.get("/api/queues/orders")["name"] == "orders"  # the default vhost's queue: a shortcut
    assert api.get("/api/queues/jobs?vhost=team%2Fa")["settings"]["max-length"]["value"] == 5
    assert _deprecation(api, "GET", "/api/exchanges/events?vhost=team%2Fa") == (200, "true")
    assert api.get("/api/exchanges/events?vhost=team%2Fa")["type"] == "direct"
    assert api.call("GET", "/api/exchanges/nowhere")[0] == 404  # neither a vhost nor an exchange of /
    assert api.call("GET", "/api/streams/nowhere")[1]["error"] == "no vhost 'nowhere'"


def test_a_stream_is_a_resource_of_its_vhost_as_the_list_shows_it(api: Api) -> None:
    """``GET /api/streams/{vhost}/{name}``: the list's entry, 404 with a reason elsewhere."""
    listed = api.get("/api/streams/team%2Fa")["items"]
    assert [s["name"] for s in listed] == ["log"]
    assert api.get("/api/streams/team%2Fa/log") == listed[0]
    assert _deprecation(api, "GET", "/api/streams/team%2Fa/log") == (200, None)
    assert api.call("GET", "/api/streams/%2F/log") == (404, {"error": "no stream 'log' in vhost '/'", "status": 404})
    assert api.call("GET", "/api/streams/nowhere/log")[1]["error"] == "no vhost 'nowhere'"
