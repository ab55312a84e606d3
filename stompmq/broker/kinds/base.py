"""What a destination kind is: one object saying what SEND, SUBSCRIBE, a transaction and the
permission checks do with a destination of its namespace.

Theory of operation
-------------------
``parse_destination`` tells a destination's namespace (``Destination.kind``: ``queue``,
``topic``, ...); ``registry.KINDS`` maps it to the object that acts for it, a
``DestinationKind``.  The kinds are stateless singletons: what they act on (the dispatcher,
the router, the streams, ...) is the engine's, handed to each call as ``Parts``, so one kind
object serves every broker (vhost) of a process, and the pure facets (``resource``, the
permissions a frame needs) work without any broker at all (server/auth.py).

The base class is a kind that refuses everything but naming a resource; a kind overrides what
it supports.  SEND is a template: ``send`` forwards the sender's headers, lets the kind admit
the frame (``admit_send``: a new queue counted, an ``/amq/queue/`` looked up), reads the
options, rewrites a ``/temp-queue/`` reply-to, holds the frame for its transaction or routes it
(``route``).  A transaction plans its SENDs before applying any (``plan``): a kind whose
routing can fail on the message (a consistent-hash exchange) decides then, the others route
at the commit.  A kind with a stored queue behind it subscribes through
``Subscriptions.consume``; topics and streams have subscriptions of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...protocol import Frame
from ..acks import Acks
from ..config import BrokerConfig
from ..control import Control, Deferred
from ..destinations import Destination
from ..dispatch import Dispatcher
from ..errors import ClientError
from ..receipts import HELD, Headers, Held
from ..routing import Router
from ..send_headers import send_options, sender_headers
from ..session import Session
from ..streams import Streams
from ..subscriptions import SubscribeRequest, Subscriptions
from ..temp_queues import TEMP_DESTINATION

#: What a SEND's handler answers: RECEIPT headers now, later (a store read), none yet, or plain.
SendAnswer = Headers | Deferred[Headers] | Held | None
#: A transaction's SEND, planned: called at COMMIT with the SEND's options (priority, ack
#: timeout, expiry, delivery time) to publish it.
Planned = Callable[[int, float | None, int | None, int | None], object]
#: (action, resource) pairs a frame needs permission for (server/auth.py).
Needs = list[tuple[str, str]]


@dataclass(slots=True)
class Parts:
    """What the kinds act on: the engine's parts, and its answers that need the store.

    ``hold`` keeps a frame for its transaction; ``existing_queue(session, frame, name)`` is True
    when queue ``name`` is known to exist, else the store is asked and the session waits (False);
    ``unused_queue`` likewise for an ``x-queue-name`` nobody may use.
    """

    config: BrokerConfig
    dispatcher: Dispatcher
    router: Router
    streams: Streams
    subscriptions: Subscriptions
    acks: Acks
    control: Control
    hold: Callable[[Session, Frame], Held]
    existing_queue: Callable[[Session, Frame, str], bool]
    unused_queue: Callable[[Session, Frame, str], bool]


class DestinationKind:
    """One namespace of destinations (``/NAMESPACE/...``); the base refuses SEND and SUBSCRIBE."""

    #: The str between the first two slashes, a ``destinations.Kind`` constant.
    namespace = ""

    # -- permissions (pure: no broker) --------------------------------------------------------
    def resource(self, dest: Destination, send_headers: dict[str, str] | None = None) -> str:
        """The resource ``dest`` acts on (resources.py); ``send_headers``: a SEND's, else None."""
        return f"/{dest.kind}/{dest.name}"

    def send_needs(self, dest: Destination, headers: dict[str, str]) -> Needs:
        """The permissions a SEND to ``dest`` needs."""
        return [("write", self.resource(dest, headers))]

    def subscribe_needs(
        self, dest: Destination, headers: dict[str, str], login: str | None, client_id: str | None
    ) -> Needs:
        """The permissions a SUBSCRIBE to ``dest`` by ``login`` (and CONNECT ``client_id``) needs."""
        return [("read", self.resource(dest))]

    # -- SEND ---------------------------------------------------------------------------------
    def send(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> SendAnswer:
        """Handle a SEND to ``dest``: held for its transaction, or routed now."""
        headers = frame.headers
        forwarded = sender_headers(headers, session.login, session.relay, parts.config.stamp_user_id)
        if forwarded is not headers:
            frame = Frame(frame.command, forwarded, frame.body)
            headers = forwarded
        if not self.admit_send(parts, session, dest, frame):
            return HELD
        options = send_options(headers, parts.dispatcher.clock.wall_ms)
        reply_to = headers.get("reply-to")
        if reply_to is not None and reply_to.startswith(TEMP_DESTINATION):
            frame = parts.router.temps.rewrite_reply_to(session, frame)
        if "transaction" in headers:
            return parts.hold(session, frame)
        return self.route(parts, dest, frame, *options, session)

    def admit_send(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> bool:
        """May ``frame`` go on now (ClientError if never)?  False: it waits for a store read."""
        return True

    def route(
        self, parts: Parts, dest: Destination, frame: Frame, priority: int, ack_timeout: float | None,
        expires: int | None, deliver_at: int | None, publisher: Session,
    ) -> dict[str, str] | None:
        """Publish a SEND; QueueFull (after every other target queue got its copy) if a full
        ``reject-publish`` queue refused it.  The RECEIPT's headers, or None."""
        raise ClientError(f"SEND to {dest.raw!r} is not supported")

    def plan(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> Planned:
        """A transaction's SEND, checked before any frame of the COMMIT is applied; by default
        it is routed when the COMMIT applies it."""

        def routed(priority: int, ack_timeout: float | None, expires: int | None, deliver_at: int | None) -> object:
            return self.route(parts, dest, frame, priority, ack_timeout, expires, deliver_at, session)

        return routed

    # -- SUBSCRIBE ----------------------------------------------------------------------------
    def admit_subscribe(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> bool:
        """May the SUBSCRIBE go on now (ClientError if never)?  False: it waits for a store read."""
        return True

    def subscribe(self, parts: Parts, request: SubscribeRequest) -> None:
        """Start the subscription ``request`` asks for."""
        request.refuse_browser()
        raise ClientError(f"cannot SUBSCRIBE to {request.dest.raw!r}")

    # -- /control/bind ------------------------------------------------------------------------
    def bind_target(self, dest: Destination) -> str:
        """The name an exchange binding to ``dest`` is stored under (``Router.bind``)."""
        raise ClientError(f"only queues and streams can be bound to an exchange, not {dest.raw!r}")
