"""A kombu transport on stompmq, for Celery: ``stompmq://USER:PASS@HOST:PORT//``.

Importing this module registers the ``stompmq`` URL scheme with kombu (``TRANSPORT_ALIASES``),
so a Celery app that imports it can say ``broker_url = "stompmq://guest:guest@localhost:61613//"``
(``transport = "stompmq.integrations.celery:Transport"`` works without the import).  What maps
to what (docs/task-queues/celery.md has the user's view):

* **Exchanges are the broker's.**  kombu's ``direct``, ``fanout`` and ``topic`` exchanges are
  declared on the broker (``/control/declare/exchange/NAME`` with ``type``), queues bound with
  ``/control/bind/exchange/NAME`` (``queue``, ``routing-key``), and a publish to exchange E with
  routing key K is a SEND to ``/exchange/E`` with ``routing-key:K``: routing happens in the
  broker, so a worker's events reach a ``celery events`` started later, and a broadcast reaches
  every worker's pidbox queue.  The default (nameless) exchange is a SEND to ``/queue/K``.
* **Consuming is pushed**: ``basic_consume`` is a SUBSCRIBE (``client-individual``, or ``auto``
  for ``no_ack`` consumers such as the pidbox, events and ``rpc://`` replies) whose
  ``prefetch`` is the channel's QoS; nothing polls.  The SUBSCRIBE is sent at the next
  ``drain_events``, because Celery's worker sets its QoS after it starts consuming.  A later
  change of the QoS is not followed (STOMP cannot change a subscription's prefetch).
* **Acks**: ``ack`` is an ACK, ``reject``/``requeue`` a NACK (``requeue:false`` for a reject
  without requeue); a worker that dies (``kill -9``) has its deliveries requeued by the broker.
* **Countdown and ETA wait in the broker**: a message whose ``eta`` header is a time with a
  zone is sent with ``deliver-at`` (epoch ms) and its ``eta`` removed, so it reaches a worker
  when due and runs at once: no worker holds it in memory, nor past a visibility timeout.
* **Priorities**: the message's priority (0-9, higher first, as RabbitMQ's; none is 0) is the
  SEND's ``priority``.
* **Long tasks**: every client-ack SUBSCRIBE has ``ack-timeout`` (transport option
  ``ack_timeout``, 60 s), and a thread extends the deadline of every delivery the connection
  holds every third of it (``/control/extend-ack``): a task longer than the timeout is neither
  redelivered nor cut off, while a dead worker's tasks come back when its connection drops.
* **Queue arguments**: ``x-message-ttl`` and ``x-max-length`` become the queue's declared
  ``message-ttl`` and ``max-length``.  ``auto_delete`` queues (reply, event and pidbox queues)
  are deleted when their last consumer on the broker goes; ``x-expires`` has no equivalent.
* **The message** is the STOMP body, byte for byte; kombu's headers, properties, content type
  and encoding, exchange and routing key travel as JSON in one STOMP header, ``kombu``.

Threads: one STOMP connection per kombu connection (``sync_client.Connection``).  The
thread that drains events reads it, and also waits for the receipts of declarations; ACKs come
from any thread (Celery's thread pool acknowledges in the task's thread), as do the deadline
extensions of the connection's own thread.  No asyncio.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from kombu.message import Message
from kombu.transport import TRANSPORT_ALIASES, base

from ..protocol import Frame
from ..stomp_url import DEFAULT_PORT
from ..sync_client import BrokerRefused, Connection, StompmqError, StompURL

__all__ = ["Channel", "Transport"]

#: The STOMP header that carries kombu's envelope (headers, properties, content type...).
ENVELOPE = "kombu"
#: Seconds a client-ack delivery may go without an extension (transport option ``ack_timeout``).
ACK_TIMEOUT = 60.0
#: The exchange types the broker has (``broker/key_exchanges.py``).
EXCHANGE_TYPES = frozenset({"direct", "fanout", "topic"})
#: Queue arguments with a stompmq equivalent, to its declaration header.
QUEUE_ARGUMENTS = {"x-message-ttl": "message-ttl", "x-max-length": "max-length"}
#: Frames one ``drain_events`` delivers at most without waiting (what a read brought in).
DRAIN_BATCH = 256


class Consumer:
    """One ``basic_consume``: a STOMP subscription of one channel."""

    __slots__ = ("channel", "tag", "id", "queue", "no_ack", "callback", "subscribed")

    def __init__(self, channel: Channel, tag: str, queue: str, no_ack: bool, callback: Callable[[Message], Any]) -> None:
        self.channel = channel
        self.tag = tag
        self.id = f"{channel.channel_id}.{tag}"  # kombu's tags are unique per channel only
        self.queue = queue
        self.no_ack = no_ack
        self.callback = callback
        self.subscribed = False


class Link:
    """The STOMP connection under one kombu connection: its consumers by subscription id, the
    ones still to subscribe, and the thread that extends the held deliveries' deadlines."""

    def __init__(self, url: StompURL, ack_timeout: float) -> None:
        self.stomp = Connection(url)
        self.ack_timeout = ack_timeout
        self.consumers: dict[str, Consumer] = {}
        self.pending: list[Consumer] = []
        #: ack ids delivered to client-ack consumers and not settled yet (any thread settles)
        self.held: dict[str, None] = {}
        self.stopped = threading.Event()
        self.extender: threading.Thread | None = None
        if ack_timeout > 0:
            self.extender = threading.Thread(target=self._extend, name="stompmq-extend-ack", daemon=True)
            self.extender.start()

    def _extend(self) -> None:
        """Every third of the ack timeout, move the deadline of everything held to now + timeout.
        No receipt is asked: an id settled meanwhile is simply not held any more."""
        timeout = self.ack_timeout
        headers = {"destination": "/control/extend-ack", "ack-timeout": f"{timeout:g}"}
        while not self.stopped.wait(timeout / 3):
            ids = list(self.held)
            if not ids:
                continue
            try:
                self.stomp.send_frame("SEND", {**headers, "id": ",".join(ids)})
            except StompmqError:
                return  # the connection is gone: so are its deliveries' deadlines

    def subscribe_pending(self) -> None:
        """Send the SUBSCRIBEs of the consumers started since, with their channel's prefetch."""
        pending, self.pending = self.pending, []
        for consumer in pending:
            headers = {"destination": "/queue/" + consumer.queue, "id": consumer.id}
            if consumer.no_ack:
                headers["ack"] = "auto"
            else:
                headers["ack"] = "client-individual"
                if consumer.channel.prefetch_count:
                    headers["prefetch"] = str(consumer.channel.prefetch_count)
                if self.ack_timeout > 0:
                    headers["ack-timeout"] = f"{self.ack_timeout:g}"
            self.stomp.send_frame("SUBSCRIBE", headers)
            consumer.subscribed = True

    def drain(self, timeout: float | None) -> None:
        """Deliver what arrives within ``timeout`` (None: wait as long as it takes): at least one
        MESSAGE, then those already read; ``socket.timeout`` if none came."""
        if self.pending:
            self.subscribe_pending()
        stomp = self.stomp
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            frame = stomp.receive(min(deadline - time.monotonic(), 1.0))
            if frame is not None:
                break
            if time.monotonic() >= deadline:
                raise TimeoutError()
        for _ in range(DRAIN_BATCH):
            self.deliver(frame)
            if not stomp.frames:
                return
            frame = stomp.frames.popleft()

    def deliver(self, frame: Frame) -> None:
        if frame.command == "ERROR":  # the broker closes the connection after it
            self.stomp.abort()
            raise BrokerRefused(frame.headers.get("message", "ERROR"))
        if frame.command != "MESSAGE":
            return  # a RECEIPT nobody waits for (a request that timed out)
        consumer = self.consumers.get(frame.headers.get("subscription", ""))
        if consumer is None:
            return  # cancelled: the broker requeued what it held unacked
        message = consumer.channel.to_message(frame, consumer)
        if not consumer.no_ack:
            self.held[message.delivery_tag] = None
        consumer.callback(message)

    def request(self, destination: str, **headers: str) -> dict[str, str]:
        """A ``/control`` request; the RECEIPT's headers."""
        return self.stomp.request("SEND", {"destination": destination, **headers})

    def close(self) -> None:
        self.stopped.set()
        self.stomp.close()


