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

Two consumer modes change who gets a message (see docs/architecture.md,
"Exclusive consumers, message groups, browsing, temporary queues"):

* *Single active consumer* (``activemq.exclusive:true`` or
  ``x-single-active-consumer:true`` on SUBSCRIBE): while the queue has such
  subscriptions, only the oldest of them receives (``exclusive[0]``); when it
  leaves, what it held unacked is back in the window by seq, so its successor
  gets those first, in order.
* *Message groups* (``JMSXGroupID`` or ``group`` on SEND): a group is sticky, as in ActiveMQ
  and Artemis: its first message picks an owner (``_lighter``) and the group stays with that
  subscription, in every ack mode, until it leaves or the group is closed (a message with
  ``JMSXGroupSeq:-1`` is the group's last: once it and the group's earlier messages are
  settled the name is free; one sent after it reopens the group with its owner).  ``groups``
  maps each owned group to its owner and its count of messages parked or in flight; a group
  whose count is 0 is *idle* (``idle_groups``, least recently used first), and beyond
  ``IDLE_GROUPS_MAX`` of them the oldest is forgotten, as ActiveMQ's cached group map does.
  The head message of a group owned by a subscription without room is
  *parked* for it (``parked``), so other groups flow past it; parked messages
  go out first when the owner has room again, and back to the window, in
  order, when it leaves.  Parking is bounded by the window's capacity: beyond
  it, dispatch waits (head-of-line) rather than hold more messages.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

from ..storage.base import MESSAGE_OVERHEAD, StoredMessage
from ..storage.header_filter import HeaderFilter, Term
from .consumer import AckMode, Consumer
from .pacing import RESUME_AT, Pace
from .stats import QueueStats
from .window import ReadyWindow, SharedReadyWindow


def group_of(msg: StoredMessage) -> str | None:
    """The message group a message belongs to, if any: ``JMSXGroupID`` (ActiveMQ's header), else
    ``group``; an empty value is no group."""
    headers = msg.headers
    if not headers:
        return None
    return headers.get("JMSXGroupID") or headers.get("group") or None


#: ``JMSXGroupSeq`` of a group's last message (ActiveMQ's way to close a group).
CLOSING_SEQ = "-1"
#: Idle groups (owned, nothing parked or in flight) a queue remembers: beyond it the least
#: recently used is forgotten and its next message picks an owner afresh.  A group costs about
#: 200 bytes, so a flood of one-message groups costs a queue at most about 20 MB.
IDLE_GROUPS_MAX = 100_000
#: Sifted messages with an expiry a queue on a durable store remembers (``sifted``), about 70
#: bytes each: beyond it one expires when a subscriber change reads it again (``rethink``).
SIFTED_MAX = 100_000


#: The kind of subscriber a queue serves (session.py's ``Subscription``): a queue hands back
#: what it was given, and asks of it only what ``Consumer`` says (consumer.py).
S = TypeVar("S", bound=Consumer)


class Group(Generic[S]):
    """Who owns a message group, how many of its messages are parked or in flight, and whether
    the last one assigned closed it (``JMSXGroupSeq:-1``)."""

    __slots__ = ("owner", "count", "closed")

    def __init__(self, owner: S) -> None:
        self.owner = owner
        self.count = 0
        self.closed = False


