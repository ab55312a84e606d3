"""The API declares what it lists: queues with their arguments, and vhosts that count them."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from stompmq.cli import main
from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import BrokerError, Client
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
