"""A Dramatiq broker on stompmq: ``StompmqBroker(url="stomp://USER:PASS@HOST:PORT")``.

What maps to what (docs/task-queues/dramatiq.md has the user's view):

* A Dramatiq queue ``Q`` is ``/queue/Q``.  ``declare_queue`` only records the name (a stompmq
  queue exists once used), so it is idempotent; ``get_declared_queues`` lists them.
* ``enqueue(message, delay=ms)`` is one SEND with stompmq's ``delay`` header: the message waits
  in the broker's delayed store and becomes ready when due.  There is no ``Q.DQ`` delay queue,
  so no ``after_declare_delay_queue`` and no worker holding far-future messages in memory;
  the message reaches the worker without an ``eta`` option, when it is due.
* ``broker_priority`` (0-9, higher first, as RabbitMQ's) is the SEND's ``priority``.
* ``confirm_delivery=True`` asks a RECEIPT for every SEND: ``enqueue`` returns once the broker
  has committed the message to its store, and a refused SEND raises.  Without it a SEND is
  written and forgotten (stored within the broker's flush interval); an ERROR the broker sent
  for it is noticed, and logged, at the next ``enqueue`` on that thread's connection.
* A consumer is a ``client-individual`` SUBSCRIBE with Dramatiq's prefetch as ``prefetch``;
  ``ack`` is an ACK.  ``nack`` (a rejected message: retries exhausted, time limit, no actor)
  moves it to Dramatiq's dead-letter queue ``Q.XQ`` in one STOMP transaction (SEND to
  ``/queue/Q.XQ`` and ACK, then COMMIT), so it is never in both queues nor in neither.
  ``Q.XQ`` is declared with ``message-ttl`` (``dramatiq_dead_message_ttl``, 7 days), as the
  RabbitMQ broker declares it.  Nothing here depends on the broker's own dead-letter options.
* ``requeue`` does nothing: closing the consumer's connection makes the broker requeue what it
  had unacked (so does a worker killed with SIGKILL), marked ``redelivered``.

Heart-beats (``heart_beat``, 10 s each way by default) are ``sync_client``'s: a thread of their
own writes them, so a worker busy with a long task keeps its connections, and a broker that
vanished is noticed by the consumer thread within twice the broker's interval.

Threads: a connection per thread for publishing (Dramatiq's worker threads enqueue retries),
and one per consumer, read by its consumer thread while worker threads send its ACKs
(``sync_client.Connection``'s rules).  No asyncio.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

import dramatiq
from dramatiq.common import current_millis, q_name, xq_name
from dramatiq.errors import BrokerError, ConnectionClosed, DecodeError, QueueJoinTimeout
from dramatiq.message import Message
from dramatiq.middleware import Middleware

from ..protocol import Frame
from ..sync_client import HEART_BEAT, BrokerRefused, Connection, ConnectionLost, StompmqError, StompURL

__all__ = ["StompmqBroker"]

#: Milliseconds a message stays in a dead-letter queue (the RabbitMQ broker's setting, read alike).
DEAD_MESSAGE_TTL = int(os.getenv("dramatiq_dead_message_ttl", 86400000 * 7))
#: Attempts of one enqueue over a fresh connection when the connection breaks.
MAX_ENQUEUE_ATTEMPTS = 3
#: stompmq's message priorities.
PRIORITIES = range(10)
#: The header of a ``Q.XQ`` message that says why it was rejected.  Not the broker's
#: ``dead-letter-reason``: the broker drops that from a client's SEND, since its consumers trust it
#: to be the broker's own word.
REASON_HEADER = "dramatiq-reason"
#: Longest text of an exception carried in a dead letter's ``REASON_HEADER``.
REASON_CHARS = 500


class StompmqBroker(dramatiq.Broker):
    """A Dramatiq broker that talks STOMP to stompmq.

    Parameters:
      url: ``stomp://USER:PASS@HOST:PORT`` (a path names a vhost: ``.../VHOST``).
      confirm_delivery: wait for the broker's RECEIPT (message stored) on every enqueue.
      ack_timeout: seconds a consumer may hold a message unacked before the broker gives it to
        another (the SUBSCRIBE's ``ack-timeout``); None leaves the broker's ``--ack-timeout``.
      dead_message_ttl: milliseconds a rejected message is kept in ``Q.XQ``.
      heart_beat: seconds between heart-beats each way that every connection offers (0: none;
        the broker may ask for longer); they go on while a worker runs a long task.
      middleware: as for every Dramatiq broker.
    """

    def __init__(
        self,
        *,
        url: str = "stomp://127.0.0.1:61613",
        confirm_delivery: bool = False,
        ack_timeout: float | None = None,
        dead_message_ttl: int = DEAD_MESSAGE_TTL,
        heart_beat: float = HEART_BEAT,
        middleware: list[Middleware] | None = None,
    ) -> None:
        super().__init__(middleware=middleware)
        self.url = StompURL.parse(url)
        self.heart_beat = heart_beat
        self.confirm_delivery = confirm_delivery
        self.ack_timeout = ack_timeout
        self.dead_message_ttl = dead_message_ttl
        self.queues: set[str] = set()
        #: Queues whose ``Q.XQ`` has been declared (with its TTL) by this broker object.
        self._dead_letters_declared: set[str] = set()
        #: Per queue, the latest due time (epoch ms) of a delayed message enqueued here: ``join``.
        self._delayed_until: dict[str, int] = {}
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self._state = threading.local()

    # -- connections -----------------------------------------------------------------------------
    @property
    def connection(self) -> Connection:
        """This thread's publishing connection, opened on first use."""
        conn: Connection | None = getattr(self._state, "connection", None)
        if conn is None or conn.closed:
            conn = self._state.connection = Connection(self.url, heart_beat=self.heart_beat)
            with self._lock:
                self._connections.add(conn)
        return conn

    def _drop_connection(self) -> None:
        conn: Connection | None = getattr(self._state, "connection", None)
        if conn is not None:
            conn.abort()
            self._state.connection = None
            with self._lock:
                self._connections.discard(conn)

    def _request(self, destination: str, headers: dict[str, str] | None = None) -> dict[str, str]:
        """A ``/control`` request on this thread's connection; its RECEIPT's headers."""
        try:
            return self.connection.request("SEND", {"destination": destination, **(headers or {})})
        except BrokerRefused as e:
            self._drop_connection()
            raise BrokerError(f"stompmq: {e}") from None
        except StompmqError as e:
            self._drop_connection()
            raise ConnectionClosed(e) from None

    def close(self) -> None:
        """Close every connection this broker opened (each after a DISCONNECT receipt)."""
        with self._lock:
            connections, self._connections = self._connections, set()
        for conn in connections:
            conn.close()

    # -- queues ----------------------------------------------------------------------------------
    def declare_queue(self, queue_name: str) -> None:
        """Record the queue (idempotent).  stompmq creates ``/queue/Q`` on first use; its dead-letter
        queue is declared when a consumer first consumes it."""
        name = q_name(queue_name)
        if name not in self.queues:
            self.emit_before("declare_queue", name)
            self.queues.add(name)
            self.emit_after("declare_queue", name)

    def get_declared_queues(self) -> set[str]:
        return self.queues.copy()

    def _declare_dead_letters(self, queue_name: str) -> None:
        """``Q.XQ`` with its TTL, once per broker object: dead letters expire as on RabbitMQ."""
        if queue_name not in self._dead_letters_declared:
            self._request(f"/control/declare/queue/{xq_name(queue_name)}",
                          {"message-ttl": str(self.dead_message_ttl)})
            self._dead_letters_declared.add(queue_name)

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> dramatiq.Consumer:
        """A consumer of ``/queue/Q`` holding up to ``prefetch`` messages unacked; each ``next``
        waits up to ``timeout`` ms."""
        self.declare_queue(queue_name)
        self._declare_dead_letters(q_name(queue_name))
        return _StompmqConsumer(self, q_name(queue_name), prefetch, timeout)

    # -- publishing ------------------------------------------------------------------------------
    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        """SEND the message to ``/queue/Q``; ``delay`` ms is stompmq's delayed delivery."""
        queue_name = q_name(message.queue_name)
        self.declare_queue(queue_name)
        headers = {"destination": f"/queue/{queue_name}"}
        priority = message.options.get("broker_priority")
        if priority is not None:
            if priority not in PRIORITIES:
                raise ValueError(f"broker_priority must be an integer 0-9 on stompmq, not {priority!r}")
            headers["priority"] = str(priority)
        if delay is not None and delay > 0:
            delay = math.ceil(delay)  # never early
            headers["delay"] = str(delay)
            due = current_millis() + delay
            if due > self._delayed_until.get(queue_name, 0):
                self._delayed_until[queue_name] = due
        body = message.encode()
        self.logger.debug("Enqueueing message %r on queue %r.", message.message_id, queue_name)
        self.emit_before("enqueue", message, delay)
        for attempt in itertools.count(1):
            try:
                self._send(headers, body)
                break
            except BrokerRefused as e:
                self._drop_connection()
                raise BrokerError(f"stompmq refused message {message.message_id} on {queue_name}: {e}") from None
            except ConnectionLost as e:
                self._drop_connection()
                if attempt >= MAX_ENQUEUE_ATTEMPTS:
                    raise ConnectionClosed(e) from None
                self.logger.debug("Retrying enqueue over a new connection (%d/%d): %s",
                                  attempt, MAX_ENQUEUE_ATTEMPTS, e)
        self.emit_after("enqueue", message, delay)
        return message

    def _send(self, headers: dict[str, str], body: bytes) -> None:
        conn = self.connection
        if self.confirm_delivery:
            conn.request("SEND", headers, body)
            return
        try:
            conn.check()
        except BrokerRefused as e:  # about an earlier SEND, whose enqueue has returned
            self.logger.error("stompmq refused an earlier message sent without confirm_delivery: %s", e)
            self._drop_connection()
            conn = self.connection
        conn.send_frame("SEND", headers, body)

    # -- tests' helpers --------------------------------------------------------------------------
    def get_queue_message_counts(self, queue_name: str) -> tuple[int, int]:
        """(messages in ``Q``, ready or unacked; messages in ``Q.XQ``).  Delayed messages not yet
        due are in neither (stompmq counts them when they become ready)."""
        name = q_name(queue_name)
        return (self._count(name), self._count(xq_name(name)))

    def _count(self, queue_name: str) -> int:
        return int(self._request(f"/control/count-msgs/queue/{queue_name}")["num-messages"])

    def flush(self, queue_name: str) -> None:
        """Drop every message of ``Q`` and ``Q.XQ``: ready ones, and delayed ones not yet due
        (retries in backoff included), as RabbitMQ's broker purges ``Q``, ``Q.DQ`` and ``Q.XQ``."""
        name = q_name(queue_name)
        for target in (name, xq_name(name)):
            self._request(f"/control/purge/queue/{target}", {"delayed": "true"})
        self._delayed_until.pop(name, None)

    def flush_all(self) -> None:
        for queue_name in self.get_declared_queues():
            self.flush(queue_name)

    def join(self, queue_name: str, min_successes: int = 10, idle_time: int = 100, *,
             timeout: int | None = None) -> None:
        """Wait until ``Q`` holds nothing, ready or unacked (so a message being worked on counts,
        unlike RabbitMQ's join), ``min_successes`` checks in a row ``idle_time`` ms apart, and
        every delayed message enqueued through this broker object is due.

        Delayed messages enqueued by other processes (a worker's retries) are invisible until due."""
        name = q_name(queue_name)
        deadline = None if timeout is None else time.monotonic() + timeout / 1000
        successes = 0
        while successes < min_successes:
            if deadline is not None and time.monotonic() >= deadline:
                raise QueueJoinTimeout(queue_name)
            waiting = self._delayed_until.get(name, 0) > current_millis()
            successes = 0 if waiting or self._count(name) else successes + 1
            time.sleep(idle_time / 1000)


class _StompmqMessage(dramatiq.MessageProxy):
    def __init__(self, message: Message[Any], ack_id: str, redelivered: bool) -> None:
        super().__init__(message)
        self._ack_id = ack_id
        self.redelivered = redelivered


class _StompmqConsumer(dramatiq.Consumer):
    """One SUBSCRIBE on a connection of its own (see the module's docstring)."""

    def __init__(self, broker: StompmqBroker, queue_name: str, prefetch: int, timeout: int) -> None:
        self.broker = broker
        self.queue_name = queue_name
        self.timeout = timeout / 1000
        self.logger = broker.logger
        self._transactions = itertools.count()
        headers = {"destination": f"/queue/{queue_name}", "id": "0", "ack": "client-individual",
                   "prefetch": str(max(1, prefetch))}
        if broker.ack_timeout is not None:
            headers["ack-timeout"] = str(broker.ack_timeout)
        try:
            self.conn = Connection(broker.url, heart_beat=broker.heart_beat)
            self.conn.request("SUBSCRIBE", headers)
        except StompmqError as e:
            raise ConnectionClosed(e) from None

    def __next__(self) -> dramatiq.MessageProxy | None:
        try:
            frame = self.conn.receive(self.timeout)  # an ERROR raises BrokerRefused
        except StompmqError as e:
            raise ConnectionClosed(e) from None
        if frame is None or frame.command != "MESSAGE":
            return None
        ack_id = frame.headers["ack"]
        try:
            message = Message.decode(frame.body)
        except DecodeError as e:
            self.logger.exception("Failed to decode a message of %r: moved to its dead-letter queue.",
                                  self.queue_name)
            self._dead_letter(ack_id, frame.body, f"cannot decode: {e}")
            return None
        return _StompmqMessage(message, ack_id, frame.headers.get("redelivered") == "true")

    def ack(self, message: dramatiq.MessageProxy) -> None:
        """ACK (from a worker thread).  On a broken connection the ACK is lost and the broker has
        requeued the message already: it runs again (at least once), so this logs and returns
        rather than raising, which would make Dramatiq retry an ACK that can never succeed."""
        assert isinstance(message, _StompmqMessage)
        try:
            self.conn.send_frame("ACK", {"id": message._ack_id})
        except StompmqError as e:
            self.logger.warning("Could not ack message %r (it will be delivered again): %s", message.message_id, e)

    def nack(self, message: dramatiq.MessageProxy) -> None:
        """Move the message to ``Q.XQ`` (see the module's docstring), with why in
        ``REASON_HEADER``."""
        assert isinstance(message, _StompmqMessage)
        exception = message._exception
        reason = "rejected" if exception is None else f"{type(exception).__name__}: {exception}"
        try:
            self._dead_letter(message._ack_id, message._message.encode(), reason)
        except StompmqError as e:
            self.logger.warning("Could not reject message %r (it will be delivered again): %s",
                                message.message_id, e)

    def _dead_letter(self, ack_id: str, body: bytes, reason: str) -> None:
        tx = {"transaction": f"x{next(self._transactions)}"}
        self.conn.send_frames([
            Frame("BEGIN", tx),
            Frame("SEND", {"destination": f"/queue/{xq_name(self.queue_name)}",
                           REASON_HEADER: reason[:REASON_CHARS], **tx}, body),
            Frame("ACK", {"id": ack_id, **tx}),
            Frame("COMMIT", tx),
        ])

    def requeue(self, messages: Iterable[dramatiq.MessageProxy]) -> None:
        """Nothing to do: closing the connection requeues every unacked message."""

    def close(self) -> None:
        self.conn.close()
