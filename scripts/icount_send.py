#!/usr/bin/env python3
"""N queue SENDs through the engine, in process, for instruction counts of the hot path.

One subscriber (auto ack) on the memory store; each SEND is handled, delivered into a counting
outbox and settled (``Broker.written``), as a connection would.  MODE: ``plain``, ``ttl``
(``ttl:60000`` on every SEND) or ``extra`` (a header of the same size the broker ignores).
Run it twice under callgrind and take the difference, so start-up cancels out:

  for n in 2000 7000; do
    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python scripts/icount_send.py $n ttl
  done   # instructions per message = (Collected[7000] - Collected[2000]) / 5000
"""

from __future__ import annotations

import sys

from stompmq.broker import Broker
from stompmq.protocol import Frame
from stompmq.storage.memory import MemoryStore


class CountingOutbox:
    queued = 0

    def write(self, data: bytes) -> None:
        self.queued += len(data)

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
    broker.handle(subscriber, Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/q"}, b""))
    producer = broker.open_session("p", "1.2", CountingOutbox())
    headers = {"destination": "/queue/q", "colour": "blue"}
    if mode == "ttl":
        headers["ttl"] = "60000"
    elif mode == "extra":
        headers["xyz"] = "60000"
    frame = Frame("SEND", headers, b"x" * 100)
    for _ in range(n):
        broker.handle(producer, frame)
        broker.written(subscriber, outbox.queued)


if __name__ == "__main__":
    main()
