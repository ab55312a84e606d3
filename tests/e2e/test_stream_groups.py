"""Stream consumer groups (x-stream-group) through the real broker, on every store: resuming after
the last ACK, restarts, /control/stream-group, lag in /api/streams and /metrics, bad input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.server import ServerSettings
from stompmq.server.auth import Permission

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread, restarting
from ..support.stompclient import Client
from ..support.users import NOTHING, write_users
from ..support.waiting import wait_until
from .test_http import Api
from .test_streams import publish, read


def group(c: Client, stream: str, name: str, **headers: str) -> dict[str, str]:
    """``/control/stream-group``'s answer (setting ``offset`` or ``forget`` first if given)."""
    receipt = c.request("SEND", {"destination": f"/control/stream-group/stream/{stream}", "group": name, **headers})
    return {k: receipt[k] for k in ("group", "next-offset", "committed-offset", "lag") if k in receipt.headers}


def test_a_group_resumes_after_its_last_ack(broker: BrokerThread) -> None:
    with Client(broker.port) as c:
        publish(c, "s", 10)
        c.subscribe("/stream/s", ack="client-individual", x_stream_offset="first", x_stream_group="g")
        got = c.messages(10)
        for msg in got[:4]:
            c.ack(msg)
        assert group(c, "s", "g") == {"group": "g", "next-offset": "10", "committed-offset": "4", "lag": "6"}
    with Client(broker.port) as c:  # the same group, no offset: after the last ACK
        c.subscribe("/stream/s", ack="client", x_stream_group="g")
        got = c.messages(6)
        assert [int(m["x-stream-offset"]) for m in got] == list(range(4, 10))
        c.ack(got[2])  # cumulative: up to offset 6
        c.subscribe("/stream/s", "fresh", ack="client", x_stream_group="new")  # no commit yet: "next"
        c.expect_nothing()
    with Client(broker.port) as c:
        c.subscribe("/stream/s", ack="client", x_stream_group="g")
        assert read(c, 3) == [(7, "m7"), (8, "m8"), (9, "m9")]
        c.subscribe("/stream/s", "other", ack="client", x_stream_group="h", x_stream_offset="8")  # explicit wins
        assert read(c, 2) == [(8, "m8"), (9, "m9")]
        c.expect_nothing()
        assert "committed-offset" not in group(c, "s", "new")


def test_a_restart_keeps_the_group_offsets(store_kind: str, tmp_path: Path) -> None:
    if store_kind == "memory":
        pytest.skip("the memory store keeps nothing across a restart")
    with restarting(store_kind, tmp_path) as start:
        with Client(start().port) as c:
            publish(c, "r", 5)
            c.subscribe("/stream/r", ack="client-individual", x_stream_offset="first", x_stream_group="g")
            got = c.messages(5)
            c.ack(got[1])
            c.ack(got[2])
            group(c, "r", "set", offset="1")
            group(c, "r", "gone", offset="3")
            group(c, "r", "gone", forget="true")
        with Client(start().port) as c:
            assert group(c, "r", "g")["committed-offset"] == "3"
            assert group(c, "r", "set")["committed-offset"] == "1"
            assert "committed-offset" not in group(c, "r", "gone")
            c.subscribe("/stream/r", ack="client", x_stream_group="g")
            assert read(c, 2) == [(3, "m3"), (4, "m4")]


def test_control_sets_a_group_only_while_nobody_reads_for_it(broker: BrokerThread) -> None:
    with Client(broker.port) as c:
        publish(c, "c", 5)
        assert group(c, "c", "g", offset="2") == {"group": "g", "next-offset": "5", "committed-offset": "2",
                                                   "lag": "3"}
        sub = c.subscribe("/stream/c", ack="client", x_stream_group="g")
        assert read(c, 3) == [(2, "m2"), (3, "m3"), (4, "m4")]
        with Client(broker.port) as other:
            other.frame("SEND", {"destination": "/control/stream-group/stream/c", "group": "g", "offset": "0"})
            assert "unsubscribe" in other.expect_error()["message"]
        c.unsubscribe(sub)  # unacked entries commit nothing
        assert group(c, "c", "g")["committed-offset"] == "2"
        group(c, "c", "g", offset="4")
        c.subscribe("/stream/c", ack="client", x_stream_group="g")
        assert read(c, 1) == [(4, "m4")]


