"""SUBSCRIBE and UNSUBSCRIBE: a subscription joins a queue's round-robin or a topic's set.

``SUBSCRIBE /stream/NAME`` starts a cursor at ``x-stream-offset`` (see streams.py).
``SUBSCRIBE /exchange/NAME/REST`` is RabbitMQ's consumer-side form of an
exchange: a private queue (``amq.gen.`` prefix) is bound with REST (a weight
for consistent-hash, a binding key for direct and topic) for the
subscription's lifetime and purged when it ends.  Such private queues (and
temporary queues, temp_queues.py) are consumed by their own subscription or
connection only: a SUBSCRIBE naming one as ``/queue/amq.gen...`` is refused, as
RabbitMQ refuses to consume another connection's exclusive queue.

A durable topic subscription (``durable:true`` or ``persistent:true`` with an
``id``, RabbitMQ's form; ``activemq.subscriptionName`` with the CONNECT's
``client-id``, ActiveMQ's) is a stored queue bound to ``amq.topic`` with the
topic as its pattern: the store, paging and acks carry it like any queue, and
it keeps collecting messages while its subscriber is away.  The queue is named
after its owner as well as the subscription (``durable_queue``): the login,
then the client-id in ActiveMQ's form, then the id or subscription name, so
the same id from another user is another subscription and nobody can take
over, or re-point, someone else's (the vhost is implicit: each has its own
engine and store keys).  UNSUBSCRIBE with the same durable header deletes it;
a plain one detaches and keeps it.  Ending a subscription requeues what it
held unacked.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import quote

from ..storage.records import BindingRecord
from .acks import Acks
from .browse import BROWSER_HEADER, Browsers, BrowseSubscription
from .config import BrokerConfig
from .consumer import AckMode
from .destinations import MAX_NAME_BYTES, Destination, is_queue_name
from .dispatch import Dispatcher
from .errors import ClientError
from .exchanges import PRIVATE_QUEUE_PREFIX
from .limits import LimitError
from .policy_apply import AppliedPolicies
from .routing import Router
from .selectors import Selector, compile_selector
from .send_headers import flag, quoted, seconds
from .session import Session, Subscription
from .stream_log import StreamSubscription
from .streams import Streams
from .virtual_topics import virtual_topic

#: ActiveMQ's prefetch header; 0 there means the consumer pulls (STOMP's nearest: prefetch 1).
ACTIVEMQ_PREFETCH = "activemq.prefetchSize"
#: Header names that set a subscription's prefetch, first one present wins.
PREFETCH_HEADERS = ("prefetch", ACTIVEMQ_PREFETCH, "prefetch-count")

_ACK_MODES = {mode.value: mode for mode in AckMode}
log = logging.getLogger(__name__)

#: RabbitMQ's SUBSCRIBE header naming an exchange subscription's private queue.
QUEUE_NAME_HEADER = "x-queue-name"
#: Queue names the broker makes itself (private, durable, temporary); never an x-queue-name.
RESERVED_QUEUE_PREFIX = "amq."
#: Name prefix of the queue of a durable topic subscription (never purged at start).
DURABLE_QUEUE_PREFIX = "amq.subscription."
#: The prefix of durable subscriptions named by their id alone, before they had owners: any
#: user naming the id took the subscription over.  ``drop_legacy_bindings`` retires them.
LEGACY_DURABLE_PREFIX = "amq.durable."
#: SUBSCRIBE headers that make the subscription a single active consumer (ActiveMQ, RabbitMQ).
EXCLUSIVE_HEADERS = ("activemq.exclusive", "x-single-active-consumer")
#: ActiveMQ's header naming a durable topic subscription (scoped by the CONNECT client-id).
ACTIVEMQ_SUBSCRIPTION = "activemq.subscriptionName"
#: JMS's message selector on SUBSCRIBE (ActiveMQ's header name).
SELECTOR_HEADER = "selector"
#: Consumer priority on SUBSCRIBE (ActiveMQ's, RabbitMQ's): first one present wins.
PRIORITY_HEADERS = ("activemq.priority", "x-priority")
#: A consumer priority's range (RabbitMQ's: a signed 32-bit integer; ActiveMQ's 0-127 fits).
PRIORITY_LIMIT = 2**31


@dataclass(slots=True)
class SubscribeRequest:
    """A SUBSCRIBE, checked: what its destination's kind needs to start it."""

    session: Session
    dest: Destination
    headers: dict[str, str]
    sub_id: str
    mode: AckMode
    prefetch: int
    ack_timeout: float | None
    exclusive: bool
    browser: bool
    selector: Selector | None

    def refuse_browser(self) -> None:
        """ClientError if this is a ``browser:true`` SUBSCRIBE: only queues can be browsed."""
        if self.browser:
            raise ClientError(f"browser:true needs a queue destination, not {self.dest.raw!r}")


