"""The broker's definitions as a file would declare them: every vhost, exchange, binding, declared
queue, stream, policy, operator policy, shovel and user (``GET /api/definitions``,
``stompmq admin export``).

The document is the definitions file format (broker/definitions.py): the default vhost's lists
at the top, every other vhost in a ``vhosts`` entry, shovels and users at the top.  Everything is
sorted and defaults are left out, so exporting what an import of the export declared gives the
same bytes.  Secrets are left out unless asked for: users' password hashes, and the passwords in
shovels' URLs (masked); a masked URL imported back is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..broker import Broker
from ..broker.definitions import PASSWORD_HASH
from ..broker.exchanges import EXCHANGE_TYPE
from ..broker.key_exchanges import BUILT_IN
from ..broker.routing import STREAM_TARGET
from ..broker.stream_log import MAX_AGE, MAX_BYTES
from ..logs import masked
from ..vhost_names import DEFAULT_VHOST
from .auth import Users
from .policies import Policies

if TYPE_CHECKING:
    from .runtime import Runtime


def export_definitions(runtime: Runtime, users: Users | None, secrets: bool) -> dict[str, Any]:
    """The whole definitions document (``secrets``: with password hashes and shovel passwords)."""
    document = _vhost(runtime.engines[DEFAULT_VHOST], runtime.policies, DEFAULT_VHOST)
    others = [{"name": vhost, **_vhost(engine, runtime.policies, vhost)}
              for vhost, engine in sorted(runtime.engines.items()) if vhost != DEFAULT_VHOST]
    if others:
        document["vhosts"] = others
    shovels = []
    for name, running in sorted(runtime.shovels.shovels.items()):
        stored = running.declaration.stored()
        if not secrets:
            stored = {**stored, "from": masked(stored["from"]), "to": masked(stored["to"])}
        shovels.append({"name": name, **stored})
    if shovels:
        document["shovels"] = shovels
    if users is not None and users.users:
        document["users"] = [_user(user, secrets) for _, user in sorted(users.users.items())]
    return document


def _vhost(engine: Broker, policies: Policies, vhost: str) -> dict[str, Any]:
    exchanges: list[dict[str, Any]] = []
    bindings: list[dict[str, Any]] = []
    for name in sorted({*engine.exchanges, *engine.key_exchanges}):
        hashed = engine.exchanges.get(name)
        if hashed is not None:
            exchanges.append({"name": name, "type": EXCHANGE_TYPE, **dict(sorted(hashed.options.items()))})
            bindings += [{"exchange": name, "queue": q if q.startswith(STREAM_TARGET) else "/queue/" + q, "weight": w}
                         for q, w in sorted(hashed.bindings.items()) if q not in hashed.private]
            continue
        keyed = engine.key_exchanges[name]
        if name not in BUILT_IN:
            exchanges.append({"name": name, "type": keyed.type})
        bindings += [{"exchange": name, "queue": "/queue/" + q, "routing-key": key}
                     for q, key in sorted(keyed.bindings) if q not in keyed.private]
    streams = []
    for name, stream in sorted(engine.streams_by_name.items()):
        options = {key: int(stream.options[key]) for key in (MAX_AGE, MAX_BYTES) if key in stream.options}
        streams.append({"name": name, **options})
    parts: dict[str, list[dict[str, Any]]] = {
        "exchanges": exchanges,
        "queues": [{"name": name, **settings} for name, settings in engine.declared_queues().items()],
        "streams": streams,
        "bindings": bindings,
        "policies": [p.record() for p in policies.of(vhost, False)],
        "operator-policies": [p.record() for p in policies.of(vhost, True)],
    }
    return {key: entries for key, entries in parts.items() if entries}


def _user(user: Any, secrets: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": user.name, "tags": sorted(user.tags)}
    if secrets:
        entry[PASSWORD_HASH] = user.password
    entry["permissions"] = {vhost: {"configure": p.configure, "write": p.write, "read": p.read}
                            for vhost, p in sorted(user.permissions.items())}
    return entry
