"""A session's frames applied: one handler per command, a socket read's frames in one step.

``Broker.handle`` and ``Broker.handle_frames`` are this module's ``Frames.handle`` and
``Frames.handle_frames``.  SEND and SUBSCRIBE go to their destination's kind (kinds/), the
other commands to acks, subscriptions and transactions.  A frame's RECEIPT is answered with
what its handler returned: at once, once a store read answers (``Deferred``), or not yet
(``Held``: a transaction holds it, or it waits for the store).  A frame that must look
something up in the store first (``/amq/queue/NAME``: does it exist?  ``x-queue-name``: is it
unused?) makes its session wait (``Session.waiting``) with every later frame behind it, so
their order holds; the answer fails the session or handles them all (``_checked``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from ..protocol import Frame
from ..storage.base import Store, StoredMessage, StoreError
from .acks import LATE, AckRun, Acks
from .config import BrokerConfig
from .control import Control, Deferred
from .destinations import Kind, parse_destination
from .dispatch import Dispatcher
from .errors import ClientError
from .kinds.base import Parts, SendAnswer
from .kinds.registry import KINDS
from .reads import Reads, StoreRead
from .receipts import HELD, Headers, Held, Receipts
from .routing import Router
from .send_headers import SPECIAL_HEADERS, user_headers
from .session import Session
from .streams import Streams
from .subscriptions import QUEUE_NAME_HEADER, Subscriptions
from .transactions import Transactions, requeue_wanted

log = logging.getLogger(__name__)

Handler = Callable[[Session, Frame], SendAnswer]
T = TypeVar("T")


class Frames:
    def __init__(
        self, store: Store, config: BrokerConfig, reads: Reads, dispatcher: Dispatcher, receipts: Receipts,
        router: Router, streams: Streams, acks: Acks, subscriptions: Subscriptions, transactions: Transactions,
        control: Control,
    ) -> None:
        self.store = store
        self.config = config
        self.reads = reads
        self.dispatcher = dispatcher
        self.receipts = receipts
        self.acks = acks
        self.subscriptions = subscriptions
        self.transactions = transactions
        #: what the destination kinds act on (kinds/base.py)
        self.parts = Parts(config, dispatcher, router, streams, subscriptions, acks, control, transactions.hold,
                           self._existing_queue, self._unused_queue)
        #: x-queue-name names the store found unused, for the SUBSCRIBE handled again at once
        self._vetted: set[str] = set()
        self._handlers: dict[str, Handler] = {
            "SEND": self._on_send,
            "SUBSCRIBE": self._on_subscribe,
            "UNSUBSCRIBE": self._on_unsubscribe,
            "ACK": self._on_ack,
            "NACK": self._on_nack,
            "BEGIN": self._on_begin,
            "COMMIT": self._on_commit,
            "ABORT": self._on_abort,
        }

    def handle(self, session: Session, frame: Frame) -> None:
        """Apply one client frame; raise ClientError to fail the connection."""
        if session.waiting is not None:  # an earlier frame waits for a store read: keep the order
            session.waiting.append(frame)
            return
        handler = self._handlers.get(frame.command)
        if handler is None:
            raise ClientError(f"unknown command {frame.command!r}")
        pacing = self.dispatcher.pacing
        if pacing:  # left by a publish outside any client's frame (a timer's): nobody to pace
            pacing.clear()
        before = self.dispatcher.published
        answer = handler(session, frame)
        if pacing:
            self._paced(session)
        self._answer(session, frame, answer, before)

    def _answer(self, session: Session, frame: Frame, answer: Headers | Deferred[Headers] | Held | None,
                before: StoredMessage | None) -> None:
        """Send the RECEIPT ``frame`` asked for with what its handler answered: now, once a
        store read answers (``Deferred``), or not yet (``Held`` by a transaction or a wait).
        ``before``: ``Dispatcher.published`` before the frame (a SEND that published changed it)."""
        if isinstance(answer, Held):
            return
        receipt = frame.headers.get("receipt")
        if isinstance(answer, Deferred):
            self._answer_later(session, receipt, answer)
        elif receipt is not None:
            message = self.dispatcher.published if frame.command == "SEND" else None
            if message is before:
                message = None
            self.receipts.send(session, receipt, answer, message)

    def handle_frames(self, session: Session, frames: list[Frame]) -> None:
        """Apply the frames of one socket read, in order, as ``handle`` would one by one, but in
        one call: a producer sends hundreds of SENDs per read, a client-ack consumer
        as many ACKs.  A SEND goes straight to ``_on_send`` (a plain one to a queue, without
        option headers, straight to ``Dispatcher.publish``), with the per-frame dispatch,
        pacing and receipt bookkeeping paid once per read.  A plain ACK is settled at once, so a
        later frame sees it settled, while the store deletes of a run of them wait for one call
        and each subscription is pumped once, after the run (``AckRun``); any other frame goes
        through ``handle`` once what came before it is finished.  RECEIPTs go out in order,
        each once what its frame buffered is.  A frame that makes the session wait for a store
        read (``Session.waiting``) queues the rest behind it.  A bad frame raises ClientError
        carrying its ``receipt_id``, after the frames before it took effect (an unexpected
        error, logged, becomes one too)."""
        waiting = session.waiting
        if waiting is not None:
            waiting.extend(frames)
            return
        acks, on_send, send_receipt = self.acks, self._on_send, self.receipts.send
        dispatcher = self.dispatcher
        # With stamp_user_id every SEND gets the sender's login: none takes the plain path below.
        publish, special, in_use = dispatcher.publish, SPECIAL_HEADERS, dispatcher.stats
        queue_kind = None if self.config.stamp_user_id else Kind.QUEUE  # QueueKind's send, inlined
        pacing = self.dispatcher.pacing
        if pacing:  # left by a publish outside any client's frame (a timer's): nobody to pace
            pacing.clear()
        run = AckRun()
        receipts: list[str] = []  # of the ACKs in the run
        frame = frames[0]
        try:
            for index, frame in enumerate(frames):
                if session.closed:  # failed by a frame before (its ERROR is the last word)
                    return
                headers = frame.headers
                command = frame.command
                if command == "ACK" and "transaction" not in headers:
                    target = acks.target(session, headers)
                    receipt = headers.get("receipt")
                    if target is not None:
                        acks.settle_ack(run, *target)
                        if receipt is not None:
                            receipts.append(receipt)
                        continue
                    if run.subs:  # the late ACK's RECEIPT comes after those before it
                        self._finish_acks(session, run, receipts)
                    if receipt is not None:
                        send_receipt(session, receipt, LATE)
                    continue
                if run.subs:
                    self._finish_acks(session, run, receipts)
                if command == "SEND":
                    dest = parse_destination(headers.get("destination"))
                    if dest.kind is queue_kind and special.isdisjoint(headers):
                        # A plain message to a queue (no options, reply-to or transaction): what
                        # _on_send and QueueKind.send would do, without either.
                        if dest.name not in in_use:
                            dispatcher.admit_queue(dest.name)
                        msg: StoredMessage | None = publish(dest.name, user_headers(headers), frame.body)
                        answer = None
                    else:
                        before = dispatcher.published  # (a publish replaces it with what it made)
                        answer = on_send(session, frame)
                        msg = dispatcher.published
                        if msg is before:
                            msg = None
                    if answer is None:  # _answer's plain case, spelled out: once per SEND
                        receipt = headers.get("receipt")
                        if receipt is not None:
                            send_receipt(session, receipt, None, msg)
                        continue
                    self._answer(session, frame, answer, before)
                else:
                    if pacing:  # handle() starts its own pacing record
                        self._paced(session)
                    self.handle(session, frame)
                waiting = session.waiting
                if waiting is not None:  # an /amq/queue/ frame asked the store: the rest wait
                    waiting.extend(frames[index + 1 :])
                    return
        except ClientError as e:
            e.receipt_id = frame.headers.get("receipt")
            raise
        except Exception as e:
            log.exception("session %s: internal error handling %s", session.id, frame.command)
            raise ClientError("internal error", frame.headers.get("receipt")) from e
        finally:
            self._finish_acks(session, run, receipts)
            if pacing:
                self._paced(session)

    def _finish_acks(self, session: Session, run: AckRun, receipts: list[str]) -> None:
        self.acks.finish(run)
        for receipt in receipts:
            self.receipts.send(session, receipt)
        receipts.clear()

    def _paced(self, session: Session) -> None:
        """The frame just handled left queues backed up: its sender waits for them (pacing.py),
        except for queues it consumes itself (its own ACKs may be what drains them)."""
        backed_up = self.dispatcher.pacing
        paced = session.paced
        if paced is None:
            paced = session.paced = set()
        if not backed_up <= paced:  # else every SEND of a read into a backed-up queue paid for this
            own = {sub.queue for sub in session.subscriptions.values()}
            paced.update(queue for queue in backed_up if queue not in own)
        backed_up.clear()

    def _answer_later(self, session: Session, receipt: str | None, deferred: Deferred[Headers]) -> None:
        entry = self.receipts.reserve(session, receipt) if receipt is not None else None

        def done(result: object) -> None:
            if entry is not None:
                self.receipts.answer(session, entry, deferred.answer(result))

        def failed(error: StoreError) -> None:
            if not session.closed:
                session.fail(f"store error: {error}", receipt)

        self.reads.submit(StoreRead(deferred.fetch, done, failed))

    def _release_receipts(self, session: Session, frames: list[Frame]) -> None:
        """A transaction ended: answer the receipts its frames asked for, in order."""
        for held in frames:
            receipt = held.headers.get("receipt")
            if receipt is not None:
                self.receipts.send(session, receipt)

    def _on_send(self, session: Session, frame: Frame) -> SendAnswer:
        dest = parse_destination(frame.headers.get("destination"))
        return KINDS[dest.kind].send(self.parts, session, dest, frame)

    def _on_subscribe(self, session: Session, frame: Frame) -> Held | None:
        dest = parse_destination(frame.headers.get("destination"))
        kind = KINDS[dest.kind]
        if not kind.admit_subscribe(self.parts, session, dest, frame):
            return HELD
        kind.subscribe(self.parts, self.subscriptions.request(session, dest, frame.headers))
        return None

    def _existing_queue(self, session: Session, frame: Frame, name: str) -> bool:
        """``/amq/queue/NAME`` names an existing queue (RabbitMQ): True when this broker knows
        it (used since start).  Otherwise the store is asked (``_ask_store``)."""
        dispatcher = self.dispatcher
        if name in dispatcher.stats or name in dispatcher.queues:
            return True
        if not self.store.durable:
            raise ClientError(_no_queue(name))

        def fetch(store: Store) -> Awaitable[bool]:
            return store.queue_exists(name)

        def answer(exists: bool) -> str | None:
            if not exists:
                return _no_queue(name)
            dispatcher.queue_stats(name)  # known from now on
            return None

        self._ask_store(session, frame, fetch, answer)
        return False

    def _unused_queue(self, session: Session, frame: Frame, name: str) -> bool:
        """``x-queue-name`` names the private queue of an exchange subscription (RabbitMQ): a
        queue nobody uses, since the subscription's end deletes it.  ClientError if this broker
        knows it in use; True once the store has said it holds no messages (``_ask_store``)."""
        self.subscriptions.check_queue_name(name)
        if not self.store.durable or name in self._vetted:
            self._vetted.discard(name)
            return True

        def fetch(store: Store) -> Awaitable[int]:
            return store.count(name)

        def answer(count: int) -> str | None:
            if count:
                return f"{QUEUE_NAME_HEADER} {name!r} names a queue that holds messages"
            self._vetted.add(name)
            return None

        self._ask_store(session, frame, fetch, answer)
        return False

    def _ask_store(
        self, session: Session, frame: Frame, fetch: Callable[[Store], Awaitable[T]],
        answer: Callable[[T], str | None],
    ) -> None:
        """What ``frame`` names must be looked up in the store: it and every later frame of the
        session wait for the answer (``Session.waiting``), so their order holds; ``answer``
        says what is wrong with the result (the session fails) or None (the frames go on)."""
        session.waiting = deque([frame])

        def failed(error: StoreError) -> None:
            if not session.closed:
                session.fail(f"store error: {error}", frame.headers.get("receipt"))

        self.reads.submit(StoreRead(fetch, partial(self._checked, session, answer), failed))

    def _checked(self, session: Session, answer: Callable[[T], str | None], result: T) -> None:
        """The store answered for the first waiting frame: handle the frames that waited."""
        frames, session.waiting = session.waiting, None
        if session.closed or frames is None:
            return
        error = answer(result)
        if error is not None:
            session.fail(error, frames[0].headers.get("receipt"))
            return
        for frame in frames:
            try:
                self.handle(session, frame)  # a later frame may wait again: the rest queue behind it
            except ClientError as e:
                session.fail(e.message, frame.headers.get("receipt"))
                return
            except Exception:
                log.exception("session %s: internal error handling %s", session.id, frame.command)
                session.fail("internal error", frame.headers.get("receipt"))
                return
        if session.waiting is None:
            session.ungated()

    def _on_unsubscribe(self, session: Session, frame: Frame) -> None:
        self.subscriptions.unsubscribe(session, frame.headers)

    def _on_ack(self, session: Session, frame: Frame) -> Headers | Held | None:
        target = self.acks.target(session, frame.headers)
        if target is None:
            return LATE  # too late: nothing to settle, in a transaction or not
        if "transaction" in frame.headers:
            return self.transactions.hold(session, frame)
        self.acks.ack(*target)
        return None

    def _on_nack(self, session: Session, frame: Frame) -> Headers | Held | None:
        # NACK is not in STOMP 1.0, but RabbitMQ takes it there, naming the message by message-id
        # as a 1.0 ACK does, and clients written against RabbitMQ send it.
        target = self.acks.target(session, frame.headers)
        if target is None:
            return LATE
        requeue = requeue_wanted(frame.headers)
        if "transaction" in frame.headers:
            return self.transactions.hold(session, frame)
        self.acks.nack(*target, requeue)
        return None

    def _on_begin(self, session: Session, frame: Frame) -> None:
        self.transactions.begin(session, frame)

    def _on_commit(self, session: Session, frame: Frame) -> None:
        self._release_receipts(session, self.transactions.commit(session, frame, self.parts))

    def _on_abort(self, session: Session, frame: Frame) -> None:
        self._release_receipts(session, self.transactions.abort(session, frame))


def _no_queue(name: str) -> str:
    return f"no queue named {name!r} (/amq/queue/NAME names an existing queue; use /queue/NAME to create one)"
