"""``stompmq admin``: the management CLI against a real broker's HTTP API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.cli import main
from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
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
    run.url = f"http://127.0.0.1:{http_port}"  # type: ignore[attr-defined]
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


def test_every_command_prints_a_table_unless_json(admin) -> None:
    send_all(admin.broker.port, "/queue/jobs", ["a", "b"])
    code, out, _ = admin("overview")
    assert code == 0 and out.split()[:2] == ["FIELD", "VALUE"] and "totals.published" in out
    code, out, _ = admin("purge", "jobs")
    assert code == 0 and ["purged", "2"] in [line.split() for line in out.splitlines()]
    code, out, _ = admin("--json", "purge", "jobs")
    assert code == 0 and json.loads(out)["purged"] == 0
    code, _, err = admin("purge", "no-such-queue")
    assert code == 1 and "404" in err and "no-such-queue" in err


def test_publish_peek_and_consumers(admin) -> None:
    send_all(admin.broker.port, "/queue/jobs", ["a"])
    code, out, err = admin("publish", "jobs", "urgent", "--header", "priority=9", "--header", "k=v")
    assert code == 0, err
    code, out, _ = admin("peek", "jobs")
    header, first, second = out.splitlines()
    assert header.split()[0] == "PRIORITY" and first.split()[-1] == "urgent" and second.split()[-1] == "a"
    assert [m["body"] for m in json.loads(admin("--json", "peek", "jobs", "--count", "1")[1])] == ["urgent"]
    with Client(admin.broker.port, login="w") as consumer:
        consumer.subscribe("/queue/jobs", ack="client", prefetch="5")
        consumer.messages(2)
        [row] = json.loads(admin("--json", "consumers", "jobs")[1])
        assert (row["login"], row["unacked"]) == ("w", 2)
    assert admin("publish", "jobs", "x", "--header", "novalue")[0] == 2


def test_declaring_a_direct_exchange_answers_with_it(admin) -> None:
    code, out, err = admin("--json", "declare", "ex2", "--option", "type=direct")
    assert code == 0, err
    assert (json.loads(out)["name"], json.loads(out)["type"]) == ("ex2", "direct")
    rows = {row["name"]: row for row in json.loads(admin("--json", "list-exchanges")[1])}
    assert rows["ex2"]["type"] == "direct"
    code, _, err = admin("declare", "ex3", "--option", "type")
    assert code == 2 and "KEY=VALUE" in err


@pytest.mark.parametrize("extension", [".toml", ".json"])
def test_export_and_import_round_trip(admin, tmp_path: Path, extension: str) -> None:
    for name, options in (("orders", ["--option", "hash-header=customer"]), ('odd "name" é', [])):
        assert admin("declare", name, *options)[0] == 0
    assert admin("bind", "orders", "/queue/o1", "--weight", "2")[0] == 0
    assert admin("bind", 'odd "name" é', "q\\x")[0] == 0
    before = json.loads(admin("--json", "list-exchanges")[1])
    path = tmp_path / ("defs" + extension)
    assert admin("export", str(path))[0] == 0
    if extension == ".toml":
        assert tomllib.loads(path.read_text())["exchanges"][0]["name"] == "odd \"name\" é"
    else:
        assert json.loads(path.read_text())["bindings"]
    assert admin("declare-vhost", "copy")[0] == 0
    assert admin("--vhost", "copy", "import", str(path))[0] == 0
    assert json.loads(admin("--json", "--vhost", "copy", "list-exchanges")[1]) == before


def test_export_without_vhost_is_every_vhost_and_with_one_that_vhost_alone(admin, tmp_path: Path) -> None:
    assert admin("declare-vhost", "other")[0] == 0
    assert admin("--vhost", "other", "declare", "only-there")[0] == 0
    whole, one = tmp_path / "whole.json", tmp_path / "one.json"
    assert admin("export", str(whole))[0] == 0 and admin("--vhost", "other", "export", str(one))[0] == 0
    assert [v["name"] for v in json.loads(whole.read_text())["vhosts"]] == ["other"]
    assert [e["name"] for e in json.loads(one.read_text())["exchanges"]] == ["only-there"]
    code, _, err = admin("--vhost", "other", "import", str(whole))
    assert code == 2 and "vhosts" in err and "without --vhost" in err
    assert admin("--vhost", "nowhere", "export", str(one))[0] == 2


def test_a_definitions_file_needs_a_known_extension(admin, tmp_path: Path) -> None:
    code, _, err = admin("export", str(tmp_path / "defs.yaml"))
    assert code == 2 and "defs.yaml" in err and ".toml or .json" in err
    assert not (tmp_path / "defs.yaml").exists()


def test_a_bad_or_empty_url_is_a_usage_error() -> None:
    code = subprocess.run([sys.executable, "-c", "import sys; from stompmq.cli import main; sys.exit(main())",
                           "admin", "--url", "", "overview"], capture_output=True, text=True)
    assert code.returncode == 2 and "Traceback" not in code.stderr and "http://" in code.stderr
    empty = subprocess.run([sys.executable, "-c", "import sys; from stompmq.admin import DEFAULT_URL; print(DEFAULT_URL)"],
                           capture_output=True, text=True, env={**os.environ, "STOMPMQ_ADMIN_URL": ""})
    assert empty.stdout.strip() == "http://127.0.0.1:61680"


def test_a_reader_that_stops_early_is_not_an_error(admin) -> None:
    with Client(admin.broker.port) as producer:
        for i in range(400):
            producer.send_to(f"/queue/pipe-{i:03d}", "x", receipt=False)
        producer.sync()
    command = [sys.executable, "-c", "import sys; from stompmq.cli import main; sys.exit(main())",
               "admin", "--url", admin.url, "--json", "list-queues"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.read(10)  # then stop reading, as `| head -c 10` does
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(30) == 0 and err == ""


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
    exchanges = [e for e in json.loads(admin("--json", "--vhost", "staging", "list-exchanges")[1])
                 if not e["name"].startswith("amq.")]  # the built-in ones are listed too
    assert [(e["name"], e["bindings"]) for e in exchanges] == [("ring", "q:1")]
    assert [e["name"] for e in json.loads(admin("--json", "list-exchanges")[1])] == ["amq.direct", "amq.fanout",
                                                                                      "amq.topic"]


def test_connection_detail_alarms_and_limits(admin) -> None:
    with Client(admin.broker.port, login="ops") as c:
        c.subscribe("/queue/jobs", "s1")
        (row,) = json.loads(admin("--json", "list-connections")[1])
        code, out, _ = admin("--json", "connection", row["id"])
        assert code == 0 and json.loads(out)["subscriptions"][0]["destination"] == "/queue/jobs"
    code, out, _ = admin("alarms")
    assert code == 0 and "memory.used" in out
    code, out, _ = admin("--json", "set-limits", "--disk-free-limit", "4096", "--memory-high-watermark", "0")
    assert code == 0 and json.loads(out)["disk"]["limit"] == 4096 and json.loads(out)["memory"]["limit"] is None
    assert admin("set-limits")[0] == 2


def test_get_and_move(admin) -> None:
    send_all(admin.broker.port, "/queue/DLQ.jobs", ["a", "b", "c", "d"],
             lambda i: {"dead-letter-reason": "expired", "original-destination": "/queue/jobs"})
    code, out, err = admin("get", "DLQ.jobs", "--count", "2")
    header, first, second = out.splitlines()
    assert code == 0 and header.split()[0] == "PRIORITY" and first.split()[-1] == "a" and second.split()[-1] == "b"
    code, out, _ = admin("--json", "move", "DLQ.jobs", "jobs", "--count", "1")
    assert code == 0 and json.loads(out)["moved"] == 1
    code, out, _ = admin("move", "DLQ.jobs", "/queue/jobs")  # the rest
    assert code == 0 and ["moved", "1"] in [line.split() for line in out.splitlines()]
    [moved, rest] = json.loads(admin("--json", "peek", "jobs")[1])
    assert (moved["body"], rest["body"]) == ("c", "d") and "dead-letter-reason" not in moved["headers"]
    assert json.loads(admin("--json", "get", "DLQ.jobs")[1]) == []
    for args, status in ((("get", "jobs", "--count", "0"), 2), (("move", "jobs", ""), 2),
                         (("move", "jobs", "jobs"), 1), (("get", "jobs", "--count", "5000"), 1),
                         (("move", "no-such-queue", "jobs"), 1)):
        code, out, err = admin(*args)
        assert code == status and out == "" and len(err.splitlines()) == 1 and "Traceback" not in err, (args, err)
    assert "the queue itself" in admin("move", "jobs", "jobs")[2]
