"""Settling deliveries: ACK, NACK, ack timeouts, and requeueing what a subscription held.

A delivery is *settled* when it leaves every index that tracks it (the
subscription's ``unacked``, the session's ``deliveries``, the queue's
``inflight``) and its ack-timeout timer is cancelled (``Dispatcher.ack_timers``, by seq:
the engine's own record, not the stored message's), so memory follows the deliveries in
flight, not the history.  Then the message is deleted (ACK), requeued with one more
redelivery (NACK, ack timeout, a subscription or connection gone), or dead-lettered past
``--max-redeliveries``.

Ack ids: STOMP 1.2 ACKs name the ``ack`` header of the MESSAGE (a per-session
counter); 1.0 and 1.1 name the ``message-id``, which two overlapping topic
subscriptions of one session share, so ``target`` also looks at the
``subscription`` header, but only to choose between subscriptions holding the id:
a wrong one is ignored, as RabbitMQ and ActiveMQ do.

A client-ack consumer sends one ACK per message, many per socket read, so the
ACKs of a read form an ``AckRun`` (``Broker.handle_frames``): each is settled as
it comes (a later ACK of the same id finds it settled), while their store
deletes wait for one ``Store.delete_all`` and each subscription they made room
in is pumped once, at the end (``finish``), instead of once per ACK.
"""

from __future__ import annotations

from ..storage.base import StoredMessage
from .consumer import AckMode
from .dispatch import ACK_TIMEOUT, Dispatcher
from .errors import ClientError
from .events import Watch
from .queue import Queue
from .send_headers import seconds
from .session import EXPIRED_KEPT, Session, Subscription
from .stream_log import StreamSubscription
from .streams import Streams

#: ``/control/extend-ack``: a delivery's new ack deadline (``Acks.extend``), the connection's own.
EXTEND_ACK = "extend-ack"
#: The RECEIPT of an ACK or NACK that came after its ack timeout requeued the message.
LATE = {"ack-late": "true"}


class AckRun:
    """ACKs settled and not finished yet: the messages to delete, the subscriptions to pump."""

    __slots__ = ("gone", "subs")

    def __init__(self) -> None:
        self.gone: list[StoredMessage] = []
        self.subs: dict[Subscription, None] = {}  # in the order they were acked, each once