class Subscriptions:
    def __init__(
        self, dispatcher: Dispatcher, acks: Acks, router: Router, streams: Streams, config: BrokerConfig,
        policies: AppliedPolicies,
    ) -> None:
        self.dispatcher = dispatcher
        self.policies = policies  # a queue's use starts and ends here (its ``expires``)
        self.streams = streams
        self.acks = acks
        self.router = router
        self.config = config
        self.browsers = Browsers(dispatcher)

    def request(self, session: Session, dest: Destination, headers: dict[str, str]) -> SubscribeRequest:
        """What a SUBSCRIBE asks for, checked (ClientError or LimitError naming the problem);
        its destination's kind then starts it (kinds/)."""
        sub_id = headers.get("id")
        if sub_id is None:
            if session.version != "1.0":
                raise ClientError("SUBSCRIBE without id header")
            sub_id = dest.raw  # STOMP 1.0 made the id optional
        if sub_id in session.subscriptions:
            raise ClientError(f"duplicate subscription id {sub_id!r}")
        if len(session.subscriptions) >= self.config.max_subscriptions:
            raise LimitError("max-subscriptions",
                             f"too many subscriptions on this connection (at most {self.config.max_subscriptions})")
        mode = _ACK_MODES.get(headers.get("ack", "auto"))
        if mode is None:
            raise ClientError(f"ack header must be auto, client or client-individual, not {headers['ack']!r}")
        prefetch = self._prefetch(headers)
        ack_timeout = seconds(headers, "ack-timeout")
        exclusive = single_active(headers)
        browser = flag(headers, BROWSER_HEADER, False)
        selector = compile_selector(headers.get(SELECTOR_HEADER, ""))
        if selector is not None and browser:
            # Refused rather than ignored: a consumer that asked for some messages must not get all.
            raise ClientError(f"{SELECTOR_HEADER} is not supported on browser subscriptions (docs/selectors.md)")
        return SubscribeRequest(session, dest, headers, sub_id, mode, prefetch, ack_timeout, exclusive, browser,
                                selector)

    def consume(self, request: SubscribeRequest, queue_name: str, *, shows_queue: bool = False) -> None:
        """Subscribe ``request`` to stored queue ``queue_name`` (or browse it).  ``shows_queue``:
        its MESSAGEs name the queue; else what was subscribed to (a durable, exchange or
        temporary queue's subscriber sees that, as in RabbitMQ)."""
        session, dest, sub_id = request.session, request.dest, request.sub_id
        if request.browser:
            self.browsers.subscribe(session, sub_id, dest.raw, queue_name)
            return
        queue = self.dispatcher.activate(queue_name)
        declared = self.dispatcher.bounds.declared.get(queue_name)
        exclusive = request.exclusive or (declared is not None and declared.single_active)
        if not shows_queue:
            queue.destination = dest.raw
        sub = Subscription(sub_id, session, dest.raw, request.mode, request.prefetch, request.ack_timeout, queue,
                           request.selector, consumer_priority(request.headers))
        session.subscriptions[sub_id] = sub
        self.dispatcher.restore(queue, queue.add_subscriber(sub, exclusive))
        self.policies.used(queue_name)
        self.dispatcher.pump(queue)

    def subscribe_queue(self, request: SubscribeRequest) -> None:
        """SUBSCRIBE ``/queue/NAME`` (or ``/amq/queue/NAME``): a consumer of the stored queue,
        unless it is someone's private queue; a virtual topic's consumer queue is bound first."""
        name = request.dest.name
        if name.startswith(PRIVATE_QUEUE_PREFIX):
            raise ClientError(f"access refused: {request.dest.raw!r} is the private queue of another subscription"
                              " or connection (only its own can consume it)")
        topic = virtual_topic(name, self.config.virtual_topic_prefix)
        if topic is not None:
            self.router.bind_durable(name, topic)
        self.consume(request, name, shows_queue=True)

    def check_queue_name(self, name: str) -> None:
        """ClientError unless ``x-queue-name`` ``name`` may name an exchange subscription's
        private queue: a valid queue name outside the reserved ``amq.`` prefix (RabbitMQ's rule;
        the generated, durable and temporary queues live there) that this broker knows nobody
        uses (declared, bound, subscribed, holding messages in memory), since the subscription's
        end deletes it.  The engine asks the store whether it holds messages."""
        if not is_queue_name(name):
            raise ClientError(f"{QUEUE_NAME_HEADER} {name!r} is not a queue name")
        if name.startswith(RESERVED_QUEUE_PREFIX):
            raise ClientError(f"{QUEUE_NAME_HEADER} {name!r}: queue names starting with "
                              f"{RESERVED_QUEUE_PREFIX!r} are reserved")
        dispatcher = self.dispatcher
        if name in dispatcher.queues or name in dispatcher.bounds.declared or self.router.is_bound(name):
            raise ClientError(f"{QUEUE_NAME_HEADER} {name!r} names a queue in use")

    def _prefetch(self, headers: dict[str, str]) -> int:
        limit = self.config.max_prefetch
        for name in PREFETCH_HEADERS:
            value = headers.get(name)
            if value is not None:
                if not (value.isascii() and value.isdigit()):  # int() would take "+5", " 5" and "5_0"
                    raise ClientError(f"{name} must be a positive integer, not {quoted(value)}")
                prefetch = int(value) if len(value) < 20 else limit  # past any limit: clamped below
                if prefetch == 0 and name == ACTIVEMQ_PREFETCH:
                    prefetch = 1  # ActiveMQ's 0 is a consumer that pulls one at a time
                if prefetch < 1:
                    raise ClientError(f"{name} must be a positive integer, not {quoted(value)}")
                return min(prefetch, limit)
        return min(self.config.default_prefetch, limit)

    def unsubscribe(self, session: Session, headers: dict[str, str]) -> None:
        sub_id = headers.get("id")
        if sub_id is None and session.version == "1.0" and "destination" in headers:
            self._unsubscribe_destination(session, headers["destination"])
            return
        if sub_id is None:
            raise ClientError("UNSUBSCRIBE without id header")
        sub = session.subscriptions.pop(sub_id, None)
        if sub is None:
            raise ClientError(f"no subscription with id {sub_id!r}")
        self.drop(sub)
        durable = durable_queue(session.login, session.client_id, headers)
        if durable is not None and sub.queue is not None and sub.queue.name == durable:
            self.dispatcher.purge(durable)  # UNSUBSCRIBE with the durable header deletes it
            self.router.unbind_everywhere(durable)

    def _unsubscribe_destination(self, session: Session, destination: str) -> None:
        """STOMP 1.0: UNSUBSCRIBE by destination ends every subscription to it, whatever id its
        SUBSCRIBE gave (stompngo sends ids on 1.0 and unsubscribes by destination)."""
        subs = session.subscriptions
        ids = [sub_id for sub_id, sub in subs.items() if sub.destination == destination]
        if not ids:
            raise ClientError(f"no subscription to {destination!r}")
        for sub_id in ids:
            self.drop(subs.pop(sub_id))

    def drop(self, sub: Subscription) -> None:
        """End one subscription: requeue what it held, leave its queue or topic."""
        sub.active = False
        self.acks.release(sub)
        queue = sub.queue
        if isinstance(sub, StreamSubscription):
            self.streams.remove(sub)
            return
        if isinstance(sub, BrowseSubscription):
            self.browsers.remove(sub)
            return
        if queue is None:
            self.router.topics.remove(sub.destination[len("/topic/") :], sub)
            self.router.overflow.forget(sub)
            return
        self.dispatcher.restore(queue, queue.remove_subscriber(sub))
        if not queue.nsubs:
            self.policies.unused(queue.name)
        if not queue.nsubs and self.router.drop_private(queue.name):
            # an exchange subscription's queue dies with it, its deliveries still in the outbox too
            self.dispatcher.discard_unsent(sub.session, queue)
            self.dispatcher.purge(queue.name)
        self.dispatcher.pump(queue)
        self.dispatcher.deactivate_if_idle(queue)


