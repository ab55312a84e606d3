"""Every management route, walked with every kind of user: the tag and the vhost permissions
each route declares (``stompmq.server.api.routes.ROUTES``) are what the API enforces.

The users file is the attacker's (docs/security.md): an administrator with permissions on ``/`` only, a
``monitoring`` user with none, ordinary users on ``/`` and on ``secret``; besides them a
``monitoring`` user who may read ``secret`` (it may peek there) and ``root``, an administrator
with every permission on both vhosts (it sets up each call, and is the control that every call
can succeed).  Each call gets fresh resources (a queue holding one message, an exchange, a
binding, a shovel, a connection), so a call that is allowed really does what it says.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stompmq.broker import Broker
from stompmq.broker.config import BrokerConfig
from stompmq.cli import main
from stompmq.server import ServerSettings
from stompmq.server.api.app import ManagementApp
from stompmq.server.api.routes import DASHBOARD_ROUTE, QUEUE_PATH, ROUTES, VHOST_NAME, ApiRoute
from stompmq.server.auth import Permission, User, Users, hash_password
from stompmq.server.runtime import Runtime
from stompmq.storage.memory import MemoryStore

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.users import NOTHING
from ..support.waiting import wait_until
from .test_http import Api

#: In the body of every message the walk publishes: a response holding it showed a message.
MARKER = "payroll-of-the-secret-vhost"
VHOSTS = ("/", "secret")
READ_ONLY = Permission(configure=NOTHING, write=NOTHING, read=".*")
#: name -> (tags, permissions by vhost)
KINDS: dict[str, tuple[list[str], dict[str, Permission]]] = {
    "root": (["administrator"], {"/": Permission(), "secret": Permission()}),
    "admin": (["administrator"], {"/": Permission()}),
    "watcher": (["monitoring"], {}),
    "reader": (["monitoring"], {"secret": READ_ONLY}),
    "alice": ([], {"/": Permission()}),
    "bob": ([], {"secret": Permission()}),
}


def _allowed(route: ApiRoute, user: str, vhost: str) -> bool:
    """What the route's declaration says ``user`` may do on ``vhost``."""
    tags, permissions = KINDS[user]
    if route.tag == "administrator" and "administrator" not in tags:
        return False
    if route.tag == "monitoring" and not {"administrator", "monitoring"} & set(tags):
        return False
    permission = permissions.get(vhost)
    return all(permission is not None and permission.allows(need.split()[0], need.split()[1])
               for need in route.needs)


