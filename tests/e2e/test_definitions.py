"""Definitions round trip: ``stompmq admin export`` of a broker with one of everything, imported
into an empty broker, exports the same bytes; import is idempotent, strict and has a dry run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.cli import main
from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client

ROOT = ("root", "pw-root")


def users_file(path: Path, *extra: User) -> str:
    root = User("root", hash_password(ROOT[1]), ["administrator"], {"/": Permission(), "staging": Permission()})
    Users({u.name: u for u in (root, *extra)}).save(path)
    return str(path)


def start(make: Callable[..., BrokerThread], users: str) -> tuple[BrokerThread, str]:
    http_port = free_port()
    broker = make(settings=ServerSettings(port=0, http_port=http_port, users_file=users))
    return broker, f"http://127.0.0.1:{http_port}"


def admin(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["admin", "--url", url, "--user", ROOT[0], "--password", ROOT[1], *args])
    out, err = capsys.readouterr()
    return code, out, err


def one_of_everything(broker: BrokerThread, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every kind a definitions file holds, in two vhosts."""
    assert admin(capsys, url, "declare-vhost", "staging")[0] == 0
    with Client(broker.port, login=ROOT[0], passcode=ROOT[1]) as c:
        for destination, headers in [
            ("/control/declare/exchange/ring", {"hash-header": "customer"}),
            ("/control/declare/exchange/orders", {"type": "direct"}),
            ("/control/declare/exchange/bcast", {"type": "fanout"}),
            ("/control/declare/exchange/logs", {"type": "topic"}),
            ("/control/declare/queue/jobs", {"message-ttl": "60000", "dead-letter": "true", "max-length": "10",
                                             "overflow": "reject-publish", "expires": "3600000"}),
            ("/control/declare/queue/single", {"x-single-active-consumer": "true", "ack-timeout": "2.5"}),
            ("/control/declare/stream/events", {"max-age": "86400", "max-bytes": "1000000"}),
            ("/control/bind/exchange/ring", {"queue": "/queue/q1", "weight": "2"}),
            ("/control/bind/exchange/ring", {"queue": "/stream/events", "weight": "1"}),
            ("/control/bind/exchange/orders", {"queue": "/queue/jobs", "routing-key": "eu"}),
            ("/control/bind/exchange/logs", {"queue": "/queue/all", "routing-key": "app.#"}),
            ("/control/bind/exchange/bcast", {"queue": "/queue/q1"}),
        ]:
            c.request("SEND", {"destination": destination, **headers})
    with Client(broker.port, login=ROOT[0], passcode=ROOT[1], host="staging") as c:
        c.request("SEND", {"destination": "/control/declare/exchange/jobs", "type": "direct"})
        c.request("SEND", {"destination": "/control/bind/exchange/jobs", "queue": "/queue/run", "routing-key": "run"})
    for args in (["set-policy", "ttl", "--pattern", "^q", "--priority", "2", "--definition", "message-ttl=5000"],
                 ["set-policy", "--operator", "cap", "--pattern", ".*", "--definition", "max-length=1000"],
                 ["set-policy", "retain", "--apply-to", "streams", "--pattern", "^events$", "--definition",
                  "max-age=3600", "--definition", "max-length-bytes=5000000"],
                 ["set-policy", "--operator", "stream-cap", "--apply-to", "streams", "--pattern", ".*",
                  "--definition", "max-age=604800"],
                 ["set-policy", "both", "--apply-to", "all", "--pattern", "^audit", "--priority", "-1",
                  "--definition", "max-length-bytes=1000000"],
                 ["--vhost", "staging", "set-policy", "idle", "--pattern", "^tmp\\.", "--definition", "expires=60000",
                  "--definition", "expires-when-empty=true"],
                 ["declare-shovel", "move", "--from", "stomp://u:secret@127.0.0.1:1/queue/a",
                  "--to", f"stomp://127.0.0.1:{broker.port}/queue/b", "--prefetch", "7"]):
        code, _, err = admin(capsys, url, *args)
        assert code == 0, (args, err)


