"""The management API's message operations over real HTTP on a real broker: get, move, and
publish under a resource alarm."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password

from ..support.broker_process import BrokerProcess, Peer, free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.waiting import send_all, wait_until
from .test_http import Api


def _broker(make_broker: Callable[..., BrokerThread], **config: object) -> tuple[BrokerThread, Api]:
    port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=port), config=BrokerConfig(**config))  # type: ignore[arg-type]
    return broker, Api(port)


def _counts(api: Api, name: str) -> tuple[int, int]:
    queue = api.get(f"/api/queues/%2F/{name}")
    return queue["ready"], queue["unacked"]


def test_get_takes_the_first_messages_for_good(make_broker: Callable[..., BrokerThread]) -> None:
    """A window of 8 makes the get page through the store; what it took is never delivered again."""
    broker, api = _broker(make_broker, window=8)
    send_all(broker.port, "/queue/jobs", [f"m{i}" for i in range(30)], lambda i: {"n": str(i)})
    status, body = api.call("POST", "/api/queues/%2F/jobs/get", {"count": 20})
    assert status == 200, body
    assert [m["body"] for m in body["items"]] == [f"m{i}" for i in range(20)]
    first = body["items"][0]
    assert first["headers"]["n"] == "0" and first["redelivery_count"] == 0 and first["age"] >= 0
    assert _counts(api, "jobs") == (10, 0)
    assert api.get("/api/queues/%2F/jobs")["acked"] == 20
    with Client(broker.port) as consumer:
        consumer.subscribe("/queue/jobs", ack="client-individual", prefetch="100")
        assert [m.body for m in consumer.messages(10)] == [f"m{i}".encode() for i in range(20, 30)]
        consumer.expect_nothing(0.2)
        status, body = api.call("POST", "/api/queues/%2F/jobs/get", {"count": 5})  # the rest are in flight
        assert status == 200 and body["items"] == []


def test_get_leaves_deliveries_in_flight_with_their_consumer(make_broker: Callable[..., BrokerThread]) -> None:
    broker, api = _broker(make_broker)
    send_all(broker.port, "/queue/work", ["1", "2", "3", "4"])
    with Client(broker.port) as consumer:
        consumer.subscribe("/queue/work", ack="client-individual", prefetch="1")
        held = consumer.message()
        assert held.body == b"1"
        status, body = api.call("POST", "/api/queues/%2F/work/get", {"count": 10})
        assert status == 200 and [m["body"] for m in body["items"]] == ["2", "3", "4"]
        assert _counts(api, "work") == (0, 1)
        consumer.ack(held)
        consumer.expect_nothing(0.2)
    assert _counts(api, "work") == (0, 0)


def test_move_a_dead_letter_queue_back_to_its_queue(make_broker: Callable[..., BrokerThread]) -> None:
    broker, api = _broker(make_broker, dead_letter_rejected=True)
    send_all(broker.port, "/queue/orders", ["a", "b", "c"], lambda i: {"customer": str(i)})
    with Client(broker.port) as consumer:
        consumer.subscribe("/queue/orders", ack="client-individual", prefetch="10")
        for msg in consumer.messages(3):
            consumer.nack(msg, requeue="false")
    wait_until(lambda: _counts(api, "DLQ.orders") == (3, 0), "three dead letters")
    [dead, *_] = api.get("/api/queues/%2F/DLQ.orders/messages")["items"]
    assert dead["headers"]["original-destination"] == "/queue/orders"

    status, body = api.call("POST", "/api/queues/%2F/DLQ.orders/move", {"to": "orders", "count": 2})
    assert status == 200 and body["moved"] == 2 and body["to"] == "orders", body
    assert _counts(api, "DLQ.orders") == (1, 0) and _counts(api, "orders") == (2, 0)
    status, body = api.call("POST", "/api/queues/%2F/DLQ.orders/move", {"to": "/queue/orders"})  # all the rest
    assert status == 200 and body["moved"] == 1
    assert _counts(api, "DLQ.orders") == (0, 0)
    with Client(broker.port) as consumer:
        consumer.subscribe("/queue/orders", ack="client-individual", prefetch="10")
        moved = consumer.messages(3)
        assert [m.body for m in moved] == [b"a", b"b", b"c"]
        assert [m.headers["customer"] for m in moved] == ["0", "1", "2"]
        # back home, live again: the dead-letter headers are gone
        assert not any("dead-letter-reason" in m.headers or "original-destination" in m.headers for m in moved)
        for msg in moved:
            consumer.ack(msg)
    wait_until(lambda: _counts(api, "orders") == (0, 0), "the moved messages acknowledged")


def test_moved_elsewhere_a_dead_letter_keeps_its_headers(make_broker: Callable[..., BrokerThread]) -> None:
    broker, api = _broker(make_broker, dead_letter_rejected=True)
    send_all(broker.port, "/queue/orders", ["x"])  # a real dead letter: a client cannot forge its headers
    with Client(broker.port) as consumer:
        consumer.subscribe("/queue/orders", ack="client-individual")
        consumer.nack(consumer.message(), requeue="false")
    wait_until(lambda: _counts(api, "DLQ.orders") == (1, 0), "the dead letter")
    status, body = api.call("POST", "/api/queues/%2F/DLQ.orders/move", {"to": "parked"})
    assert status == 200 and body["moved"] == 1
    [parked] = api.get("/api/queues/%2F/parked/messages")["items"]
    assert parked["headers"]["dead-letter-reason"] == "rejected with NACK requeue:false"
    assert parked["headers"]["original-destination"] == "/queue/orders"


def test_a_full_target_stops_a_move_and_the_rest_stay(make_broker: Callable[..., BrokerThread]) -> None:
    broker, api = _broker(make_broker)
    with Client(broker.port) as c:
        c.request("SEND", {"destination": "/control/declare/queue/small", "max-length": "2",
                           "overflow": "reject-publish"})
    send_all(broker.port, "/queue/big", ["1", "2", "3", "4"])
    status, body = api.call("POST", "/api/queues/%2F/big/move", {"to": "small"})
    assert status == 200 and body["moved"] == 2 and "full" in body["stopped"], body
    assert _counts(api, "small") == (2, 0) and _counts(api, "big") == (2, 0)
    [left, _] = api.get("/api/queues/%2F/big/messages")["items"]
    assert left["body"] == "3" and left["redelivery_count"] == 0  # put back as never delivered


def test_bad_gets_and_moves_are_400_or_404_with_a_reason(make_broker: Callable[..., BrokerThread]) -> None:
    broker, api = _broker(make_broker)
    send_all(broker.port, "/queue/q", ["x"])
    for body, reason in (({}, "count is missing"), ({"count": 0}, "count must be a number from 1 to 1000"),
                         ({"count": 1001}, "from 1 to 1000"), ({"count": "3"}, "count must be"),
                         ({"count": True}, "count must be"), ({"count": 1, "to": "x"}, "unknown field 'to'")):
        status, answer = api.call("POST", "/api/queues/%2F/q/get", body)
        assert status == 400 and reason in answer["error"], (body, answer)
    for body, reason in (({}, "to must name a queue"), ({"to": ""}, "to must name a queue"),
                         ({"to": 5}, "to must name a queue"), ({"to": "q"}, "the queue itself"),
                         ({"to": "/queue/q"}, "the queue itself"), ({"to": "r", "count": 0}, "count must be"),
                         ({"to": "r", "count": 10_001}, "from 1 to 10000"), ({"to": "r", "x": 1}, "unknown field")):
        status, answer = api.call("POST", "/api/queues/%2F/q/move", body)
        assert status == 400 and reason in answer["error"], (body, answer)
    status, answer = api.call("POST", "/api/queues/%2F/nothing-here/get", {"count": 1})
    assert status == 404 and "no queue 'nothing-here'" in answer["error"]
    status, answer = api.call("POST", "/api/queues/%2F/nothing-here/move", {"to": "q"})
    assert status == 404
    assert api.call("GET", "/api/queues/%2F/q/get")[0] == 405
    assert _counts(api, "q") == (1, 0)  # nothing taken by any of them


def test_get_and_move_need_read_on_the_source_and_write_on_the_target(
        make_memory_broker: Callable[..., BrokerThread], tmp_path: Path) -> None:
    grants = {"reader": Permission(configure="^$", write="^$", read="^/queue/src$"),
              "mover": Permission(configure="^$", write="^/queue/dst$", read="^/queue/src$")}
    users = Users({name: User(name, hash_password("pw"), ["administrator"], {"/": permission})
                   for name, permission in grants.items()})
    users.users["elsewhere"] = User("elsewhere", hash_password("pw"), ["administrator"], {"other": Permission()})
    users.users["root"] = User("root", hash_password("pw"), ["administrator"], {"/": Permission()})
    users.save(tmp_path / "users.toml")
    port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=port, users_file=str(tmp_path / "users.toml")))
    api = Api(port)
    with Client(broker.port, login="root", passcode="pw") as producer:
        for body in ("1", "2", "3"):
            producer.send_to("/queue/src", body)
        producer.send_to("/queue/dst", "d")

    def call(user: str, action: str, body: dict[str, object], queue: str = "src") -> tuple[int, dict[str, str]]:
        auth = {"authorization": "Basic " + base64.b64encode(f"{user}:pw".encode()).decode()}
        return api.call("POST", f"/api/queues/%2F/{queue}/{action}", body, headers=auth)

    status, body = call("reader", "get", {"count": 1})
    assert status == 200 and [m["body"] for m in body["items"]] == ["1"]  # type: ignore[index]
    status, body = call("reader", "get", {"count": 1}, queue="dst")
    assert status == 403 and "no read permission on /queue/dst" in body["error"]
    status, body = call("elsewhere", "get", {"count": 1})  # no permissions on this vhost at all
    assert status == 403
    status, body = call("reader", "move", {"to": "dst"})
    assert status == 403 and "no write permission on /queue/dst" in body["error"]
    status, body = call("mover", "move", {"to": "elsewhere"})
    assert status == 403 and "/queue/elsewhere" in body["error"]
    status, body = call("mover", "move", {"to": "dst"})
    assert status == 200 and body["moved"] == 2  # type: ignore[comparison-overlap]


def test_an_api_publish_during_a_resource_alarm_is_refused(make_broker: Callable[..., BrokerThread],
                                                           tmp_path: Path) -> None:
    port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=port, disk_path=str(tmp_path)))
    api = Api(port)
    send_all(broker.port, "/queue/jobs", ["1"])
    assert api.call("PUT", "/api/alarms", {"disk_free_limit": 1 << 62})[1]["alarms"] == ["disk"]
    status, body = api.call("POST", "/api/queues/%2F/jobs/publish", {"body": "held"})
    assert status == 503 and "disk alarm set" in body["error"], body
    assert _counts(api, "jobs") == (1, 0)
    status, body = api.call("POST", "/api/queues/%2F/jobs/get", {"count": 1})  # taking frees space: allowed
    assert status == 200 and len(body["items"]) == 1
    assert api.call("PUT", "/api/alarms", {"disk_free_limit": None})[1]["alarms"] == []
    assert api.call("POST", "/api/queues/%2F/jobs/publish", {"body": "now"})[0] == 201
    assert _counts(api, "jobs") == (1, 0)


def test_a_get_and_a_move_answer_once_committed(tmp_path: Path) -> None:
    """With a long flush interval, only the commit behind the answer makes them durable: a
    SIGKILL right after the answers loses neither."""
    http_port = free_port()
    with BrokerProcess(tmp_path / "db.sqlite", "--http-port", str(http_port), "--flush-interval", "30") as broker:
        broker.start()
        api = Api(http_port)
        send_all(broker.port, "/queue/kept", ["1", "2", "3"])
        assert [m["body"] for m in api.call("POST", "/api/queues/%2F/kept/get", {"count": 2})[1]["items"]] == ["1", "2"]
        assert api.call("POST", "/api/queues/%2F/kept/move", {"to": "other"})[1]["moved"] == 1
        broker.kill9()
        broker.start()
        with Peer(broker.port) as peer:
            assert (peer.count("kept"), peer.count("other")) == (0, 1)
