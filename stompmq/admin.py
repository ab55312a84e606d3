"""``stompmq admin ...``: the management API from a shell, as tables or ``--json``.

Every command is one or a few HTTP requests to a running broker's management
API (``--url``, default the broker's default ``http://127.0.0.1:61680``); lists
follow the API's pages to the end.  Every command prints a table (a list as rows,
one object as FIELD/VALUE rows) unless ``--json`` asks for the API's JSON.  A
reader that stops early (``| head``) is not an error.  Exit codes: 0 done, 1 the
broker refused (its error is printed), 2 usage or connection errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
from typing import Any

from . import tomlfile
from .admin_api import DEFAULT_URL, Api, ApiError, quoted
from .broker.definitions import VHOST_LISTS, DefinitionsError

#: Definitions file formats, by file name extension (both ways: export writes what import reads).
FORMATS = (".toml", ".json")


class UsageError(Exception):
    """A bad argument: one line on stderr, exit code 2."""


def _pairs(flag: str, items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` arguments as a dict; one without ``=`` is a usage error."""
    malformed = [item for item in items if "=" not in item]
    if malformed:
        raise UsageError(f"{flag} {malformed[0]!r}: write KEY=VALUE")
    return dict(item.split("=", 1) for item in items)


def _limit(value: str) -> int:
    """A byte count for --disk-free-limit (0 turns the alarm off)."""
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