@pytest.mark.parametrize("extension", [".json", ".toml"])
def test_export_import_into_an_empty_broker_export_is_byte_identical(
        make_memory_broker: Callable[..., BrokerThread], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        extension: str) -> None:
    alice = User("alice", hash_password("a"), ["monitoring"], {"/": Permission("^$", "^/queue/", ".*")})
    source, source_url = start(make_memory_broker, users_file(tmp_path / "a.toml", alice))
    one_of_everything(source, source_url, capsys)
    first, second, third = (tmp_path / f"{n}{extension}" for n in ("first", "second", "third"))
    code, out, err = admin(capsys, source_url, "export", str(first), "--with-secrets")
    assert code == 0, err
    target, target_url = start(make_memory_broker, users_file(tmp_path / "b.toml"))
    code, out, err = admin(capsys, target_url, "import", str(first), "--dry-run")
    assert code == 0 and "policy ttl" in out, err
    assert json.loads(admin(capsys, target_url, "--json", "list-policies")[1]) == []  # the dry run changed nothing
    code, out, err = admin(capsys, target_url, "import", str(first))
    assert code == 0, err
    assert admin(capsys, target_url, "export", str(second), "--with-secrets")[0] == 0
    assert second.read_bytes() == first.read_bytes()
    assert admin(capsys, target_url, "import", str(first))[0] == 0  # idempotent
    assert admin(capsys, target_url, "export", str(third), "--with-secrets")[0] == 0
    assert third.read_bytes() == first.read_bytes()
    if extension == ".json":
        data = json.loads(first.read_text())
        assert {e["type"] for e in data["exchanges"]} == {"consistent-hash", "direct", "fanout", "topic"}
        assert {"name": "jobs", "dead-letter": True, "expires": 3600000, "max-length": 10, "message-ttl": 60000,
                "overflow": "reject-publish"} in data["queues"]
        assert data["vhosts"][0]["name"] == "staging" and data["vhosts"][0]["policies"][0]["name"] == "idle"
        assert {"name": "retain", "pattern": "^events$", "apply-to": "streams", "priority": 0,
                "definition": {"max-age": 3600, "max-length-bytes": 5000000}} in data["policies"]
        assert {p["name"]: p["apply-to"] for p in data["operator-policies"]} == {"cap": "queues",
                                                                                "stream-cap": "streams"}
        assert [u["name"] for u in data["users"]] == ["alice", "root"]


def test_without_secrets_nothing_secret_is_exported(make_memory_broker: Callable[..., BrokerThread], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    broker, url = start(make_memory_broker, users_file(tmp_path / "a.toml"))
    one_of_everything(broker, url, capsys)
    path = tmp_path / "plain.json"
    assert admin(capsys, url, "export", str(path))[0] == 0
    text = path.read_text()
    assert "secret" not in text and "scrypt" not in text and "password-hash" not in text
    code, _, err = admin(capsys, url, "import", str(path))
    assert code == 2 and "shovels[0]" in err and "masked" in err


@pytest.mark.parametrize(("content", "words"), [
    ({"queues": [{"name": "q", "mesage-ttl": 5}]}, ["queues[0]", "'mesage-ttl'", "did you mean 'message-ttl'"]),
    ({"bindings": [{"exchange": "amq.direct", "queue": "q", "routing_key": "k"}]}, ["bindings[0]", "'routing-key'"]),
    ({"exchange": []}, ["unknown key 'exchange'", "did you mean 'exchanges'"]),
    ({"vhosts": [{"name": "v", "polices": []}]}, ["vhosts[0]", "did you mean 'policies'"]),
    ({"policies": [{"name": "p", "pattern": ".*", "definition": {"max-lenght": 1}}]}, ["policies[0]", "'max-length'"]),
    ({"exchanges": [{"name": "amq.topic", "type": "direct"}]}, ["exchanges[0]", "type topic"]),
    ({"users": [{"name": "u", "tags": ["admin"]}]}, ["users[0]", "tags"]),
])
def test_a_bad_file_is_refused_with_exit_2_naming_the_entry_and_changes_nothing(
        make_memory_broker: Callable[..., BrokerThread], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        content: dict[str, object], words: list[str]) -> None:
    broker, url = start(make_memory_broker, users_file(tmp_path / "a.toml"))
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"exchanges": [{"name": "fine", "type": "direct"}], **content}))
    code, _, err = admin(capsys, url, "import", str(path))
    assert code == 2, err
    for word in words:
        assert word in err, (word, err)
    exported = tmp_path / "after.json"
    assert admin(capsys, url, "export", str(exported))[0] == 0
    assert "fine" not in exported.read_text()
