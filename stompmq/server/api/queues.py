"""A vhost's queues: ``/api/queues`` lists them, ``/api/queues/{vhost}/{name}`` is one.

A queue is a resource at ``/api/queues/{vhost}/{name}`` (each one percent-encoded path
segment; ``queue_target``), with ``/purge``, ``/consumers``, ``/history`` and the message
actions of ``messages.py`` under it; anything unknown (a vhost, a queue, an action) is a 404
with a reason, never an empty success.  Declare, delete and purge run the same ``/control``
verbs a STOMP client can send (``Management.change``), so both surfaces behave identically.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from operator import attrgetter
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...broker import Broker, ClientError
from ...broker.policy_match import header_text, unknown_key
from ...broker.queue_settings import SETTING_KEYS
from ...vhost_names import DEFAULT_VHOST
from .rates import history_json, history_range
from .requests import age, json_object, listed_vhost, log, only_fields, page_args, query_vhost, raw_segments
from .routes import QUEUE_PATH, ApiRoute

if TYPE_CHECKING:
    from .management import Management

QueueHandler = Callable[[Broker, str, str, tuple[int, int], Request], Awaitable[Response]]


def queue_target(request: Request, actions: set[str]) -> tuple[str, str, str | None]:
    """(vhost, queue, action) of ``/api/queues/VHOST/NAME[/ACTION]``, from the raw path.

    Each of VHOST and NAME is one percent-encoded path segment (``/`` is ``%2F``), so a name
    holding ``/`` is never read as a route: the decoded path cannot tell them apart, hence the
    raw one.  ``/api/queues/NAME`` (one segment) is a shortcut for the queue in the vhost of
    ``?vhost=`` (default ``/``); with two or more segments ``?vhost=`` would be a second
    answer to the same question, and is refused.
    """
    segments = raw_segments(request, "/api/queues/", "queue")
    query_vhost = request.query_params.get("vhost")
    if len(segments) == 1 and segments[0]:
        return query_vhost if query_vhost is not None else DEFAULT_VHOST, segments[0], None
    if query_vhost is not None:
        raise HTTPException(400, "give the vhost in the path (/api/queues/VHOST/NAME) or ?vhost=, not both")
    if len(segments) in (2, 3) and all(segments) and (len(segments) == 2 or segments[2] in actions):
        return segments[0], segments[1], segments[2] if len(segments) == 3 else None
    raise HTTPException(404, "not a queue path: use /api/queues/VHOST/NAME[/" + "|".join(sorted(actions)) + "] with "
                             "VHOST and NAME percent-encoded (/ is %2F)")



class QueueApi:
    """The queue routes; ``route`` dispatches ``/api/queues/...`` on the raw path to ``actions``."""

    def __init__(self, app: Management) -> None:
        self.app = app
        #: (action after the queue's path or None, method) -> handler (``actions_from``)
        self.actions: dict[tuple[str | None, str], QueueHandler] = {}

    def actions_from(self, routes: Iterable[ApiRoute]) -> None:
        """The handlers of the routes under ``QUEUE_PATH``, once every part of the app exists."""
        self.actions = {
            (route.path.removeprefix(QUEUE_PATH).removeprefix("/") or None, route.method):
                attrgetter(route.handler)(self.app)
            for route in routes if route.path.startswith(QUEUE_PATH)
        }

    async def list_queues(self, request: Request) -> Response:
        if not listed_vhost(request, self.app.engines):  # /api/queues/NAME: the default vhost's queue
            return await self.route(request)
        after, limit = page_args(request)
        engine = self.app.engine(request)
        vhost = query_vhost(request)
        page = await self.app.answer(engine, engine.list_queues(after, limit))
        items = []
        for row in page.rows:
            # One age of each, so that oldest_age is exactly the older of the two it reports.
            ready_age, unacked_age = age(row.oldest_ready_ms), age(row.oldest_unacked_ms)
            item = {
                "name": row.name,
                "ready": row.ready,
                "unacked": row.unacked,
                "consumers": row.consumers,
                "oldest_age": max((a for a in (ready_age, unacked_age) if a is not None), default=None),
                "oldest_ready_age": ready_age,
                "oldest_unacked_age": unacked_age,
                "broker": self.app.broker_id,
            }
            item.update(row.stats.as_dict() if row.stats is not None else {})
            item["rates"] = self.app.rates.of(vhost, row.name)
            items.append(item)
        return JSONResponse({"items": items, "next_after": page.next_after})

    async def route(self, request: Request) -> Response:
        """``/api/queues/{vhost}/{name}[/ACTION]``: route on the raw path (see ``queue_target``)."""
        vhost, name, action = queue_target(request, {a for a, _ in self.actions if a is not None})
        handler = self.actions.get((action, request.method))
        if handler is None:
            allowed = ", ".join(sorted(m for a, m in self.actions if a == action))
            hint = ""
            if action is None and (name, request.method) in self.actions:  # the old /api/queues/NAME/ACTION
                hint = f"; {name} of queue {vhost!r} in vhost '/' is /api/queues/%2F/{urllib.parse.quote(vhost, safe='')}/{name}"
            raise HTTPException(405, f"{request.method} is not allowed here (allowed: {allowed}){hint}")
        engine = self.app.engines.get(vhost)
        if engine is None:
            raise HTTPException(404, f"no vhost {vhost!r} (the queue routes are /api/queues/VHOST/NAME, "
                                     "each percent-encoded, e.g. /api/queues/%2F/orders)")
        counts = await self._queue_counts(engine, name)
        if counts is None and not (action is None and request.method == "PUT"):  # (a PUT declares it)
            raise HTTPException(404, f"no queue {name!r} in vhost {vhost!r}")
        return await handler(engine, vhost, name, counts or (0, 0), request)

    async def _queue_counts(self, engine: Broker, name: str) -> tuple[int, int] | None:
        """(ready, unacked) of queue ``name``, or None if there is no such queue: one this broker
        neither uses nor declared, of which the store holds no message."""
        counts = await self.app.answer(engine, self.app.administer(engine, "count-msgs/queue/" + name))
        ready, unacked = int(counts["num-ready"]), int(counts["num-unacked"])
        if not engine.knows_queue(name) and ready + unacked == 0:
            return None
        return ready, unacked

    async def get_queue(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                        request: Request, status: int = 200) -> Response:
        stats = engine.queue_stats.get(name)
        oldest_ready, oldest_unacked = await self.app.answer(engine, engine.queue_ages(name))
        return JSONResponse({
            "name": name,
            "vhost": vhost,
            "ready": counts[0],
            "unacked": counts[1],
            "oldest_ready_age": age(oldest_ready),
            "oldest_unacked_age": age(oldest_unacked),
            "consumers": engine.consumer_count(name),
            "broker": self.app.broker_id,
            **(stats.as_dict() if stats is not None else {}),
            "rates": self.app.rates.of(vhost, name),
            "settings": engine.queue_settings(name),
        }, status_code=status)

    async def purge_queue(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                          request: Request) -> Response:
        """Drop the ready messages; ``purged`` is how many were ready as the purge began (counted
        by the read just before it: a message sent meanwhile may be purged too)."""
        self.app.change(request, vhost, engine, "purge/queue/" + name)
        log.info("queue %s of vhost %s purged through the management API (%d messages)", name, vhost, counts[0])
        return JSONResponse({"name": name, "vhost": vhost, "purged": counts[0]})

    async def declare_queue(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                            request: Request) -> Response:
        """``{"arguments": {KEY: VALUE}}``: declare the queue with these settings (queue_settings.py),
        replacing an earlier declaration; 201 if it was not declared."""
        body = await json_object(request)
        only_fields(body, {"arguments"}, "a queue declaration has arguments")
        arguments = body.get("arguments", {})
        if not isinstance(arguments, dict):
            raise HTTPException(400, "arguments must be an object of queue settings, e.g. {\"message-ttl\": 60000}")
        try:
            unknown_key(arguments, SETTING_KEYS, "a queue argument")
        except ClientError as e:
            raise HTTPException(400, e.message) from None
        created = name not in engine.declared_queues()
        self.app.change(request, vhost, engine, "declare/queue/" + name, {k: header_text(v) for k, v in arguments.items()})
        log.info("queue %s of vhost %s declared through the management API: %s", name, vhost, arguments)
        return await self.get_queue(engine, vhost, name, (await self._queue_counts(engine, name)) or counts, request,
                                    201 if created else 200)

    async def delete_queue(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                           request: Request) -> Response:
        self.app.change(request, vhost, engine, "delete/queue/" + name)
        log.info("queue %s of vhost %s deleted through the management API", name, vhost)
        return JSONResponse({"name": name, "vhost": vhost, "deleted": True, "purged": counts[0]})

    async def queue_history(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                            request: Request) -> Response:
        """The queue's rates, the last ``?range=`` seconds, if it is one of those with a history."""
        return history_json(*self.app.rates.history.of((vhost, name), history_range(request)))

    async def queue_consumers(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                              request: Request) -> Response:
        """The subscriptions of this broker's connections to the queue."""
        items = []
        for conn in self.app.connections.values():
            session = conn.session
            if session is None or conn.vhost != vhost:
                continue
            for sub in session.subscriptions.values():
                queue = sub.queue
                if queue is not None and queue.name == name:
                    items.append({"connection": conn.id, "peer": conn.peer, "login": session.login,
                                  "subscription": sub.id, "ack": sub.ack_mode.value, "prefetch": sub.prefetch,
                                  "unacked": len(sub.unacked), "priority": sub.priority,
                                  "selector": None if sub.selector is None else sub.selector.text})
        return JSONResponse({"items": items})
