"""``stompmq admin``: the management CLI against a real broker's HTTP API."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.cli import main
from stompmq.server import ServerSettings

from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.broker_process import free_port
from ..support.waiting import send_all


@pytest.fixture
def admin(make_memory_broker: Callable[..., BrokerThread], capsys: pytest.CaptureFixture[str]):
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port))

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["admin", "--url", f"http://127.0.0.1:{http_port}", *args])
        out, err = capsys.readouterr()
        return code, out, err

    run.broker = broker  # type: ignore[attr-defined]
    return run


def test_list_queues_as_table_and_json(admin) -> None:
    send_all(admin.broker.port, "/queue/jobs", ["a", "b"])
    code, out, _ = admin("list-queues")
    header, row = out.splitlines()
    assert code == 0 and header.split()[:3] == ["NAME", "READY", "UNACKED"] and row.split()[:2] == ["jobs", "2"]
    code, out, _ = admin("--json", "list-queues")
    assert [(q["name"], q["ready"]) for q in json.loads(out)] == [("jobs", 2)]
    assert admin("purge", "jobs")[0] == 0
    assert json.loads(admin("--json", "list-queues")[1])[0]["ready"] == 0


def test_connections_listed_and_closed(admin) -> None:
    with Client(admin.broker.port, login="ops") as c:
        rows = json.loads(admin("--json", "list-connections")[1])
        assert [r["login"] for r in rows] == ["ops"]
        assert admin("close-connection", rows[0]["id"])[0] == 0
        c.expect_error()


def test_declare_bind_export_import(admin, tmp_path: Path) -> None:
    assert admin("declare", "orders", "--option", "hash-header=customer")[0] == 0
    assert admin("bind", "orders", "/queue/o1", "--weight", "2")[0] == 0
    assert admin("bind", "orders", "o2")[0] == 0
    exported = tmp_path / "defs.json"
    assert admin("export", str(exported))[0] == 0
    data = json.loads(exported.read_text())
    [exchange] = data["exchanges"]
    assert (exchange["name"], exchange["type"], exchange["hash-header"]) == ("orders", "consistent-hash", "customer")
    assert {(b["queue"], b["weight"]) for b in data["bindings"]} == {("/queue/o1", 2), ("/queue/o2", 1)}
    assert admin("unbind", "orders", "o1")[0] == 0
    assert admin("import", str(exported))[0] == 0  # puts o1 back
    assert "o1:2" in admin("list-exchanges")[1]


def test_refusals_and_unreachable_broker(admin, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = admin("bind", "nope", "q")
    assert code == 1 and "404" in err and "nope" in err
    assert main(["admin", "--url", f"http://127.0.0.1:{free_port()}", "list-queues"]) == 2
    assert "cannot reach" in capsys.readouterr().err


def test_vhosts_declared_listed_and_scoping_queue_commands(admin) -> None:
    from .test_vhosts import connect, request

    assert admin("declare-vhost", "dev")[0] == 0
    with connect(admin.broker.port, "dev") as client:
        request(client, "SEND", {"destination": "/queue/jobs"}, b"x")
    code, out, _ = admin("list-vhosts")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["/", "dev"]
    assert [q["name"] for q in json.loads(admin("--json", "--vhost", "dev", "list-queues")[1])] == ["jobs"]
    assert json.loads(admin("--json", "list-queues")[1]) == []


def test_credentials_for_a_broker_with_users(make_memory_broker: Callable[..., BrokerThread], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from stompmq.server.auth import User, Users, hash_password

    Users({"root": User("root", hash_password("secret"), ["administrator"], {})}).save(tmp_path / "users.toml")
    http_port = free_port()
    make_memory_broker(settings=ServerSettings(port=0, http_port=http_port, users_file=str(tmp_path / "users.toml")))
    url = f"http://127.0.0.1:{http_port}"
    assert main(["admin", "--url", url, "overview"]) == 1
    assert "401" in capsys.readouterr().err
    assert main(["admin", "--url", url, "--user", "root", "--password", "secret", "declare-vhost", "dev"]) == 0


def test_import_declares_the_vhosts_of_a_definitions_file(admin, tmp_path: Path) -> None:
    path = tmp_path / "defs.toml"
    path.write_text('[[vhosts]]\nname = "staging"\n[[vhosts.exchanges]]\nname = "ring"\ntype = "consistent-hash"\n'
                    '[[vhosts.bindings]]\nexchange = "ring"\nqueue = "/queue/q"\n')
    assert admin("import", str(path))[0] == 0
    [exchange] = json.loads(admin("--json", "--vhost", "staging", "list-exchanges")[1])
    assert exchange["name"] == "ring" and exchange["bindings"] == "q:1"
    assert json.loads(admin("--json", "list-exchanges")[1]) == []
