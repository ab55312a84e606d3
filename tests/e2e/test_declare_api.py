"""The API declares what it lists: queues with their arguments, and vhosts that count them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.cli import main
from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import BrokerError, Client
from ..support.stores import make_store_factory
from .test_http import Api


def test_a_queue_is_declared_with_arguments_and_deleted_over_the_api(
        make_broker: Callable[..., BrokerThread]) -> None:
    http_port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=http_port))
    api = Api(http_port)
    status, queue = api.call("PUT", "/api/queues/%2F/bounded",
                             {"arguments": {"max-length": 1, "overflow": "reject-publish", "dead-letter": True}})
    assert status == 201, queue
    assert queue["settings"] == {"dead-letter": {"value": True, "source": "declaration"},
                                 "max-length": {"value": 1, "source": "declaration"},
                                 "overflow": {"value": "reject-publish", "source": "declaration"}}
    with Client(broker.port) as c:
        c.send_to("/queue/bounded", "1")
        with pytest.raises(BrokerError, match="is full"):
            c.send_to("/queue/bounded", "2")
    assert api.call("PUT", "/api/queues/%2F/bounded", {"arguments": {"max-length": 5}})[0] == 200  # replaced
    assert api.get("/api/queues/%2F/bounded")["settings"] == {"max-length": {"value": 5, "source": "declaration"}}
    status, error = api.call("PUT", "/api/queues/%2F/x", {"arguments": {"max-lenght": 5}})
    assert status == 400 and "did you mean 'max-length'" in error["error"]
    status, error = api.call("PUT", "/api/queues/%2F/x", {"argumnets": {}})
    assert status == 400 and "arguments" in error["error"]
    assert api.call("GET", "/api/queues/%2F/x")[0] == 404  # refused: nothing declared
    assert api.call("DELETE", "/api/queues/%2F/bounded")[0] == 200
    assert api.call("GET", "/api/queues/%2F/bounded")[0] == 404


def test_list_vhosts_counts_the_declared_queues(make_memory_broker: Callable[..., BrokerThread],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port))
    url = f"http://127.0.0.1:{http_port}"
    for i in range(6):
        assert main(["admin", "--url", url, "declare-queue", f"q{i}", "--argument", "message-ttl=1000"]) == 0
    assert main(["admin", "--url", url, "declare", "events", "--option", "type=topic"]) == 0
    with Client(broker.port) as c:
        c.send_to("/queue/q0", "used")
    capsys.readouterr()
    assert main(["admin", "--url", url, "--json", "list-vhosts"]) == 0
    (vhost,) = json.loads(capsys.readouterr().out)
    assert (vhost["queues"], vhost["queues_declared"], vhost["exchanges"]) == (6, 6, 1)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_deleted_vhost_is_gone_with_everything_in_it_across_a_restart(tmp_path: Path, kind: str) -> None:
    store = make_store_factory(kind, tmp_path)
    http_port = free_port()
    settings = ServerSettings(port=0, http_port=http_port)
    api = Api(http_port)
    with BrokerThread(store, settings=settings).start() as broker:
        assert api.call("PUT", "/api/vhosts/doomed")[0] == 201
        assert api.call("PUT", "/api/queues/doomed/jobs", {"arguments": {"max-length": 5}})[0] == 201
        assert api.call("PUT", "/api/policies/doomed/p", {"pattern": ".*", "definition": {"message-ttl": 60000}})[0] == 201
        with Client(broker.port, host="doomed") as c:
            c.request("SEND", {"destination": "/control/declare/exchange/orders", "type": "direct"})
            c.request("SEND", {"destination": "/control/bind/exchange/orders", "queue": "/queue/jobs",
                               "routing-key": "k"})
            c.request("SEND", {"destination": "/control/declare/stream/events"})
            c.send_to("/queue/jobs", "lost with the vhost")
            c.send_to("/queue/later", "delayed", headers={"delay": "600000"})
            assert api.call("DELETE", "/api/vhosts/doomed")[0] == 200
            c.expect_error()  # its connections are closed
        assert api.call("DELETE", "/api/vhosts/doomed")[0] == 404
        assert api.call("DELETE", "/api/vhosts/%2F")[0] in (400, 404)
        assert [v["name"] for v in api.get("/api/vhosts")["items"]] == ["/"]
        assert api.get("/api/policies")["items"] == []
    with BrokerThread(store, settings=settings).start() as broker:
        assert [v["name"] for v in api.get("/api/vhosts")["items"]] == ["/"]  # not brought back by a stored row
        assert api.call("PUT", "/api/vhosts/doomed")[0] == 201
        assert api.call("GET", "/api/queues/doomed/jobs")[0] == 404  # nothing of it is left
        assert api.call("GET", "/api/queues/doomed/later")[0] == 404
        assert {e["name"] for e in api.get("/api/exchanges?vhost=doomed")["items"]} == {
            "amq.direct", "amq.fanout", "amq.topic"}
        assert api.get("/api/streams?vhost=doomed")["items"] == []