class Queue(Generic[S]):
    __slots__ = ("name", "destination", "window", "nsubs", "ready_subs", "inflight", "avoid", "stats", "pinned",
                 "exclusive", "groups", "idle_groups", "parked", "nparked", "pace", "nacking", "claim_until",
                 "members", "selective", "picky", "aside", "aside_expires", "sifted", "give_back", "passed")

    def __init__(
        self,
        name: str,
        capacity: int | None,
        spilled: bool,
        max_bytes: int | None = None,
        stats: QueueStats | None = None,
        shared: bool = False,
    ) -> None:
        self.name = name
        self.destination = "/queue/" + name
        self.window = (SharedReadyWindow if shared else ReadyWindow)(capacity, spilled, max_bytes)
        self.nsubs = 0  # subscriptions (the round-robin holds those with room)
        self.nacking = 0  # ...of them acknowledging (client, client-individual): pacing.py
        self.ready_subs: deque[S] = deque()
        self.inflight: dict[int, StoredMessage] = {}  # seq -> message delivered, not yet settled
        # seq -> subscription whose ack timeout expired for it: another one gets it if it can
        self.avoid: dict[int, S] | None = None
        self.stats = stats if stats is not None else QueueStats()
        self.pinned = False
        # Made on first use (None until then): an active queue of a million costs no more.
        self.exclusive: list[S] | None = None  # single-active subscriptions, oldest first
        self.groups: dict[str, Group[S]] | None = None  # owned groups, idle ones too
        self.idle_groups: dict[str, None] | None = None  # owned groups with count 0, least recently used first
        self.parked: dict[S, deque[StoredMessage]] | None = None  # per owner, in order
        self.nparked = 0
        self.pace: Pace | None = None  # its producers are held back, or were (pacing.py)
        #: Wall ms until which it claims on demand: subscribers on another broker sharing the store
        #: want it too (dispatch.py).  0: it may keep a full window.
        self.claim_until = 0
        self.members: list[S] = []  # every subscription, oldest first (sift.py asks the busy ones)
        self.selective = 0  # ...of them with a selector
        #: ...with a selector or a consumer priority: while any, dispatch sifts (sift.py)
        self.picky = 0
        #: the memory store's messages no subscriber's selector matched, in order (sift.py)
        self.aside: deque[StoredMessage] | None = None
        self.aside_expires: int | None = None  # ...the earliest expiry among them (the dispatcher drops them)
        #: a durable store's: seqs of the messages with an expiry sifted out to the store, until
        #: ``rethink`` (up to ``SIFTED_MAX``): the window no longer holds them, the expiry sweep
        #: removes them (dispatch.py, ``holds``)
        self.sifted: set[int] | None = None
        #: a shared store's: messages sifted out since the last pump, whose rows it frees (sift.py)
        self.give_back: list[StoredMessage] | None = None
        self.passed: set[int] = set()  # ...and the seqs given back so (dispatch.py), until ``rethink``

    @property
    def size(self) -> int:
        """Ready messages in memory (in the window, parked for a subscriber, or set aside)."""
        return self.window.size + self.nparked + (len(self.aside) if self.aside else 0)

    @property
    def idle(self) -> bool:
        """No subscribers, nothing in flight, no read pending, nothing parked, not pinned: it may
        leave memory."""
        return (not self.nsubs and not self.inflight and not self.window.loading and not self.nparked
                and not self.pinned)

    def wants_page(self) -> bool:
        return (self.nsubs > 0 or self.pinned) and self.window.wants_page()

    # -- subscribers ----------------------------------------------------------------------------
    def add_subscriber(self, sub: S, exclusive: bool = False) -> list[StoredMessage]:
        """``sub`` joins; returns the parked messages to put back into the window when it makes
        the queue single-active (they wait for nobody any more)."""
        self.nsubs += 1
        if sub.ack_mode is not AckMode.AUTO:
            self.nacking += 1
        self.members.append(sub)
        if sub.selector is not None:
            self.selective += 1
        if sub.selector is not None or sub.priority:
            self.picky += 1
        self.make_ready(sub)
        back = self.rethink()  # the messages sifted out so far may be the newcomer's
        if not exclusive:
            return back
        if self.exclusive is None:
            self.exclusive = []
        self.exclusive.append(sub)
        return back + self.take_parked()

    def rethink(self) -> list[StoredMessage]:
        """The subscribers changed: what no selector matched may match now (sift.py).  The window
        reads the store again from its sift floor; the memory store's set-aside messages are
        returned for the caller to put back into the window."""
        self.passed.clear()  # (the newcomer may match them: the others hear of them again)
        self.sifted = None  # (read again, they are the window's)
        floor = self.window.sift_floor
        if floor is not None:
            self.window.sift_floor = None
            self.window.look_back(floor)
        aside = self.aside
        if not aside:
            return []
        self.aside = self.aside_expires = None
        return list(aside)

    def header_filter(self) -> HeaderFilter | None:
        """What a page read may leave out (storage/header_filter.py): the union of the
        subscribers' prefilters while each has one, on a store of one broker (a shared store's
        rows no selector here matches are freed for the others, sift.py); else None."""
        if not self.selective or self.selective < self.nsubs or self.give_back is not None:
            return None
        terms: list[Term] = []
        for sub in self.members:
            prefilter = sub.selector.prefilter if sub.selector is not None else None
            if prefilter is None:
                return None
            terms += prefilter
        return tuple(terms)

    def take_parked(self) -> list[StoredMessage]:
        """Every parked message (their groups' counts drop), for the window or a purge."""
        if not self.parked:
            return []
        taken = [msg for waiting in self.parked.values() for msg in waiting]
        self.parked = None
        self.nparked = 0
        if self.groups:
            for msg in taken:
                self.settled(msg)
        return taken

    def remove_subscriber(self, sub: S) -> list[StoredMessage]:
        """``sub`` left: forget it, free its groups, and return its parked messages (in order)
        for the caller to put back into the window."""
        self.nsubs -= 1
        if sub.ack_mode is not AckMode.AUTO:
            self.nacking -= 1
        self.members.remove(sub)
        back = []
        if sub.selector is not None:
            self.selective -= 1
        if sub.selector is not None or sub.priority:
            self.picky -= 1
        if self.exclusive and sub in self.exclusive:
            self.exclusive.remove(sub)
            back = self.rethink()  # its successor may match what it did not
        elif self.nsubs and sub.selector is not None and not self.selective:
            back = self.rethink()  # the subscribers left take everything
        groups = self.groups
        if groups:
            idle = self.idle_groups
            for name in [name for name, group in groups.items() if group.owner is sub]:
                del groups[name]
                if idle:
                    idle.pop(name, None)
        parked = self.parked.pop(sub, None) if self.parked else None
        if parked is None:
            return back
        self.nparked -= len(parked)
        return back + list(parked)

    def parked_seqs(self) -> set[int]:
        """Seqs of the parked messages (in memory, neither ready in the window nor in flight)."""
        return {msg.seq for waiting in (self.parked or {}).values() for msg in waiting}

    def room(self) -> int:
        """Messages its subscribers can take now: a client-ack one's prefetch room; an auto-ack
        one, bounded by its socket only, what its socket's buffer can still take (at least one),
        at what a message counts in the window (``ReadyWindow.message_bytes``, ``len(body) +
        MESSAGE_OVERHEAD``: more than the frame, so the count errs low)."""
        room = 0
        unit = 0
        for sub in self.ready_subs:
            if sub.active and sub.has_room():  # (a client-ack one has room below its prefetch)
                if sub.ack_mode is not AckMode.AUTO:
                    room += sub.prefetch - len(sub.unacked)
                    continue
                if not unit:
                    unit = self.window.message_bytes() or MESSAGE_OVERHEAD
                room += max(1, sub.spare() // unit)
        return room

    def make_ready(self, sub: S) -> None:
        if not sub.in_ready and sub.active:
            sub.in_ready = True
            self.ready_subs.append(sub)

    def backed_up(self) -> bool:
        """Does the queue still hold its producers back (not yet drained to ``RESUME_AT``, or
        with no subscriber that acknowledges, not yet empty)?  (pacing.py)"""
        if not self.nsubs:
            return False
        window = self.window
        if self.nacking:
            return window.fills(RESUME_AT)
        return bool(window.size or window.tail)

    def check_pace(self) -> None:
        """After a pump: wake the producers of a queue that drained; forget an episode that gave
        up once the queue has drained all in memory again."""
        pace = self.pace
        assert pace is not None
        if self.backed_up() or (pace.off and self.window.spilled):
            return
        self.pace = None
        pace.wake()

    def dispatch(self, now_ms: int, expired: list[StoredMessage]) -> Iterator[tuple[S, StoredMessage]]:
        """Ready messages paired round-robin with subscribers that have room; messages that
        expired before ``now_ms`` go to ``expired`` instead.  A ``picky`` queue is sifted
        instead (``sift.sift``, which the dispatcher calls for it).

        The caller delivers each pair before asking for the next, so a subscriber's room is
        checked after its previous delivery.
        """
        window = self.window
        if self.exclusive:
            single = self.exclusive[0]
            while window.size and single.active and single.has_room():
                msg = window.pop()
                if msg.expires is not None and msg.expires < now_ms:
                    expired.append(msg)
                    continue
                yield single, msg
            return
        if self.parked:
            yield from self.unpark()
        ready_subs = self.ready_subs
        while window.size:
            sub = self.front()
            if sub is None:
                return
            if self.avoid is not None and self._passes_over(sub):
                ready_subs.rotate(-1)
                continue
            head = window.peek()
            if head.expires is not None and head.expires < now_ms:
                expired.append(window.pop())
                continue
            name = group_of(head)
            if name is not None:
                groups = self.groups
                if groups is None:
                    groups = self.groups = {}
                group = groups.get(name)
                if group is None:
                    owner = self._lighter(sub)
                    group = groups[name] = Group(owner)
                    if owner is not sub:
                        self._assign(name, group, head)
                        yield owner, window.pop()
                        continue
                elif group.owner is not sub:
                    owner = group.owner
                    if not (self.parked and owner in self.parked) and owner.has_room():
                        self._assign(name, group, head)
                        yield owner, window.pop()
                    elif not self._park(owner, name, group):
                        return  # parking is full: wait for owners to take theirs
                    continue
                self._assign(name, group, head)
            yield sub, window.pop()
            if len(ready_subs) > 1:
                ready_subs.rotate(-1)

    def taker(self, msg: StoredMessage) -> S | None:
        """Who gets ``msg``, just sent, at once and without it entering the window: the
        subscription ``dispatch`` would pair it with, when the window is empty and nothing
        (a single active consumer, parking, an ack-timeout detour, pinning, a group, an expiry)
        could make it another one.  None: the message goes through the window as usual.

        A queue whose consumers keep up sends every message this way: pushing it into the
        window and popping it out again was about a seventh of its cost."""
        window = self.window
        headers = msg.headers  # a group header, even an empty one (no group): the window decides
        if (window.size or window.spilled or self.exclusive or self.parked or self.avoid is not None
                or self.pinned or self.picky or msg.expires is not None
                or headers and ("JMSXGroupID" in headers or "group" in headers)):
            return None
        sub = self.front()
        if sub is not None and len(self.ready_subs) > 1:
            self.ready_subs.rotate(-1)
        return sub

    def front(self) -> S | None:
        """The next subscription of the round-robin with room (those without room leave it)."""
        ready_subs = self.ready_subs
        while ready_subs:
            sub = ready_subs[0]
            if sub.active and sub.has_room():
                return sub
            ready_subs.popleft()
            sub.in_ready = False
        return None

    def _lighter(self, sub: S) -> S:
        """Who gets a group that has no owner: ``sub`` (first in the round-robin) or the next one,
        whichever has fewer deliveries unacked (two random choices, in effect).  Owners keep
        their groups while they have messages in flight, so without this groups drift to the
        busiest subscriber; comparing two costs O(1) and evens them out."""
        ready_subs = self.ready_subs
        if len(ready_subs) > 1:
            other = ready_subs[1]
            if len(other.unacked) < len(sub.unacked) and other.active and other.has_room():
                return other
        return sub

    def _assign(self, name: str, group: Group[S], msg: StoredMessage) -> None:
        """``msg`` of group ``name`` goes to (or is parked for) the group's owner: one more
        unsettled, no longer idle; ``JMSXGroupSeq:-1`` closes the group, any other reopens it."""
        if not group.count and self.idle_groups:
            self.idle_groups.pop(name, None)
        group.count += 1
        group.closed = msg.headers.get("JMSXGroupSeq") == CLOSING_SEQ

    def own(self, name: str, owner: S, msg: StoredMessage) -> None:
        """``msg`` of group ``name`` goes to (or was parked for) ``owner``, which owns the group
        from now on if nobody did (sift.py: the first subscriber that matched it)."""
        groups = self.groups
        if groups is None:
            groups = self.groups = {}
        group = groups.get(name)
        if group is None:
            group = groups[name] = Group(owner)
        if group.owner is owner:
            self._assign(name, group, msg)

    def _park(self, owner: S, name: str, group: Group[S]) -> bool:
        """Set the head message aside for its group's owner, behind what it already has.
        False: parking is full (the window's capacity), nothing moved."""
        if not self.park(owner):
            return False
        self._assign(name, group, self.parked[owner][-1])  # type: ignore[index]
        return True

    def park(self, owner: S) -> bool:
        """Set the head message aside for ``owner`` (its group's owner; sift.py: a busy subscriber
        its selector matched), behind what it already has.  False: parking is full (the window's
        capacity), nothing moved."""
        capacity = self.window.capacity
        if capacity is not None and self.nparked >= capacity:
            return False
        if self.parked is None:
            self.parked = {}
        parked = self.parked.get(owner)
        if parked is None:
            parked = self.parked[owner] = deque()
        parked.append(self.window.pop())
        self.nparked += 1
        return True

    def sift_out(self, msg: StoredMessage) -> None:
        """No subscriber's selector matches ``msg``, taken from the window: it waits for one that
        may (sift.py), in the store (the window's sift floor; a shared store frees its row) or, on
        the memory store, in ``aside``.  Either way it still expires on time: the store's expiry
        sweep is told it is not in memory (``sifted``), the dispatcher sweeps ``aside``."""
        expires = msg.expires
        if self.window.capacity is None:
            if self.aside is None:
                self.aside = deque()
            self.aside.append(msg)
            if expires is not None and (self.aside_expires is None or expires < self.aside_expires):
                self.aside_expires = expires
            return
        self.window.sift_out(msg)
        if expires is not None:
            if self.sifted is None:
                self.sifted = set()
            if len(self.sifted) < SIFTED_MAX:
                self.sifted.add(msg.seq)
        if self.give_back is not None:
            self.give_back.append(msg)

    def settled(self, msg: StoredMessage) -> None:
        """A delivery of a grouped message settled (or a parked one went back to the window):
        once none of its group is left, the group is idle, still its owner's, or gone if closed."""
        name = group_of(msg)
        groups = self.groups
        if name is not None and groups is not None:
            group = groups.get(name)
            if group is not None:
                group.count -= 1
                if group.count > 0:
                    return
                group.count = 0
                if group.closed:
                    del groups[name]
                    return
                idle = self.idle_groups
                if idle is None:
                    idle = self.idle_groups = {}
                idle[name] = None
                if len(idle) > IDLE_GROUPS_MAX:
                    oldest = next(iter(idle))
                    del idle[oldest]
                    del groups[oldest]

    def unpark(self) -> Iterator[tuple[S, StoredMessage]]:
        """Parked messages to their owners while they have room, oldest first."""
        parked = self.parked
        assert parked is not None
        for owner in list(parked):
            waiting = parked[owner]
            while waiting and owner.active and owner.has_room():
                self.nparked -= 1
                yield owner, waiting.popleft()
            if not waiting:
                del parked[owner]

    def _passes_over(self, sub: S) -> bool:
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

    def expired(self, msg: StoredMessage, sub: S) -> None:
        """``sub`` let ``msg``'s ack timeout expire: prefer another subscriber for it."""
        if self.avoid is None:
            self.avoid = {}
        self.avoid[msg.seq] = sub
