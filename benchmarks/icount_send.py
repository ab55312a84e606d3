"""N queue SENDs through the engine, in process, for instruction counts of the hot path.

One subscriber on the memory store; each SEND is handled, delivered into a counting outbox and
settled, as a connection would.  MODE: ``plain``, ``ttl`` (``ttl:60000`` on every SEND) or
``extra`` (a header of the same size the broker ignores), all auto-ack (settled by
``Broker.written``); ``ack``: the subscriber is ``client-individual`` and ACKs every message,
the ACKs of 1,000 messages parsed from one buffer and handed over as a connection does
(``Broker.handle_frames``).  Run it twice under
callgrind and take the difference, so start-up cancels out:

  for n in 2000 7000; do
    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python -m benchmarks.icount_send $n ttl
  done   # instructions per message = (Collected[7000] - Collected[2000]) / 5000

``ack`` minus ``plain`` is the cost of a client acknowledgement (the ACK's parse and engine
work, and what a client-ack delivery tracks that an auto-ack one does not).
"""

from __future__ import annotations

import sys

from stompmq.broker import Broker
from stompmq.protocol import Frame, FrameParser
from stompmq.storage.memory import MemoryStore

ACKS_PER_READ = 1000


class CountingOutbox:
    queued = 0

    def write(self, data: bytes) -> None:
        self.queued += len(data)

    def write_body(self, head: bytes, body: bytes) -> None:
        self.queued += len(head) + len(body) + 1

    def has_room(self) -> bool:
        return True

    def can_take_transient(self) -> bool:
        return True


def main() -> None:
    n, mode = int(sys.argv[1]), sys.argv[2]
    broker = Broker(MemoryStore())
    broker.advance(0.0, 1.7e9)
    outbox = CountingOutbox()
    subscriber = broker.open_session("s", "1.2", outbox)
    subscribe = {"id": "1", "destination": "/queue/q"}
    if mode == "ack":
        subscribe.update({"ack": "client-individual", "prefetch": str(ACKS_PER_READ)})
    broker.handle(subscriber, Frame("SUBSCRIBE", subscribe, b""))
    producer = broker.open_session("p", "1.2", CountingOutbox())
    headers = {"destination": "/queue/q", "colour": "blue"}
    if mode == "ttl":
        headers["ttl"] = "60000"
    elif mode == "extra":
        headers["xyz"] = "60000"
    frame = Frame("SEND", headers, b"x" * 100)
    if mode != "ack":
        for _ in range(n):
            broker.handle(producer, frame)
            broker.written(subscriber, outbox.queued)
        return
    parser = FrameParser()
    for first in range(1, n + 1, ACKS_PER_READ):
        last = min(first + ACKS_PER_READ, n + 1)
        for _ in range(first, last):
            broker.handle(producer, frame)
        acks = parser.feed(b"".join(b"ACK\nid:%d\n\n\0" % i for i in range(first, last)))
        broker.handle_frames(subscriber, acks)


if __name__ == "__main__":
    main()