class Walk:
    """The broker under test, and fresh resources for each call."""

    def __init__(self, broker: BrokerThread, api: Api) -> None:
        self.broker = broker
        self.api = api
        self.serial = itertools.count()
        self.clients: list[Client] = []
        self.producers: dict[str, Client] = {}  # root's, by vhost

    def call(self, user: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        token = base64.b64encode(f"{user}:pw-{user}".encode()).decode()
        return self.api.call(method, path, body, headers={"authorization": "Basic " + token})

    def root(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.call("root", method, path, body)
        assert status < 300, (method, path, status, answer)
        return answer

    def queue(self, vhost: str) -> str:
        """A new queue of ``vhost`` holding one message."""
        name = f"q{next(self.serial)}"
        if vhost not in self.producers:
            self.producers[vhost] = Client(self.broker.port, login="root", passcode="pw-root", host=vhost)
            self.clients.append(self.producers[vhost])
        self.producers[vhost].send_to("/queue/" + name, MARKER)
        return name

    def stream(self, vhost: str) -> str:
        """A new stream of ``vhost`` holding one entry."""
        name = f"st{next(self.serial)}"
        self.queue(vhost)  # (root's producer on the vhost)
        self.producers[vhost].send_to("/stream/" + name, MARKER)
        return name

    def schedule(self, vhost: str) -> str:
        """The id of a new schedule of ``vhost`` (in a new queue)."""
        name = f"sq{next(self.serial)}"
        self.queue(vhost)  # (root's producer on the vhost)
        self.producers[vhost].send_to("/queue/" + name, MARKER, headers={
            "AMQ_SCHEDULED_DELAY": "600000", "AMQ_SCHEDULED_PERIOD": "1000", "AMQ_SCHEDULED_REPEAT": "3"})
        items = self.root("GET", f"/api/schedules/{_quoted(vhost)}?limit=1000")["items"]
        return next(item["id"] for item in items if item["queue"] == name)

    def exchange(self, vhost: str, queue: str | None = None) -> str:
        name = f"ex{next(self.serial)}"
        self.root("PUT", f"/api/exchanges/{_quoted(vhost)}/{name}", {})
        if queue is not None:
            self.root("POST", f"/api/exchanges/{_quoted(vhost)}/{name}/bindings", {"queue": queue, "weight": 1})
        return name

    def connection(self) -> str:
        """The id of a new STOMP connection (alice's, on ``/``)."""
        before = {c["id"] for c in self.root("GET", "/api/connections")["items"]}
        self.clients.append(Client(self.broker.port, login="alice", passcode="pw-alice"))
        ids: list[str] = []
        wait_until(lambda: ids.extend({c["id"] for c in self.root("GET", "/api/connections")["items"]} - before)
                   or ids, "the new connection listed")
        return ids[0]

    def shovel_fields(self) -> dict[str, str]:
        port = self.broker.port
        return {"from": f"stomp://root:pw-root@127.0.0.1:{port}/queue/shovel-in",
                "to": f"stomp://root:pw-root@127.0.0.1:{port}/queue/shovel-out"}

    def request(self, route: ApiRoute, vhost: str) -> tuple[str, Any]:
        """(path, body) of a call of ``route`` on ``vhost`` that succeeds for a user allowed it."""
        v = _quoted(vhost)
        n = next(self.serial)
        handler = route.handler.rpartition(".")[2]  # the method of its resource part
        if route.path.endswith("/{vhost}"):  # a list of the vhost's resources: /api/KIND/VHOST
            return route.path.replace("{vhost}", v), None
        if route.path.startswith(QUEUE_PATH):
            name = self.queue(vhost)
            action = route.path.removeprefix(QUEUE_PATH)
            body = {"publish": {"body": MARKER}, "get": {"count": 1}, "move": {"to": name + "-to"}}.get(
                action.removeprefix("/"))
            return f"{_segment(vhost)}/{name}{action}", body
        if route.handler.startswith("exchange_api.") and "{" in route.path:
            # /api/exchanges/VHOST/NAME..., or the older /api/exchanges/NAME...?vhost=VHOST
            def at(name: str, tail: str = "") -> str:
                if route.vhost == "path":
                    return f"/api/exchanges/{v}/{name}{tail}"
                return f"/api/exchanges/{name}{tail}?vhost={v}"

            if handler == "declare_exchange":
                return at(f"ex{n}"), {}
            if handler in ("get_exchange", "delete_exchange"):
                return at(self.exchange(vhost)), None
            if handler == "bind":
                return at(self.exchange(vhost), "/bindings"), {"queue": self.queue(vhost), "weight": 1}
            queue = self.queue(vhost)  # unbind
            return at(self.exchange(vhost, queue), "/bindings/" + queue), None
        if handler in ("get_shovel", "delete_shovel"):
            self.root("PUT", f"/api/shovels/s{n}", self.shovel_fields())
            return f"/api/shovels/s{n}", None
        if handler == "declare_shovel":
            return f"/api/shovels/s{n}", self.shovel_fields()
        if handler == "get_stream":
            return f"/api/streams/{v}/{self.stream(vhost)}", None
        if handler in ("get_connection", "close_connection"):
            return f"/api/connections/{self.connection()}", None
        if route.handler.startswith("policy_api."):
            prefix = route.path.removesuffix(VHOST_NAME)
            if handler.endswith(("get_policy", "delete_policy")):
                self.root("PUT", f"{prefix}/%2F/p{n}", {"pattern": "^x$", "definition": {"max-length": 5}})
            body = {"pattern": "^x$", "definition": {"max-length": 5}} if handler.endswith("put_policy") else None
            return (f"{prefix}/%2F/p{n}" if route.path.endswith(VHOST_NAME) else prefix), body
        if route.handler == "definitions_api.import_":
            return "/api/definitions", {"queues": [{"name": f"declared{n}"}]}
        if handler == "delete_vhost":
            self.root("PUT", f"/api/vhosts/gone{n}")
            return f"/api/vhosts/gone{n}", None
        if handler == "declare_vhost":
            return f"/api/vhosts/dev{n}", None
        if handler == "list_schedules":
            return f"/api/schedules/{v}", None
        if handler == "cancel_schedule":
            return f"/api/schedules/{v}/{self.schedule(vhost)}", None
        if route.handler == "trace_api.put":
            return f"/api/trace?vhost={v}", {"on": False}
        if handler in ("get_user", "delete_user", "put_user"):
            if handler != "put_user":
                self.root("PUT", f"/api/users/u{n}", {"password": "pw", "tags": []})
            return f"/api/users/u{n}", {"password": "pw", "tags": "monitoring"} if handler == "put_user" else None
        if handler in ("get_permission", "delete_permission", "put_permission"):
            self.root("PUT", f"/api/users/u{n}", {"password": "pw", "tags": []})
            permission = {"configure": "^$", "write": ".*", "read": ".*"}
            if handler != "put_permission":
                self.root("PUT", f"/api/permissions/{v}/u{n}", permission)
            return f"/api/permissions/{v}/u{n}", permission if handler == "put_permission" else None
        if handler == "set_alarm_limits":
            return "/api/alarms", {}
        if handler == DASHBOARD_ROUTE:
            return "/index.html", None
        assert "{" not in route.path, f"no sample request for {route.method} {route.path}: add one to Walk.request"
        return route.path + (f"?vhost={v}" if route.vhost == "query" else ""), None


def _quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _segment(vhost: str) -> str:
    return "/api/queues/" + _quoted(vhost)


@pytest.fixture
def walk(make_memory_broker: Callable[..., BrokerThread], tmp_path: Path) -> Iterator[Walk]:
    users = Users({name: User(name, hash_password("pw-" + name), tags, permissions)
                   for name, (tags, permissions) in KINDS.items()})
    users.save(tmp_path / "users.toml")
    port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=port, users_file=str(tmp_path / "users.toml")))
    walk = Walk(broker, Api(port))
    walk.root("PUT", "/api/vhosts/secret")
    yield walk
    for client in walk.clients:
        client.close()


