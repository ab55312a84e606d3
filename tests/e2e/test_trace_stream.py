"""A vhost's durable message trace (/stream/stompmq.trace) on a real broker: every step of a
queue message as an entry, headers only unless asked, readable by the API, a STOMP stream
subscriber and ``stompmq admin trace tail``; kept on across a restart; nothing receipted lost
across kill -9."""

from __future__ import annotations

import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stompmq.admin import main as admin
from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings

from ..support.broker_process import BrokerProcess, free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client, control
from ..support.waiting import wait_until
from .test_http import Api

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def events(api: Api, after: int = 0) -> list[dict[str, Any]]:
    return api.get(f"/api/trace/events?after={after}&limit=1000")["items"]


def steps(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["headers"]["x-trace-event"], e["headers"]["x-trace-queue"]) for e in items]


def test_every_step_of_a_message_is_an_entry(make_broker: Callable[..., BrokerThread]) -> None:
    port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=port),
                         config=BrokerConfig(dead_letter_rejected=True))
    api = Api(port)
    assert api.get("/api/trace") == {"on": False, "body_bytes": 0, "stream": "/stream/stompmq.trace", "next_offset": 0}
    assert api.call("PUT", "/api/trace", {"on": True, "body_bytes": 4})[1]["on"] is True
    assert api.call("PUT", "/api/trace", {"on": "yes"})[0] == 400
    assert api.call("PUT", "/api/trace", {"on": True, "body_bytes": -1})[0] == 400
    with Client(broker.port) as c:
        c.send_to("/queue/orders", "order-1", headers={"traceparent": TRACEPARENT, "x-producer-id": "p"})
        c.subscribe("/queue/orders", ack="client-individual")
        c.nack(c.message(), requeue="false")
        c.subscribe("/queue/DLQ.orders", ack="client-individual")
        c.ack(c.message())
        control(c, "declare/queue/short", **{"message-ttl": "50"})
        c.send_to("/queue/short", "gone")
        wait_until(lambda: (api.get("/api/queues/%2F/short")["oldest_ready_age"] or 0) > 0.1, "past its TTL")
        c.subscribe("/queue/short")  # dispatch finds it expired
        wait_until(lambda: ("expire", "short") in steps(events(api)), "the expiry traced", timeout=15)
    items = events(api)
    assert steps(items) == [
        ("publish", "orders"), ("deliver", "orders"), ("nack", "orders"), ("dead-letter", "orders"),
        ("publish", "DLQ.orders"), ("deliver", "DLQ.orders"), ("ack", "DLQ.orders"),
        ("publish", "short"), ("expire", "short"),
    ]
    first = items[0]
    assert first["headers"]["traceparent"] == TRACEPARENT and first["body"] == "orde"
    assert first["headers"]["x-trace-body-size"] == "7"
    assert first["headers"]["x-trace-producer-id"] == "p" and "x-producer-id" not in first["headers"]
    assert items[2]["headers"]["x-trace-requeue"] == "false"
    assert items[3]["headers"]["x-trace-reason"].startswith("rejected with NACK")
    assert [e["offset"] for e in items] == list(range(len(items)))
    with Client(broker.port) as reader:  # any stream consumer reads it
        reader.subscribe("/stream/stompmq.trace", x_stream_offset="first")
        assert [m["x-trace-event"] for m in reader.messages(len(items))] == [s for s, _ in steps(items)]
    assert api.call("PUT", "/api/trace", {"on": False})[1]["on"] is False
    with Client(broker.port) as c:
        c.send_to("/queue/orders", "untraced")
    assert len(events(api)) == len(items)


def test_admin_trace_on_tail_and_off(make_memory_broker: Callable[..., BrokerThread],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=port))
    url = ["--url", f"http://127.0.0.1:{port}"]
    assert admin([*url, "trace", "on"]) == 0
    with Client(broker.port) as c:
        c.subscribe("/queue/jobs")
        c.send_to("/queue/jobs", "j", headers={"traceparent": TRACEPARENT})
        c.message()
    capsys.readouterr()
    assert admin([*url, "trace", "tail", "--from", "first", "--count", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("0 ") and " publish jobs id=" in lines[0]
    assert f"traceparent={TRACEPARENT}" in lines[0] and " deliver jobs " in lines[1] and "subscription=" in lines[1]
    assert admin([*url, "trace", "off"]) == 0
    assert admin([*url, "--json", "trace", "status"]) == 0
    assert '"on": false' in capsys.readouterr().out
    assert admin([*url, "trace", "tail", "--from", "soon"]) == 2


@pytest.mark.slow
def test_no_receipted_event_is_lost_across_kill_9_and_the_trace_stays_on(tmp_path: Path) -> None:
    http_port = free_port()
    n = 300
    with BrokerProcess(tmp_path / "trace.db", "--http-port", str(http_port)) as broker:
        broker.start()
        api = Api(http_port)
        wait_until(lambda: _reachable(api), "the management API")
        api.call("PUT", "/api/trace", {"on": True})
        with Client(broker.port) as c:
            for i in range(n):  # each SEND receipted before the next
                c.send_to("/queue/crash", str(i), headers={"n": str(i)})
        broker.kill9()
        broker.start()
        wait_until(lambda: _reachable(api), "the management API again")
        assert api.get("/api/trace")["on"] is True  # resumed from the stream's stored options
        published = [e["headers"]["n"] for e in events(api) if e["headers"]["x-trace-event"] == "publish"]
        assert published == [str(i) for i in range(n)]  # 0 lost, in order
        with Client(broker.port) as c:
            c.subscribe("/queue/crash")
            c.messages(n)
        wait_until(lambda: sum(e["headers"]["x-trace-event"] == "deliver" for e in events(api, n)) == n,
                   "the deliveries after the restart traced")


def _reachable(api: Api) -> bool:
    try:
        return api.call("GET", "/healthz")[0] == 200
    except (urllib.error.URLError, OSError):
        return False
