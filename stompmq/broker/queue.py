"""An active queue: its ready window, its subscribers in round-robin, its deliveries in flight.

Theory of operation
-------------------
``ReadyWindow`` (window.py) decides which ready messages are in memory; a
``Queue`` decides who gets them.  Subscriptions with room sit in
``ready_subs``, a round-robin deque: each delivery costs O(1) however many
subscribers the queue has.  Subscriptions that lost their room or unsubscribed
are dropped lazily when they reach the front, and put back when an ACK or a
drained socket gives them room again.

``dispatch`` yields (subscription, message) pairs and leaves the delivery to
its caller, so a queue knows nothing of the engine that owns it.  A message
whose ack timeout expired at one subscription goes to another one with room if
there is one (``avoid``), as ocamlmq does.  An expired message reached at the head is set
aside for the caller instead of being delivered.  A ``pinned`` queue (a bounded ``drop-head``
one, whose oldest messages must be at hand) stays in memory without subscribers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from ..storage.base import StoredMessage
from .session import Subscription
from .stats import QueueStats
from .window import ReadyWindow


class Queue:
    __slots__ = ("name", "destination", "window", "nsubs", "ready_subs", "inflight", "avoid", "stats", "pinned")

    def __init__(
        self,
        name: str,
        capacity: int | None,
        spilled: bool,
        max_bytes: int | None = None,
        stats: QueueStats | None = None,
    ) -> None:
        self.name = name
        self.destination = "/queue/" + name
        self.window = ReadyWindow(capacity, spilled, max_bytes)
        self.nsubs = 0  # subscriptions (the round-robin holds those with room)
        self.ready_subs: deque[Subscription] = deque()
        self.inflight: dict[int, StoredMessage] = {}  # seq -> message delivered, not yet settled
        # seq -> subscription whose ack timeout expired for it: another one gets it if it can
        self.avoid: dict[int, Subscription] | None = None
        self.stats = stats if stats is not None else QueueStats()
        self.pinned = False

    @property
    def size(self) -> int:
        """Ready messages in memory."""
        return self.window.size

    @property
    def idle(self) -> bool:
        """No subscribers, nothing in flight, no read pending, not pinned: it may leave memory."""
        return not self.nsubs and not self.inflight and not self.window.loading and not self.pinned

    def wants_page(self) -> bool:
        return (self.nsubs > 0 or self.pinned) and self.window.wants_page()

    # -- subscribers ----------------------------------------------------------------------------
    def add_subscriber(self, sub: Subscription) -> None:
        self.nsubs += 1
        self.make_ready(sub)

    def make_ready(self, sub: Subscription) -> None:
        if not sub.in_ready and sub.active:
            sub.in_ready = True
            self.ready_subs.append(sub)

    def dispatch(self, now_ms: int, expired: list[StoredMessage]) -> Iterator[tuple[Subscription, StoredMessage]]:
        """Ready messages paired round-robin with subscribers that have room; messages that
        expired before ``now_ms`` go to ``expired`` instead.

        The caller delivers each pair before asking for the next, so a subscriber's room is
        checked after its previous delivery.
        """
        ready_subs = self.ready_subs
        window = self.window
        while window.size and ready_subs:
            sub = ready_subs[0]
            if not sub.active or not sub.has_room():
                ready_subs.popleft()
                sub.in_ready = False
                continue
            if self.avoid is not None and self._passes_over(sub):
                ready_subs.rotate(-1)
                continue
            msg = window.pop()
            if msg.expires is not None and msg.expires < now_ms:
                expired.append(msg)
                continue
            yield sub, msg
            if len(ready_subs) > 1:
                ready_subs.rotate(-1)

    def _passes_over(self, sub: Subscription) -> bool:
        """Should ``sub`` skip the head message because its ack timeout expired there,
        and another subscription with room can take it?"""
        assert self.avoid is not None
        seq = self.window.peek().seq
        avoided = self.avoid.get(seq)
        if avoided is None:
            return False
        if avoided is sub and any(s is not sub and s.active and s.has_room() for s in self.ready_subs):
            return True
        del self.avoid[seq]
        if not self.avoid:
            self.avoid = None
        return False

    def expired(self, msg: StoredMessage, sub: Subscription) -> None:
        """``sub`` let ``msg``'s ack timeout expire: prefer another subscriber for it."""
        if self.avoid is None:
            self.avoid = {}
        self.avoid[msg.seq] = sub
