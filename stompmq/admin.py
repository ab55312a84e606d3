"""``stompmq admin ...``: the management API from a shell, as tables or ``--json``.

Every command is one or a few HTTP requests to a running broker's management
API (``--url``, default the broker's default ``http://127.0.0.1:61680``); lists
follow the API's pages to the end.  Exit codes: 0 done, 1 the broker refused
(its JSON error is printed), 2 usage or connection errors.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from .broker.definitions import DefinitionsError, load_definitions
from .config import DEFAULT_HTTP_PORT

DEFAULT_URL = os.environ.get("STOMPMQ_ADMIN_URL", f"http://127.0.0.1:{DEFAULT_HTTP_PORT}")
PAGE = 1000


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class Api:
    url: str
    vhost: str = "/"  # the vhost of the queue, exchange and topic routes
    headers: dict[str, str] = dataclasses.field(default_factory=lambda: {"content-type": "application/json"})

    @classmethod
    def login(cls, url: str, vhost: str, user: str | None, password: str) -> Api:
        """The API at ``url``, with HTTP basic credentials of a broker user (--users-file) if given."""
        api = cls(url.rstrip("/"), vhost)
        if user is not None:
            api.headers["authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return api

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        if self.vhost != "/":
            path += ("&" if "?" in path else "?") + "vhost=" + _quoted(self.vhost)
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("error", e.reason)
            except ValueError:
                message = e.reason
            raise ApiError(e.code, str(message)) from None

    def pages(self, path: str) -> Iterator[dict[str, Any]]:
        after = ""
        while True:
            page = self.call("GET", f"{path}?limit={PAGE}&after={urllib.parse.quote(after)}")
            yield from page["items"]
            if page["next_after"] is None:
                return
            after = page["next_after"]


def _quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def export_definitions(api: Api) -> dict[str, Any]:
    """The exchanges and bindings as a definitions file (``--definitions`` reads it back)."""
    exchanges, bindings = [], []
    for ex in api.pages("/api/exchanges"):
        exchanges.append({"name": ex["name"], "type": "consistent-hash", **ex["options"]})
        bindings += [{"exchange": ex["name"], "queue": "/queue/" + b["queue"], "weight": b["weight"]}
                     for b in ex["bindings"]]
    return {"exchanges": exchanges, "bindings": bindings}


def import_definitions(api: Api, data: dict[str, Any]) -> None:
    """Declare what ``data`` declares: in ``api``'s vhost, and each ``vhosts`` entry in its own."""
    for entry in data.get("vhosts", []):
        api.call("PUT", "/api/vhosts/" + _quoted(entry["name"]))
        import_definitions(dataclasses.replace(api, vhost=entry["name"]), {**entry, "vhosts": []})
    for ex in data.get("exchanges", []):
        options = {k: v for k, v in ex.items() if k not in ("name", "type")}
        api.call("PUT", "/api/exchanges/" + _quoted(ex["name"]), options)
    for b in data.get("bindings", []):
        api.call("POST", f"/api/exchanges/{_quoted(b['exchange'])}/bindings",
                 {"queue": b["queue"], "weight": b.get("weight", 1)})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stompmq admin", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"management API [default: {DEFAULT_URL}; env STOMPMQ_ADMIN_URL]")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--vhost", default="/", help="the vhost of queue and exchange commands [default: /]")
    parser.add_argument("--user", default=os.environ.get("STOMPMQ_ADMIN_USER"),
                        help="a user of the broker's --users-file [env STOMPMQ_ADMIN_USER]")
    parser.add_argument("--password", default=os.environ.get("STOMPMQ_ADMIN_PASSWORD", ""),
                        help="its password [env STOMPMQ_ADMIN_PASSWORD, better than the command line]")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("overview", help="version, uptime, store, totals and rates")
    sub.add_parser("list-vhosts", help="every vhost with its connections and queues")
    sub.add_parser("declare-vhost", help="declare a vhost").add_argument("name")
    sub.add_parser("list-queues", help="every queue with its counts")
    sub.add_parser("list-connections", help="every client connection")
    sub.add_parser("list-exchanges", help="every exchange with its bindings")
    for name, what in (("purge", "drop a queue's ready messages"), ("delete", "purge a queue and unbind it")):
        sub.add_parser(name, help=what).add_argument("queue")
    declare = sub.add_parser("declare", help="declare a consistent-hash exchange")
    declare.add_argument("exchange")
    declare.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                         help="declaration option, e.g. hash-header=customer-id")
    bind = sub.add_parser("bind", help="bind a queue to an exchange")
    bind.add_argument("exchange")
    bind.add_argument("queue")
    bind.add_argument("--weight", type=int, default=1)
    unbind = sub.add_parser("unbind", help="unbind a queue from an exchange")
    unbind.add_argument("exchange")
    unbind.add_argument("queue")
    sub.add_parser("close-connection", help="close a client connection").add_argument("id")
    sub.add_parser("export", help="write the exchanges and bindings as a definitions file").add_argument("file")
    sub.add_parser("import", help="declare what a definitions file (TOML or JSON) declares").add_argument("file")
    sub.add_parser("import-rabbitmq", help="RabbitMQ's definitions.json: see stompmq admin import-rabbitmq --help")
    return parser