class DeclareOk:
    """queue.declare-ok: (queue, ready messages, subscribers), the counts read from the broker
    (``/control/count-msgs``, ``/control/count-subscribers``) when first looked at."""

    def __init__(self, link: Link, queue: str) -> None:
        self._link = link
        self.queue = queue
        self._counts: tuple[int, int] | None = None

    def _read(self) -> tuple[int, int]:
        if self._counts is None:
            ready = self._link.request(f"/control/count-msgs/queue/{self.queue}")["num-ready"]
            subscribers = self._link.request(f"/control/count-subscribers/queue/{self.queue}")["num-subscribers"]
            self._counts = int(ready), int(subscribers)
        return self._counts

    @property
    def message_count(self) -> int:
        return self._read()[0]

    @property
    def consumer_count(self) -> int:
        return self._read()[1]

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int) -> str | int:
        return self.queue if index in (0, -3) else (self.queue, *self._read())[index]

    def __iter__(self) -> Iterator[str | int]:
        yield self.queue
        yield from self._read()


class Channel(base.StdChannel):
    """A kombu channel: declarations as ``/control`` requests, publishes as SENDs, consumers as
    subscriptions of the connection's ``Link``."""

    _tags = itertools.count(1)
    _ids = itertools.count(1)

    def __init__(self, connection: Transport, link: Link) -> None:
        self.connection = connection
        self.link = link
        self.channel_id = next(self._ids)
        self.prefetch_count = 0
        self.consumers: dict[str, Consumer] = {}
        #: auto_delete queues declared here: deleted when their last consumer is gone
        self.auto_delete: set[str] = set()
        self.closed = False

    # -- declarations ---------------------------------------------------------------------------
    def exchange_declare(self, exchange: str = "", type: str = "direct", durable: bool = False,
                         auto_delete: bool = False, arguments: dict[str, Any] | None = None,
                         nowait: bool = False, passive: bool = False) -> None:
        if not exchange:
            return  # the default exchange: queues by name
        if type not in EXCHANGE_TYPES:
            raise StompmqError(f"stompmq has no {type!r} exchanges (only {', '.join(sorted(EXCHANGE_TYPES))})")
        if passive:
            self.link.request(f"/control/stats/exchange/{exchange}")
            return
        self.link.request(f"/control/declare/exchange/{exchange}", type=type)

    def exchange_delete(self, exchange: str, if_unused: bool = False, nowait: bool = False) -> None:
        self.link.request(f"/control/delete/exchange/{exchange}")

    def queue_declare(self, queue: str = "", passive: bool = False, durable: bool = False,
                      exclusive: bool = False, auto_delete: bool = False,
                      arguments: dict[str, Any] | None = None, nowait: bool = False) -> DeclareOk:
        """A queue exists once used; a declaration with arguments stores its policy (a request),
        one without asks nothing.  The answer is AMQP's queue.declare-ok, whose counts are read
        only if looked at: the ``rpc://`` backend declares its reply queue for every task sent,
        and never looks."""
        if not queue:
            queue = f"amq.gen-{time.monotonic_ns():x}-{next(self._tags)}"
        options = {QUEUE_ARGUMENTS[k]: str(int(v)) for k, v in (arguments or {}).items()
                   if k in QUEUE_ARGUMENTS and v is not None}
        if options and not passive:
            self.link.request(f"/control/declare/queue/{queue}", **options)
        if auto_delete:
            self.auto_delete.add(queue)
        return DeclareOk(self.link, queue)

    def queue_bind(self, queue: str, exchange: str = "", routing_key: str = "",
                   arguments: dict[str, Any] | None = None, nowait: bool = False) -> None:
        if exchange:  # the default exchange binds every queue by its name already
            self.link.request(f"/control/bind/exchange/{exchange}", queue="/queue/" + queue,
                              **{"routing-key": routing_key})

    def queue_unbind(self, queue: str, exchange: str = "", routing_key: str = "",
                     arguments: dict[str, Any] | None = None, nowait: bool = False) -> None:
        if exchange:
            self.link.request(f"/control/unbind/exchange/{exchange}", queue="/queue/" + queue,
                              **{"routing-key": routing_key})

    def queue_purge(self, queue: str, nowait: bool = False) -> int:
        return int(self.link.request(f"/control/purge/queue/{queue}").get("num-purged", 0))

    def queue_delete(self, queue: str, if_unused: bool = False, if_empty: bool = False, nowait: bool = False) -> int:
        if if_unused and int(self.link.request(f"/control/count-subscribers/queue/{queue}")["num-subscribers"]):
            return 0
        if if_empty and int(self.link.request(f"/control/count-msgs/queue/{queue}")["num-messages"]):
            return 0
        self.link.request(f"/control/delete/queue/{queue}")
        self.auto_delete.discard(queue)
        return 0

    # -- publishing -----------------------------------------------------------------------------
    def prepare_message(self, body: bytes | str, priority: int | None = None, content_type: str | None = None,
                        content_encoding: str | None = None, headers: dict[str, Any] | None = None,
                        properties: dict[str, Any] | None = None) -> dict[str, Any]:
        if isinstance(body, str):
            body = body.encode(content_encoding or "utf-8")
        properties = dict(properties or {})
        if priority is not None:
            properties["priority"] = priority
        return {"body": body, "headers": dict(headers or {}), "properties": properties,
                "content_type": content_type, "content_encoding": content_encoding}

    def basic_publish(self, message: dict[str, Any], exchange: str = "", routing_key: str = "",
                      mandatory: bool = False, immediate: bool = False, **kwargs: Any) -> None:
        headers = message["headers"]
        stomp = {"destination": f"/exchange/{exchange}" if exchange else "/queue/" + routing_key}
        if exchange:
            stomp["routing-key"] = routing_key
        priority = message["properties"].get("priority")
        stomp["priority"] = str(min(max(int(priority), 0), 9)) if priority is not None else "0"
        due = _due_ms(headers.get("eta"))
        if due is not None:
            headers = {**headers, "eta": None}  # the broker holds it until then: run it on arrival
            stomp["deliver-at"] = str(due)
        properties = {k: v for k, v in message["properties"].items() if k != "delivery_info"}
        stomp[ENVELOPE] = json.dumps(
            {"h": headers, "p": properties, "t": message["content_type"], "e": message["content_encoding"],
             "x": exchange, "k": routing_key}, separators=(",", ":"), default=str)
        self.link.stomp.send_frame("SEND", stomp, message["body"])

    # -- consuming ------------------------------------------------------------------------------
    def basic_qos(self, prefetch_size: int = 0, prefetch_count: int = 0, apply_global: bool = False) -> None:
        """The prefetch of the subscriptions this channel starts from now on."""
        self.prefetch_count = prefetch_count

    def basic_consume(self, queue: str, no_ack: bool = False, callback: Callable[[Message], Any] | None = None,
                      consumer_tag: str | None = None, **kwargs: Any) -> str:
        tag = consumer_tag or f"kombu-{next(self._tags)}"
        if tag in self.consumers:
            raise StompmqError(f"consumer tag {tag!r} is in use on this channel")
        consumer = Consumer(self, tag, queue, no_ack, callback or (lambda message: None))
        self.consumers[tag] = self.link.consumers[consumer.id] = consumer
        self.link.pending.append(consumer)
        return tag

    def basic_cancel(self, consumer_tag: str) -> None:
        consumer = self.consumers.pop(consumer_tag, None)
        if consumer is None:
            return
        link = self.link
        del link.consumers[consumer.id]
        if not consumer.subscribed:
            link.pending.remove(consumer)
            return
        if link.stomp.closed:
            return
        link.stomp.request("UNSUBSCRIBE", {"id": consumer.id})
        queue = consumer.queue
        if queue in self.auto_delete and not any(c.queue == queue for c in link.consumers.values()):
            self.queue_delete(queue, if_unused=True)

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        for tag in self._settled(delivery_tag, multiple):
            self.link.stomp.send_frame("ACK", {"id": tag})

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.link.held.pop(delivery_tag, None)
        self.link.stomp.send_frame("NACK", {"id": delivery_tag, "requeue": "true" if requeue else "false"})

    def basic_recover(self, requeue: bool = True) -> None:
        """Give back everything this connection holds unacked (AMQP's recover with requeue)."""
        if not requeue:
            raise StompmqError("basic_recover(requeue=False) has no STOMP equivalent")
        for tag in list(self.link.held):
            self.basic_reject(tag, requeue=True)

    def _settled(self, delivery_tag: str, multiple: bool) -> list[str]:
        """The ack ids an ack settles (up to ``delivery_tag`` with ``multiple``), no longer held."""
        held = self.link.held
        if not multiple:
            held.pop(delivery_tag, None)
            return [delivery_tag]
        tags = []
        for tag in list(held):
            tags.append(tag)
            held.pop(tag, None)
            if tag == delivery_tag:
                break
        return tags

    def to_message(self, frame: Frame, consumer: Consumer) -> Message:
        """A MESSAGE as kombu's message (a STOMP message from another client has no envelope:
        its headers are the message's headers)."""
        headers = frame.headers
        envelope = headers.get(ENVELOPE)
        if envelope is not None:
            env = json.loads(envelope)
        else:
            env = {"h": dict(headers), "p": {}, "t": headers.get("content-type"), "e": None,
                   "x": "", "k": consumer.queue}
        tag = headers.get("ack") or headers.get("message-id", "")
        properties = env["p"]
        properties["delivery_tag"] = tag
        delivery_info = {"exchange": env["x"], "routing_key": env["k"], "consumer_tag": consumer.tag,
                         "delivery_tag": tag, "redelivered": headers.get("redelivered") == "true",
                         "priority": properties.get("priority")}
        properties["delivery_info"] = delivery_info
        return Message(body=frame.body, delivery_tag=tag, content_type=env["t"], content_encoding=env["e"],
                       delivery_info=delivery_info, properties=properties, headers=env["h"], channel=self)

    def message_to_python(self, raw: Message) -> Message:
        return raw  # callbacks get kombu messages already (``to_message``)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for tag in list(self.consumers):
            try:
                self.basic_cancel(tag)
            except StompmqError:
                break  # the connection is gone: the broker requeued what it held
        self.connection.close_channel(self)