def consumer_priority(headers: dict[str, str]) -> int:
    """A queue SUBSCRIBE's consumer priority (``activemq.priority`` or ``x-priority``; 0 if
    neither): higher ones get messages first while they have room (sift.py)."""
    for name in PRIORITY_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        digits = value[1:] if value[:1] in ("-", "+") else value
        if not (digits.isascii() and digits.isdigit() and len(digits) < 12) or \
                not -PRIORITY_LIMIT <= int(value) < PRIORITY_LIMIT:
            raise ClientError(f"{name} must be an integer from {-PRIORITY_LIMIT} to {PRIORITY_LIMIT - 1},"
                              f" not {quoted(value)}")
        return int(value)
    return 0


def single_active(headers: dict[str, str]) -> bool:
    """Does a SUBSCRIBE ask to be its queue's single active consumer (ActiveMQ's or RabbitMQ's
    header; either one true is enough)?"""
    return flag(headers, EXCLUSIVE_HEADERS[0], False) | flag(headers, EXCLUSIVE_HEADERS[1], False)


def durable_queue(login: str | None, client_id: str | None, headers: dict[str, str]) -> str | None:
    """The queue of the durable topic subscription a SUBSCRIBE/UNSUBSCRIBE of ``login``'s
    connection names, if any: ``amq.subscription.LOGIN/ID`` (RabbitMQ's form) or
    ``amq.subscription.LOGIN,CLIENT-ID/NAME`` (ActiveMQ's).  LOGIN and CLIENT-ID are
    percent-encoded, so they hold no ``/`` or ``,`` and no two owners share a name."""
    owner = quote(login or "", safe="")
    name = headers.get(ACTIVEMQ_SUBSCRIPTION)
    if name is not None:
        if client_id is None:
            raise ClientError(f"{ACTIVEMQ_SUBSCRIPTION} needs a client-id header in CONNECT")
        queue = f"{DURABLE_QUEUE_PREFIX}{owner},{quote(client_id, safe='')}/{name}"
    elif flag(headers, "durable", False) or flag(headers, "persistent", False):
        if "id" not in headers:
            raise ClientError("a durable subscription needs an id header")
        queue = f"{DURABLE_QUEUE_PREFIX}{owner}/{headers['id']}"
    else:
        return None
    if len(queue.encode()) > MAX_NAME_BYTES:
        raise ClientError(f"durable subscription name too long: {queue!r}")
    return queue