def _check_url(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--url {url!r} is not an http:// or https:// URL (env STOMPMQ_ADMIN_URL)")


def _fields(result: dict[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """One object as FIELD/VALUE rows, nested objects flattened (``totals.published``)."""
    rows = []
    for key, value in result.items():
        if isinstance(value, dict) and value:
            rows += _fields(value, prefix + key + ".")
        else:
            rows.append({"field": prefix + key, "value": json.dumps(value) if isinstance(value, list) else value})
    return rows


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def write_definitions(path: str, data: dict[str, Any]) -> None:
    """``data`` as TOML or JSON, by ``path``'s extension."""
    text = tomlfile.dumps(data) if _format(path) == ".toml" else json.dumps(data, indent=2) + "\n"
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def _format(path: str) -> str:
    extension = os.path.splitext(path)[1].lower()
    if extension not in FORMATS:
        raise UsageError(f"{path}: name a .toml or .json file (the extension picks the format)")
    return extension


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stompmq admin", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"management API [default: {DEFAULT_URL}; env STOMPMQ_ADMIN_URL]")
    parser.add_argument("--json", action="store_true", help="print the API's JSON instead of a table (every command)")
    parser.add_argument("--vhost", help="the vhost of queue and exchange commands; with export and "
                        "import, that vhost's definitions alone [default: /; export and import: every vhost]")
    parser.add_argument("--user", default=os.environ.get("STOMPMQ_ADMIN_USER"),
                        help="a user of the broker's --users-file [env STOMPMQ_ADMIN_USER]")
    parser.add_argument("--password", default=os.environ.get("STOMPMQ_ADMIN_PASSWORD", ""),
                        help="its password [env STOMPMQ_ADMIN_PASSWORD, better than the command line]")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("overview", help="version, uptime, store, totals and rates")
    sub.add_parser("list-vhosts", help="every vhost with its connections and queues")
    sub.add_parser("declare-vhost", help="declare a vhost").add_argument("name")
    sub.add_parser("delete-vhost", help="delete a vhost with its queues, messages, exchanges, streams and "
                   "policies (its connections are closed)").add_argument("name")
    sub.add_parser("list-queues", help="every queue with its counts")
    declare_queue = sub.add_parser("declare-queue", help="declare a queue with settings (stored; a new declaration "
                                   "replaces the old one)")
    declare_queue.add_argument("queue")
    declare_queue.add_argument("--argument", action="append", default=[], metavar="KEY=VALUE",
                               help="a setting, e.g. message-ttl=60000, dead-letter=true (repeatable)")
    sub.add_parser("list-connections", help="every client connection")
    sub.add_parser("list-exchanges", help="every exchange with its bindings")
    sub.add_parser("list-schedules", help="the vhost's scheduled and delayed messages, the next to fire first")
    sub.add_parser("cancel-schedule", help="cancel a schedule (its ID from list-schedules)").add_argument("id")
    for name, what in (("purge", "drop a queue's ready messages"), ("delete", "purge a queue and unbind it"),
                       ("consumers", "the subscriptions of a queue")):
        sub.add_parser(name, help=what).add_argument("queue")
    peek = sub.add_parser("peek", help="show a queue's first ready messages, consuming none")
    peek.add_argument("queue")
    peek.add_argument("--count", type=int, default=10, help="messages to show [default: 10; at most 100]")
    get = sub.add_parser("get", help="take a queue's first ready messages and acknowledge them (gone for good)")
    get.add_argument("queue")
    get.add_argument("--count", type=int, default=1, help="messages to take [default: 1; at most 1000]")
    move = sub.add_parser("move", help="move a queue's ready messages to another queue of the vhost, e.g. a "
                          "dead-letter queue back to its queue")
    move.add_argument("queue")
    move.add_argument("to", help="the queue to move them to")
    move.add_argument("--count", type=int, default=None,
                      help="messages to move [default: every ready one, at most 10000 a request]")
    publish = sub.add_parser("publish", help="put a message in a queue (as a SEND without receipt)")
    publish.add_argument("queue")
    publish.add_argument("body")
    publish.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                         help="a header of the message, e.g. priority=9 (repeatable)")
    declare = sub.add_parser("declare", help="declare an exchange: consistent-hash, or --option type=direct, "
                             "fanout or topic")
    declare.add_argument("exchange")
    declare.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                         help="declaration option, e.g. hash-header=customer-id")
    bind = sub.add_parser("bind", help="bind a queue to an exchange")
    bind.add_argument("exchange")
    bind.add_argument("queue")
    bind.add_argument("--weight", type=int, default=None, help="a consistent-hash binding's weight [default: 1]")
    bind.add_argument("--routing-key", default=None, help="a direct or topic exchange's binding key")
    unbind = sub.add_parser("unbind", help="unbind a queue from an exchange")
    unbind.add_argument("exchange")
    unbind.add_argument("queue")
    sub.add_parser("connection", help="one client connection: its subscriptions and rates").add_argument("id")
    sub.add_parser("close-connection", help="close a client connection").add_argument("id")
    sub.add_parser("alarms", help="resource alarms set now, their limits and the measurements")
    limits = sub.add_parser("set-limits", help="change the resource alarms' limits until the broker restarts")
    limits.add_argument("--disk-free-limit", type=_limit, default=argparse.SUPPRESS, metavar="BYTES",
                        help="free bytes the store's file system must keep (0: alarm off)")
    limits.add_argument("--memory-high-watermark", type=float, default=argparse.SUPPRESS, metavar="N",
                        help="resident memory: a fraction of RAM up to 1, bytes above (0: alarm off)")
    sub.add_parser("list-shovels", help="the shovels the broker runs: state, last error, moved, rate")
    shovel = sub.add_parser("declare-shovel", help="have the broker run a shovel (stored: it survives restarts)")
    shovel.add_argument("name")
    shovel.add_argument("--from", dest="source", required=True, metavar="URL",
                        help="stomp://[user:password@]host[:port]/DESTINATION[?vhost=V] to take messages from")
    shovel.add_argument("--to", dest="target", required=True, metavar="URL",
                        help="stomp://[user:password@]host[:port]/DESTINATION[?vhost=V] to put them on")
    shovel.add_argument("--prefetch", type=int, default=argparse.SUPPRESS,
                        help="messages in flight, the source's prefetch [default: 1000]")
    sub.add_parser("delete-shovel", help="stop a shovel and forget it").add_argument("name")
    trace = sub.add_parser("trace", help="the vhost's durable message trace (/stream/stompmq.trace): on, off, "
                           "status, or tail its events")
    trace.add_argument("action", choices=["on", "off", "status", "tail"])
    trace.add_argument("--body-bytes", type=int, default=0, help="on: keep each body's first N bytes [default: 0, "
                       "headers only]")
    trace.add_argument("--from", dest="start", default="next", help="tail: first, next (only new events) or an "
                       "offset [default: next]")
    trace.add_argument("--count", type=int, help="tail: stop after this many events [default: follow until "
                       "interrupted]")
    policy = sub.add_parser("set-policy", help="set a policy of the vhost: settings for every queue whose name "
                            "matches a pattern, applied at once (stored)")
    policy.add_argument("name")
    policy.add_argument("--pattern", required=True, help="a regular expression searched in queue names, e.g. ^orders\\.")
    policy.add_argument("--definition", action="append", required=True, metavar="KEY=VALUE",
                        help="a setting, e.g. message-ttl=60000 or expires=3600000 (repeatable)")
    policy.add_argument("--priority", type=int, default=0, help="the highest priority of the matching policies "
                        "applies [default: 0]")
    policy.add_argument("--apply-to", default="queues", choices=("queues", "streams", "exchanges", "all"))
    for name, what in (("set-policy", "set"), ("clear-policy", "clear"), ("list-policies", "list")):
        (policy if name == "set-policy" else sub.add_parser(name, help=f"{what} policies of the vhost")).add_argument(
            "--operator", action="store_true", help=f"{what} operator policies (they cap: the stricter value wins)")
        if name == "clear-policy":
            sub.choices[name].add_argument("name")
    export = sub.add_parser("export", help="write every definition (vhosts, exchanges, queues, streams, bindings, "
                            "policies, shovels, users) as a definitions file (FILE.toml or FILE.json: the "
                            "extension picks the format)")
    export.add_argument("file")
    export.add_argument("--with-secrets", action="store_true",
                        help="with the users' password hashes and the shovels' passwords (administrators only)")
    imported = sub.add_parser("import", help="declare what a definitions file (FILE.toml or FILE.json) declares, "
                              "checked whole first (an invalid file changes nothing)")
    imported.add_argument("file")
    imported.add_argument("--dry-run", action="store_true", help="print the steps and change nothing")
    sub.add_parser("import-rabbitmq", help="RabbitMQ's definitions.json: see stompmq admin import-rabbitmq --help")
    return parser


#: The columns of each list command's table.
COLUMNS = {
    "list-vhosts": ["name", "connections", "queues", "queues_declared", "queues_in_use", "exchanges"],
    "list-queues": ["name", "ready", "unacked", "consumers", "publish/s", "deliver/s", "ack/s", "oldest_ready_age",
                    "oldest_unacked_age"],
    "list-connections": ["id", "peer", "login", "version", "subscriptions", "bytes_in", "bytes_out"],
    "list-exchanges": ["name", "type", "bindings", "routed"],
    "consumers": ["connection", "peer", "login", "subscription", "ack", "prefetch", "unacked"],
    "peek": ["priority", "redelivery_count", "age", "headers", "body"],
    "get": ["priority", "redelivery_count", "age", "headers", "body"],
    "list-shovels": ["name", "state", "moved", "rate", "from", "to", "error"],
    "list-schedules": ["id", "queue", "next", "remaining", "period", "cron"],  # (remaining None: no end)
    "list-policies": ["vhost", "name", "pattern", "apply-to", "priority", "definition"],
}


def run(api: Api, args: argparse.Namespace) -> Any:
    """Do the command; return what to print (a list of rows or one object)."""
    command = args.command
    if command == "overview":
        return api.call("GET", "/api/overview")
    if command == "list-vhosts":
        return api.call("GET", "/api/vhosts")["items"]
    if command == "declare-vhost":
        return api.call("PUT", "/api/vhosts/" + quoted(args.name))
    if command == "delete-vhost":
        return api.call("DELETE", "/api/vhosts/" + quoted(args.name))
    if command == "list-queues":
        rows = list(api.pages("/api/queues/" + quoted(api.vhost), scoped=False))
        for row in rows:
            row.update({k + "/s": v for k, v in row.pop("rates").items()})
        return rows
    if command == "list-connections":
        return list(api.pages("/api/connections"))
    if command == "list-exchanges":
        rows = list(api.pages("/api/exchanges/" + quoted(api.vhost), scoped=False))
        for row in rows:
            row["bindings"] = ",".join(f"{b['queue']}:{b.get('weight', b.get('routing_key'))}" for b in row["bindings"])
        return rows
    if command == "list-schedules":
        return list(api.pages("/api/schedules/" + quoted(api.vhost), scoped=False))
    if command == "cancel-schedule":
        return api.call("DELETE", f"/api/schedules/{quoted(api.vhost)}/{quoted(args.id)}", scoped=False)
    if command == "purge":
        return api.queue("POST", args.queue, "purge")
    if command == "delete":
        return api.queue("DELETE", args.queue)
    if command == "consumers":
        return api.queue("GET", args.queue, "consumers")["items"]
    if command in ("peek", "get"):
        if args.count < 1:
            raise UsageError(f"--count must be at least 1, not {args.count}")
        if command == "peek":
            rows = api.queue("GET", args.queue, f"messages?count={args.count}")["items"]
        else:
            rows = api.queue("POST", args.queue, "get", {"count": args.count})["items"]
        for row in rows:
            row["body"] = row.get("body", "(base64) " + row.pop("body_base64", ""))
        return rows
    if command == "move":
        if not args.to.removeprefix("/queue/"):
            raise UsageError("move: name the queue to move to")
        if args.count is not None and args.count < 1:
            raise UsageError(f"--count must be at least 1, not {args.count}")
        body = {"to": args.to} if args.count is None else {"to": args.to, "count": args.count}
        return api.queue("POST", args.queue, "move", body)
    if command == "publish":
        body = {"body": args.body, "headers": _pairs("--header", args.header)}
        return api.queue("POST", args.queue, "publish", body)
    if command == "declare-queue":
        return api.queue("PUT", args.queue, body={"arguments": _pairs("--argument", args.argument)})
    if command == "declare":
        return api.exchange("PUT", args.exchange, body=_pairs("--option", args.option))
    if command == "bind":
        binding = {"queue": args.queue, "weight": args.weight, "routing_key": args.routing_key}
        return api.exchange("POST", args.exchange, "/bindings", {k: v for k, v in binding.items() if v is not None})
    if command == "unbind":
        queue = args.queue.removeprefix("/queue/")
        return api.exchange("DELETE", args.exchange, "/bindings/" + quoted(queue))
    if command == "connection":
        return api.call("GET", "/api/connections/" + quoted(args.id))
    if command == "alarms":
        return api.call("GET", "/api/alarms")
    if command == "set-limits":
        changes = {key: value or None for key, value in vars(args).items()
                   if key in ("disk_free_limit", "memory_high_watermark")}
        if not changes:
            raise UsageError("set-limits: give --disk-free-limit, --memory-high-watermark or both")
        return api.call("PUT", "/api/alarms", changes)
    if command == "list-shovels":
        return api.call("GET", "/api/shovels", scoped=False)["items"]
    if command == "declare-shovel":
        body = {"from": args.source, "to": args.target, **({"prefetch": args.prefetch} if "prefetch" in args else {})}
        return api.call("PUT", "/api/shovels/" + quoted(args.name), body, scoped=False)
    if command == "delete-shovel":
        return api.call("DELETE", "/api/shovels/" + quoted(args.name), scoped=False)
    if command in ("set-policy", "clear-policy", "list-policies"):
        collection = "/api/operator-policies" if args.operator else "/api/policies"
        if command == "list-policies":
            return api.call("GET", f"{collection}/{quoted(api.vhost)}", scoped=False)["items"]
        path = f"{collection}/{quoted(api.vhost)}/{quoted(args.name)}"
        if command == "clear-policy":
            return api.call("DELETE", path, scoped=False)
        return api.call("PUT", path, {"pattern": args.pattern, "apply-to": args.apply_to, "priority": args.priority,
                                      "definition": _pairs("--definition", args.definition)}, scoped=False)
    if command == "close-connection":
        return api.call("DELETE", "/api/connections/" + quoted(args.id))
    if command == "trace":
        if args.action == "tail":
            return trace_tail(api, args.start, args.count, args.json)
        if args.action == "status":
            return api.call("GET", "/api/trace")
        return api.call("PUT", "/api/trace", {"on": args.action == "on", "body_bytes": args.body_bytes})
    one_vhost = args.vhost is not None  # export and import: that vhost alone, else every vhost
    if command == "export":
        _format(args.file)
        data = api.call("GET", "/api/definitions" + ("?secrets=true" if args.with_secrets else ""), scoped=False)
        if one_vhost:
            data = vhost_part(data, api.vhost)
        write_definitions(args.file, data)
        vhosts = [data, *data.get("vhosts", [])]
        return {"exported": args.file, "vhosts": len(vhosts),
                **{key: sum(len(part.get(key, [])) for part in vhosts) for key in VHOST_LISTS},
                "shovels": len(data.get("shovels", [])), "users": len(data.get("users", []))}
    assert command == "import"
    _format(args.file)
    data = tomlfile.load_definitions(args.file)
    if one_vhost:
        data = into_vhost(data, api.vhost, args.file)
    try:
        answer = api.call("POST", "/api/definitions" + ("?dry_run=true" if args.dry_run else ""), data, scoped=False)
    except ApiError as e:
        if e.status == 400:  # the file is wrong: a usage error, as --definitions at start-up
            raise DefinitionsError(f"{args.file}: {str(e).removeprefix('definitions: ')}") from None
        raise
    return [{"step": step} for step in answer["steps"]] if args.dry_run else {
        "imported": args.file, "steps": len(answer["steps"])}


def vhost_part(document: dict[str, Any], vhost: str) -> dict[str, Any]:
    """One vhost's lists of a whole-broker definitions document, as a file of its own (the default
    vhost's are at the top, the others' in ``vhosts``); no shovels or users, which are the broker's."""
    if vhost == "/":
        return {key: document[key] for key in VHOST_LISTS if key in document}
    for part in document.get("vhosts", []):
        if part.get("name") == vhost:
            return {key: value for key, value in part.items() if key != "name"}
    raise UsageError(f"--vhost {vhost!r}: the broker has no such vhost")


def into_vhost(data: dict[str, Any], vhost: str, file: str) -> dict[str, Any]:
    """A one-vhost definitions file as the whole-broker document that declares it in ``vhost``
    (so an export of one vhost can be imported into another); a whole-broker file is refused, as
    its vhosts, shovels and users name their own places."""
    broker_wide = sorted(set(data) - set(VHOST_LISTS))
    if broker_wide:
        raise UsageError(f"{file}: {', '.join(broker_wide)}: a file for every vhost; import it without --vhost")
    return data if vhost == "/" else {"vhosts": [{"name": vhost, **data}]}


#: How often ``trace tail`` asks for new events when it has read them all.
TAIL_POLL_SECONDS = 0.5


def trace_tail(api: Api, start: str, count: int | None, as_json: bool) -> None:
    """Print the trace's events from ``start`` on, one line each (``--json``: the entry as JSON),
    following new ones (``count``: stop after that many)."""
    if start == "first":
        after = 0
    elif start == "next":
        after = int(api.call("GET", "/api/trace")["next_offset"])
    elif start.isdigit():
        after = int(start)
    else:
        raise UsageError(f"--from {start!r}: write first, next or an offset")
    printed = 0
    try:
        while count is None or printed < count:
            limit = 1000 if count is None else min(1000, count - printed)
            page = api.call("GET", f"/api/trace/events?after={after}&limit={limit}")
            for entry in page["items"]:
                print(json.dumps(entry) if as_json else _event_line(entry), flush=True)
                printed += 1
            if not page["items"]:
                time.sleep(TAIL_POLL_SECONDS)
            after = page["next"]
    except KeyboardInterrupt:
        pass


def _event_line(entry: dict[str, Any]) -> str:
    """``OFFSET TIME EVENT QUEUE id=MESSAGE-ID`` and what else the event says."""
    headers = entry["headers"]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(entry["timestamp"] / 1000))
    extra = " ".join(f"{name.removeprefix('x-trace-')}={value}" for name, value in headers.items()
                     if name.startswith("x-trace-") and name not in _LINE_HEADERS)
    trace = f" traceparent={headers['traceparent']}" if "traceparent" in headers else ""
    return (f"{entry['offset']} {stamp}.{entry['timestamp'] % 1000:03d}Z {headers.get('x-trace-event')} "
            f"{headers.get('x-trace-queue')} id={headers.get('x-trace-message-id')}{trace}{' ' + extra if extra else ''}")


