"""Users and permissions through a real listening broker: the matrix, logins, throttling."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password

from ..support.broker_thread import BrokerThread
from ..support.rawclient import TIMEOUT, RawClient, RawFrame
from ..support.waiting import wait_until

NOTHING = "^$"
USERS = {
    "admin": {"/": Permission()},
    "producer": {"/": Permission(NOTHING, "^/queue/orders$", NOTHING)},
    "consumer": {"/": Permission(NOTHING, NOTHING, "^/queue/orders$")},
    "operator": {"/": Permission("^/queue/", NOTHING, NOTHING)},
    "elsewhere": {"other": Permission()},
}
#: (what the frame does, the frame) -> the permission it needs
ACTIONS = {
    "configure": ("SEND", {"destination": "/control/purge/queue/orders"}),
    "write": ("SEND", {"destination": "/queue/orders"}),
    "read": ("SUBSCRIBE", {"destination": "/queue/orders", "id": "1"}),
    "control-read": ("SEND", {"destination": "/control/count-msgs/queue/orders"}),
}
ALLOWED = {
    "admin": {"configure", "write", "read", "control-read"},
    "producer": {"write"},
    "consumer": {"read", "control-read"},
    "operator": {"configure"},
}


@pytest.fixture
def secured(tmp_path: Path, make_memory_broker: Callable[..., BrokerThread]) -> BrokerThread:
    users = Users({name: User(name, hash_password("pw-" + name), [], perms) for name, perms in USERS.items()})
    users.save(tmp_path / "users.toml")
    return make_memory_broker(settings=ServerSettings(port=0, users_file=str(tmp_path / "users.toml")))


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("user", sorted(ALLOWED))
def test_permission_matrix(secured: BrokerThread, user: str, action: str) -> None:
    command, headers = ACTIONS[action]
    with RawClient(secured.port) as client:
        client.connect(login=user, passcode="pw-" + user)
        client.frame(command, {**headers, "receipt": "r"})
        reply = client.recv()
        if action in ALLOWED[user]:
            assert reply.command == "RECEIPT", reply
        else:
            assert reply.command == "ERROR", reply
            need = "read" if action == "control-read" else action
            resource = headers["destination"].replace("/control/purge", "").replace("/control/count-msgs", "")
            assert reply.body.decode() == f"access refused: {need} access to {resource} in vhost / refused to user {user}"
            assert reply["receipt-id"] == "r"
            client.assert_closed()


def test_a_user_without_permissions_on_the_vhost_is_refused_at_connect(secured: BrokerThread) -> None:
    with RawClient(secured.port) as client:
        client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "login": "elsewhere",
                                 "passcode": "pw-elsewhere"})
        assert client.expect_error().body == b"access refused: no permissions on vhost /"


@pytest.mark.parametrize("login, passcode", [("admin", "wrong"), ("nobody", "pw-admin"), (None, None)])
def test_bad_credentials_and_anonymous_clients_get_the_same_error(
    secured: BrokerThread, login: str | None, passcode: str | None
) -> None:
    headers = {"accept-version": "1.2", "host": "localhost"}
    if login is not None:
        headers.update(login=login, passcode=passcode or "")
    with RawClient(secured.port) as client:
        client.frame("CONNECT", headers)
        assert client.expect_error()["message"] == "bad login or passcode"


def client_from(address: str, port: int) -> RawClient:
    client = RawClient.__new__(RawClient)
    client.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT, source_address=(address, 0))
    client.buffer = b""
    return client


def login_reply(address: str, port: int, login: str, passcode: str) -> RawFrame:
    with client_from(address, port) as client:
        client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "login": login, "passcode": passcode})
        return client.recv()


def test_a_failed_login_backs_off_its_own_address_and_login_only(secured: BrokerThread) -> None:
    assert login_reply("127.0.0.2", secured.port, "admin", "wrong")["message"] == "bad login or passcode"
    again = login_reply("127.0.0.2", secured.port, "admin", "pw-admin")  # at once: refused, not checked
    assert again["message"].startswith("too many failed logins, retry in ")
    assert login_reply("127.0.0.2", secured.port, "consumer", "pw-consumer").command == "CONNECTED"
    assert login_reply("127.0.0.3", secured.port, "admin", "pw-admin").command == "CONNECTED"
    wait_until(lambda: login_reply("127.0.0.2", secured.port, "admin", "pw-admin").command == "CONNECTED",
               "the back-off over", timeout=10)


def test_a_correct_login_is_not_held_behind_concurrent_bad_ones(secured: BrokerThread) -> None:
    """40 clients keep guessing from one address; a correct login from it gets in at once."""
    stop = threading.Event()
    replies: list[str] = []

    def guess(i: int) -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError, EOFError, TimeoutError):
                replies.append(login_reply("127.0.0.2", secured.port, f"guess{i % 4}", "wrong")["message"])

    guessers = [threading.Thread(target=guess, args=(i,)) for i in range(40)]
    for thread in guessers:
        thread.start()
    try:
        wait_until(lambda: len(replies) >= 40, "the guessing under way", timeout=30)
        start = time.monotonic()
        assert login_reply("127.0.0.2", secured.port, "admin", "pw-admin").command == "CONNECTED"
        took = time.monotonic() - start
    finally:
        stop.set()
        for thread in guessers:
            thread.join()
    assert took <= 3.0, took
    assert any(r.startswith("too many failed logins") for r in replies)


def test_login_and_passcode_remain_a_one_user_shortcut(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(settings=ServerSettings(port=0, login="u", passcode="p"))
    with RawClient(broker.port) as client:
        client.connect(login="u", passcode="p")
        client.frame("SEND", {"destination": "/control/purge/queue/q", "receipt": "r"})
        assert client.recv().command == "RECEIPT"


def test_a_changed_users_file_applies_to_a_running_broker(secured: BrokerThread, tmp_path: Path) -> None:
    users = Users.load(tmp_path / "users.toml")
    users.users["producer"].permissions["/"] = Permission(NOTHING, "^/queue/", NOTHING)
    users.users["newcomer"] = User("newcomer", hash_password("hello"), [], {"/": Permission()})
    users.save(tmp_path / "users.toml")

    def newcomer_gets_in() -> bool:
        with RawClient(secured.port) as client:
            client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "login": "newcomer", "passcode": "hello"})
            return client.recv().command == "CONNECTED"

    wait_until(newcomer_gets_in, "the new user let in", timeout=10)
    with RawClient(secured.port) as client:
        client.connect(login="producer", passcode="pw-producer")
        client.frame("SEND", {"destination": "/queue/other", "receipt": "r"})
        assert client.recv().command == "RECEIPT"


def test_a_changed_users_file_applies_to_open_connections(secured: BrokerThread, tmp_path: Path) -> None:
    with RawClient(secured.port) as client:
        client.connect(login="producer", passcode="pw-producer")
        client.frame("SEND", {"destination": "/queue/orders", "receipt": "before"})
        assert client.recv().command == "RECEIPT"
        users = Users.load(tmp_path / "users.toml")
        del users.users["producer"].permissions["/"]
        users.save(tmp_path / "users.toml")
        deadline = time.monotonic() + 10
        while True:  # the file is checked every 2 s; until then the old permissions hold
            client.frame("SEND", {"destination": "/queue/orders", "receipt": "r"})
            reply = client.recv()
            if reply.command == "ERROR" or time.monotonic() > deadline:
                break
        assert reply.body.decode() == "access refused: write access to /queue/orders in vhost / refused to user producer"


def test_a_refused_frame_in_a_read_ends_it_after_the_frames_before_it(secured: BrokerThread) -> None:
    """The frames of one read reach the engine together, but a refused one is the last: those
    before it take effect (their RECEIPTs come first), those after it do not."""
    with RawClient(secured.port) as client:
        client.connect(login="producer", passcode="pw-producer")
        client.send(
            b"SEND\ndestination:/queue/orders\nreceipt:before\n\nfirst\0"
            b"SEND\ndestination:/queue/elsewhere\nreceipt:refused\n\nsecond\0"
            b"SEND\ndestination:/queue/orders\nreceipt:after\n\nthird\0"
        )
        assert client.recv()["receipt-id"] == "before"
        error = client.expect_error()
        assert error["receipt-id"] == "refused"
        assert error.body.startswith(b"access refused: write access to /queue/elsewhere")
        client.assert_closed()
    with RawClient(secured.port) as client:
        client.connect(login="consumer", passcode="pw-consumer")
        client.frame("SUBSCRIBE", {"destination": "/queue/orders", "id": "1"})
        assert client.recv().body == b"first"
        assert client.no_frame()  # "third" came after the refused frame: never taken