class Transport(base.Transport):
    """kombu's transport for ``stompmq://``: one STOMP connection per kombu connection."""

    default_port = DEFAULT_PORT  # type: ignore[assignment]  # (kombu's base says None)
    driver_type = "stomp"
    driver_name = "stompmq"
    connection_errors = (StompmqError, OSError)  # type: ignore[assignment]
    channel_errors = ()  # type: ignore[assignment]
    implements = base.Transport.implements.extend(
        asynchronous=False, exchange_type=EXCHANGE_TYPES, heartbeats=False,
    )

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.channels: list[Channel] = []

    def establish_connection(self) -> Link:
        client: Any = self.client
        vhost = client.virtual_host or "/"
        url = StompURL(
            host=client.hostname or "localhost", port=client.port or DEFAULT_PORT, login=client.userid or None,
            passcode=client.password or None, vhost=client.hostname if vhost == "/" else vhost.strip("/"),
        )
        return Link(url, float(client.transport_options.get("ack_timeout", ACK_TIMEOUT)))

    def close_connection(self, connection: Link) -> None:
        for channel in list(self.channels):
            if channel.link is connection:
                channel.closed = True  # its subscriptions end with the connection
                self.channels.remove(channel)
        connection.close()

    def create_channel(self, connection: Link) -> Channel:
        channel = Channel(self, connection)
        self.channels.append(channel)
        return channel

    def close_channel(self, channel: Channel) -> None:
        if channel in self.channels:
            self.channels.remove(channel)

    def drain_events(self, connection: Link, timeout: float | None = None, **kwargs: Any) -> None:
        connection.drain(timeout)

    def verify_connection(self, connection: Link) -> bool:
        return not connection.stomp.closed

    @property
    def default_connection_params(self) -> dict[str, Any]:
        return {"port": self.default_port, "hostname": "localhost"}

    def driver_version(self) -> str:
        from .. import __version__

        return __version__


def _due_ms(eta: object) -> int | None:
    """Celery's ``eta`` header (ISO 8601) as epoch milliseconds; None when absent or without a
    zone (a naive time is the app's timezone, which a transport cannot know: the worker waits)."""
    if not isinstance(eta, str):
        return None
    try:
        when = datetime.fromisoformat(eta)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return math.ceil(when.timestamp() * 1000)


TRANSPORT_ALIASES["stompmq"] = "stompmq.integrations.celery:Transport"
