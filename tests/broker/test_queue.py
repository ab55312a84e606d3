"""Queue dispatch: round-robin over subscribers with room, prefetch, and ack-timeout avoidance."""

from __future__ import annotations

from collections import deque

from stompmq.broker.consumer import AckMode
from stompmq.broker.queue import Queue
from stompmq.broker.session import Session, Subscription
from stompmq.storage.base import StoredMessage

from .fakes import FakeOutbox


def sub(name: str, queue: Queue, prefetch: int = 100, mode: AckMode = AckMode.CLIENT_INDIVIDUAL) -> Subscription:
    s = Subscription("1", Session(name, "1.2", FakeOutbox()), queue.destination, mode, prefetch, None, queue)
    queue.add_subscriber(s)
    return s


def fill(queue: Queue, n: int) -> None:
    for seq in range(1, n + 1):
        queue.window.push(StoredMessage(seq, queue.name, 4, {}, b"", 0))


def deliver_all(queue: Queue) -> list[tuple[str, int]]:
    out = []
    for s, msg in queue.dispatch(0, []):
        s.unacked = {**s.unacked, str(msg.seq): msg} if s.ack_mode is not AckMode.AUTO else s.unacked
        out.append((s.session.id, msg.seq))
    return out


def test_round_robin_over_subscribers() -> None:
    queue = Queue("q", None, spilled=False)
    sub("a", queue)
    sub("b", queue)
    fill(queue, 4)
    assert deliver_all(queue) == [("a", 1), ("b", 2), ("a", 3), ("b", 4)]


def test_prefetch_bounds_each_subscriber() -> None:
    queue = Queue("q", None, spilled=False)
    sub("a", queue, prefetch=1)
    sub("b", queue, prefetch=2)
    fill(queue, 5)
    assert deliver_all(queue) == [("a", 1), ("b", 2), ("b", 3)]
    assert queue.size == 2
    assert len(queue.ready_subs) == 0  # both dropped lazily once full


def test_a_subscriber_without_room_in_its_socket_is_skipped() -> None:
    queue = Queue("q", None, spilled=False)
    a = sub("a", queue, mode=AckMode.AUTO)
    sub("b", queue, mode=AckMode.AUTO)
    a.session.outbox.room = False  # type: ignore[attr-defined]
    fill(queue, 2)
    assert deliver_all(queue) == [("b", 1), ("b", 2)]


def test_an_expired_message_prefers_another_subscriber() -> None:
    queue = Queue("q", None, spilled=False)
    a = sub("a", queue)
    sub("b", queue)
    fill(queue, 1)
    msg = queue.window.peek()
    queue.expired(msg, a)
    assert deliver_all(queue) == [("b", 1)]


def test_an_expired_message_goes_back_to_its_only_subscriber() -> None:
    queue = Queue("q", None, spilled=False)
    a = sub("a", queue)
    fill(queue, 1)
    queue.expired(queue.window.peek(), a)
    assert deliver_all(queue) == [("a", 1)]
    assert queue.avoid is None


def test_idle_means_no_subscriber_nothing_in_flight_no_read() -> None:
    queue = Queue("q", 10, spilled=True)
    assert queue.idle
    s = sub("a", queue)
    assert not queue.idle and queue.wants_page()
    queue.window.start_page()
    queue.nsubs -= 1
    s.active = False
    assert not queue.idle  # a page read is in flight


def message(seq: int, headers: dict[str, str] | None = None, expires: int | None = None) -> StoredMessage:
    return StoredMessage(seq, "q", 4, headers or {}, b"", 0, expires=expires)


def test_a_fresh_message_goes_to_whom_dispatch_would_give_it() -> None:
    """``taker`` (no window) and push + ``dispatch`` pair the same messages with the same
    subscribers, round-robin, skipping one without room."""
    picks: dict[bool, list[tuple[str, int]]] = {}
    for direct in (True, False):
        queue = Queue("q", None, spilled=False)
        a = sub("a", queue, prefetch=2)
        sub("b", queue, prefetch=3)
        sub("c", queue, mode=AckMode.AUTO)
        out = picks[direct] = []
        for seq in range(1, 9):
            if seq == 5:
                a.session.outbox.room = False  # type: ignore[attr-defined]
            msg = message(seq)
            if direct:
                taker = queue.taker(msg)
                assert taker is not None
                pairs = [(taker, msg)]
            else:
                queue.window.push(msg)
                pairs = list(queue.dispatch(0, []))
            for s, m in pairs:
                if s.ack_mode is not AckMode.AUTO:
                    s.unacked = {**s.unacked, str(m.seq): m}
                out.append((s.session.id, m.seq))
    assert picks[True] == picks[False]
    assert picks[True][:4] == [("a", 1), ("b", 2), ("c", 3), ("a", 4)]


def test_nobody_takes_a_fresh_message_without_room() -> None:
    queue = Queue("q", None, spilled=False)
    assert queue.taker(message(1)) is None  # no subscriber
    s = sub("a", queue, prefetch=1)
    s.unacked = {"1": message(1)}
    assert queue.taker(message(2)) is None
    assert not queue.ready_subs  # dropped from the round-robin, as dispatch drops it


def test_a_fresh_message_goes_through_the_window_when_anything_could_change_its_taker() -> None:
    """Each case ``dispatch`` treats specially keeps the message on the window's path."""

    def fresh(**kwargs: object) -> Queue:
        queue = Queue("q", 10, spilled=bool(kwargs.get("spilled")))
        sub("a", queue)
        return queue

    queue = fresh()
    assert queue.taker(message(1)) is not None  # the plain case, for contrast
    queue.window.push(message(1))
    assert queue.taker(message(2)) is None  # an older message is ready: it goes first
    assert fresh(spilled=True).taker(message(1)) is None  # older ones wait in the store
    queue = fresh()
    queue.exclusive = [queue.ready_subs[0]]
    assert queue.taker(message(1)) is None
    queue = fresh()
    queue.parked = {queue.ready_subs[0]: deque([message(0)])}
    assert queue.taker(message(1)) is None
    queue = fresh()
    queue.expired(message(1), queue.ready_subs[0])
    assert queue.taker(message(1)) is None
    queue = fresh()
    queue.pinned = True
    assert queue.taker(message(1)) is None
    assert fresh().taker(message(1, expires=5)) is None
    assert fresh().taker(message(1, {"JMSXGroupID": "g"})) is None
    assert fresh().taker(message(1, {"group": "g"})) is None
    # Any group header, even an empty one (no group: group_of), leaves it to the window.
    assert fresh().taker(message(1, {"group": ""})) is None