_LINE_HEADERS = frozenset({"x-trace-event", "x-trace-queue", "x-trace-message-id", "x-trace-published"})


def show(result: Any, columns: list[str] | None, as_json: bool) -> None:
    """Print ``result``: JSON, or a table (``columns`` of a list; FIELD/VALUE rows of an object)."""
    if as_json:
        print(json.dumps(result, indent=2))
    elif isinstance(result, list):
        print(_table(result, columns or sorted({k for row in result for k in row})))
    else:
        print(_table(_fields(result), ["field", "value"]))


def main(argv: list[str]) -> int:
    if argv[:1] == ["import-rabbitmq"]:  # over STOMP, not this API: its own options (rabbitmq_import.py)
        from .rabbitmq_import import main as import_rabbitmq

        return import_rabbitmq(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        _check_url(args.url)
        result = run(Api.login(args.url, args.vhost or "/", args.user, args.password), args)
        if result is not None:  # (trace tail printed its events as they came)
            show(result, COLUMNS.get(args.command), args.json)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped (| head): not an error, and nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except ApiError as e:
        print(f"stompmq admin: {e.status}: {e}", file=sys.stderr)
        return 1
    except UsageError as e:
        print(f"stompmq admin: {e}", file=sys.stderr)
        return 2
    except (urllib.error.URLError, OSError) as e:
        print(f"stompmq admin: cannot reach {args.url}: {getattr(e, 'reason', e)}", file=sys.stderr)
        return 2
    except DefinitionsError as e:
        print(f"stompmq admin: {e}", file=sys.stderr)
        return 2
    return 0
