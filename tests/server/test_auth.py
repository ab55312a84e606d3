"""The pure auth decisions: hashes, the users file, permissions."""

from __future__ import annotations

from pathlib import Path

import pytest

from stompmq.cli import main
from stompmq.server.auth import (
    _DUMMY_HASH,
    AddressCounter,
    Permission,
    User,
    Users,
    UsersFileError,
    hash_password,
    required_permissions,
    verify_password,
)


def test_hashes_are_salted_scrypt_and_verify() -> None:
    first, second = hash_password("secret"), hash_password("secret")
    assert first != second and first.startswith("scrypt$16384$8$1$")
    assert verify_password("secret", first) and verify_password("secret", second)
    assert not verify_password("Secret", first)
    assert not verify_password("secret", "md5$abc") and not verify_password("secret", "garbage")


def test_unknown_user_and_wrong_password_look_the_same() -> None:
    users = Users({"alice": User("alice", hash_password("pw"))})
    assert users.authenticate("alice", "pw") is users.users["alice"]
    assert users.authenticate("alice", "nope") is None
    assert users.authenticate("mallory", "pw") is None
    assert users.authenticate(None, None) is None


def test_the_unknown_users_hash_is_a_real_scrypt_hash() -> None:
    """Written out to keep scrypt off the start-up path; it must cost what a real check costs."""
    assert _DUMMY_HASH == hash_password("", salt=bytes(16))


def test_the_users_file_round_trips(tmp_path: Path) -> None:
    users = Users({'we"ird': User('we"ird', hash_password("x"), ["monitoring"],
                                  {"/": Permission("^$", ".*", "^/queue/a\\."), "prod": Permission()})})
    users.save(tmp_path / "u.toml")
    assert (tmp_path / "u.toml").stat().st_mode & 0o777 == 0o600
    assert Users.load(tmp_path / "u.toml") == users


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("not toml [", "not valid TOML"),
        ("[users.a]\ntags = []\n", "needs a password hash"),
        ('[users.a]\npassword = "x"\n[users.a.permissions."/"]\nread = "("\n', "bad permissions"),
    ],
)
def test_a_bad_users_file_is_one_clear_error(tmp_path: Path, text: str, complaint: str) -> None:
    (tmp_path / "u.toml").write_text(text)
    with pytest.raises(UsersFileError, match=complaint):
        Users.load(tmp_path / "u.toml")


@pytest.mark.parametrize(
    "command, headers, needs",
    [
        ("SEND", {"destination": "/queue/a"}, [("write", "/queue/a")]),
        ("SEND", {"destination": "/exchange/prices/eu"}, [("write", "/exchange/prices")]),
        ("SUBSCRIBE", {"destination": "/topic/t"}, [("read", "/topic/t")]),
        ("SUBSCRIBE", {"destination": "/exchange/amq.direct/k", "x-queue-name": "mine"},
         [("read", "/exchange/amq.direct"), ("configure", "/queue/mine")]),
        ("SEND", {"destination": "/control/purge/queue/a"}, [("configure", "/queue/a")]),
        ("SEND", {"destination": "/control/declare/exchange/x"}, [("configure", "/exchange/x")]),
        ("SEND", {"destination": "/control/bind/exchange/x", "queue": "/queue/q"},
         [("configure", "/exchange/x"), ("configure", "/queue/q")]),
        ("SEND", {"destination": "/control/count-msgs/queue/a"}, [("read", "/queue/a")]),
        ("SEND", {"destination": "/control/stats/exchange/x"}, [("read", "/exchange/x")]),
        ("SEND", {}, []),
        ("SEND", {"destination": "/control/extend-ack", "id": "1", "ack-timeout": "60"}, []),  # its own deliveries
        ("ACK", {"destination": "/queue/a"}, []),
    ],
)
def test_which_permissions_a_frame_needs(command: str, headers: dict[str, str], needs: list[tuple[str, str]]) -> None:
    assert required_permissions(command, headers) == needs


def test_permissions_are_searched_like_rabbitmq() -> None:
    p = Permission(configure="^$", write="^/queue/orders$", read="^/(queue|topic)/public\\.")
    assert p.allows("write", "/queue/orders") and not p.allows("write", "/queue/orders2")
    assert p.allows("read", "/topic/public.news") and not p.allows("read", "/topic/private")
    assert not p.allows("configure", "/queue/orders")


def test_the_users_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = str(tmp_path / "users.toml")
    assert main(["users", "--users-file", f, "add", "alice", "--password", "pw", "--tags", "administrator"]) == 0
    assert main(["users", "--users-file", f, "add", "alice", "--password", "pw"]) == 1
    assert main(["users", "--users-file", f, "add", "bob", "--password", "pw", "--tags", "root"]) == 1
    assert main(["users", "--users-file", f, "set-permissions", "alice", "--vhost", "/",
                 "--configure", "^$", "--write", ".*", "--read", "^/queue/"]) == 0
    assert main(["users", "--users-file", f, "set-permissions", "alice", "--configure", "(",
                 "--write", "", "--read", ""]) == 1
    assert main(["users", "--users-file", f, "passwd", "alice", "--password", "new"]) == 0
    users = Users.load(f)
    assert users.authenticate("alice", "new") is not None and users.authenticate("alice", "pw") is None
    assert users.users["alice"].permissions["/"] == Permission("^$", ".*", "^/queue/")
    capsys.readouterr()
    assert main(["users", "--users-file", f, "list"]) == 0
    assert "alice\ttags=administrator" in capsys.readouterr().out
    assert main(["users", "--users-file", f, "delete", "alice"]) == 0
    assert main(["users", "--users-file", f, "delete", "alice"]) == 1
    assert Users.load(f).users == {}


def test_connections_are_counted_per_address() -> None:
    counter = AddressCounter(limit=2)
    assert counter.admit("a") and counter.admit("a") and not counter.admit("a")
    assert counter.admit("b")
    counter.release("a")
    assert counter.admit("a")
    assert AddressCounter(limit=None).admit("a")
