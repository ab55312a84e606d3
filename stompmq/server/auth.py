"""Users, hashed passwords and per-vhost permissions (RabbitMQ's model).

Pure: no trio, no sockets, no clock (time is passed in), so every decision here
is unit-tested without a broker.

* A **users file** is TOML::

      [users.alice]
      password = "scrypt$16384$8$1$<salt hex>$<hash hex>"
      tags = ["administrator"]
      [users.alice.permissions."/"]
      configure = ".*"
      write = ".*"
      read = "^/(queue|topic)/public\\."

  Passwords are hashed with ``hashlib.scrypt`` (memory-hard: 16 MiB and ~50 ms
  per guess), never stored in clear; ``stompmq users`` edits the file.
* **Permissions** are three regular expressions per user and vhost, searched
  (``re.search``, as RabbitMQ does: anchor with ``^``/``$``) in the resource a
  destination acts on (``/queue/orders``, ``/exchange/prices``), never in its
  text: every alias (``/amq/queue/orders``, ``/exchange/amq.topic/KEY``...) is
  resolved first (``broker/resources.py``).  ``write`` guards SEND, ``read``
  guards SUBSCRIBE and the ``/control`` reads, ``configure`` guards the
  ``/control`` verbs that change things (declare, delete, bind, unbind, purge),
  checked against ``/KIND/NAME`` (and, for bind and unbind, against the queue
  being bound).
* **Connections per address** are counted (``AddressCounter``) against
  ``--max-connections-per-address``.
* Failed logins are throttled per (address, login) in ``logins.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..broker import ClientError
from ..broker.destinations import parse_destination
from ..broker.kinds.registry import kind_of
from ..vhost_names import DEFAULT_VHOST

#: scrypt cost: N=2**14, r=8, p=1 is 16 MiB of memory per hash (the interactive-login setting).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
#: ``impersonator`` (RabbitMQ's tag): a relay (a shovel) that may SEND others' user-id and the
#: broker's own headers (broker/send_headers.py), with CONNECT ``relay:true``.
IMPERSONATOR = "impersonator"
KNOWN_TAGS = frozenset({"administrator", "monitoring", IMPERSONATOR})
#: ``/control`` verbs that change the broker (``configure``); every other verb only reads.


class UsersFileError(Exception):
    """The users file cannot be read or is malformed (the message is one line for the operator)."""


def hash_password(password: str, salt: bytes | None = None) -> str:
    """An scrypt hash in the self-describing form ``scrypt$N$r$p$salt$hash``."""
    salt = os.urandom(16) if salt is None else salt
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def is_password_hash(text: str) -> bool:
    """Whether ``text`` has the form ``hash_password`` writes (``scrypt$N$r$p$salt$hash``, hex)."""
    parts = text.split("$")
    if len(parts) != 6 or parts[0] != "scrypt" or not all(p.isascii() and p.isdigit() for p in parts[1:4]):
        return False
    try:
        return bool(bytes.fromhex(parts[4])) and bool(bytes.fromhex(parts[5]))
    except ValueError:
        return False


def verify_password(password: str, hashed: str) -> bool:
    """Whether ``password`` matches ``hashed``; a malformed hash matches nothing."""
    try:
        scheme, n, r, p, salt, digest = hashed.split("$")
        if scheme != "scrypt":
            return False
        expected = bytes.fromhex(digest)
        actual = hashlib.scrypt(
            password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p),
            maxmem=128 * int(n) * int(r) * (int(p) + 1) + 1024 * 1024, dklen=len(expected),
        )
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)


@dataclass(frozen=True, slots=True)
class Permission:
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"

    def allows(self, action: str, resource: str) -> bool:
        """``action`` is ``configure``, ``write`` or ``read``."""
        return re.search(getattr(self, action), resource) is not None

    def validate(self) -> None:
        """Raise ``re.error`` if a pattern does not compile."""
        for pattern in (self.configure, self.write, self.read):
            re.compile(pattern)


@dataclass(slots=True)
class User:
    name: str
    password: str  # the scrypt hash
    tags: list[str] = field(default_factory=list)
    permissions: dict[str, Permission] = field(default_factory=dict)  # vhost -> permission


@dataclass(slots=True)
class Users:
    users: dict[str, User] = field(default_factory=dict)

    @classmethod
    def single(cls, login: str, passcode: str) -> Users:
        """``--login/--passcode``: one user with every permission on the default vhost."""
        return cls({login: User(login, hash_password(passcode), ["administrator"], {DEFAULT_VHOST: Permission()})})

    @classmethod
    def load(cls, path: str | Path) -> Users:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as e:
            raise UsersFileError(f"cannot read users file {path}: {e.strerror or e}") from None
        except tomllib.TOMLDecodeError as e:
            raise UsersFileError(f"users file {path} is not valid TOML: {e}") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "users file") -> Users:
        users: dict[str, User] = {}
        raw_users = data.get("users", {})
        if not isinstance(raw_users, dict):
            raise UsersFileError(f"{where}: [users] must be a table")
        for name, raw in raw_users.items():
            if not isinstance(raw, dict) or not isinstance(raw.get("password"), str):
                raise UsersFileError(f"{where}: user {name!r} needs a password hash")
            tags = raw.get("tags", [])
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise UsersFileError(f"{where}: tags of user {name!r} must be a list of strings")
            permissions: dict[str, Permission] = {}
            for vhost, perm in raw.get("permissions", {}).items():
                try:
                    permission = Permission(**{k: str(perm.get(k, "^$")) for k in ("configure", "write", "read")})
                    permission.validate()
                except (AttributeError, re.error) as e:
                    raise UsersFileError(f"{where}: bad permissions of user {name!r} on vhost {vhost!r}: {e}") from None
                permissions[vhost] = permission
            users[name] = User(name, raw["password"], list(tags), permissions)
        return cls(users)

    def dumps(self) -> str:
        """The users file's TOML text (JSON string escapes are valid TOML basic strings)."""
        q = json.dumps
        lines: list[str] = []
        for user in sorted(self.users.values(), key=lambda u: u.name):
            lines += [f"[users.{q(user.name)}]", f"password = {q(user.password)}",
                      f"tags = [{', '.join(q(t) for t in user.tags)}]"]
            for vhost, p in sorted(user.permissions.items()):
                lines += [f"[users.{q(user.name)}.permissions.{q(vhost)}]", f"configure = {q(p.configure)}",
                          f"write = {q(p.write)}", f"read = {q(p.read)}"]
            lines.append("")
        return "\n".join(lines)

    def save(self, path: str | Path) -> None:
        """Write atomically (a running broker may be reading it) and readable by the owner only."""
        tmp = Path(f"{path}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.dumps())
        os.replace(tmp, path)

    def authenticate(self, login: str | None, passcode: str | None) -> User | None:
        """The user if the passcode is right; None for an unknown user or a wrong passcode alike."""
        user = self.users.get(login or "")
        if user is None:
            # Hash anyway so the answer takes as long as for a known user (no user enumeration).
            verify_password(passcode or "", _DUMMY_HASH)
            return None
        return user if verify_password(passcode or "", user.password) else None


#: ``hash_password("", salt=bytes(16))``, written out: hashing it at import took 50-350 ms of every
#: broker start (scrypt is memory-hard by design); a test checks the two agree.
_DUMMY_HASH = (
    "scrypt$16384$8$1$00000000000000000000000000000000$aafcf55e459476ff6be6f07652e713a7f515279ae4439d6e18465f45d20b1bb3"
)


def required_permissions(
    command: str, headers: dict[str, str], login: str | None = None, client_id: str | None = None
) -> list[tuple[str, str]]:
    """The (action, resource) pairs a SEND or SUBSCRIBE needs, all of them; [] for other frames.

    Each destination kind says what its frames need (``DestinationKind.send_needs`` and
    ``subscribe_needs``, broker/kinds/), over the resources destinations resolve to
    (``broker.resources``), so every alias of a queue or topic meets the same patterns.  A ``/control/VERB/KIND/NAME``
    SEND needs ``configure`` or ``read`` on ``/KIND/NAME``'s resource; binding or unbinding
    also changes the queue of its ``queue`` header, so it needs ``configure`` on that queue
    too.  An ``/exchange/`` SUBSCRIBE with ``x-queue-name:NAME`` also needs ``configure`` on
    ``/queue/NAME``, the queue it creates.  A durable topic subscription of ``login`` (``client_id``: the CONNECT's) reads its
    stored queue as well as the topic, so it needs ``read`` on both.
    """
    if command != "SEND" and command != "SUBSCRIBE":
        return []
    try:
        dest = parse_destination(headers.get("destination"))
    except ClientError:
        return []  # the engine reports the bad destination
    kind = kind_of(dest)
    if command == "SUBSCRIBE":
        return kind.subscribe_needs(dest, headers, login, client_id)
    return kind.send_needs(dest, headers)


@dataclass(slots=True)
class AddressCounter:
    """Open connections per source address, so one address cannot take every connection."""

    limit: int | None
    _open: dict[str, int] = field(default_factory=dict)

    def admit(self, address: str) -> bool:
        """Count a new connection from ``address``; False (and not counted) when over the limit."""
        n = self._open.get(address, 0)
        if self.limit is not None and n >= self.limit:
            return False
        self._open[address] = n + 1
        return True

    def release(self, address: str) -> None:
        n = self._open.pop(address, 0) - 1
        if n > 0:
            self._open[address] = n