def test_lag_in_the_api_and_the_metrics(make_broker: Callable[..., BrokerThread]) -> None:
    port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=port, metrics_top_queues=2))
    api = Api(port)
    with Client(broker.port) as c:
        publish(c, "lagging", 10)
        for name, offset in (("a", "1"), ("b", "7"), ("c", "10")):
            group(c, "lagging", name, offset=offset)
    streams = api.get("/api/streams")["items"]
    assert [s["name"] for s in streams] == ["lagging"]
    assert streams[0]["next_offset"] == 10
    groups = streams[0]["groups"]
    assert [{k: v for k, v in g.items() if k != "lag_seconds"} for g in groups] == [
        {"name": "a", "committed_offset": 1, "lag": 9}, {"name": "b", "committed_offset": 7, "lag": 3},
        {"name": "c", "committed_offset": 10, "lag": 0}]
    assert groups[2]["lag_seconds"] == 0 and groups[0]["lag_seconds"] >= groups[1]["lag_seconds"] >= 0
    wait_until(lambda: api.get("/api/streams")["items"][0]["groups"][1]["lag_seconds"] >= 0.2,
               "the lagging group's first unconsumed entry ages")
    status, text = api.call("GET", "/metrics")
    assert status == 200
    lines = [line for line in text.splitlines() if line.startswith("stompmq_stream_group")]
    assert 'stompmq_stream_group_lag{group="a",stream="lagging",vhost="/"} 9.0' in lines
    assert 'stompmq_stream_group_lag{group="b",stream="lagging",vhost="/"} 3.0' in lines
    assert not any('group="c"' in line for line in lines)  # only the two lagging most (bounded)
    assert "stompmq_stream_groups 3.0" in lines
    assert "stompmq_stream_group_lag_max 9.0" in lines
    seconds = {line.split("{")[0].split(" ")[0]: float(line.rsplit(" ", 1)[1]) for line in lines if "lag_seconds" in line}
    assert seconds["stompmq_stream_group_lag_seconds"] >= 0.2 and seconds["stompmq_stream_group_lag_seconds_max"] >= 0.2


@pytest.mark.parametrize(
    ("command", "headers", "problem"),
    [
        ("SUBSCRIBE", {"x-stream-group": ""}, "x-stream-group must be"),
        ("SUBSCRIBE", {"x-stream-group": "a b"}, "x-stream-group must be"),
        ("SUBSCRIBE", {"x-stream-group": "é"}, "x-stream-group must be"),
        ("SUBSCRIBE", {"x-stream-group": "g" * 201}, "x-stream-group must be"),
        ("SUBSCRIBE", {"x-stream-group": "g", "ack": "auto"}, "client-individual ack mode"),
        ("SEND", {"offset": "1"}, "group header"),
        ("SEND", {"group": "g", "offset": "-1"}, "offset must be"),
        ("SEND", {"group": "g/h", "offset": "1"}, "must be 1 to 200"),
    ],
)
def test_bad_group_input_is_an_error(memory_broker: BrokerThread, command: str, headers: dict[str, str],
                                     problem: str) -> None:
    destination = "/stream/x" if command == "SUBSCRIBE" else "/control/stream-group/stream/x"
    with Client(memory_broker.port) as c:
        c.frame(command, {"destination": destination, "id": "1", "ack": "client", **headers})
        assert problem in c.expect_error()["message"]
    with Client(memory_broker.port) as c:  # the broker lives on
        publish(c, "x", 1)


def test_a_stream_keeps_a_bounded_number_of_groups(memory_broker: BrokerThread) -> None:
    with Client(memory_broker.port) as c:
        for n in range(100):
            c.send_to("/control/stream-group/stream/many", receipt=False, headers={"group": f"g{n}", "offset": "0"})
        c.sync()
        c.frame("SUBSCRIBE", {"destination": "/stream/many", "id": "1", "ack": "client", "x-stream-group": "g100"})
        assert "100 consumer groups" in c.expect_error()["message"]
    with Client(memory_broker.port) as c:
        group(c, "many", "g0", forget="true")  # room again
        c.subscribe("/stream/many", ack="client", x_stream_group="g100")


def test_committing_a_group_needs_read_on_the_stream(tmp_path: Path,
                                                     make_memory_broker: Callable[..., BrokerThread]) -> None:
    users = write_users(tmp_path / "users.toml", {
        "reader": Permission(NOTHING, NOTHING, "^/stream/s$"),
        "writer": Permission(NOTHING, "^/stream/", NOTHING),
    })
    broker = make_memory_broker(settings=ServerSettings(port=0, users_file=users))
    with Client(broker.port, login="reader", passcode="pw-reader") as c:
        assert group(c, "s", "g", offset="0")["committed-offset"] == "0"
    with Client(broker.port, login="writer", passcode="pw-writer") as c:
        c.frame("SEND", {"destination": "/control/stream-group/stream/s", "group": "g", "offset": "1"})
        assert "read" in c.expect_error()["message"]
    with Client(broker.port, login="reader", passcode="pw-reader") as c:
        assert group(c, "s", "g")["committed-offset"] == "0"
