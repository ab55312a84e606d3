"""The management API and /metrics over real HTTP, on a real broker, on every store."""

from __future__ import annotations

import base64
import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stompmq.protocol import native as native_codec
from stompmq.server import ServerSettings
from stompmq.storage.sqlite import SQLiteStore

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.waiting import send_all, wait_sessions, wait_until


class Api:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"content-type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                status = response.status
                kind = response.headers.get("content-type", "")
        except urllib.error.HTTPError as e:
            raw, status, kind = e.read(), e.code, e.headers.get("content-type", "")
        return status, json.loads(raw) if "json" in kind else raw.decode()

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        assert status == 200, (status, body)
        return body


@pytest.fixture
def http_broker(make_broker: Callable[..., BrokerThread]) -> tuple[BrokerThread, Api]:
    port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=port, store_shown="test-store",
                                                 metrics_top_queues=3))
    return broker, Api(port)


def test_health_and_overview(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    assert api.get("/healthz") == {"status": "ok"}
    assert api.get("/readyz")["status"] == "ready"
    send_all(broker.port, "/queue/a", ["1", "2"])
    overview = api.get("/api/overview")
    assert overview["store"] == "test-store"
    assert overview["frame_codec"] == ("native" if native_codec.NATIVE else "python")
    assert overview["totals"]["published"] == 2
    assert set(overview["rates"]) == {"publish", "deliver", "ack"}


def test_queue_list_pages_through_every_queue(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    names = [f"q{i:02d}" for i in range(25)]
    with Client(broker.port) as c:
        for i, name in enumerate(names):
            for _ in range(i % 3 + 1):
                c.send_to("/queue/" + name, "x")
    seen: dict[str, int] = {}
    after, pages = "", 0
    while True:
        page = api.get(f"/api/queues?limit=10&after={after}")
        pages += 1
        assert len(page["items"]) <= 10
        seen.update({item["name"]: item["ready"] for item in page["items"]})
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert pages == 3
    assert seen == {name: i % 3 + 1 for i, name in enumerate(names)}


def test_queue_detail_purge_and_delete(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    send_all(broker.port, "/queue/work", ["1", "2", "3"])
    with Client(broker.port, login="w") as consumer:
        consumer.subscribe("/queue/work", ack="client-individual", prefetch="1")
        consumer.message()
        queue = api.get("/api/queues/%2F/work")
        assert (queue["ready"], queue["unacked"], queue["consumers"], queue["vhost"]) == (2, 1, 1, "/")
        assert queue["published"] == 3 and queue["delivered"] == 1
        shortcut = api.get("/api/queues/work")  # one segment: the shortcut for vhost /
        moving = {"rates": None, "oldest_ready_age": None, "oldest_unacked_age": None}  # read at each request
        assert {**shortcut, **moving} == {**queue, **moving}
        assert queue["oldest_unacked_age"] >= 0 and queue["oldest_ready_age"] >= 0
        [sub] = api.get("/api/queues/%2F/work/consumers")["items"]
        assert (sub["login"], sub["ack"], sub["prefetch"], sub["unacked"]) == ("w", "client-individual", 1, 1)
        status, body = api.call("POST", "/api/queues/%2F/work/purge")
        assert status == 200 and body["purged"] == 2
        assert api.get("/api/queues/%2F/work")["ready"] == 0
        assert api.get("/api/queues/%2F/work")["unacked"] == 1  # in flight stays with its consumer
    wait_until(lambda: api.get("/api/queues/%2F/work")["unacked"] == 0, "the delivery back in the queue")
    status, body = api.call("DELETE", "/api/queues/%2F/work")
    assert status == 200 and body["deleted"] is True
    assert "work" not in [q["name"] for q in api.get("/api/queues")["items"]]
    assert api.call("GET", "/api/queues/%2F/work")[0] == 404


def test_unknown_queues_and_paths_are_404_with_a_reason(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    for method, path in (("GET", "/api/queues/nonexistent"), ("GET", "/api/queues/%2F/nonexistent"),
                         ("POST", "/api/queues/%2F/nonexistent/purge"), ("DELETE", "/api/queues/%2F/nonexistent")):
        status, body = api.call(method, path)
        assert status == 404 and "no queue 'nonexistent'" in body["error"], (method, path, body)
    # Two segments are a vhost and a queue: never a queue named "orders/messages".
    status, body = api.call("GET", "/api/queues/orders/messages")
    assert status == 404 and "no vhost 'orders'" in body["error"]
    send_all(broker.port, "/queue/orders/messages", ["x"])
    assert api.get("/api/queues/%2F/orders%2Fmessages")["ready"] == 1
    assert api.call("GET", "/api/queues/%2F/orders%2Fmessages/nothing")[0] == 404
    assert api.call("POST", "/api/queues/%2F/orders%2Fmessages")[0] == 405
    status, body = api.call("POST", "/api/queues/orders%2Fmessages/purge")  # the old form
    assert status == 405 and "/api/queues/%2F/orders%2Fmessages/purge" in body["error"]
    status, body = api.call("GET", "/api/queues/%2F/orders%2Fmessages?vhost=%2F")
    assert status == 400 and "not both" in body["error"]
    assert api.call("GET", "/api/queues/%2F/%FF")[0] == 400


def test_peek_and_publish(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    assert api.call("POST", "/api/queues/%2F/jobs/publish", {"body": "x"})[0] == 404  # no such queue yet
    send_all(broker.port, "/queue/jobs", ["first"], lambda i: {"colour": "blue"})
    status, body = api.call("POST", "/api/queues/%2F/jobs/publish", {"body": "urgent", "headers": {"priority": "9"}})
    assert status == 201 and body["published"] is True
    peeked = api.get("/api/queues/%2F/jobs/messages")["items"]
    assert [m["body"] for m in peeked] == ["urgent", "first"]  # delivery order: priority first
    assert peeked[1]["headers"]["colour"] == "blue" and peeked[1]["redelivery_count"] == 0
    assert peeked[0]["age"] >= 0 and api.get("/api/queues/%2F/jobs")["ready"] == 2  # nothing consumed
    assert [m["body"] for m in api.get("/api/queues/%2F/jobs/messages?count=1")["items"]] == ["urgent"]
    with Client(broker.port) as consumer:
        consumer.subscribe("/queue/jobs", ack="client-individual", prefetch="1")
        msg = consumer.message()
        assert msg.body == b"urgent"
        assert [m["body"] for m in api.get("/api/queues/%2F/jobs/messages")["items"]] == ["first"]  # in flight
        consumer.unsubscribe(msg["subscription"])  # what it held goes back, redelivered
    again = api.get("/api/queues/%2F/jobs/messages")["items"]
    assert [(m["body"], m["redelivery_count"]) for m in again] == [("urgent", 1), ("first", 0)]
    for bad in ({"body": 1}, {"body": "x", "headers": {"a": "b\nc"}}, {"body": "x", "extra": 1},
                {"body": "x", "headers": {"priority": "high"}}):
        assert api.call("POST", "/api/queues/%2F/jobs/publish", bad)[0] == 400, bad
    assert api.call("GET", "/api/queues/%2F/jobs/messages?count=0")[0] == 400


def test_ready_is_never_negative_under_a_client_ack_consumer(http_broker: tuple[BrokerThread, Api]) -> None:
    """Polls the list while a producer and a client-ack consumer (prefetch 10) keep the queue busy."""
    broker, api = http_broker
    stop = threading.Event()
    acked = [0]

    def consume() -> None:
        with Client(broker.port) as consumer:
            consumer.subscribe("/queue/busy", ack="client", prefetch="10")
            while not stop.is_set():
                try:
                    msg = consumer.message(timeout=0.5)
                except TimeoutError:
                    continue  # the producer stopped
                consumer.ack(msg, receipt=False)
                acked[0] += 1

    def produce() -> None:
        with Client(broker.port) as producer:
            while not stop.is_set():
                producer.send_to("/queue/busy", "x", receipt=False)
                producer.sync()

    threads = [threading.Thread(target=consume), threading.Thread(target=produce)]
    for thread in threads:
        thread.start()
    seen = []
    try:
        wait_until(lambda: acked[0] > 0, "the consumer acking")
        for _ in range(100):
            seen += [(q["ready"], q["unacked"]) for q in api.get("/api/queues")["items"] if q["name"] == "busy"]
            seen.append(tuple(api.get("/api/queues/%2F/busy")[k] for k in ("ready", "unacked")))
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert seen and all(ready >= 0 and unacked >= 0 for ready, unacked in seen), [c for c in seen if min(c) < 0]


def test_exchange_declare_bind_unbind(http_broker: tuple[BrokerThread, Api]) -> None:
    _, api = http_broker
    status, ex = api.call("PUT", "/api/exchanges/orders", {})
    assert status == 201 and ex["bindings"] == []
    status, ex = api.call("POST", "/api/exchanges/orders/bindings", {"queue": "/queue/o1", "weight": 3})
    assert status == 201 and ex["bindings"] == [{"queue": "o1", "weight": 3}]
    assert [e["name"] for e in api.get("/api/exchanges")["items"]] == ["amq.direct", "amq.fanout", "amq.topic", "orders"]
    status, ex = api.call("PUT", "/api/exchanges/ex2", {"type": "direct"})
    assert status == 201 and (ex["type"], ex["bindings"]) == ("direct", [])
    status, ex = api.call("POST", "/api/exchanges/ex2/bindings", {"queue": "d1", "routing_key": "k"})
    assert status == 201 and ex["bindings"] == [{"queue": "d1", "routing_key": "k"}]
    assert api.call("DELETE", "/api/exchanges/ex2/bindings/d1?routing_key=k")[1]["bindings"] == []
    assert api.call("DELETE", "/api/exchanges/orders/bindings/o1")[1]["bindings"] == []
    assert api.call("DELETE", "/api/exchanges/orders")[0] == 200
    assert api.call("GET", "/api/exchanges/orders")[0] == 404


def test_connections_listed_and_closed(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    with Client(broker.port, login="alice") as c:
        c.subscribe("/topic/news")
        [conn] = api.get("/api/connections")["items"]
        assert conn["login"] == "alice" and conn["version"] == "1.2" and conn["subscriptions"] == 1
        assert conn["peer"].startswith("127.0.0.1:") and conn["bytes_in"] > 0 and conn["bytes_out"] > 0
        assert api.get("/api/topics")["items"] == [{"topic": "news", "subscriptions": 1}]
        assert api.call("DELETE", f"/api/connections/{conn['id']}")[0] == 200
        assert "closed by an administrator" in c.expect_error()["message"]
    wait_until(lambda: api.get("/api/connections")["items"] == [], "connection gone")


def test_errors_are_json_with_a_status(http_broker: tuple[BrokerThread, Api]) -> None:
    _, api = http_broker
    assert api.call("GET", "/api/nothing")[0] == 404
    status, body = api.call("GET", "/api/queues?limit=0")
    assert status == 400 and "limit" in body["error"]
    status, body = api.call("POST", "/api/exchanges/none/bindings", {"queue": "q"})
    assert status == 404 and body["status"] == 404
    status, body = api.call("PUT", "/api/exchanges/x", ["not", "an", "object"])
    assert status == 400
    assert api.call("DELETE", "/api/connections/999")[0] == 404


def test_cross_site_requests_are_refused(http_broker: tuple[BrokerThread, Api]) -> None:
    _, api = http_broker
    # A form on another site can POST text/plain without a preflight: it must change nothing.
    assert api.call("POST", "/api/queues/q/purge", headers={"content-type": "text/plain"})[0] == 415
    # DNS rebinding: the API answers only to the broker's names.
    status, body = api.call("GET", "/api/overview", headers={"host": "evil.example"})
    assert status == 400 and "not a name of this broker" in body["error"]
    assert api.call("GET", "/api/overview", headers={"host": "localhost:61680"})[0] == 200


@pytest.mark.parametrize("names, evil", [(("broker.example",), 400), (("*",), 200)])
def test_host_names_are_the_hosts_the_api_answers(make_memory_broker: Callable[..., BrokerThread],
                                                  names: tuple[str, ...], evil: int) -> None:
    port = free_port()
    make_memory_broker(settings=ServerSettings(port=0, http_port=port, host_names=names))
    api = Api(port)
    assert api.call("GET", "/api/overview", headers={"host": f"broker.example:{port}"})[0] == 200
    assert api.call("GET", "/api/overview", headers={"host": "evil.example"})[0] == evil


def test_metrics_bound_per_queue_series(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    for i in range(6):
        send_all(broker.port, f"/queue/m{i}", ["x"] * (i + 1), receipt=False)
    status, text = api.call("GET", "/metrics")
    assert status == 200
    assert "stompmq_published_all_total 21.0" in text
    assert f"stompmq_native_frame_codec {float(native_codec.NATIVE)}" in text
    published = [line for line in text.splitlines() if line.startswith("stompmq_queue_published_total{")]
    assert broker.broker is not None
    this = broker.broker.store.node_id or "local"  # whose counters: its node id, "local" alone on a store
    assert api.get("/api/overview")["broker"] == this
    assert sorted(published) == [f'stompmq_queue_published_total{{broker="{this}",queue="m{i}",vhost="/"}} {i + 1}.0'
                                 for i in (3, 4, 5)]
    assert all(q["broker"] == this for q in api.get("/api/queues")["items"])
    assert api.get("/api/queues/%2F/m5")["broker"] == this
    assert 'stompmq_queue_ready{queue="m5",vhost="/"} 6.0' in text
    if broker.broker is not None and broker.broker.store.durable:  # commit groups are timed
        assert "stompmq_store_commit_seconds_count" in text and "stompmq_store_commit_group_size_bucket" in text


def test_metrics_of_the_process_the_build_and_the_queue_consumers(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    with Client(broker.port) as consumer:
        consumer.subscribe("/queue/watched", ack="client")
        send_all(broker.port, "/queue/watched", ["x"])
        consumer.message()
        text = api.call("GET", "/metrics")[1]
    lines = text.splitlines()
    [info] = [line for line in lines if line.startswith("stompmq_build_info{")]
    assert 'version="0.1.0"' in info and info.endswith(" 1.0")
    assert 'stompmq_queue_consumers{queue="watched",vhost="/"} 1.0' in lines
    for series in ("process_resident_memory_bytes", "process_open_fds", "process_cpu_seconds_total"):
        assert any(line.startswith(series + " ") for line in lines), series
    disk = [float(line.split()[1]) for line in lines if line.startswith("stompmq_store_disk_bytes ")]
    on_sqlite = broker.broker is not None and isinstance(broker.broker.store, SQLiteStore)
    assert len(disk) == on_sqlite and all(size > 0 for size in disk)


def test_control_list_queues_pages_in_receipt_headers(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, _ = http_broker
    for name in ("a", "b", "c"):
        send_all(broker.port, "/queue/" + name, ["x"])
    with Client(broker.port) as c:
        first = c.request("SEND", {"destination": "/control/list-queues", "limit": "2"})
        assert (first["num-queues"], first["queue-0-name"], first["queue-1-name"]) == ("2", "a", "b")
        assert first["queue-0-ready"] == "1"
        rest = c.request("SEND", {"destination": "/control/list-queues", "after": first["next-after"]})
        assert (rest["num-queues"], rest["queue-0-name"]) == ("1", "c")
        assert "next-after" not in rest.headers


def test_topic_drops_are_counted(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    with Client(broker.port) as sub:
        sub.subscribe("/topic/t", ack="client-individual", prefetch="1")
        send_all(broker.port, "/topic/t", ["1", "2", "3"])
        sub.message()
        assert "stompmq_topic_drops_total 2.0" in api.call("GET", "/metrics")[1]


def test_reply_queue_drops_are_counted(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    owner, worker = Client(broker.port), Client(broker.port)
    owner.request("SEND", {"destination": "/queue/w", "reply-to": "/temp-queue/r"}, b"q")
    worker.subscribe("/queue/w")
    reply_to = worker.message()["reply-to"]
    owner.request("DISCONNECT")
    owner.close()
    wait_sessions(broker, 1)
    worker.request("SEND", {"destination": reply_to}, b"too late")  # the reply queue is gone
    assert "stompmq_reply_queue_drops_total 1.0" in api.call("GET", "/metrics")[1]
    worker.close()


def test_vhosts_are_declared_and_listed_and_scope_the_queue_routes(http_broker: tuple[BrokerThread, Api]) -> None:
    from .test_vhosts import connect, request

    broker, api = http_broker
    assert api.call("PUT", "/api/vhosts/dev")[0] == 201
    assert api.call("PUT", "/api/vhosts/dev")[0] == 200  # idempotent
    assert api.call("PUT", "/api/vhosts/" + "x" * 256)[0] == 400
    with connect(broker.port, "dev") as client:
        request(client, "SEND", {"destination": "/queue/only-in-dev"}, b"x")
    send_all(broker.port, "/queue/only-in-default", ["y"])
    vhosts = {item["name"]: item for item in api.get("/api/vhosts")["items"]}
    assert set(vhosts) == {"/", "dev"} and vhosts["dev"]["queues_in_use"] == 1
    assert [q["name"] for q in api.get("/api/queues?vhost=dev")["items"]] == ["only-in-dev"]
    assert "only-in-dev" not in [q["name"] for q in api.get("/api/queues")["items"]]
    assert api.get("/api/queues/only-in-dev?vhost=dev")["ready"] == 1
    assert api.call("GET", "/api/queues?vhost=nope")[0] == 404
    metrics = api.get("/metrics")
    assert re.search(r'^stompmq_queue_published_total\{broker="\w+",queue="only-in-dev",vhost="dev"\} 1.0$', metrics,
                     re.MULTILINE)


def test_with_a_users_file_the_api_needs_basic_auth_and_a_tag(
    make_memory_broker: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    from stompmq.server.auth import User, Users, hash_password

    users = Users({name: User(name, hash_password("pw-" + name), tags, {})
                   for name, tags in (("root", ["administrator"]), ("watcher", ["monitoring"]), ("plain", []))})
    users.save(tmp_path / "users.toml")
    port = free_port()
    make_memory_broker(settings=ServerSettings(port=0, http_port=port, users_file=str(tmp_path / "users.toml")))
    api = Api(port)

    def as_user(name: str, password: str | None = None) -> dict[str, str]:
        token = base64.b64encode(f"{name}:{password or 'pw-' + name}".encode()).decode()
        return {"authorization": "Basic " + token}

    assert api.call("GET", "/healthz")[0] == 200  # probes need no credentials
    assert api.call("GET", "/readyz")[0] == 200
    status, body = api.call("GET", "/api/overview")
    assert status == 401 and body["error"] == "authentication required"
    assert api.call("GET", "/api/overview", headers=as_user("root", "wrong"))[0] == 401
    status, body = api.call("PUT", "/api/vhosts/dev", headers=as_user("root"))  # root just failed: backs off
    assert status == 429 and body["error"].startswith("too many failed logins, retry in ")
    assert api.call("GET", "/api/overview", headers={"authorization": "Basic !!!"})[0] == 401
    assert api.call("GET", "/api/overview", headers=as_user("watcher"))[0] == 200
    assert api.call("GET", "/metrics", headers=as_user("watcher"))[0] == 200
    status, body = api.call("PUT", "/api/vhosts/dev", headers=as_user("watcher"))
    assert status == 403 and "needs the administrator tag" in body["error"]
    assert api.call("GET", "/api/overview", headers=as_user("plain"))[0] == 403
    wait_until(lambda: api.call("GET", "/api/overview", headers=as_user("root"))[0] == 200, "root's back-off over")
    assert api.call("PUT", "/api/vhosts/dev", headers=as_user("root"))[0] == 201
    assert api.call("GET", "/api/alarms", headers=as_user("watcher"))[0] == 200
    assert api.call("PUT", "/api/alarms", {"disk_free_limit": None}, headers=as_user("watcher"))[0] == 403
    assert api.call("PUT", "/api/alarms", {"disk_free_limit": None}, headers=as_user("root"))[0] == 200


def test_disk_alarm_blocks_a_producer_until_the_limit_is_lowered(
        make_broker: Callable[..., BrokerThread], tmp_path: Path) -> None:
    """A limit above the disk's free space sets the disk alarm: a producer's SEND gets no RECEIPT
    while a consumer still drains; lowering the limit through the API resumes the producer."""
    port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=port, disk_path=str(tmp_path)))
    api = Api(port)
    send_all(broker.port, "/queue/work", ["1", "2"])
    assert api.get("/api/alarms")["alarms"] == []
    status, body = api.call("PUT", "/api/alarms", {"disk_free_limit": 1 << 62})
    assert status == 200 and body["alarms"] == ["disk"] and body["disk"]["free"] > 0, body
    assert api.get("/api/overview")["alarms"] == ["disk"]
    assert 'stompmq_alarm{resource="disk"} 1.0' in api.call("GET", "/metrics")[1]
    with Client(broker.port) as producer, Client(broker.port) as consumer:
        producer.frame("SEND", {"destination": "/queue/work", "receipt": "held"}, b"3")
        consumer.subscribe("/queue/work", ack="client-individual")
        for msg in consumer.messages(2):
            consumer.ack(msg)  # acknowledged (its RECEIPT came) while the producer is held
        with pytest.raises(TimeoutError):
            producer.recv(1.0)
        details = [api.get("/api/connections/" + row["id"]) for row in api.get("/api/connections")["items"]]
        assert [d["held_by"] for d in details if d["held"]] == ["alarm"], details  # the producer's reader
        status, body = api.call("PUT", "/api/alarms", {"disk_free_limit": None})
        assert status == 200 and body["alarms"] == [], body
        producer.wait_receipt("held")
        assert consumer.message().body == b"3"
    assert api.call("PUT", "/api/alarms", {"disk_free_limit": -1})[0] == 400
    assert api.call("PUT", "/api/alarms", {"disk": 1})[0] == 400


def test_the_grafana_dashboard_and_the_alert_rules_use_series_the_broker_exports(
        http_broker: tuple[BrokerThread, Api], store_kind: str) -> None:
    broker, api = http_broker
    send_all(broker.port, "/queue/a", ["1"])
    send_all(broker.port, "/stream/s", ["1"])
    with Client(broker.port) as c:  # a stream consumer group, for its lag series
        c.request("SEND", {"destination": "/control/stream-group/stream/s", "group": "g", "offset": "0"})
    exported = set(re.findall(r"^(\w+)", api.call("GET", "/metrics")[1], re.MULTILINE))
    deploy = Path(__file__).parents[2] / "deploy"
    dashboard = json.loads((deploy / "grafana-dashboard.json").read_text())
    rules = re.findall(r"^\s+expr: (.+)$", (deploy / "prometheus-alerts.yml").read_text(), re.MULTILINE)
    assert len(rules) == 5
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]] + rules
    used = {name for expr in expressions for name in re.findall(r"\b((?:stompmq|process)_\w+)", expr)}
    if store_kind != "sqlite":  # the size of a store elsewhere (memory, a database server) is not ours to tell
        used.discard("stompmq_store_disk_bytes")
    assert used and used <= exported, used - exported


def test_connection_detail_with_subscriptions_and_rates(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    with Client(broker.port, login="ops") as c:
        c.subscribe("/queue/jobs", "s1", ack="client-individual", prefetch="5")
        c.send_to("/queue/jobs", "x")
        c.message()
        (row,) = api.get("/api/connections")["items"]
        detail = api.get("/api/connections/" + row["id"])
        assert detail["login"] == "ops" and detail["held"] is False and detail["held_by"] is None
        assert detail["subscriptions"] == [{"id": "s1", "destination": "/queue/jobs", "queue": "jobs",
                                            "ack": "client-individual", "prefetch": 5, "unacked": 1, "selector": None}]
        assert detail["rates"]["frames_in"] > 0 and detail["rates"]["bytes_out"] > 0
    assert api.call("GET", "/api/connections/999999")[0] == 404


@pytest.mark.slow
def test_rate_history_of_the_totals_and_of_a_queue(http_broker: tuple[BrokerThread, Api]) -> None:
    broker, api = http_broker
    send_all(broker.port, "/queue/a", ["1"] * 20)
    wait_until(lambda: any(p[1] for p in api.get("/api/history")["points"]), "a point with publishes", 15)
    history = api.get("/api/queues/%2F/a/history")
    assert history["columns"] == ["time", "publish", "deliver", "ack"] and history["interval"] == 5
    assert any(point[1] > 0 for point in history["points"])
    assert api.call("GET", "/api/queues/%2F/nope/history")[0] == 404
    assert api.get("/api/history?range=28800")["points"] and api.get("/api/history?range=60")["interval"] == 5
    status, answer = api.call("GET", "/api/history?range=7200")
    assert status == 400 and "60, 600, 3600, 28800" in answer["error"]


def test_cluster_lists_the_brokers_on_the_database(http_broker: tuple[BrokerThread, Api], store_kind: str) -> None:
    broker, api = http_broker
    cluster = api.get("/api/cluster")
    if store_kind != "postgres":
        assert cluster == {"shared": False, "brokers": [], "totals": None}
        return
    (this,) = cluster["brokers"]
    assert cluster["shared"] and this["this"] and this["live"] and this["epoch"] >= 1 and this["version"]
    assert this["lease_until"] > this["last_renewal"]  # ISO 8601 UTC strings sort as times
    assert this["lease_remaining"] > 0 and this["renewal_age"] >= 0
    assert set(this["counters"]) == set(cluster["totals"]) == {"published", "delivered", "acked", "redelivered",
                                                               "dead_lettered"}
    with Client(broker.port) as consumer:
        consumer.subscribe("/queue/held", ack="client-individual", prefetch="2")
        send_all(broker.port, "/queue/held", ["1", "2", "3", "4"])
        consumer.messages(2)
        wait_until(lambda: [(b["claimed"], b["unacked"]) for b in api.get("/api/cluster")["brokers"]] == [(2, 2)],
                   "the broker's claims to be listed")