def durable_pattern(dest: Destination) -> str:
    """A durable subscription binds its topic to amq.topic as an AMQP pattern (as RabbitMQ does):
    ``*`` is one word and ``#`` any number, so the ``PREFIX*`` form has no durable equivalent."""
    last = dest.name.rsplit(".", 1)[-1]
    if last.endswith("*") and last != "*":
        raise ClientError(
            f"durable subscriptions take AMQP topic patterns ('*' one word, '#' any), not {dest.raw!r}"
        )
    return dest.name


def split_legacy_bindings(bindings: list[BindingRecord]) -> tuple[list[BindingRecord], list[BindingRecord]]:
    """(bindings to load, amq.topic bindings of durable subscriptions stored under the ownerless
    naming, ``LEGACY_DURABLE_PREFIX``).  No owner can be told from such a name, so they are no
    one's subscription any more and must stop collecting copies of topic messages nobody can
    take: the engine deletes those bindings at start.  Their stored messages stay, for an
    operator to read as ``/queue/NAME`` or delete (docs/security.md)."""
    keep: list[BindingRecord] = []
    legacy: list[BindingRecord] = []
    for binding in bindings:
        retired = binding.exchange == "amq.topic" and binding.queue.startswith(LEGACY_DURABLE_PREFIX)
        (legacy if retired else keep).append(binding)
    if legacy:
        log.warning("%d durable subscription(s) of the ownerless naming unbound from amq.topic, messages kept: %s",
                    len(legacy), ", ".join(sorted({b.queue for b in legacy})[:10]))
    return keep, legacy
