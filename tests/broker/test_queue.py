"""Queue dispatch: round-robin over subscribers with room, prefetch, and ack-timeout avoidance."""

from __future__ import annotations

from stompmq.broker.queue import Queue
from stompmq.broker.session import AckMode, Session, Subscription
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