class Acks:
    def __init__(self, dispatcher: Dispatcher, streams: Streams) -> None:
        self.dispatcher = dispatcher
        self.streams = streams
        self.store = dispatcher.store
        self.config = dispatcher.config
        self.deadlines = dispatcher.deadlines
        self.ack_timers = dispatcher.ack_timers
        #: the observers that ``settle_ack`` and ``nack`` tell (events.py); None: nobody watches
        self.watch: Watch | None = None

    def target(self, session: Session, headers: dict[str, str]) -> tuple[Subscription, str] | None:
        """The subscription and ack id an ACK/NACK names; None when it is late (its ack timeout
        requeued the message: ``Session.expired``); ClientError if it names nothing else."""
        ack_id = headers.get("id")
        if ack_id is None:
            if session.version == "1.2":
                raise ClientError("ACK/NACK without id header")
            ack_id = headers.get("message-id")
            if ack_id is None:
                raise ClientError("ACK/NACK without message-id header")
        sub = holder(session, ack_id, headers)
        if sub is not None:
            return sub, ack_id
        if session.expired is not None and ack_id in session.expired:
            return None
        raise ClientError(f"no unacked message with ack id {ack_id!r}")

    def extend(self, session: Session, headers: dict[str, str]) -> dict[str, str]:
        """``/control/extend-ack``: the deliveries its ``id`` names (ack ids, comma-separated)
        are due ``ack-timeout`` seconds from now (0: never), as SQS's ChangeMessageVisibility and
        Pub/Sub's modifyAckDeadline do; the RECEIPT counts them (``extended``) and names the ids
        that are late (``ack-late``: requeued by their timeout) or held by nobody here."""
        ids = headers.get("id")
        if not ids:
            raise ClientError("/control/extend-ack needs an id header (the ack ids, comma-separated)")
        timeout = seconds(headers, "ack-timeout")
        if timeout is None:
            raise ClientError("/control/extend-ack needs an ack-timeout header (seconds from now, 0: never)")
        extended = 0
        late: list[str] = []
        unknown: list[str] = []
        timers, deadlines = self.ack_timers, self.deadlines
        for ack_id in ids.split(","):
            sub = holder(session, ack_id, headers)
            if sub is None:
                (late if session.expired is not None and ack_id in session.expired else unknown).append(ack_id)
                continue
            extended += 1
            if sub.queue is None:
                continue  # topic and stream deliveries have no deadline to move
            msg = sub.unacked[ack_id]
            timer = timers.pop(msg.seq, None)
            if timer is not None:
                deadlines.cancel(timer)
            if timeout > 0:
                timers[msg.seq] = deadlines.arm(timeout, ACK_TIMEOUT, session, ack_id, msg)
        answer = {"extended": str(extended)}
        if late:
            answer["ack-late"] = ",".join(late)
        if unknown:
            answer["not-unacked"] = ",".join(unknown)
        return answer

    def ack(self, sub: Subscription, ack_id: str) -> None:
        """Apply one ACK completely (a transaction's, at COMMIT)."""
        run = AckRun()
        self.settle_ack(run, sub, ack_id)
        self.finish(run)

    def settle_ack(self, run: AckRun, sub: Subscription, ack_id: str) -> None:
        """Settle what one ACK covers now; its deletes and the pump wait for ``finish(run)``."""
        ids = acked_ids(sub, ack_id)
        queue = sub.queue
        if queue is None:  # topic and stream messages are never deleted by an ACK
            for one in ids:
                msg = self.settle(sub, one)
            if isinstance(sub, StreamSubscription) and sub.group is not None:
                self.streams.commit(sub, msg)  # the group resumes after the last entry acked
        else:
            gone = run.gone
            for one in ids:
                gone.append(self.settle(sub, one))
            queue.stats.acked += len(ids)
            if self.watch is not None:
                self.watch.acked(gone[len(gone) - len(ids):], sub)
        run.subs[sub] = None

    def finish(self, run: AckRun) -> None:
        """Delete what the run's ACKs settled (one store call), then pump each subscription."""
        if run.gone:
            self.dispatcher.remove_all(run.gone)
            run.gone = []
        if run.subs:
            subs, run.subs = run.subs, {}
            for sub in subs:
                self.after_settle(sub)

    def nack(self, sub: Subscription, ack_id: str, requeue: bool) -> None:
        watch = self.watch
        for one in acked_ids(sub, ack_id):
            msg = self.settle(sub, one)
            if sub.queue is None:
                continue  # topic and stream messages are not requeued (a stream is re-read instead)
            if watch is not None:  # before its requeue or dead letter, whose events follow
                watch.nacked(msg, sub, requeue)
            if requeue:
                self.requeue(sub.queue, msg)
            elif self.config.dead_letter_rejected and sub.queue is not None:
                self.dispatcher.dead_letter(msg, "rejected with NACK requeue:false")
            else:
                self.dispatcher.remove(msg)
        self.after_settle(sub)

    def expire(self, session: Session, ack_id: str, msg: StoredMessage) -> None:
        """An ack timeout fired (it is cancelled when its delivery settles, so it is live)."""
        sub = session.deliveries.get(ack_id)
        if sub is None or sub.unacked.get(ack_id) is not msg:
            return  # a 1.0/1.1 key shared by two subscriptions: the other one holds it now
        self.settle(sub, ack_id)
        expired = session.expired
        if expired is None:
            expired = session.expired = {}
        expired[ack_id] = None
        if len(expired) > EXPIRED_KEPT:
            del expired[next(iter(expired))]
        if sub.queue is not None:
            sub.queue.expired(msg, sub)
        self.requeue(sub.queue, msg)
        self.after_settle(sub)

    def release(self, sub: Subscription) -> None:
        """The subscription ends: everything it holds unacked goes back to its queue."""
        for ack_id in list(sub.unacked):
            self.requeue(sub.queue, self.settle(sub, ack_id))

    def release_unsent(self, session: Session) -> None:
        """The connection closed: auto-ack deliveries its socket never took go back, in order."""
        queues: dict[str, Queue[Subscription]] = {}
        for queue, msg in self.dispatcher.take_unsent(session):
            self.requeue(queue, msg)
            queues[queue.name] = queue
        for queue in queues.values():
            self.dispatcher.pump(queue)
            self.dispatcher.deactivate_if_idle(queue)

    def settle(self, sub: Subscription, ack_id: str) -> StoredMessage:
        """Remove one unacked delivery from every index and return its message."""
        msg = sub.unacked.pop(ack_id)
        deliveries = sub.session.deliveries
        if deliveries.get(ack_id) is sub:  # 1.0/1.1 keys may be shared: see target()
            del deliveries[ack_id]
        queue = sub.queue
        if queue is not None:
            queue.inflight.pop(msg.seq, None)
            if queue.groups:
                queue.settled(msg)
        timers = self.ack_timers
        if timers:
            timer = timers.pop(msg.seq, None)
            if timer is not None:
                self.deadlines.cancel(timer)
        return msg

    def requeue(self, queue: Queue[Subscription] | None, msg: StoredMessage, redelivered: bool = True) -> None:
        """Put an unacked queue message back, counting a redelivery (unless nobody saw it:
        ``redelivered`` False, take.py); dead-letter it past the limit."""
        if queue is None:
            return  # topic message: transient
        forfeited = self.dispatcher.forfeited
        if forfeited and msg.seq in forfeited:
            forfeited.discard(msg.seq)  # claimed under a lease that lapsed: another broker has it
            return
        msg.delivered = False
        if redelivered:
            msg.redeliveries += 1
            queue.stats.redelivered += 1
            limit = self.dispatcher.bounds.delivery_limit(queue.name, self.config.max_redeliveries)
            if limit is not None and msg.redeliveries > limit:
                self.dispatcher.dead_letter(msg, f"redelivered more than {limit} times")
                return
        msg.held = queue.window.requeue(msg)
        self.store.update(msg)

    def after_settle(self, sub: Subscription) -> None:
        """The subscription has room again: deliver to it, and let an idle queue go."""
        queue = sub.queue
        if queue is None:
            if isinstance(sub, StreamSubscription):
                self.streams.pump(sub)  # the position advances as ACKs make room
            return
        if sub.active:
            queue.make_ready(sub)
        self.dispatcher.pump(queue)
        self.dispatcher.deactivate_if_idle(queue)


def holder(session: Session, ack_id: str, headers: dict[str, str]) -> Subscription | None:
    """The subscription of ``session`` holding the unacked delivery ``ack_id``, if any."""
    sub = session.deliveries.get(ack_id)
    if session.version != "1.2":
        # 1.0/1.1 name a delivery by message-id, which two subscriptions of one session share
        # when overlapping topic subscriptions both received the message: the subscription
        # header picks one.  A header naming another subscription (some clients send any
        # value) does not make the ACK fail while the id is unacked on this connection.
        named = session.subscriptions.get(headers.get("subscription", ""))
        if named is not None and ack_id in named.unacked:
            sub = named
        elif sub is None:  # the shared key's entry was settled already
            sub = next((s for s in session.subscriptions.values() if ack_id in s.unacked), None)
    return sub


def acked_ids(sub: Subscription, ack_id: str) -> list[str]:
    """The deliveries one ACK/NACK settles: cumulative for `client`, one otherwise."""
    if sub.ack_mode is not AckMode.CLIENT:
        return [ack_id]
    ids = []
    for candidate in sub.unacked:
        ids.append(candidate)
        if candidate == ack_id:
            break
    return ids
