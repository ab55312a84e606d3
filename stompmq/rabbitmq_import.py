"""``stompmq admin import-rabbitmq definitions.json``: RabbitMQ's topology and users on stompmq.

The input is what ``rabbitmqctl export_definitions`` or the management UI
writes.  ``plan`` turns it into a ``Plan`` without touching anything; ``--dry-run``
prints it.  Then:

* **Vhosts, exchanges, queues, streams and bindings** are declared on a running
  broker over STOMP (``--broker stomp://admin:password@host:61613``), through
  the ``/control`` verbs every declaration of stompmq goes through, each with a
  receipt.  That is the one path that knows every kind involved (direct, fanout,
  topic and consistent-hash exchanges, queue policies, streams); the broker
  stores them, so they survive restarts.  Declarations are idempotent: running
  the import twice changes nothing.
* **Users** go into a users file (``--users-file``; merged into it when it
  exists), which a running broker reloads by itself.  RabbitMQ's password hashes
  (salted SHA-256/512 or MD5) cannot be turned into stompmq's scrypt hashes, so a
  user's password comes from ``--password-file`` (``user:password`` lines), or
  the user is written locked until ``stompmq users passwd`` sets one.
* **Policies and operator policies** are set through the broker's management API
  (``--url``, with the credentials of ``--broker``): their keys map one for one but for
  ``dead-letter-exchange`` (``dead-letter``: to ``/queue/DLQ.NAME``) and ``consumer-timeout``
  (``ack-timeout``, in seconds); ``apply-to`` ``classic_queues`` and ``quorum_queues`` are
  ``queues``; a stream policy's ``max-age`` ("7D") is in seconds.  A policy of which no key
  maps, or for exchanges (``alternate-exchange`` has no counterpart), is listed as not mapped.
* **Permissions**: RabbitMQ's configure/write/read regular expressions match
  resource *names* (``orders``); stompmq's match resources (``/queue/orders``,
  ``/exchange/orders``).  A pattern is rewritten to match the same names of every
  kind: ``^`` becomes "just after ``/KIND/``".

Whatever has no stompmq counterpart (headers exchanges, exchange-to-exchange
bindings, shovel and federation parameters, policy keys such as ``ha-mode``, ...) is listed under "not
mapped" in the plan, and what maps with a different meaning under "differs";
nothing is dropped silently.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .admin_api import DEFAULT_URL, Api, ApiError
from .broker.policy_match import KEYS_OF, MAX_AGE
from .client import ClientError, Refused, StompConnection, StompUrl, run_client
from .server.auth import KNOWN_TAGS, Permission, User, Users, UsersFileError, hash_password
from .vhost_names import DEFAULT_VHOST

DECLARE_VHOST = "/control/declare/vhost/"
#: Written as the password hash of a user without a password: it matches no password.
LOCKED = "locked: no password yet, set one with stompmq users passwd"
KEY_TYPES = ("direct", "fanout", "topic")
#: The exchanges stompmq has built in, as RabbitMQ does, with their types.
BUILT_IN = {"amq.direct": "direct", "amq.fanout": "fanout", "amq.topic": "topic"}
CONSISTENT_HASH = "x-consistent-hash"
#: RabbitMQ's hash-property values and stompmq's names for them.
HASH_PROPERTIES = {"message_id": "message-id", "correlation_id": "correlation-id", "timestamp": "timestamp"}
#: The kinds of resource permissions are checked on (``/KIND/NAME``, broker/resources.py).
RESOURCE_KINDS = ("queue", "topic", "exchange", "stream", "temp-queue", "reply-queue")
#: Queue arguments that map to a stompmq queue policy key one for one.
QUEUE_ARGUMENTS = {"x-message-ttl": "message-ttl", "x-max-length": "max-length",
                   "x-max-length-bytes": "max-length-bytes", "x-single-active-consumer": "x-single-active-consumer"}
#: Queue arguments that need no counterpart, and why.
QUEUE_ARGUMENTS_DIFFER = {
    "x-max-priority": "priorities 0-9 are always honoured",
    "x-queue-mode": "queues always page to the store beyond their window (like lazy queues)",
    "x-queue-version": "one storage format",
}
#: RabbitMQ policy keys that map one for one.
POLICY_KEYS = {"message-ttl", "expires", "max-length", "max-length-bytes", "overflow", "delivery-limit"}
#: RabbitMQ's apply-to values and stompmq's.
APPLY_TO = {"queues": "queues", "classic_queues": "queues", "quorum_queues": "queues", "streams": "streams",
            "exchanges": "exchanges", "all": "all"}
DURATION_UNITS = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60, "s": 1}


@dataclass(frozen=True, slots=True)
class Step:
    """One ``/control`` SEND: its destination and headers."""

    destination: str
    headers: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        options = " ".join(f"{k}={v}" for k, v in self.headers.items())
        return f"{self.destination}{' ' + options if options else ''}"


@dataclass(frozen=True, slots=True)
class PolicyStep:
    """One policy (or operator policy) to set: ``PUT /api/[operator-]policies/VHOST/NAME``."""

    vhost: str
    name: str
    operator: bool
    body: dict[str, Any]

    def describe(self) -> str:
        kind = "operator policy" if self.operator else "policy"
        return f"{kind} {self.name} on {self.vhost}: {json.dumps(self.body, sort_keys=True)}"


@dataclass
class Plan:
    vhosts: dict[str, list[Step]] = field(default_factory=dict)  # vhost -> its steps, in order
    policies: list[PolicyStep] = field(default_factory=list)
    users: dict[str, User] = field(default_factory=dict)
    locked: list[str] = field(default_factory=list)  # users written without a password
    unmapped: list[str] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)

    def text(self) -> str:
        lines = []
        for vhost, steps in self.vhosts.items():
            lines.append(f"vhost {vhost}:")
            lines += [f"  {step.describe()}" for step in steps]
        if self.users:
            lines.append("users:")
            for user in self.users.values():
                password = "NEEDS A PASSWORD (locked)" if user.name in self.locked else "password from --password-file"
                lines.append(f"  {user.name} tags=[{','.join(user.tags)}] {password}")
                lines += [f"    on {v}: configure={p.configure!r} write={p.write!r} read={p.read!r}"
                          for v, p in user.permissions.items()]
        if self.policies:
            lines.append("policies (through the management API):")
            lines += [f"  {step.describe()}" for step in self.policies]
        for title, items in (("differs", self.differs), ("not mapped", self.unmapped)):
            if items:
                lines.append(f"{title}:")
                lines += [f"  - {item}" for item in items]
        return "\n".join(lines)


def load(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as e:
        raise ClientError(f"cannot read RabbitMQ definitions {path}: {e}") from None
    if not isinstance(data, dict):
        raise ClientError(f"{path}: expected a JSON object (rabbitmqctl export_definitions)")
    return data


def plan(data: dict[str, Any], passwords: dict[str, str], default: str = DEFAULT_VHOST) -> Plan:
    """What importing ``data`` does; ``passwords`` maps user names to new passwords, ``default``
    is the vhost of entries that name none (a single vhost's export)."""
    result = Plan()
    for entry in _entries(data, "vhosts"):
        result.vhosts.setdefault(str(entry.get("name", DEFAULT_VHOST)), [])
        if entry.get("limits"):
            result.unmapped.append(f"vhost {entry.get('name')}: limits {entry['limits']}")
    _exchanges_and_queues(data, result, default)
    _users(data, result, passwords, default)
    for key, operator in (("policies", False), ("operator_policies", True)):
        for entry in _entries(data, key):
            step = _policy(entry, operator, result, default)
            if step is not None:
                result.policies.append(step)
    for key, what in (("parameters", "parameter"), ("global_parameters", "global parameter"), ("topic_permissions", "topic permission")):
        for entry in _entries(data, key):
            if key == "global_parameters" and entry.get("name") in ("cluster_name", "internal_cluster_id"):
                continue  # the old cluster's identity: nothing to carry over
            result.unmapped.append(f"{what}: {json.dumps(entry, sort_keys=True)}")
    for vhost, steps in result.vhosts.items():
        if vhost != DEFAULT_VHOST:
            steps.insert(0, Step(DECLARE_VHOST + vhost))
    return result


def _entries(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ClientError(f"definitions: {key!r} must be a list of objects")
    return value


def _exchanges_and_queues(data: dict[str, Any], result: Plan, default: str) -> None:
    exchanges: dict[tuple[str, str], str] = {}  # (vhost, name) -> type, of those declared
    streams: set[tuple[str, str]] = set()
    queues: set[tuple[str, str]] = set()
    for ex in _entries(data, "exchanges"):
        vhost, name, kind = _vhost(ex, default), str(ex.get("name", "")), str(ex.get("type", ""))
        steps = result.vhosts.setdefault(vhost, [])
        what = f"exchange {name!r} on {vhost}"
        if name in BUILT_IN or not name:
            continue  # RabbitMQ's built-in exchanges exist in stompmq too
        if "/" in name or kind not in (*KEY_TYPES, CONSISTENT_HASH):
            result.unmapped.append(f"{what}: type {kind}" if "/" not in name else f"{what}: a name with '/'")
            continue
        headers = {"type": kind}
        arguments = dict(ex.get("arguments") or {})
        if kind == CONSISTENT_HASH:
            headers = {}
            if "hash-header" in arguments:
                headers["hash-header"] = str(arguments.pop("hash-header"))
            if "hash-property" in arguments:
                prop = str(arguments.pop("hash-property"))
                if prop not in HASH_PROPERTIES:
                    result.unmapped.append(f"{what}: hash-property {prop}")
                    continue
                headers["hash-property"] = HASH_PROPERTIES[prop]
        for flag in ("auto_delete", "internal"):
            if ex.get(flag):
                result.unmapped.append(f"{what}: {flag} (declared as a plain exchange)")
        for arg, value in arguments.items():
            result.unmapped.append(f"{what}: argument {arg}={value}")
        exchanges[(vhost, name)] = kind
        steps.append(Step("/control/declare/exchange/" + name, headers))
    for q in _entries(data, "queues"):
        vhost, name = _vhost(q, default), str(q.get("name", ""))
        step = _queue(vhost, name, q, result)
        if step is not None:
            result.vhosts.setdefault(vhost, []).append(step)
            (streams if step.destination.startswith("/control/declare/stream/") else queues).add((vhost, name))
    for b in _entries(data, "bindings"):
        vhost = _vhost(b, default)
        source, target, key = str(b.get("source", "")), str(b.get("destination", "")), str(b.get("routing_key", ""))
        what = f"binding {source!r} -> {target!r} key {key!r} on {vhost}"
        if not source:
            continue  # the default exchange: /queue/NAME does the same in stompmq
        source_type = exchanges.get((vhost, source), BUILT_IN.get(source))
        if source_type is None:
            result.unmapped.append(f"{what}: its exchange is not mapped")
        elif b.get("destination_type") != "queue":
            result.unmapped.append(f"{what}: exchange-to-exchange bindings")
        elif (vhost, target) not in queues and (vhost, target) not in streams:
            result.unmapped.append(f"{what}: its queue is not mapped")
        elif source_type == CONSISTENT_HASH:
            if not key.isdigit() or not 1 <= int(key) <= 65535:
                result.unmapped.append(f"{what}: the weight (routing key) must be a number from 1 to 65535")
                continue
            prefix = "/stream/" if (vhost, target) in streams else "/queue/"
            result.vhosts[vhost].append(Step("/control/bind/exchange/" + source,
                                             {"queue": prefix + target, "weight": key}))
        elif (vhost, target) in streams:
            result.unmapped.append(f"{what}: a {source_type} exchange cannot route to a stream (consistent-hash can)")
        else:
            if b.get("arguments"):
                result.unmapped.append(f"{what}: binding arguments {b['arguments']} (ignored)")
            result.vhosts[vhost].append(Step("/control/bind/exchange/" + source,
                                             {"queue": "/queue/" + target, "routing-key": key}))


def _queue(vhost: str, name: str, q: dict[str, Any], result: Plan) -> Step | None:
    """The declaration of one queue (a stream for ``x-queue-type: stream``), or None (unmapped)."""
    what = f"queue {name!r} on {vhost}"
    if not name or name.startswith("/"):
        result.unmapped.append(f"{what}: the name")
        return None
    arguments = dict(q.get("arguments") or {})
    kind = str(arguments.pop("x-queue-type", "classic"))
    for flag in ("auto_delete", "exclusive"):
        if q.get(flag):
            result.unmapped.append(f"{what}: {flag} (declared as a plain durable queue)")
    if q.get("durable") is False:
        result.differs.append(f"{what}: not durable in RabbitMQ; every stompmq queue is stored")
    headers: dict[str, str] = {}
    if kind == "stream":
        if "x-max-age" in arguments:
            age = _seconds(str(arguments.pop("x-max-age")))
            if age is None:
                result.unmapped.append(f"{what}: x-max-age")
            else:
                headers["max-age"] = str(age)
        if "x-max-length-bytes" in arguments:
            headers["max-bytes"] = str(arguments.pop("x-max-length-bytes"))
        for arg, value in arguments.items():
            result.unmapped.append(f"{what}: stream argument {arg}={value}")
        return Step("/control/declare/stream/" + name, headers)
    if kind == "quorum":
        result.differs.append(f"{what}: a quorum queue; stompmq replicates through its store (PostgreSQL), "
                              "not by queue")
    elif kind != "classic":
        result.unmapped.append(f"{what}: x-queue-type {kind} (declared as a queue)")
    for arg, value in arguments.items():
        if arg in QUEUE_ARGUMENTS:
            headers[QUEUE_ARGUMENTS[arg]] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        elif arg == "x-overflow":
            overflow = str(value)
            if overflow == "reject-publish-dlx":
                result.differs.append(f"{what}: x-overflow reject-publish-dlx is reject-publish (not dead-lettered)")
                overflow = "reject-publish"
            headers["overflow"] = overflow
        elif arg == "x-dead-letter-exchange":
            headers["dead-letter"] = "true"
            result.differs.append(f"{what}: dead letters go to /queue/DLQ.{name}, not to exchange {value!r}")
        elif arg == "x-dead-letter-routing-key":
            result.differs.append(f"{what}: x-dead-letter-routing-key {value!r} unused (see dead letters)")
        elif arg in QUEUE_ARGUMENTS_DIFFER:
            result.differs.append(f"{what}: {arg}={value}: {QUEUE_ARGUMENTS_DIFFER[arg]}")
        else:
            result.unmapped.append(f"{what}: argument {arg}={value}")
    return Step("/control/declare/queue/" + name, headers)


def _policy(entry: dict[str, Any], operator: bool, result: Plan, default: str) -> PolicyStep | None:
    """One RabbitMQ policy as stompmq's, or None (listed as not mapped)."""
    vhost, name = _vhost(entry, default), str(entry.get("name", ""))
    what = f"{'operator policy' if operator else 'policy'} {name!r} on {vhost}"
    definition: dict[str, Any] = {}
    for key, value in dict(entry.get("definition") or {}).items():
        if key in POLICY_KEYS:
            if key == "overflow" and value == "reject-publish-dlx":
                result.differs.append(f"{what}: overflow reject-publish-dlx is reject-publish (not dead-lettered)")
                value = "reject-publish"
            definition[key] = value
        elif key == "dead-letter-exchange" and not operator:
            definition["dead-letter"] = True
            result.differs.append(f"{what}: dead letters go to /queue/DLQ.NAME, not to exchange {value!r}")
        elif key == "consumer-timeout" and isinstance(value, int):
            definition["ack-timeout"] = value / 1000 if value % 1000 else value // 1000
        elif key == MAX_AGE and _seconds(str(value)) is not None:
            definition[key] = _seconds(str(value))
        else:
            result.unmapped.append(f"{what}: key {key}={json.dumps(value)}")
    apply_to = APPLY_TO.get(str(entry.get("apply-to", "all")))
    if apply_to == "exchanges" or apply_to is None:
        result.unmapped.append(f"{what}: apply-to {entry.get('apply-to')}: exchanges have no settings here")
        return None
    for key in sorted(definition):
        if apply_to != "all" and key not in KEYS_OF[apply_to]:
            result.unmapped.append(f"{what}: key {key}: not a setting of {apply_to}")
            del definition[key]
    if not definition:
        result.unmapped.append(f"{what}: none of its keys maps")
        return None
    if entry.get("apply-to") in ("classic_queues", "quorum_queues"):
        result.differs.append(f"{what}: apply-to {entry['apply-to']} applies to every queue")
    return PolicyStep(vhost, name, operator, {"pattern": str(entry.get("pattern", "")), "apply-to": apply_to,
                                              "priority": int(entry.get("priority", 0)), "definition": definition})


def _seconds(age: str) -> int | None:
    """RabbitMQ's ``x-max-age`` ("7D", "12h", "30m", "1Y") in seconds; None if unreadable."""
    match = re.fullmatch(r"(\d+)([YMDhms])", age)
    return int(match[1]) * DURATION_UNITS[match[2]] if match else None


def _vhost(entry: dict[str, Any], default: str) -> str:
    return str(entry.get("vhost", default))


def _users(data: dict[str, Any], result: Plan, passwords: dict[str, str], default: str) -> None:
    for u in _entries(data, "users"):
        name = str(u.get("name", ""))
        raw_tags = u.get("tags", [])
        tags = [t.strip() for t in (raw_tags.split(",") if isinstance(raw_tags, str) else raw_tags) if t.strip()]
        for tag in tags:
            if tag not in KNOWN_TAGS:
                result.unmapped.append(f"user {name!r}: tag {tag}")
        if "limits" in u and u["limits"]:
            result.unmapped.append(f"user {name!r}: limits {u['limits']}")
        if name in passwords:
            password = hash_password(passwords[name])
        else:
            password = LOCKED
            result.locked.append(name)
        result.users[name] = User(name, password, [t for t in tags if t in KNOWN_TAGS])
    for p in _entries(data, "permissions"):
        user = result.users.get(str(p.get("user", "")))
        if user is None:
            result.unmapped.append(f"permissions of {p.get('user')!r}: no such user in the file")
            continue
        vhost = _vhost(p, default)
        try:
            user.permissions[vhost] = Permission(*(translate(str(p.get(a, ""))) for a in ("configure", "write", "read")))
        except re.error as e:
            user.permissions[vhost] = Permission("^$", "^$", "^$")
            result.unmapped.append(f"permissions of {user.name!r} on {vhost}: {e} (written as no access)")


def translate(pattern: str) -> str:
    """A RabbitMQ permission pattern (searched in a resource's name) as a stompmq one (searched in
    the resource, ``/KIND/NAME``): the same names of every kind.  ``re.error`` if it does not compile."""
    if pattern in ("", "^$"):
        return "^$"  # RabbitMQ: the empty pattern grants nothing
    if pattern == ".*":
        return ".*"
    kinds = "|".join(re.escape(kind) for kind in RESOURCE_KINDS)
    start = "(?:" + "|".join(f"(?<=^/{re.escape(kind)}/)" for kind in RESOURCE_KINDS) + ")"
    out, i = [], 0
    while i < len(pattern):  # ``^`` becomes "just after /KIND/"; escapes and classes are copied
        c = pattern[i]
        j = i + 1
        if c == "\\":
            j = i + 2
        elif c == "[":  # a character class, through its closing ] (one right after [ or [^ is literal)
            j += pattern[j] == "^" if j < len(pattern) else 0
            j += pattern[j] == "]" if j < len(pattern) else 0
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            j += 1
        out.append(start if c == "^" else pattern[i:j])
        i = j
    translated = f"^/(?:{kinds})/.*?(?:{''.join(out)})"
    re.compile(translated)
    return translated


def read_passwords(path: str) -> dict[str, str]:
    passwords = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise ClientError(f"cannot read password file {path}: {e.strerror or e}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user:
            raise ClientError(f"{path}:{number}: expected user:password")
        passwords[user] = password
    return passwords


async def apply(result: Plan, broker: StompUrl) -> None:
    """Declare the plan's new vhosts (on the default vhost), then each vhost's other steps in it."""
    first = await StompConnection.open(broker)
    try:
        for steps in result.vhosts.values():
            if steps and steps[0].destination.startswith(DECLARE_VHOST):
                await _run(first, steps[0])
    finally:
        await first.close()
    for vhost, steps in result.vhosts.items():
        steps = [step for step in steps if not step.destination.startswith(DECLARE_VHOST)]
        if not steps:
            continue
        connection = await StompConnection.open(broker, vhost if vhost != DEFAULT_VHOST else broker.host)
        try:
            for step in steps:
                await _run(connection, step)
        finally:
            await connection.close()


def set_policies(result: Plan, url: str, broker: StompUrl) -> None:
    """Set the plan's policies through the management API at ``url``, as ``broker``'s user."""
    api = Api.login(url, DEFAULT_VHOST, broker.login, broker.passcode or "")
    for step in result.policies:
        collection = "/api/operator-policies/" if step.operator else "/api/policies/"
        path = collection + urllib.parse.quote(step.vhost, safe="") + "/" + urllib.parse.quote(step.name, safe="")
        try:
            api.call("PUT", path, step.body, scoped=False)
        except ApiError as e:
            raise Refused(f"{step.describe()}: {e.status}: {e}") from None
        except OSError as e:
            raise ClientError(f"cannot reach the management API at {url} (--url) for the policies: "
                              f"{getattr(e, 'reason', e)}") from None


async def _run(connection: StompConnection, step: Step) -> None:
    try:
        await connection.request("SEND", {"destination": step.destination, **step.headers})
    except ClientError as e:
        raise type(e)(f"{step.describe()}: {e}") from None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="stompmq admin import-rabbitmq", description=__doc__.splitlines()[0])
    parser.add_argument("file", help="RabbitMQ definitions (JSON)")
    parser.add_argument("--broker", default="stomp://127.0.0.1:61613", metavar="URL",
                        help="the stompmq to declare on: stomp://[user:password@]host[:port] (an administrator "
                             "when it has users) [default: stomp://127.0.0.1:61613]")
    parser.add_argument("--url", default=None, metavar="URL",
                        help="the broker's management API, for the policies [default: stompmq admin's --url]")
    parser.add_argument("--users-file", metavar="FILE", help="write the users into this users file (merged)")
    parser.add_argument("--password-file", metavar="FILE", help="user:password lines: the users' new passwords")
    parser.add_argument("--vhost", default=DEFAULT_VHOST,
                        help="the vhost of entries that name none (a single vhost's export) [default: /]")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    args = parser.parse_args(argv)
    try:
        broker = StompUrl.parse(args.broker)
        passwords = read_passwords(args.password_file) if args.password_file else {}
        try:
            result = plan(load(args.file), passwords, args.vhost)
        except (AttributeError, TypeError, ValueError) as e:  # a field of the wrong type
            raise ClientError(f"{args.file}: not RabbitMQ definitions: {e}") from None
        print(result.text())
        if args.dry_run:
            return 0
        if result.users and args.users_file is None:
            print("stompmq admin: users not written: give --users-file", file=sys.stderr)
        if args.users_file is not None:
            path = Path(args.users_file)
            users = Users.load(path) if path.exists() else Users()
            for name, user in result.users.items():
                if name in result.locked and name in users.users:  # a password set since an earlier import
                    user.password = users.users[name].password
                users.users[name] = user
            users.save(path)
        run_client(apply, result, broker)
        if result.policies:
            set_policies(result, args.url or DEFAULT_URL, broker)
    except (ClientError, UsersFileError) as e:
        print(f"stompmq admin: {e}", file=sys.stderr)
        return e.exit_code if isinstance(e, ClientError) else 2
    print("imported" + (f"; {len(result.locked)} users need a password: stompmq users --users-file "
                        f"{args.users_file} passwd NAME" if result.locked and args.users_file else ""))
    return 0

