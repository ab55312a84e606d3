"""The messages of a queue: peek, get (take and acknowledge), move to another queue, publish.

Get and move take messages through the engine as a consumer of their own does
(``broker/take.py``), then read the store, so they answer once what they did is committed.  A
publish while a resource alarm is set is refused (503): a publisher is held back, an HTTP
request should not hang.  Each needs the user's ``read`` or ``write`` permission on the queue
(``routes.py``), checked here once the body is read.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...broker import Broker
from ...broker.take import Take
from ...storage.base import StoredMessage
from ..alarms import CHECK_SECONDS
from .requests import (
    age,
    authorise,
    count_param,
    json_count,
    json_object,
    log,
    only_fields,
    queue_name,
    queue_resource,
    request_user,
)

if TYPE_CHECKING:
    from .management import Management

T = TypeVar("T")

#: Messages a peek shows when the client does not say, and at most.
DEFAULT_PEEK, MAX_PEEK = 10, 100
#: Messages one get takes at most, and one move moves at most (also at most --max-prefetch).
MAX_GET, MAX_MOVE = 1000, 10_000
#: Seconds a get or move waits for the store's pages of the queue before it settles what it has,
#: and how often it looks meanwhile (the engine has no callback for a page that brought nothing).
TAKE_SECONDS, TAKE_POLL = 10.0, 0.01
#: What no header name or value may hold (a frame's line structure), nor ':' in a name.
_BAD_HEADER = re.compile("[\r\n\0]")


class MessageApi:
    def __init__(self, app: Management) -> None:
        self.app = app

    async def peek_messages(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                            request: Request) -> Response:
        """``?count=N`` (default 10): the first ready messages, in delivery order, consuming none."""
        count = count_param(request, "count", DEFAULT_PEEK, MAX_PEEK)
        authorise(request, vhost, [("read", queue_resource(name))])
        messages = await self.app.answer(engine, engine.peek(name, count))
        return JSONResponse({"items": [message_json(msg) for msg in messages]})

    async def get_messages(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                           request: Request) -> Response:
        """``{"count": N}``: take up to N ready messages and acknowledge them (gone for good), in
        delivery order; answered once the deletes are committed."""
        body = await json_object(request)
        only_fields(body, {"count"}, "a get has count")
        count = json_count(body, "count", None, MAX_GET)
        authorise(request, vhost, [("read", queue_resource(name))])
        messages = await self._take(engine, name, count, Take.ack)
        log.info("%d messages of queue %s of vhost %s taken through the management API", len(messages), name, vhost)
        return JSONResponse({"items": [message_json(msg) for msg in messages]})

    async def move_messages(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                            request: Request) -> Response:
        """``{"to": QUEUE, "count": N}``: move up to N ready messages (default: all, at most
        ``MAX_MOVE`` a request) to another queue of the vhost, each insert committed with its
        delete; ``stopped`` says why fewer moved if the target refused (reject-publish, full)."""
        body = await json_object(request)
        only_fields(body, {"to", "count"}, "a move has to and count")
        target = body.get("to")
        if not isinstance(target, str) or not queue_name(target):
            raise HTTPException(400, "to must name a queue of the same vhost")
        target = queue_name(target)
        if target == name:
            raise HTTPException(400, "to names the queue itself: move to another queue")
        count = json_count(body, "count", MAX_MOVE, MAX_MOVE)
        authorise(request, vhost, [("read", queue_resource(name)), ("write", queue_resource(target))])
        moved, stopped = await self._take(engine, name, count, lambda take: take.move(target))
        log.info("%d messages of queue %s of vhost %s moved to queue %s through the management API", moved, name,
                 vhost, target)
        answer: dict[str, Any] = {"name": name, "vhost": vhost, "to": target, "moved": moved}
        if stopped is not None:
            answer["stopped"] = stopped
        return JSONResponse(answer)

    async def _take(self, engine: Broker, name: str, count: int, settle: Callable[[Take], T]) -> T:
        """Take up to ``count`` ready messages of queue ``name`` (``Broker.take``), wait until the
        take has what it can have (at most ``TAKE_SECONDS``), ``settle`` it, then read the store:
        a read runs behind every write buffered before it, in a group that holds none back, so
        the answer comes once the settlement is committed (or is a 503 if it was not)."""
        self.app.runtime.tick()
        take = engine.take(name, count)
        try:
            with trio.move_on_after(TAKE_SECONDS):
                while not take.complete:
                    await trio.sleep(TAKE_POLL)
            self.app.runtime.tick()
            result = settle(take)
        finally:
            self.app.runtime.tick()
            take.close()
        await engine.store.count(name)
        return result

    async def publish_message(self, engine: Broker, vhost: str, name: str, counts: tuple[int, int],
                              request: Request) -> Response:
        """``{"body": TEXT, "headers": {NAME: VALUE}}``: a message as a SEND without receipt would
        put it (stored within --flush-interval; priority, ttl, delay headers apply)."""
        authorise(request, vhost, [("write", queue_resource(name))])
        message = await json_object(request)
        body, headers = message.get("body", ""), message.get("headers", {})
        unknown = sorted(set(message) - {"body", "headers"})
        if unknown:
            raise HTTPException(400, f"unknown field {unknown[0]!r}: a message has body and headers")
        if not isinstance(body, str):
            raise HTTPException(400, "body must be a string (sent as UTF-8)")
        if not isinstance(headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and k and not _BAD_HEADER.search(k + v) and ":" not in k
                for k, v in headers.items()):
            raise HTTPException(400, "headers must map names to string values, without ':' in a name or "
                                     "CR, LF or NUL anywhere")
        alarms = self.app.runtime.alarms.active
        if alarms:  # a STOMP publisher is held back; an HTTP request is told to come back
            raise HTTPException(503, f"{' and '.join(sorted(alarms))} alarm set: publishing is blocked until it "
                                     "clears (GET /api/alarms)", headers={"retry-after": str(int(CHECK_SECONDS))})
        self.app.runtime.tick()
        user = request_user(request)
        engine.publish(name, headers, body.encode(), None if user is None else user.name)
        log.info("a message published to queue %s of vhost %s through the management API", name, vhost)
        return JSONResponse({"name": name, "vhost": vhost, "published": True}, status_code=201)


def message_json(msg: StoredMessage) -> dict[str, Any]:
    """A peeked message: the body as text (``body_base64`` when it is not UTF-8)."""
    item: dict[str, Any] = {"headers": msg.headers or {}, "priority": msg.priority,
                            "redelivery_count": msg.redeliveries, "age": age(msg.timestamp)}
    try:
        item["body"] = msg.body.decode()
    except UnicodeDecodeError:
        item["body_base64"] = base64.b64encode(msg.body).decode()
    return item