def run(api: Api, args: argparse.Namespace) -> tuple[Any, list[str] | None]:
    """Do the command; return what to print and, for a table, its columns."""
    command = args.command
    if command == "overview":
        return api.call("GET", "/api/overview"), None
    if command == "list-vhosts":
        return api.call("GET", "/api/vhosts")["items"], ["name", "connections", "queues_in_use", "exchanges"]
    if command == "declare-vhost":
        return api.call("PUT", "/api/vhosts/" + _quoted(args.name)), None
    if command == "list-queues":
        rows = list(api.pages("/api/queues"))
        for row in rows:
            row.update({k + "/s": v for k, v in row.pop("rates").items()})
        return rows, ["name", "ready", "unacked", "consumers", "publish/s", "deliver/s", "ack/s", "oldest_age"]
    if command == "list-connections":
        return list(api.pages("/api/connections")), ["id", "peer", "login", "version", "subscriptions",
                                                      "bytes_in", "bytes_out"]
    if command == "list-exchanges":
        rows = list(api.pages("/api/exchanges"))
        for row in rows:
            row["bindings"] = ",".join(f"{b['queue']}:{b['weight']}" for b in row["bindings"])
        return rows, ["name", "bindings", "routed", "unhashed"]
    if command == "purge":
        return api.call("POST", f"/api/queues/{_quoted(args.queue)}/purge"), None
    if command == "delete":
        return api.call("DELETE", "/api/queues/" + _quoted(args.queue)), None
    if command == "declare":
        options = dict(o.split("=", 1) for o in args.option if "=" in o)
        return api.call("PUT", "/api/exchanges/" + _quoted(args.exchange), options), None
    if command == "bind":
        return api.call("POST", f"/api/exchanges/{_quoted(args.exchange)}/bindings",
                        {"queue": args.queue, "weight": args.weight}), None
    if command == "unbind":
        queue = args.queue.removeprefix("/queue/")
        return api.call("DELETE", f"/api/exchanges/{_quoted(args.exchange)}/bindings/{_quoted(queue)}"), None
    if command == "close-connection":
        return api.call("DELETE", "/api/connections/" + _quoted(args.id)), None
    if command == "export":
        data = export_definitions(api)
        with open(args.file, "w") as f:
            json.dump(data, f, indent=2)
        return {"exported": args.file, "exchanges": len(data["exchanges"]), "bindings": len(data["bindings"])}, None
    assert command == "import"
    data = load_definitions(args.file)
    import_definitions(api, data)
    return {"imported": args.file}, None


def main(argv: list[str]) -> int:
    if argv[:1] == ["import-rabbitmq"]:  # over STOMP, not this API: its own options (rabbitmq_import.py)
        from .rabbitmq_import import main as import_rabbitmq

        return import_rabbitmq(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        result, columns = run(Api.login(args.url, args.vhost, args.user, args.password), args)
    except ApiError as e:
        print(f"stompmq admin: {e.status}: {e}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as e:
        print(f"stompmq admin: cannot reach {args.url}: {getattr(e, 'reason', e)}", file=sys.stderr)
        return 2
    except DefinitionsError as e:
        print(f"stompmq admin: {e}", file=sys.stderr)
        return 2
    if args.json or columns is None:
        print(json.dumps(result, indent=2))
    else:
        print(_table(result, columns))
    return 0
