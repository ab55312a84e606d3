"""Temporary reply queues: ``/temp-queue/NAME`` and the ``/reply-queue/TOKEN`` others answer to.

Theory of operation
-------------------
``/temp-queue/NAME`` names a queue private to the connection that uses it
(RabbitMQ's STOMP form): each connection saying ``/temp-queue/x`` gets its own,
created on first use (SUBSCRIBE, SEND, or a ``reply-to`` header) and deleted
with its messages when the connection closes.  It is an ordinary stored queue
named ``amq.gen.reply/TOKEN`` (the ``amq.gen.`` prefix makes a crash's leftovers
purged at start, as for exchange subscriptions; no exchange name contains ``/``,
so no exchange subscription's queue can take that name), so paging, acks and
several brokers sharing a store work unchanged.

A SEND whose ``reply-to`` is ``/temp-queue/x`` has it rewritten to
``/reply-queue/TOKEN``, which any client that was told it may SEND to (not
SUBSCRIBE: only the owner consumes it).  TOKEN is ``RANDOM.NAME``
(``NODE.RANDOM.NAME`` on a store several brokers share, NODE being the broker's
id): RANDOM is 128 bits from ``BrokerConfig.reply_token`` (``secrets``), as
RabbitMQ's ``amq.gen-`` names are, so the name is a capability nobody can guess
from their own (sequence numbers were: consecutive connections got consecutive
ones), and a reply to a queue that is gone never reaches a newer connection's
queue of the same name.  ``/control/list-queues`` leaves these queues out.  A
SEND to a reply queue of this broker that is gone is dropped and counted
(``dropped``), as RabbitMQ drops it; one of another broker is stored for that
broker to claim (see docs/architecture.md for what happens when it is gone).
"""

from __future__ import annotations

import logging

from ..protocol import Frame
from .destinations import MAX_NAME_BYTES
from .dispatch import Dispatcher
from .errors import ClientError
from .exchanges import PRIVATE_QUEUE_PREFIX
from .limits import LimitError
from .session import Session

log = logging.getLogger(__name__)

#: The stored name of a temporary queue is this + TOKEN.
TEMP_QUEUE_PREFIX = PRIVATE_QUEUE_PREFIX + "reply/"
TEMP_DESTINATION = "/temp-queue/"
REPLY_DESTINATION = "/reply-queue/"


class TempQueues:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.owners: dict[str, Session] = {}  # stored name of every live temp queue -> its connection
        self.dropped = 0  # SENDs to reply queues that were gone

    def resolve(self, session: Session, name: str) -> str:
        """The stored name of ``session``'s ``/temp-queue/NAME``, made on first use."""
        temps = session.temp_queues
        if temps is None:
            temps = session.temp_queues = {}
        queue = temps.get(name)
        if queue is None:
            limit = self.dispatcher.config.max_temp_queues
            if len(temps) >= limit:
                raise LimitError("max-temp-queues", f"this connection has {limit} temporary queues already")
            node = self.dispatcher.store.node_id
            random = self.dispatcher.config.reply_token()
            token = f"{node}.{random}.{name}" if node else f"{random}.{name}"
            if len((REPLY_DESTINATION + token).encode()) > MAX_NAME_BYTES:
                raise ClientError(f"temporary queue name too long: {TEMP_DESTINATION + name!r}")
            queue = temps[name] = TEMP_QUEUE_PREFIX + token
            self.owners[queue] = session
        return queue

    def rewrite_reply_to(self, session: Session, frame: Frame) -> Frame:
        """``frame`` with its ``reply-to: /temp-queue/NAME`` turned into the routable name."""
        name = frame.headers["reply-to"][len(TEMP_DESTINATION):]
        if not name:
            raise ClientError("reply-to /temp-queue/ needs a name")
        token = self.resolve(session, name)[len(TEMP_QUEUE_PREFIX):]
        return Frame(frame.command, {**frame.headers, "reply-to": REPLY_DESTINATION + token}, frame.body)

    def reply_target(self, token: str) -> str | None:
        """The queue a SEND to ``/reply-queue/TOKEN`` goes to; None: it is gone (dropped, counted)."""
        queue = TEMP_QUEUE_PREFIX + token
        node = self.dispatcher.store.node_id
        if queue in self.owners or (node and not token.startswith(node + ".")):
            return queue  # live here, or another broker's on a shared store: stored for it
        self.dropped += 1
        log.info("reply queue %s is gone: message dropped (%d so far)", token, self.dropped)
        return None

    def close(self, session: Session) -> None:
        """The connection closed: its temporary queues go, with their messages."""
        dispatcher = self.dispatcher
        for queue_name in (session.temp_queues or {}).values():
            del self.owners[queue_name]
            dispatcher.purge(queue_name)
            queue = dispatcher.queues.get(queue_name)
            if queue is not None:
                dispatcher.deactivate_if_idle(queue)
            dispatcher.forget_stats(queue_name)
        session.temp_queues = None
