"""In-process micro-benchmark of the broker's dispatch cost (no sockets, no parsing).

Shows how the cost of one publish grows with the number of subscribers:
* a queue with N auto-ack subscribers (round-robin: should not grow with N);
* a topic among N prefix subscriptions of varied lengths (routing: should grow
  with the number of distinct prefix lengths only, not with N).
Outboxes are counters, so this measures the broker alone.
"""

from __future__ import annotations

import argparse
import time

from stompmq.broker import Broker
from stompmq.protocol import Frame
from stompmq.storage.base import Recovery
from stompmq.storage.memory import MemoryStore


class CountingOutbox:
    """An outbox that always has room and only counts what it is given."""

    def __init__(self) -> None:
        self.frames = 0
        self.queued = 0  # bytes ever written (the engine settles auto-ack deliveries by it)

    def write(self, data: bytes) -> None:
        self.frames += 1
        self.queued += len(data)

    def write_body(self, head: bytes, body: bytes) -> None:
        self.write(head)
        self.queued += len(body) + 1

    def has_room(self) -> bool:
        return True

    def can_take_transient(self) -> bool:
        return True


def new_broker() -> Broker:
    """An engine with nothing recovered, at the current time (it is pure: no event loop needed)."""
    broker = Broker(MemoryStore())
    broker.recover(Recovery(0, [], []), [])
    broker.advance(time.monotonic(), time.time())
    return broker


def queue_publish_cost(subscribers: int, messages: int) -> float:
    broker = new_broker()
    per_session = 100
    sessions = [broker.open_session(str(i), "1.2", CountingOutbox()) for i in range(max(1, subscribers // per_session))]
    for i in range(subscribers):
        broker.handle(sessions[i % len(sessions)], Frame("SUBSCRIBE", {"id": str(i), "destination": "/queue/fan"}))
    producer = broker.open_session("producer", "1.2", CountingOutbox())
    send = Frame("SEND", {"destination": "/queue/fan"}, b"x" * 100)
    start = time.perf_counter()
    for _ in range(messages):
        broker.handle(producer, send)
    return (time.perf_counter() - start) / messages


def topic_publish_cost(subscriptions: int, messages: int) -> float:
    broker = new_broker()
    session = broker.open_session("subs", "1.2", CountingOutbox())
    for i in range(subscriptions):
        # prefixes of 8 different lengths, like "orders.eu.", "metrics.host-17.", ...
        prefix = f"t{i}." + "x" * (i % 8)
        broker.handle(session, Frame("SUBSCRIBE", {"id": str(i), "destination": f"/topic/{prefix}*"}))
    producer = broker.open_session("producer", "1.2", CountingOutbox())
    send = Frame("SEND", {"destination": "/topic/t42.xxxxxxxxxx.leaf"}, b"x" * 100)
    start = time.perf_counter()
    for _ in range(messages):
        broker.handle(producer, send)
    return (time.perf_counter() - start) / messages


def main(args: argparse.Namespace) -> None:
    for n in args.subscribers:
        cost = queue_publish_cost(n, args.messages)
        print(f"queue with {n:>6} subscribers: {cost * 1e6:6.2f} us per publish+delivery ({1 / cost:,.0f}/s)")
    for n in args.subscribers:
        cost = topic_publish_cost(n, args.messages)
        print(f"topic among {n:>6} prefix subscriptions: {cost * 1e6:6.2f} us per publish ({1 / cost:,.0f}/s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--subscribers", type=int, nargs="+", default=[1, 100, 10_000, 100_000])
    main(parser.parse_args())
