"""The restart contract checker: what clients saw of one broker across restarts, and the promises
that history must keep.

``History`` is appended to by every client thread of the workload (tests/support/restart_workload.py)
and by the thread that stops and starts the broker; every event carries the monotonic time it
was seen at, so the checks below reason only from what a client can know:

* a message's broker-side moments lie between what the client did and what it was told (a SEND's
  processing between the SEND and its RECEIPT, a dispatch after the frame that made room for it);
* a subscription ends at the first of its client's UNSUBSCRIBE/DISCONNECT/close and the next stop
  of the broker after it began.

Each check returns ``Violation``s naming the messages concerned, so ``History.excerpt`` can print
just their story.  The checks are pure functions of the events: tests/test_restart_history.py
feeds them made-up histories, one that breaks each promise and one that keeps it.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

#: Seconds of disagreement allowed between the broker's wall clock and the clients' monotonic one.
SLACK = 0.05
#: Seconds after a delivery within which a ``kill -9`` may lose its "delivered" mark (two flush
#: intervals of 50 ms, and time for a loaded machine's commit).
WRITE_BEHIND = 0.5
#: Seconds a due delayed message may take to reach a subscriber that is there and has room.
LATE = 5.0


@dataclass(frozen=True, slots=True)
class Event:
    """One thing a client did or saw (or the broker's stop, exit and start)."""

    index: int
    t: float  # seconds since the history began
    kind: str
    sub: str = ""  # the subscription (or producer) it is about
    body: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        info = " ".join(f"{k}={v}" for k, v in self.info.items())
        return f"#{self.index} {self.t:8.3f} {self.kind:<11} {self.sub:<14} {self.body:<12} {info}"


@dataclass(frozen=True, slots=True)
class Violation:
    """A promise broken: which one, how, and the messages (or subscriptions) it is about."""

    check: str
    what: str
    bodies: frozenset[str] = frozenset()
    subs: frozenset[str] = frozenset()


class History:
    """Every event in the order it was recorded (under a lock: clients run in threads)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.events: list[Event] = []
        self.lock = threading.Lock()

    def add(self, kind: str, sub: str = "", body: str = "", **info: Any) -> Event:
        with self.lock:
            event = Event(len(self.events), time.monotonic() - self.start, kind, sub, body, info)
            self.events.append(event)
            return event

    def excerpt(self, violations: Iterable[Violation], per_violation: int = 4) -> str:
        """The events of (a few of) the messages and subscriptions concerned, and every stop and start."""
        bodies: set[str] = set()
        subs: set[str] = set()
        for v in violations:
            bodies.update(sorted(v.bodies)[:per_violation])
            subs.update(sorted(v.subs)[:per_violation])
        shown = [e for e in self.events if e.body in bodies or (e.sub in subs and not e.body)
                 or e.kind in BROKER_EVENTS or (e.kind == "commit-sent" and bodies & set(e.info.get("bodies", ())))]
        return "\n".join(str(e) for e in shown)


#: Events of the broker process rather than of a client.
BROKER_EVENTS = frozenset({"stop", "stopped", "ready"})
#: Events that end a run's promises: what a client cannot have caused.
HARNESS_EVENTS = frozenset({"broker-gone", "client-crash", "consumer-error", "producer-error", "drain-timeout"})
#: Ack modes whose deliveries wait for an ACK.
CLIENT_MODES = frozenset({"client", "client-individual"})


class Facts:
    """Indexes over a history that the checks share (built once, read-only)."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.sends: dict[str, Event] = {}
        self.receipted: dict[str, float] = {}
        self.refused: set[str] = set()
        self.subscribes: dict[str, Event] = {}
        self.subscribed: dict[str, float] = {}
        self.closed: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.deliveries: dict[str, list[Event]] = defaultdict(list)
        self.acked: dict[str, float] = {}
        self.acks_sent: dict[str, list[float]] = defaultdict(list)  # per subscription, in order
        self.first_ack_sent: dict[str, float] = {}
        self.last_ack_sent: dict[str, float] = {}
        self.commits: list[Event] = []
        self.stops: list[float] = []
        self.stopped: list[Event] = []
        for e in events:
            if e.kind == "send":
                self.sends[e.body] = e
            elif e.kind == "receipted":
                self.receipted.setdefault(e.body, e.t)
            elif e.kind == "refused":
                self.refused.add(e.body)
            elif e.kind == "subscribe":
                self.subscribes[e.sub] = e
            elif e.kind == "subscribed":
                self.subscribed.setdefault(e.sub, e.t)
            elif e.kind == "closed":
                self.closed.setdefault(e.sub, e.t)
            elif e.kind == "gone":
                self.gone.setdefault(e.sub, e.t)
            elif e.kind == "delivered":
                self.deliveries[e.body].append(e)
            elif e.kind == "ack-sent":
                self.acks_sent[e.sub].append(e.t)
                self.first_ack_sent.setdefault(e.body, e.t)
                self.last_ack_sent[e.body] = e.t
            elif e.kind == "acked":
                self.acked.setdefault(e.body, e.t)
            elif e.kind == "commit-sent":
                self.commits.append(e)
            elif e.kind == "stop":
                self.stops.append(e.t)
            elif e.kind == "stopped":
                self.stopped.append(e)

    def label(self, body: str) -> str:
        """The kind of message ``body`` is (the workload's name for its destination)."""
        send = self.sends.get(body)
        return send.info.get("label", "") if send else ""

    def mode(self, sub: str) -> str:
        return self.subscribes[sub].info.get("ack", "auto")

    def next_stop(self, after: float) -> float:
        return next((t for t in self.stops if t >= after), math.inf)

    def ends(self, sub: str) -> float:
        """When the broker may have last served ``sub``: its close, or the next stop after it began."""
        return min(self.closed.get(sub, math.inf), self.next_stop(self.subscribes[sub].t))

    def gone_by(self, sub: str) -> float:
        """When the broker had surely let go of ``sub``: its DISCONNECT's RECEIPT, or the next stop."""
        return min(self.gone.get(sub, math.inf), self.next_stop(self.subscribes[sub].t))

    def room_from(self, delivery: Event) -> float:
        """The earliest the broker can have dispatched ``delivery``: its SUBSCRIBE, or for a
        client-ack subscription of prefetch 1 the last ACK it sent before this delivery."""
        start = self.subscribes[delivery.sub]
        if start.info.get("prefetch") == 1 and self.mode(delivery.sub) in CLIENT_MODES:
            before = [t for t in self.acks_sent[delivery.sub] if t < delivery.t]
            if before:
                return before[-1]
        return start.t

    def settled(self, body: str) -> bool:
        """Consumed: its ACK was receipted, an auto-ack subscription received it, or an ACK was sent
        after its last delivery (one whose RECEIPT a lost connection or a stop never brought)."""
        deliveries = self.deliveries.get(body, [])
        return (body in self.acked or any(self.mode(d.sub) not in CLIENT_MODES for d in deliveries)
                or bool(deliveries) and self.last_ack_sent.get(body, -1.0) > deliveries[-1].t)


Check = Callable[[Facts], list[Violation]]


def lost(f: Facts) -> list[Violation]:
    """Every receipted message is consumed (streams: read) by the end of the drain, but for those
    with a TTL (they may expire first)."""
    missing = {b for b in f.receipted if not f.settled(b) and "ttl" not in f.sends[b].info}
    return [Violation("lost", f"{len(missing)} receipted messages never consumed", frozenset(missing))] if missing else []


def refused_delivered(f: Facts) -> list[Violation]:
    """A SEND answered ERROR stored nothing."""
    bad = {b for b in f.refused if f.deliveries.get(b)}
    return [Violation("refused-delivered", f"{len(bad)} messages answered ERROR were delivered", frozenset(bad))] if bad else []


def after_ack(f: Facts) -> list[Violation]:
    """No delivery after the message's ACK (or the COMMIT holding it) was receipted."""
    bad = {b for b, t in f.acked.items() if any(d.t > t for d in f.deliveries[b])}
    return [Violation("after-ack", f"{len(bad)} messages delivered after their ACK was receipted", frozenset(bad))] if bad else []


def unmarked_redeliveries(f: Facts) -> list[Violation]:
    """Every delivery of a queued message but one carries ``redelivered:true`` (whatever order
    the clients' threads wrote them down in).  Two unmarked ones are allowed only across a
    ``kill -9`` that came within ``WRITE_BEHIND`` of the earlier: a delivery's mark is written
    behind, like a SEND without receipt.  The window opens ``SLACK`` before the earlier
    delivery: a client's thread may write down a MESSAGE the broker sent just before the kill
    a moment after it (seen: 1 ms)."""
    bad = set()
    kills = [e.t for e in f.events if e.kind == "stop" and e.info.get("how") != "term"]
    for b, ds in f.deliveries.items():
        if f.label(b) == "stream":
            continue
        unmarked = sorted(d.t for d in ds if d.info.get("redelivered") != "true")
        for earlier, later in zip(unmarked, unmarked[1:]):
            if not any(earlier - SLACK <= k <= min(later, earlier + WRITE_BEHIND) for k in kills):
                bad.add(b)
    return [Violation("unmarked", f"{len(bad)} messages delivered again without redelivered:true", frozenset(bad))] if bad else []


def early_delayed(f: Facts) -> list[Violation]:
    """A delayed message reaches nobody before its SEND plus its delay."""
    bad = set()
    for b, ds in f.deliveries.items():
        send = f.sends.get(b)
        if send is not None and "delay" in send.info and ds and ds[0].t < send.t + send.info["delay"] / 1000 - SLACK:
            bad.add(b)
    return [Violation("early", f"{len(bad)} delayed messages delivered before they were due", frozenset(bad))] if bad else []


def late_delayed(f: Facts) -> list[Violation]:
    """A due delayed message reaches an auto-ack subscriber of its queue that stays ``LATE`` seconds."""
    bad, subs = set(), set()
    for b, t in f.receipted.items():
        send = f.sends[b]
        if "delay" not in send.info:
            continue
        due = t + send.info["delay"] / 1000
        first = f.deliveries[b][0].t if f.deliveries.get(b) else math.inf
        for sub, start in f.subscribes.items():
            if start.info["dest"] != send.info["dest"] or f.mode(sub) in CLIENT_MODES or sub not in f.subscribed:
                continue
            since = max(due, f.subscribed[sub])
            if f.ends(sub) > since + LATE and first > since + LATE:
                bad.add(b)
                subs.add(sub)
    return [Violation("late", f"{len(bad)} due delayed messages not delivered to a waiting subscriber within {LATE} s",
                      frozenset(bad), frozenset(subs))] if bad else []


def expired_delivered(f: Facts) -> list[Violation]:
    """No delivery dispatched after the message's TTL ran out (its RECEIPT plus its ttl bounds it)."""
    bad = set()
    for b, ds in f.deliveries.items():
        send = f.sends.get(b)
        if send is None or "ttl" not in send.info or b not in f.receipted:
            continue
        expiry = f.receipted[b] + send.info["ttl"] / 1000
        if any(f.room_from(d) > expiry + SLACK for d in ds):
            bad.add(b)
    return [Violation("expired", f"{len(bad)} messages delivered after their TTL ran out", frozenset(bad))] if bad else []


def priority_order(f: Facts) -> list[Violation]:
    """A prefetch-1 client-ack subscriber that ACKs and gets ``m`` while a receipted message of a
    higher priority, never delivered yet, was in the queue before that ACK: out of order.  Only
    while every other subscription of the queue is surely gone (one may hold what it never read)."""
    bad, subs = set(), set()
    prio = [(f.receipted[b], f.sends[b].info["priority"], f.sends[b].info["dest"], b)
            for b in f.receipted if "priority" in f.sends[b].info]
    first_delivery = {b: ds[0].t for b, ds in f.deliveries.items() if ds}
    for b, ds in f.deliveries.items():
        send = f.sends.get(b)
        if send is None or "priority" not in send.info:
            continue
        for d in ds:
            start = f.subscribes[d.sub]
            if start.info.get("prefetch") != 1 or f.mode(d.sub) not in CLIENT_MODES:
                continue
            room = f.room_from(d)
            if room == start.t:
                continue  # the first of a subscription: older deliveries may still be on their way back
            dest = send.info["dest"]
            if any(f.gone_by(s) > room for s, o in f.subscribes.items() if s != d.sub and o.info["dest"] == dest and o.t < room):
                continue
            ahead = [o for t, p, q, o in prio
                     if q == dest and p > send.info["priority"] and t < room and first_delivery.get(o, math.inf) > d.t]
            if ahead:
                bad.update([b, *ahead[:3]])
                subs.add(d.sub)
    return [Violation("priority", f"{len(subs)} deliveries overtook a ready message of higher priority",
                      frozenset(bad), frozenset(subs))] if bad else []


def split_groups(f: Facts) -> list[Violation]:
    """A message group stays with the subscription that got it until that subscription ends."""
    bad, subs = set(), set()
    by_group: dict[str, list[Event]] = defaultdict(list)
    for ds in f.deliveries.values():
        for d in ds:
            group = f.sends[d.body].info.get("group") if d.body in f.sends else None
            if group is not None and d.t <= f.ends(d.sub):  # read after leaving: dispatched when, unknown
                by_group[group].append(d)
    for deliveries in by_group.values():
        deliveries.sort(key=lambda d: d.index)
        for prev, d in zip(deliveries, deliveries[1:]):
            if d.sub != prev.sub and f.ends(prev.sub) > d.t:
                bad.update([prev.body, d.body])
                subs.update([prev.sub, d.sub])
    return [Violation("group", f"{len(bad)} grouped messages went to a second subscription while the first was on",
                      frozenset(bad), frozenset(subs))] if bad else []


def exclusive_shared(f: Facts) -> list[Violation]:
    """Only the oldest exclusive subscription of a queue receives while it is there."""
    bad, subs = set(), set()
    for b, ds in f.deliveries.items():
        for d in ds:
            start = f.subscribes[d.sub]
            if not start.info.get("exclusive") or d.t > f.ends(d.sub):
                continue
            for other, o in f.subscribes.items():
                if (other != d.sub and o.info.get("exclusive") and o.info["dest"] == start.info["dest"]
                        and f.subscribed.get(other, math.inf) < start.t and f.ends(other) > d.t):
                    bad.add(b)
                    subs.update([other, d.sub])
    return [Violation("exclusive", f"{len(bad)} messages reached an exclusive subscription behind an older one",
                      frozenset(bad), frozenset(subs))] if bad else []


def partial_transactions(f: Facts) -> list[Violation]:
    """A transaction is all or nothing: its SENDs all delivered or none; its ACKs, when the COMMIT's
    answer was lost, either all took (none delivered again) or none did (all delivered again)."""
    bad = set()
    sent_in: dict[str, set[str]] = defaultdict(set)
    for b, send in f.sends.items():
        if send.info.get("tx"):
            sent_in[send.info["tx"]].add(b)
    for bodies in sent_in.values():
        delivered = {b for b in bodies if f.deliveries.get(b)}
        if delivered and delivered != bodies:
            bad |= bodies
    for commit in f.commits:
        bodies = set(commit.info["bodies"])
        if all(b in f.acked for b in bodies):
            continue
        again = {b for b in bodies if any(d.t > commit.t for d in f.deliveries[b])}
        if again and again != bodies:
            bad |= bodies
    return [Violation("transaction", f"{len(bad)} messages of transactions that took in part",
                      frozenset(bad))] if bad else []


def over_bound(f: Facts) -> list[Violation]:
    """A bounded queue (``max-length`` in the SEND's info) never holds more: at each RECEIPT,
    count the receipted messages sent before it that no ACK had been sent for and no auto-ack
    subscription ever got."""
    bad = set()
    bounded = [b for b in f.receipted if "max_length" in f.sends[b].info]
    for b in bounded:
        send, answered = f.sends[b], f.receipted[b]
        held = {o for o in bounded if f.receipted[o] < send.t and f.first_ack_sent.get(o, math.inf) > answered
                and not any(f.mode(d.sub) not in CLIENT_MODES for d in f.deliveries[o])}
        if len(held) + 1 > send.info["max_length"]:
            bad.add(b)
    return [Violation("bound", f"{len(bad)} SENDs receipted into a full bounded queue", frozenset(bad))] if bad else []


def stream_offsets(f: Facts) -> list[Violation]:
    """A stream entry keeps its offset: every read of a receipted entry sees the same one."""
    bad = {b for b, ds in f.deliveries.items()
           if b in f.receipted and f.label(b) == "stream" and len({d.info.get("offset") for d in ds}) > 1}
    return [Violation("offset", f"{len(bad)} stream entries read at two offsets", frozenset(bad))] if bad else []


def clean_stops(f: Facts) -> list[Violation]:
    """SIGTERM commits everything and exits 0."""
    bad = [e for e in f.stopped if e.info.get("how") == "term" and e.info.get("rc") != 0]
    return [Violation("exit", f"{len(bad)} SIGTERMs ended with an exit code other than 0: "
                      f"{[e.info.get('rc') for e in bad]}")] if bad else []


def harness(f: Facts) -> list[Violation]:
    """The broker still runs at the end and drained in time; no client got an ERROR it did not
    ask for or died of something unexpected."""
    bad = [e for e in f.events if e.kind in HARNESS_EVENTS]
    return [Violation("harness", "; ".join(f"{e.kind} {e.info}" for e in bad[:3]))] if bad else []


CHECKS: tuple[Check, ...] = (lost, refused_delivered, after_ack, unmarked_redeliveries, early_delayed, late_delayed,
                             expired_delivered, priority_order, split_groups, exclusive_shared, partial_transactions,
                             over_bound, stream_offsets, clean_stops, harness)


def violations(events: list[Event], checks: Iterable[Check] = CHECKS) -> list[Violation]:
    """Every broken promise of the history, check by check."""
    facts = Facts(events)
    return [v for check in checks for v in check(facts)]
