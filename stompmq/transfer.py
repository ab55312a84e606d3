"""The shovel's transfer: the messages of one STOMP destination moved to another, none lost.

Shared by the ``stompmq shovel`` command (``shovel.py``) and the shovels a broker declares
(``server/shovels.py``), so neither imports the other.

Theory of operation
-------------------
No message is lost: the shovel subscribes at the source with
``ack:client-individual`` and ACKs a message there only after the destination
sent the RECEIPT of its SEND, i.e. after the destination stored it.  A crash
between the two leaves the message unacknowledged at the source, which
delivers it again marked ``redelivered:true``; the shovel forwards that mark as
``shovel-redelivered:true``, so the only duplicates the destination can hold
are flagged ones (consumers that must not see a message twice check that
header against what they already processed).  A source that crashes outright
may forget a delivery and its ACK alike (a stompmq source writes both behind,
within its flush interval) and deliver the message again unmarked, so the
shovel also flags a message whose ``message-id`` it forwarded before (the last
``REMEMBERED`` ids; the ids of stompmq and ActiveMQ do not change across a
restart).

It is pipelined: the source's prefetch (``--prefetch``, default 1000) is the
window of messages in flight.  One task reads the source and forwards every
MESSAGE of one socket read in one write to the destination; another reads the
destination's RECEIPTs and sends the matching ACKs in one write.  Each socket
has one writer, and nothing waits per message.

Headers are kept but for those a broker sets on delivery (``BROKER_SET``);
``priority``, ``expires``, ``persistent``, ``content-type`` and user headers pass.

A RabbitMQ source (its CONNECTED says ``server:RabbitMQ/...``) is read from ``/amq/queue/NAME``
when the URL names ``/queue/NAME``: RabbitMQ's ``/queue/`` redeclares the queue, which fails with
``PRECONDITION_FAILED - inequivalent arg`` for a queue declared with arguments (most production
queues), while ``/amq/queue/`` takes the existing queue as it is (``source_destination``).

The same ``Shovel`` serves a broker's declared shovels (``Declaration``, run and restarted
after faults by ``server/shovels.py``): each ``run`` is one session on fresh connections,
and what a broken session left unconfirmed is delivered again by the source, flagged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from .client import ClientError, Refused, StompConnection, StompUrl, reason
from .logs import masked
from .protocol import Frame, encode_frame, encode_header_block, escape
from .protocol.headers import headers_without

#: Headers a broker sets on each delivery: meaningless at the destination, or set there anew.
BROKER_SET = frozenset({
    "destination", "message-id", "subscription", "ack", "content-length", "redelivered",
    "redelivery-count", "JMSXDeliveryCount", "timestamp", "receipt", "transaction", "x-stream-offset",
})
#: The header that marks a message the source delivered more than once (a possible duplicate).
REDELIVERED = "shovel-redelivered"
DEFAULT_PREFETCH = 1000
#: Source message-ids a shovel remembers having forwarded (~100 B each: ~10 MB at most).
REMEMBERED = 100_000
#: Seconds without a delivery that --until-empty takes for an empty source: STOMP cannot ask
#: whether a queue is empty, and a broker paging a large backlog from disk may pause a second or two.
IDLE_SECONDS = 5.0
#: Seconds between progress lines on a terminal (elsewhere: PLAIN_PROGRESS_SECONDS).
PROGRESS_SECONDS = 0.5
PLAIN_PROGRESS_SECONDS = 5.0
#: A declared shovel's name: it names a stored row and a path of the management API.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,49}")
#: How a declared shovel acknowledges at the source: only after the destination's RECEIPT.
ON_CONFIRM = "on-confirm"
MAX_PREFETCH = 10_000_000


def source_destination(destination: str, server: str) -> str:
    """Where to subscribe at a source whose CONNECTED said ``server``: ``/queue/NAME`` of RabbitMQ
    is its existing queue, ``/amq/queue/NAME`` (not redeclared, whatever its arguments)."""
    if server.startswith("RabbitMQ") and destination.startswith("/queue/"):
        return "/amq/queue/" + destination.removeprefix("/queue/")
    return destination


@dataclass
class Shovel:
    """What one run moves, and how far it got."""

    source: StompUrl
    target: StompUrl
    prefetch: int = DEFAULT_PREFETCH
    max: int | None = None
    until_empty: float | None = None  # stop after this many seconds without a message
    moved: int = 0
    flagged: int = 0
    forwarded: int = 0
    #: receipt number -> the source's ACK frame for that message, in the order sent
    outstanding: dict[int, bytes] = field(default_factory=dict)
    #: the message-ids forwarded, oldest first (an ordered set, at most REMEMBERED)
    forwarded_ids: dict[str, None] = field(default_factory=dict)
    last_message: float = 0.0
    #: called once each session is subscribed at the source (a supervisor's "running")
    started: Callable[[], None] = lambda: None
    connected: bool = False  # a session is subscribed now

    async def run(self) -> None:
        """One session: until ``max`` or ``until_empty`` ends it, or ClientError (possibly in an
        exception group).  What a broken session left unconfirmed the source delivers again."""
        self.outstanding = {}
        source = await StompConnection.open(self.source)
        try:
            target = await StompConnection.open(self.target, relay=True)
        except BaseException:
            await source.stream.aclose()
            raise
        prefetch = str(self.prefetch if self.max is None else min(self.prefetch, self.max))
        try:
            await source.send(Frame("SUBSCRIBE", {
                "id": "shovel", "destination": source_destination(self.source.destination, source.server),
                "ack": "client-individual",
                "prefetch-count": prefetch, "activemq.prefetchSize": prefetch,
            }))
            self.last_message = trio.current_time()
            self.connected = True
            self.started()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._forward, source, target)
                nursery.start_soon(self._confirm, source, target, nursery.cancel_scope)
                if self.until_empty is not None:
                    nursery.start_soon(self._watch_idle, nursery.cancel_scope)
            await source.close()  # what was delivered and not forwarded goes back to the queue
            await target.close()
        finally:
            self.connected = False
            with trio.CancelScope(shield=True):  # cancelled, the first aclose raises: close both
                await source.stream.aclose()
                await target.stream.aclose()

    def _done(self) -> bool:
        return self.max is not None and self.forwarded >= self.max

    async def _forward(self, source: StompConnection, target: StompConnection) -> None:
        version = target.version
        send = b"SEND\ndestination:" + escape(self.target.destination, version).encode() + b"\nreceipt:%d\n%s"
        while True:
            out = []
            for frame in await source.frames():
                if frame.command == "ERROR":
                    raise Refused(f"source {self.source.where()}: {reason(frame)}")
                if frame.command != "MESSAGE" or self._done():
                    continue  # past --max: left unacknowledged, so it goes back to the source
                headers = headers_without(frame.headers, BROKER_SET)
                message_id = frame.headers.get("message-id", "")
                if frame.headers.get("redelivered") == "true" or message_id in self.forwarded_ids:
                    headers[REDELIVERED] = "true"
                    self.flagged += 1
                self._remember(message_id)
                self.forwarded += 1
                self.outstanding[self.forwarded] = _ack(frame, source.version)
                body = frame.body
                out.append(send % (self.forwarded, encode_header_block(headers.items(), version)))
                if "content-length" in frame.headers:
                    out.append(b"content-length:%d\n\n%s\0" % (len(body), body))
                else:  # a text message (ActiveMQ's convention), which stays one: its body has no NUL
                    out.append(b"\n%s\0" % body)
            self.last_message = trio.current_time()
            if out:
                await target.send_bytes(b"".join(out))

    def _remember(self, message_id: str) -> None:
        ids = self.forwarded_ids
        ids[message_id] = None
        if len(ids) > REMEMBERED:
            del ids[next(iter(ids))]

    async def _confirm(self, source: StompConnection, target: StompConnection, scope: trio.CancelScope) -> None:
        while True:
            acks = []
            for frame in await target.frames():
                if frame.command == "ERROR":
                    raise Refused(f"destination {self.target.where()}: {reason(frame)}")
                receipt = frame.headers.get("receipt-id", "")
                if frame.command == "RECEIPT" and receipt.isdigit() and int(receipt) in self.outstanding:
                    acks.append(self.outstanding.pop(int(receipt)))
            if acks:
                await source.send_bytes(b"".join(acks))
                self.moved += len(acks)
            if self._done() and not self.outstanding:
                scope.cancel()

    async def _watch_idle(self, scope: trio.CancelScope) -> None:
        assert self.until_empty is not None
        while True:
            idle = trio.current_time() - self.last_message
            if idle >= self.until_empty and not self.outstanding:
                scope.cancel()
            await trio.sleep(max(0.05, self.until_empty - idle))


@dataclass(frozen=True)
class Declaration:
    """A shovel the broker runs: declared through the management API or a definitions file,
    stored (``stored``), shown with its URLs' passwords masked (``shown``)."""

    name: str
    source: str  # the URLs as declared, credentials included
    target: str
    prefetch: int = DEFAULT_PREFETCH
    ack_mode: str = ON_CONFIRM

    @classmethod
    def parse(cls, name: str, fields: dict[str, Any]) -> Declaration:
        """The declaration ``fields`` (``from``, ``to``, ``prefetch``, ``ack_mode``) make; ClientError
        with the reason when they are not one."""
        if not NAME.fullmatch(name):
            raise ClientError(f"bad shovel name {name!r}: 1-50 letters, digits, '.', '_' or '-'")
        unknown = sorted(set(fields) - {"from", "to", "prefetch", "ack_mode"})
        if unknown:
            raise ClientError(f"unknown field {unknown[0]!r}: a shovel has from, to, prefetch and ack_mode")
        urls = []
        for key in ("from", "to"):
            if not isinstance(fields.get(key), str):
                raise ClientError(f"a shovel needs '{key}': stomp://[user:password@]host[:port]/DESTINATION")
            urls.append(endpoint(fields[key], key))
        source, target = urls
        if (source.host, source.port, source.vhost, source.destination) == (
                target.host, target.port, target.vhost, target.destination):
            raise ClientError("from and to are the same destination: the messages would go round forever")
        prefetch = fields.get("prefetch", DEFAULT_PREFETCH)
        if not isinstance(prefetch, int) or isinstance(prefetch, bool) or not 1 <= prefetch <= MAX_PREFETCH:
            raise ClientError(f"prefetch must be a whole number from 1 to {MAX_PREFETCH}")
        ack_mode = fields.get("ack_mode", ON_CONFIRM)
        if ack_mode != ON_CONFIRM:
            raise ClientError(f"ack_mode must be {ON_CONFIRM!r} (acknowledged at the source after the "
                              f"destination's RECEIPT: nothing is lost), not {ack_mode!r}")
        return cls(name, fields["from"], fields["to"], prefetch, ack_mode)

    def stored(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "prefetch": self.prefetch, "ack_mode": self.ack_mode}

    def shown(self) -> dict[str, Any]:
        """As the API and the logs show it: never a password."""
        return {"name": self.name, **self.stored(), "from": masked(self.source), "to": masked(self.target)}

    def shovel(self) -> Shovel:
        return Shovel(StompUrl.parse(self.source), StompUrl.parse(self.target), self.prefetch)


def endpoint(text: str, what: str) -> StompUrl:
    """The URL ``text`` of a shovel's end (``what``: which one), which must name a destination."""
    url = StompUrl.parse(text)
    if not url.destination.startswith("/"):
        raise ClientError(f"{what} needs a destination: stomp://host:port/queue/NAME")
    return url


def _ack(message: Frame, version: str) -> bytes:
    """The ACK of a MESSAGE (1.2 by its ack id; 1.0 and 1.1 by message and subscription)."""
    if version == "1.2":
        return b"ACK\nid:%s\n\n\0" % escape(message.headers.get("ack", ""), version).encode()
    return encode_frame(Frame("ACK", {"message-id": message.headers.get("message-id", ""),
                                      "subscription": "shovel"}), version)
