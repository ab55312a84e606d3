"""Declared shovels: the broker runs them, reconnects after its source comes back, keeps them
across its own restart, refuses bad declarations, and never shows a password."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stompmq.broker import Broker, BrokerConfig
from stompmq.broker.definitions import DefinitionsError
from stompmq.cli import main
from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password
from stompmq.server.definitions_apply import plan
from stompmq.server.runtime import Runtime
from stompmq.storage.memory import MemoryStore
from stompmq.vhost_names import DEFAULT_VHOST

from ..support.broker_process import BrokerProcess, Peer, free_port
from ..support.broker_thread import BrokerThread
from ..support.waiting import send_all, wait_until
from .test_shovel import check_moved, fill

PASSWORD = "s3cret-pw"


def api(port: int, method: str, path: str, body: Any = None, auth: str | None = None) -> tuple[int, Any]:
    """One management API request: (status, JSON answer)."""
    headers = {"content-type": "application/json"}
    if auth is not None:
        import base64

        headers["authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess, int]]:
    """A source broker and a shovelling one with its management API (port), for the module."""
    tmp_path = tmp_path_factory.mktemp("declared")
    http_port = free_port()
    with BrokerProcess(tmp_path / "old.db") as old, \
            BrokerProcess(tmp_path / "new.db", "--http-port", str(http_port)) as new:
        old.start()
        new.start()
        yield old, new, http_port


def shovel_state(http_port: int, name: str) -> dict[str, Any]:
    status, answer = api(http_port, "GET", "/api/shovels/" + name)
    assert status == 200, answer
    return answer


def test_a_declared_shovel_outlives_a_kill_9_of_its_source_and_loses_nothing(brokers) -> None:
    old, new, http_port = brokers
    n = 4000
    fill(old.port, "k", n)
    status, answer = api(http_port, "PUT", "/api/shovels/k", {
        "from": f"stomp://guest:{PASSWORD}@127.0.0.1:{old.port}/queue/k",
        "to": f"stomp://127.0.0.1:{new.port}/queue/k", "prefetch": 200})
    assert status == 201, answer
    assert PASSWORD not in json.dumps(answer) and answer["from"].startswith("stomp://guest:***@")
    with Peer(new.port) as p:
        wait_until(lambda: p.count("k") >= n // 4, "a quarter moved", timeout=120)
    old.kill9()
    wait_until(lambda: shovel_state(http_port, "k")["state"] == "failed", "the shovel failed", timeout=30)
    assert f"127.0.0.1:{old.port}" in shovel_state(http_port, "k")["error"]
    old.start()  # the same port: the shovel connects again by itself
    with Peer(old.port) as p:
        wait_until(lambda: p.count("k") == 0, "the source emptied", timeout=120)
    wait_until(lambda: shovel_state(http_port, "k")["state"] == "running", "running again", timeout=30)
    # 0 lost, and a second copy always flagged: by the source (redelivered), or by the shovel, which
    # remembers the message-ids it forwarded (a source killed outright forgets recent ACKs and deliveries)
    duplicates = check_moved(old, new, "k", n)
    state = shovel_state(http_port, "k")
    assert state["moved"] >= n and len(duplicates) <= 2 * state["flagged"]
    logged = new.stderr
    assert PASSWORD not in logged
    assert logged.count("shovel k failed:") == 1, logged  # once per episode, not per retry
    assert api(http_port, "DELETE", "/api/shovels/k")[0] == 200


def test_a_declaration_survives_the_shovelling_brokers_restart(brokers) -> None:
    old, new, http_port = brokers
    assert api(http_port, "PUT", "/api/shovels/r", {
        "from": f"stomp://127.0.0.1:{old.port}/queue/r", "to": f"stomp://127.0.0.1:{new.port}/queue/r"})[0] == 201
    assert new.terminate() == 0
    new.start()
    wait_until(lambda: shovel_state(http_port, "r")["state"] == "running", "running after the restart", timeout=30)
    assert [s["name"] for s in api(http_port, "GET", "/api/shovels")[1]["items"]] == ["r"]
    send_all(old.port, "/queue/r", [str(i) for i in range(100)])
    with Peer(new.port) as p:
        wait_until(lambda: p.count("r") == 100, "moved after the restart", timeout=60)
    assert api(http_port, "PUT", "/api/shovels/r", {  # the same again: nothing changes
        "from": f"stomp://127.0.0.1:{old.port}/queue/r", "to": f"stomp://127.0.0.1:{new.port}/queue/r"})[0] == 200
    assert api(http_port, "DELETE", "/api/shovels/r") == (200, {"deleted": "r"})
    assert new.terminate() == 0
    new.start()
    assert api(http_port, "GET", "/api/shovels") == (200, {"items": []})  # the deletion is stored too


@pytest.mark.parametrize("name, body, reason", [
    ("a", {"to": "stomp://127.0.0.1:1/queue/b"}, "needs 'from'"),
    ("a", {"from": "http://x/queue/a", "to": "stomp://127.0.0.1:1/queue/b"}, "bad URL"),
    ("a", {"from": f"stomp://u:{PASSWORD}@h:x/queue/a", "to": "stomp://h/queue/b"}, "port must be"),
    ("a", {"from": "stomp://127.0.0.1:1", "to": "stomp://127.0.0.1:1/queue/b"}, "from needs a destination"),
    ("a", {"from": "stomp://h/queue/a", "to": "stomp://h:61613/queue/a"}, "the same destination"),
    ("a", {"from": "stomp://h/queue/a", "to": "stomp://h/queue/b", "prefetch": 0}, "prefetch must be"),
    ("a", {"from": "stomp://h/queue/a", "to": "stomp://h/queue/b", "ack_mode": "no-ack"}, "ack_mode must be"),
    ("a", {"from": "stomp://h/queue/a", "to": "stomp://h/queue/b", "colour": 1}, "unknown field 'colour'"),
    ("a%20b", {"from": "stomp://h/queue/a", "to": "stomp://h/queue/b"}, "bad shovel name"),
])
def test_bad_declarations_are_400_with_a_reason(brokers, name: str, body: dict[str, Any], reason: str) -> None:
    status, answer = api(brokers[2], "PUT", "/api/shovels/" + name, body)
    assert status == 400 and reason in answer["error"], answer
    assert PASSWORD not in answer["error"]


def test_only_an_administrator_declares_and_the_admin_commands(make_memory_broker: Callable[..., BrokerThread],
                                                               tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Users({"root": User("root", hash_password("pw"), ["administrator"], {DEFAULT_VHOST: Permission()}),
           "watch": User("watch", hash_password("pw"), ["monitoring"], {})}).save(tmp_path / "users.toml")
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port,
                                                        users_file=str(tmp_path / "users.toml")))
    body = {"from": f"stomp://root:pw@127.0.0.1:{broker.port}/queue/a", "to": f"stomp://root:pw@127.0.0.1:{broker.port}/queue/b"}
    assert api(http_port, "PUT", "/api/shovels/s", body, auth="watch:pw")[0] == 403
    url = ["admin", "--url", f"http://127.0.0.1:{http_port}"]
    root, watch = [*url, "--user", "root", "--password", "pw"], [*url, "--user", "watch", "--password", "pw"]
    assert main([*root, "declare-shovel", "s", "--from", body["from"], "--to", body["to"], "--prefetch", "10"]) == 0
    capsys.readouterr()
    wait_until(lambda: main([*watch, "--json", "list-shovels"]) == 0
               and json.loads(capsys.readouterr().out)[0]["state"] == "running", "running", timeout=30)
    assert main([*watch, "list-shovels"]) == 0
    out = capsys.readouterr().out
    assert out.split()[:3] == ["NAME", "STATE", "MOVED"] and "root:***@" in out and ":pw@" not in out
    assert main([*root, "declare-shovel", "t", "--from", "stomp://h/queue/a", "--to", "stomp://h/queue/a"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stompmq admin: 400: from and to are the same"), err
    assert main([*root, "delete-shovel", "s"]) == 0
    assert main([*root, "delete-shovel", "s"]) == 1
    assert "404: no shovel 's'" in capsys.readouterr().err


def test_a_definitions_file_declares_shovels(make_memory_broker: Callable[..., BrokerThread],
                                             tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port))
    path = tmp_path / "defs.toml"
    path.write_text(f'[[shovels]]\nname = "f"\nfrom = "stomp://127.0.0.1:{broker.port}/queue/a"\n'
                    f'to = "stomp://127.0.0.1:{broker.port}/queue/b"\nprefetch = 5\n')
    assert main(["admin", "--url", f"http://127.0.0.1:{http_port}", "import", str(path)]) == 0
    assert shovel_state(http_port, "f")["prefetch"] == 5


def test_the_brokers_definitions_file_declares_shovels_and_a_bad_entry_is_named(
        make_memory_broker: Callable[..., BrokerThread], tmp_path: Path) -> None:
    path = tmp_path / "defs.toml"
    path.write_text(f'[[shovels]]\nname = "down"\nfrom = "stomp://u:{PASSWORD}@127.0.0.1:1/queue/a"\n'
                    'to = "stomp://127.0.0.1:1/queue/b"\n')
    http_port = free_port()
    make_memory_broker(settings=ServerSettings(port=0, http_port=http_port), config=BrokerConfig(definitions=str(path)))
    wait_until(lambda: shovel_state(http_port, "down")["state"] == "failed", "failed", timeout=30)
    assert "cannot connect to 127.0.0.1:1" in shovel_state(http_port, "down")["error"]
    runtime = Runtime(Broker(MemoryStore(), BrokerConfig()))
    with pytest.raises(DefinitionsError, match=r"defs.toml: shovels\[0\]: a shovel needs 'to'"):
        plan(runtime, {"shovels": [{"name": "x", "from": "stomp://h/queue/a"}]}, str(path), None)
