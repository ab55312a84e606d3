"""Importing a definitions file into a running broker (``POST /api/definitions``, ``stompmq admin
import``): checked whole, then applied, idempotently.

``plan`` checks every entry strictly (an unknown key is an error naming the nearest known one, a
value is read as its declaration would read it, an exchange declared with another type or other
options than it has is a conflict) and returns the steps, in order: vhosts, exchanges, streams,
queues, bindings, policies, operator policies, shovels, users.  Nothing has changed if it raised.
``--dry-run`` prints the steps; ``apply`` runs them, each through what the API and ``/control``
use (``Broker.administer``, ``Policies.put``, ``Shovels.declare``), so an import of what already
exists changes nothing.  Users go into the broker's users file (``--users-file``: the broker reads
it again by itself); a user's password is the file's ``password-hash`` if it has one, else the
user's present one, else none (locked until ``stompmq users passwd`` sets one).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from ..broker import Broker, ClientError
from ..broker.definitions import (
    PASSWORD_HASH,
    TOP_LEVEL,
    VHOST_KEYS,
    VHOST_LISTS,
    DefinitionsError,
    known_keys,
)
from ..broker.exchanges import EXCHANGE_TYPE, ROUTING_KEY_HEADER, declaration_options, parse_weight
from ..broker.key_exchanges import BUILT_IN
from ..broker.key_exchanges import TYPES as KEY_TYPES
from ..broker.policy_match import FIELDS, Policy, header_text
from ..broker.queue_settings import SETTING_KEYS, QueueSettings
from ..broker.routing import STREAM_TARGET
from ..broker.send_headers import MAX_COUNT, MAX_SECONDS, non_negative
from ..broker.stream_log import MAX_AGE, MAX_BYTES
from ..client import ClientError as ShovelError
from ..client import StompUrl
from ..transfer import Declaration
from ..vhost_names import DEFAULT_VHOST, vhost_name_error
from .auth import KNOWN_TAGS, Permission, User, Users
from .policies import Policies
from .shovels import Shovels

#: The password hash of a user imported without one: it matches no password.
LOCKED = "locked: no password yet, set one with stompmq users passwd"
EXCHANGE_KEYS = ("name", "type", "hash-header", "hash-property", "on-missing", "on-unroutable")
#: What an export without secrets writes for a password (logs.masked).
MASK = "***"
USER_KEYS = ("name", "tags", PASSWORD_HASH, "permissions")


class Target(Protocol):
    """The running broker a document is applied to (``runtime.Runtime`` is one): its vhosts'
    engines, declaring a vhost, giving the engines the time, its policies and its shovels."""

    engines: dict[str, Broker]
    policies: Policies
    shovels: Shovels

    def declare(self, vhost: str) -> Broker: ...

    def tick(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Step:
    what: str
    run: Callable[[], object]


def plan(runtime: Target, data: Any, source: str, users_file: str | None) -> list[Step]:
    """The steps that apply ``data``; DefinitionsError naming the first entry that is wrong."""
    if not isinstance(data, dict):
        raise DefinitionsError(f"{source}: expected a table of lists ({', '.join(TOP_LEVEL)})")
    known_keys(data, TOP_LEVEL, source)
    if "users" in data and users_file is None:
        raise DefinitionsError(f"{source}: users: the broker has no users file (--users-file) to put them in; "
                               "import them with stompmq admin import into a broker that has one")
    for key, value in data.items():
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise DefinitionsError(f"{source}: {key!r} must be a list of tables")
    parts = {DEFAULT_VHOST: (data, source)}
    for i, entry in enumerate(data.get("vhosts", [])):
        where = f"{source}: vhosts[{i}]"
        known_keys(entry, VHOST_KEYS, where)
        name = _text(entry, "name", where)
        error = vhost_name_error(name)
        if error is not None or name in parts:
            raise DefinitionsError(f"{where}: {error or f'vhost {name!r} appears twice'}")
        for key in VHOST_LISTS:
            if not isinstance(entry.get(key, []), list) or not all(isinstance(v, dict) for v in entry.get(key, [])):
                raise DefinitionsError(f"{where}: {key!r} must be a list of tables")
        parts[name] = (entry, where)
    steps: list[Step] = []
    for vhost, (part, where) in parts.items():
        if vhost not in runtime.engines:
            steps.append(Step(f"declare vhost {vhost}", partial(runtime.declare, vhost)))
        steps += _vhost_steps(runtime, vhost, part, where)
    for i, entry in enumerate(data.get("shovels", [])):
        steps.append(_shovel(runtime, entry, f"{source}: shovels[{i}]"))
    users = data.get("users", [])
    if users and users_file is not None:
        steps.append(_users(users, source, users_file))
    return steps


def apply(runtime: Target, steps: list[Step]) -> None:
    runtime.tick()
    for step in steps:
        step.run()


def _vhost_steps(runtime: Target, vhost: str, part: dict[str, Any], source: str) -> list[Step]:
    engine = runtime.engines.get(vhost)
    steps: list[Step] = []

    def control(path: str, headers: dict[str, str]) -> Step:
        shown = " ".join(f"{k}={v}" for k, v in headers.items())
        return Step(f"{vhost}: /control/{path}{' ' + shown if shown else ''}",
                    lambda: runtime.declare(vhost).administer(path, headers))

    exchanges: dict[str, str] = {name: kind for name, kind in BUILT_IN.items()}
    if engine is not None:
        exchanges |= {name: ex.type for name, ex in engine.key_exchanges.items()}
        exchanges |= {name: EXCHANGE_TYPE for name in engine.exchanges}
    hashed: dict[str, dict[str, str]] = {}  # the file's consistent-hash exchanges' options
    where = source
    try:
        for i, entry in enumerate(part.get("exchanges", [])):
            where = f"{source}: exchanges[{i}]"
            known_keys(entry, EXCHANGE_KEYS, where)
            name = _text(entry, "name", where)
            headers = _headers(entry)
            kind = headers.get("type", EXCHANGE_TYPE)
            if not name or "/" in name:
                raise ClientError(f"exchange name {name!r} must be non-empty and must not contain '/'")
            if kind in KEY_TYPES:
                extra = sorted(set(headers) - {"type"})
                if extra:
                    raise ClientError(f"{extra[0]} is an option of consistent-hash exchanges, not of {kind} ones")
            else:
                options = declaration_options(headers)
                existing = engine.exchanges.get(name) if engine is not None else None
                previous = hashed.get(name, existing.options if existing is not None else None)
                if previous is not None and previous != options:
                    raise ClientError(f"exchange {name!r} exists with other options: {previous}")
                hashed[name] = options
            if exchanges.get(name, kind) != kind:
                raise ClientError(f"exchange {name!r} exists with type {exchanges[name]}, not {kind}")
            exchanges[name] = kind
            if name not in BUILT_IN:
                steps.append(control("declare/exchange/" + name, headers))
        for i, entry in enumerate(part.get("streams", [])):
            where = f"{source}: streams[{i}]"
            known_keys(entry, ("name", MAX_AGE, MAX_BYTES), where)
            headers = _headers(entry)
            non_negative(headers, MAX_AGE, " number of seconds", int(MAX_SECONDS))
            non_negative(headers, MAX_BYTES, "", MAX_COUNT)
            steps.append(control("declare/stream/" + _text(entry, "name", where), headers))
        for i, entry in enumerate(part.get("queues", [])):
            where = f"{source}: queues[{i}]"
            known_keys(entry, ("name", *SETTING_KEYS), where)
            name = _queue(_text(entry, "name", where))
            headers = _headers(entry)
            QueueSettings.parse(headers)
            steps.append(control("declare/queue/" + name, headers))
        for i, entry in enumerate(part.get("bindings", [])):
            where = f"{source}: bindings[{i}]"
            known_keys(entry, ("exchange", "queue", "weight", ROUTING_KEY_HEADER), where)
            exchange = _text(entry, "exchange", where)
            target = _text(entry, "queue", where)
            if target.startswith("/") and not target.startswith(("/queue/", STREAM_TARGET)):
                raise ClientError(f"only queues and streams can be bound, not {target!r}")
            target = target if target.startswith("/") else "/queue/" + target
            if exchange not in exchanges:
                raise ClientError(f"no exchange named {exchange!r}")
            kind = exchanges[exchange]
            headers = {"queue": target}
            if kind in KEY_TYPES:
                if "weight" in entry:
                    raise ClientError(f"a {kind} exchange's binding has a routing-key, not a weight")
                headers[ROUTING_KEY_HEADER] = header_text(entry.get(ROUTING_KEY_HEADER, ""))
            else:
                if ROUTING_KEY_HEADER in entry:
                    raise ClientError("a consistent-hash exchange's binding has a weight, not a routing-key")
                headers["weight"] = str(parse_weight(header_text(entry.get("weight", 1))))
            steps.append(control("bind/exchange/" + exchange, headers))
        for key, operator in (("policies", False), ("operator-policies", True)):
            for i, entry in enumerate(part.get(key, [])):
                where = f"{source}: {key}[{i}]"
                known_keys(entry, FIELDS, where)
                policy = Policy.parse(_text(entry, "name", where), {k: v for k, v in entry.items() if k != "name"},
                                      operator)
                body = {k: v for k, v in entry.items() if k != "name"}
                steps.append(Step(f"{vhost}: {'operator policy' if operator else 'policy'} {policy.name} "
                                  f"{policy.record()}", partial(runtime.policies.put, vhost, policy.name, body, operator)))
    except ClientError as e:
        raise DefinitionsError(f"{where}: {e.message}") from None
    return steps


def _shovel(runtime: Target, entry: dict[str, Any], where: str) -> Step:
    name = _text(entry, "name", where)
    fields = {k: v for k, v in entry.items() if k != "name"}
    try:
        declaration = Declaration.parse(name, fields)
    except ShovelError as e:
        raise DefinitionsError(f"{where}: {e}") from None
    if any(StompUrl.parse(url).passcode == MASK for url in (declaration.source, declaration.target)):
        raise DefinitionsError(f"{where}: its URL's password is masked ({MASK}): export with --with-secrets to "
                               "carry it")
    return Step(f"shovel {name}: {declaration.shown()}", lambda: runtime.shovels.declare(declaration))


def _users(entries: list[dict[str, Any]], source: str, users_file: str) -> Step:
    imported: list[tuple[str, list[str], str | None, dict[str, Permission]]] = []
    for i, entry in enumerate(entries):
        where = f"{source}: users[{i}]"
        known_keys(entry, USER_KEYS, where)
        name = _text(entry, "name", where)
        tags = entry.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) and t in KNOWN_TAGS for t in tags):
            raise DefinitionsError(f"{where}: tags must be a list of {', '.join(sorted(KNOWN_TAGS))}")
        password = entry.get(PASSWORD_HASH)
        if password is not None and not isinstance(password, str):
            raise DefinitionsError(f"{where}: {PASSWORD_HASH} must be a string")
        permissions: dict[str, Permission] = {}
        raw = entry.get("permissions", {})
        if not isinstance(raw, dict):
            raise DefinitionsError(f"{where}: permissions must be a table of vhosts")
        for vhost, fields in raw.items():
            if not isinstance(fields, dict):
                raise DefinitionsError(f"{where}: permissions on {vhost!r} must be a table")
            known_keys(fields, ("configure", "write", "read"), f"{where}: permissions on {vhost!r}")
            permission = Permission(*(str(fields.get(k, "^$")) for k in ("configure", "write", "read")))
            try:
                permission.validate()
            except re.error as e:
                raise DefinitionsError(f"{where}: permissions on {vhost!r}: {e}") from None
            permissions[vhost] = permission
        imported.append((name, list(tags), password, permissions))

    def write() -> None:
        path = Path(users_file)
        users = Users.load(path) if path.exists() else Users()
        for name, tags, password, permissions in imported:
            present = users.users.get(name)
            hashed = password or (present.password if present is not None else LOCKED)
            users.users[name] = User(name, hashed, tags, permissions)
        users.save(path)

    return Step(f"users {', '.join(name for name, *_ in imported)} into {users_file}", write)


def _text(entry: dict[str, Any], name: str, where: str) -> str:
    if not isinstance(entry.get(name), str):
        raise DefinitionsError(f"{where}: needs a string '{name}'")
    value: str = entry[name]
    return value


def _headers(entry: dict[str, Any]) -> dict[str, str]:
    return {k: header_text(v) for k, v in entry.items() if k != "name"}


def _queue(name: str) -> str:
    if name.startswith("/") and not name.startswith("/queue/"):
        raise ClientError(f"only queues can be declared here, not {name!r}")
    return name.removeprefix("/queue/")
