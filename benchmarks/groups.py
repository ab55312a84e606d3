"""In-process micro-benchmark: message groups against a plain queue in the engine alone.

Four client-individual subscribers (prefetch 1000) on one queue of the memory store; the
producer sends --messages messages in rounds of 1000, cycling ``JMSXGroupID`` (or --header)
over --groups groups (0: no header, a plain queue), and every delivery is ACKed before the next round.  No
sockets, no parsing of the sends: what differs between the two runs is the engine's dispatch.

Wall-clock time on a shared machine is noisy; for a steady figure count instructions with
callgrind at two message counts and take the difference per message (startup cancels out):

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m benchmarks.groups --messages 10000
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m benchmarks.groups --messages 30000

(the "Collected" line of each; (I30000 - I10000) / 20000 = instructions per message).
"""

from __future__ import annotations

import argparse
import time

from stompmq.broker import Broker
from stompmq.protocol import Frame, FrameParser
from stompmq.storage.memory import MemoryStore

ROUND = 1000
SUBSCRIBERS = 4


class AckingOutbox:
    """Keeps the ack ids of the MESSAGEs written to it (parsed back: the engine's real bytes)."""

    def __init__(self) -> None:
        self.parser = FrameParser()
        self.ack_ids: list[str] = []
        self.queued = 0

    def write(self, data: bytes) -> None:
        self.queued += len(data)
        self.ack_ids.extend(f.headers["ack"] for f in self.parser.feed(data) if f.command == "MESSAGE")

    def write_body(self, head: bytes, body: bytes) -> None:
        self.write(b"%s%s\0" % (head, body))

    def has_room(self) -> bool:
        return True

    def can_take_transient(self) -> bool:
        return True


def run(messages: int, groups: int, header: str) -> float:
    broker = Broker(MemoryStore())
    subscribers = []
    for i in range(SUBSCRIBERS):
        outbox = AckingOutbox()
        session = broker.open_session(str(i), "1.2", outbox)
        broker.handle(session, Frame("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client-individual",
                                                    "prefetch": str(ROUND)}))
        subscribers.append((session, outbox))
    producer = broker.open_session("producer", "1.2", AckingOutbox())
    body = b"x" * 100
    sends = [Frame("SEND", {"destination": "/queue/q", **({header: f"g{i % groups}"} if groups else {})}, body)
             for i in range(ROUND)]
    start = time.perf_counter()
    for _ in range(messages // ROUND):
        for send in sends:
            broker.handle(producer, send)
        for session, outbox in subscribers:
            ids, outbox.ack_ids = outbox.ack_ids, []
            for ack_id in ids:
                broker.handle(session, Frame("ACK", {"id": ack_id}))
    elapsed = time.perf_counter() - start
    assert not any(outbox.ack_ids for _, outbox in subscribers) and not broker.queues["q"].size
    return elapsed / messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--groups", type=int, nargs="+", default=[0, 1000])
    parser.add_argument("--header", default="JMSXGroupID",
                        help="the header carrying the group: another name (of the same length, e.g."
                             " JMSXGroupXX) sends the same bytes without grouping, the fairest baseline")
    args = parser.parse_args()
    for groups in args.groups:
        cost = run(args.messages, groups, args.header)
        print(f"groups={groups} header={args.header}: {cost * 1e6:.2f} us per message (send + deliver + ack)")


if __name__ == "__main__":
    main()