def test_every_route_is_in_the_route_list() -> None:
    """The server is built from ``ROUTES`` alone: a route added beside it would skip the walk."""
    from starlette.routing import Mount, Route

    management = ManagementApp(Runtime(Broker(MemoryStore(), BrokerConfig())), ServerSettings(), {})
    served: set[tuple[str, str]] = set()
    for route in management.app.routes:
        if isinstance(route, Mount):
            assert route.name == DASHBOARD_ROUTE
            served.add(("GET", "/{file:path}"))
        elif route.path == "/api/queues/{rest:path}":  # routed on the raw path by queue_resource
            served |= {(method, QUEUE_PATH + (f"/{action}" if action else ""))
                       for action, method in management.queue_api.actions}
        elif route.path == "/api/{rest:path}":  # a path no route has: a 404 naming its collection's routes
            continue
        else:
            assert isinstance(route, Route)
            served |= {(method, route.path) for method in route.methods or () if method != "HEAD"}
    assert served == {(route.method, route.path) for route in ROUTES}


def test_a_route_that_changes_a_vhost_declares_the_permissions_it_needs() -> None:
    """A mutation inside a vhost needs permissions there, not a tag alone."""
    for route in ROUTES:
        if route.vhost and route.tag == "administrator":
            assert route.needs, f"{route.method} {route.path} changes vhost resources but declares no permission"
        for need in route.needs:
            assert re.fullmatch(r"(configure|write|read) (/(queue|exchange)/[A-Z]+|/stream/stompmq\.trace)", need), need


def test_every_route_checks_the_tag_and_the_vhost_permissions(walk: Walk) -> None:
    """Each route, each user, each vhost: 403 exactly where the declaration refuses, a success
    elsewhere; and a response holding a message's body only from a route that needs ``read``."""
    outcomes: list[str] = []
    for route in ROUTES:
        for vhost in VHOSTS if route.vhost else ("/",):
            for user in KINDS:
                path, body = walk.request(route, vhost)
                status, answer = walk.call(user, route.method, path, body)
                allowed = _allowed(route, user, vhost)
                text = answer if isinstance(answer, str) else json.dumps(answer)
                if allowed != (status < 300) or (not allowed and status != 403):
                    outcomes.append(f"{user} {route.method} {path}: {status} {text[:200]}")
                if MARKER in text and not any(need.startswith("read ") for need in route.needs):
                    outcomes.append(f"{user} {route.method} {path} showed a message body without read permission")
    assert not outcomes, "\n".join(outcomes)


def test_the_docs_table_is_the_route_list() -> None:
    """docs/security.md's table of the management API has one row per route, as declared."""
    text = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    rows = set(re.findall(r"^\| `(GET|PUT|POST|DELETE) ([^`]+)` \| (\w+) \| ([^|]*) \|$", text, re.MULTILINE))
    declared = {(r.method, r.path, r.tag, ", ".join(f"`{n}`" for n in r.needs) or "—") for r in ROUTES}
    assert {(m, p, t, n.strip()) for m, p, t, n in rows} == declared


def test_cli_commands_are_refused_where_the_user_has_no_permission(
        walk: Walk, capsys: pytest.CaptureFixture[str]) -> None:
    """``stompmq admin`` goes through the same routes: an administrator without permissions on
    ``secret`` can neither read nor change its messages and exchanges there, and can on ``/``."""
    url = walk.api.base
    secret_queue = walk.queue("secret")
    queue = walk.queue("/")

    def admin(vhost: str, *args: str) -> tuple[int, str, str]:
        code = main(["admin", "--url", url, "--user", "admin", "--password", "pw-admin", "--vhost", vhost, *args])
        out, err = capsys.readouterr()
        return code, out, err

    for args in (["peek", secret_queue], ["get", secret_queue], ["move", secret_queue, "elsewhere"],
                 ["purge", secret_queue], ["publish", secret_queue, "x"], ["delete", secret_queue],
                 ["declare", "ex-cli"]):
        code, _, err = admin("secret", *args)
        assert code == 1 and "403: access refused: user admin has no" in err, (args, err)
    code, out, _ = admin("/", "peek", queue)
    assert code == 0 and MARKER in out
    assert admin("/", "declare", "ex-cli")[0] == 0
