"""Users and permissions over the management API, on a real broker over real HTTP and STOMP:
written to the users file the ``stompmq users`` CLI writes, in force for the next login."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password, verify_password
from stompmq.server.users_cli import users_main

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from .test_http import Api

EVERYTHING = {"configure": ".*", "write": ".*", "read": ".*"}


class Admin:
    """The broker, its users file, and calls as ``root`` (an administrator) or anyone."""

    def __init__(self, broker: BrokerThread, api: Api, users_file: Path) -> None:
        self.broker = broker
        self.api = api
        self.users_file = users_file

    def call(self, method: str, path: str, body: object = None, login: str = "root",
             password: str = "pw-root") -> tuple[int, object]:
        token = base64.b64encode(f"{login}:{password}".encode()).decode()
        return self.api.call(method, path, body, headers={"authorization": "Basic " + token})

    def stomp_login(self, login: str, password: str) -> str:
        """CONNECTED or ERROR: what a STOMP CONNECT with these credentials gets."""
        client = Client(self.broker.port, connect=False)
        try:
            client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "login": login,
                                     "passcode": password})
            return client.recv().command
        finally:
            client.close()


@pytest.fixture
def admin(make_memory_broker: Callable[..., BrokerThread], tmp_path: Path) -> Admin:
    users_file = tmp_path / "users.toml"
    Users({"root": User("root", hash_password("pw-root"), ["administrator"], {"/": Permission()}),
           "watcher": User("watcher", hash_password("pw-watcher"), ["monitoring"])}).save(users_file)
    port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=port, users_file=str(users_file)))
    return Admin(broker, Api(port), users_file)


def test_a_user_put_over_the_api_logs_in_at_once_and_is_stored_hashed(admin: Admin) -> None:
    assert "carol" not in Users.load(admin.users_file).users  # (no failed login first: the throttle would hold the next)
    status, answer = admin.call("PUT", "/api/users/carol", {"password": "s3cret", "tags": "monitoring"})
    assert (status, answer) == (201, {"name": "carol", "tags": ["monitoring"]})
    stored = Users.load(admin.users_file).users["carol"]
    assert "s3cret" not in admin.users_file.read_text() and verify_password("s3cret", stored.password)
    assert admin.call("PUT", "/api/permissions/%2F/carol", EVERYTHING)[0] == 201  # (a login is to a vhost)
    assert admin.stomp_login("carol", "s3cret") == "CONNECTED"
    assert admin.call("GET", "/api/overview", login="carol", password="s3cret")[0] == 200
    # Listed and shown without the password or its hash, to administrators only.
    status, listed = admin.call("GET", "/api/users")
    assert status == 200 and {"name": "carol", "tags": ["monitoring"]} in listed["items"]  # type: ignore[index]
    assert "scrypt" not in str(listed) and admin.call("GET", "/api/users/carol")[1] == answer
    assert admin.call("GET", "/api/users", login="carol", password="s3cret")[0] == 403
    # A change of tags keeps the password; a new password replaces it.
    assert admin.call("PUT", "/api/users/carol", {"tags": []}) == (200, {"name": "carol", "tags": []})
    assert admin.stomp_login("carol", "s3cret") == "CONNECTED"
    assert admin.call("PUT", "/api/users/carol", {"password": "other"})[0] == 200
    assert admin.stomp_login("carol", "other") == "CONNECTED"
    assert not verify_password("s3cret", Users.load(admin.users_file).users["carol"].password)
    # Deleted: refused at the next login, the API's and STOMP's (a failed login apiece: no throttle yet).
    assert admin.call("DELETE", "/api/users/carol") == (200, {"deleted": "carol"})
    assert admin.call("GET", "/api/overview", login="carol", password="other")[0] == 401
    assert admin.stomp_login("carol", "other") == "ERROR"
    assert admin.call("GET", "/api/users/carol")[0] == 404


def test_a_password_hash_is_taken_as_the_users_file_has_it(admin: Admin) -> None:
    hashed = hash_password("from-elsewhere")
    assert admin.call("PUT", "/api/users/dave", {"password_hash": hashed})[0] == 201
    assert Users.load(admin.users_file).users["dave"].password == hashed
    admin.call("PUT", "/api/permissions/%2F/dave", EVERYTHING)
    assert admin.stomp_login("dave", "from-elsewhere") == "CONNECTED"


def test_permissions_put_over_the_api_are_checked_at_the_next_login(admin: Admin) -> None:
    admin.call("PUT", "/api/users/erin", {"password": "pw"})
    assert admin.call("GET", "/api/permissions/%2F/erin")[0] == 404
    read_only = {"configure": "^$", "write": "^$", "read": ".*"}
    assert admin.call("PUT", "/api/permissions/%2F/erin", read_only) == (
        201, {"user": "erin", "vhost": "/", **read_only})
    assert admin.call("GET", "/api/permissions/%2F/erin") == (200, {"user": "erin", "vhost": "/", **read_only})
    assert {"user": "erin", "vhost": "/", **read_only} in admin.call("GET", "/api/permissions")[1]["items"]  # type: ignore[index]
    with Client(admin.broker.port, login="erin", passcode="pw") as erin:
        erin.frame("SEND", {"destination": "/queue/q", "receipt": "r"})
        assert erin.recv().command == "ERROR"  # no write permission
    assert admin.call("PUT", "/api/permissions/%2F/erin", EVERYTHING)[0] == 200
    with Client(admin.broker.port, login="erin", passcode="pw") as erin:
        erin.send_to("/queue/q", "allowed")  # (waits for its receipt)
    assert Users.load(admin.users_file).users["erin"].permissions["/"] == Permission(".*", ".*", ".*")
    assert admin.call("DELETE", "/api/permissions/%2F/erin") == (200, {"deleted": "erin", "vhost": "/"})
    assert admin.call("DELETE", "/api/permissions/%2F/erin")[0] == 404
    assert admin.stomp_login("erin", "pw") == "ERROR"  # no permissions on the vhost: no login there


def test_the_cli_and_the_api_edit_the_same_file(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    assert users_main(["--users-file", str(admin.users_file), "add", "frank", "--password", "pw"]) == 0
    status, answer = admin.call("PUT", "/api/users/gina", {"password": "pw", "tags": ["monitoring"]})
    assert status == 201
    users_main(["--users-file", str(admin.users_file), "list"])
    listed = capsys.readouterr().out
    assert "frank" in listed and "gina\ttags=monitoring" in listed  # the API kept the CLI's user


@pytest.mark.parametrize(("method", "path", "body", "status", "reason"), [
    ("PUT", "/api/users/h", {"tags": []}, 400, "is new: give a password"),
    ("PUT", "/api/users/h", {"password": "a", "password_hash": "b"}, 400, "not both"),
    ("PUT", "/api/users/h", {"password": "a", "tags": ["wizard"]}, 400, "unknown tag 'wizard'"),
    ("PUT", "/api/users/h", {"password": "a", "tag": []}, 400, "unknown field 'tag'"),
    ("PUT", "/api/users/h", {"password_hash": "plain"}, 400, "password_hash must be a hash"),
    ("PUT", "/api/users/h", {"password": ""}, 400, "password must be a non-empty text"),
    ("PUT", "/api/users/h", [1], 400, "must be a JSON object"),
    ("DELETE", "/api/users/nobody", None, 404, "no user 'nobody'"),
    ("PUT", "/api/permissions/%2F/root", {"configure": ".*", "write": ".*"}, 400, "read is missing"),
    ("PUT", "/api/permissions/%2F/root", {"configure": "(", "write": ".*", "read": ".*"}, 400,
     "bad regular expression"),
    ("PUT", "/api/permissions/%2F/nobody", {"configure": ".*", "write": ".*", "read": ".*"}, 404, "no user"),
    ("GET", "/api/permissions/elsewhere/root", None, 404, "no vhost 'elsewhere'"),
])
def test_bad_requests_are_refused_with_a_reason(admin: Admin, method: str, path: str, body: object, status: int,
                                                 reason: str) -> None:
    before = admin.users_file.read_text()
    got, answer = admin.call(method, path, body)
    assert got == status and reason in answer["error"], answer  # type: ignore[index]
    assert admin.users_file.read_text() == before


def test_a_monitoring_user_may_not_even_read_the_users(admin: Admin) -> None:
    for path in ("/api/users", "/api/users/root", "/api/permissions", "/api/permissions/%2F/root"):
        status, answer = admin.call("GET", path, login="watcher", password="pw-watcher")
        assert status == 403 and "administrator" in answer["error"], (path, answer)  # type: ignore[index]


def test_without_a_users_file_the_routes_say_why_they_cannot(make_memory_broker: Callable[..., BrokerThread]) -> None:
    port = free_port()
    make_memory_broker(settings=ServerSettings(port=0, http_port=port))
    status, answer = Api(port).call("PUT", "/api/users/x", {"password": "pw"})
    assert status == 409 and "without a users file (--users-file)" in answer["error"]  # type: ignore[index]
    assert Api(port).call("GET", "/api/users")[0] == 409
