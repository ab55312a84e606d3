"""Taking ready messages for an administrator: the management API's get and move.

Theory of operation
-------------------
A ``Take`` is a consumer like any other: a client-individual subscription with prefetch
``count`` (at most ``--max-prefetch``) on a session of its own, whose outbox throws the
MESSAGE frames away.  So the messages come through the queue's own dispatch: only ready
messages nobody has in flight, in delivery order, paged in from the store and, on a store
several brokers share, only rows this broker claims; the queue's other consumers share it
with the take round-robin, and a queue with a single active consumer gives the take nothing.
What the take holds is in flight, invisible to everyone else, until it settles everything in
one step: ``ack`` deletes it (a get); ``move`` puts each message into another queue and deletes
it from its own (``Dispatcher.transfer``, the path of a dead letter), so the insert and the
delete are buffered together and commit in one group; ``close`` puts back what is left
without counting a redelivery (nobody saw it).  A take has what it can have once it holds
``count`` messages or no page read of its queue is pending (``complete``); the server waits
for that, bounded, then settles.  The source queue counts the messages delivered and acked.
"""

from __future__ import annotations

from ..storage.base import StoredMessage
from .acks import AckRun, Acks
from .destinations import is_queue_name, parse_destination
from .dispatch import DEAD_LETTER_REASON, ORIGINAL_DESTINATION, Dispatcher
from .errors import ClientError
from .queue_settings import QueueFull
from .session import Session, Subscription
from .subscriptions import Subscriptions

#: The take's subscription id on its own session.
TAKE_ID = "take"


class _Discard:
    """An outbox that always has room and keeps nothing: the take reads its subscription's
    unacked deliveries, not the frames."""

    queued = 0

    def write(self, data: bytes) -> None:
        """Dropped: nobody reads a take's MESSAGE frames."""

    def write_body(self, head: bytes, body: bytes) -> None:
        """Dropped, as ``write``."""

    def has_room(self) -> bool:
        return True

    def spare(self) -> int:
        return 1 << 30  # (never asked: a take is a client-ack subscription)

    def can_take_transient(self) -> bool:
        return True


class Take:
    """Up to ``count`` ready messages of queue ``name``, held until settled or closed."""

    def __init__(self, subscriptions: Subscriptions, acks: Acks, dispatcher: Dispatcher, session_id: str,
                 name: str, count: int) -> None:
        self.acks = acks
        self.dispatcher = dispatcher
        self.name = name
        self.session = session = Session(session_id, "1.2", _Discard())
        # ack-timeout 0: the wait is the server's, bounded; no --ack-timeout requeues meanwhile
        headers = {"id": TAKE_ID, "ack": "client-individual", "prefetch": str(count), "ack-timeout": "0"}
        subscriptions.subscribe_queue(subscriptions.request(session, parse_destination("/queue/" + name), headers))
        self.subscriptions = subscriptions
        self.sub: Subscription = session.subscriptions[TAKE_ID]

    @property
    def complete(self) -> bool:
        """It holds all it asked for, or all it can have now (no page read of the queue pending)."""
        sub = self.sub
        queue = sub.queue
        return not sub.active or len(sub.unacked) >= sub.prefetch or queue is None or not queue.window.loading

    def ack(self) -> list[StoredMessage]:
        """Delete what the take holds (as its ACKs would) and end it; the messages, in order."""
        sub = self._stop()
        taken = list(sub.unacked.values())
        run = AckRun()
        for ack_id in list(sub.unacked):
            self.acks.settle_ack(run, sub, ack_id)
        self.acks.finish(run)
        self.close()
        return taken

    def move(self, target: str) -> tuple[int, str | None]:
        """Put what the take holds into queue ``target``, in order, and end it: how many moved,
        and why the rest stayed (a full ``reject-publish`` target), if they did.

        A dead letter moved back to the queue it died in is live again: its dead-letter headers
        go (it gets them afresh if it dies again); moved anywhere else it keeps them."""
        if not is_queue_name(target):
            raise ClientError(f"{target!r} is not a queue name")
        if target == self.name:
            raise ClientError("a queue's messages cannot move to the queue itself")
        sub = self._stop()
        back_home = "/queue/" + target
        moved, refused = 0, None
        for ack_id in list(sub.unacked):
            msg = sub.unacked[ack_id]
            headers = msg.headers
            if headers.get(ORIGINAL_DESTINATION) == back_home:
                headers = {k: v for k, v in headers.items() if k not in (DEAD_LETTER_REASON, ORIGINAL_DESTINATION)}
            try:
                self.dispatcher.transfer(msg, target, headers)
            except QueueFull as e:
                refused = e.message
                break
            self.acks.settle(sub, ack_id)
            moved += 1
        if sub.queue is not None:
            sub.queue.stats.acked += moved
        self.close()
        return moved, refused

    def close(self) -> None:
        """End the take: what it still holds goes back where it was, as never delivered."""
        sub = self.sub
        if self.session.closed:
            return
        sub.active = False
        for ack_id in list(sub.unacked):
            self.acks.requeue(sub.queue, self.acks.settle(sub, ack_id), redelivered=False)
        self.session.closed = True
        self.session.subscriptions.clear()
        self.subscriptions.drop(sub)

    def _stop(self) -> Subscription:
        """No more deliveries to the take (settling makes room a pump would fill)."""
        if self.session.closed:
            raise ClientError("the take is over")
        self.sub.active = False
        return self.sub
