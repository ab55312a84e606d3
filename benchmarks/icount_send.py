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

The task-queue and selector paths, so their cost per message is visible beside those:
``selector``: ``plain`` with a subscriber whose three-clause selector every message matches
(``colour = 'blue' AND size BETWEEN 1 AND 10 AND kind IN ('a', 'b')``); ``celery`` and
``dramatiq``: the SEND those integrations make for a task ``add(2, 2)`` (the ``kombu`` envelope
header and Celery's protocol-2 body; Dramatiq's JSON message as the body), to a
``client-individual`` subscriber that ACKs each, as ``ack`` does.  ``text``: ``plain`` without
``content-length`` (a text message); every other mode's SEND has it, as clients send it.
"""

from __future__ import annotations

import sys

from stompmq.broker import Broker
from stompmq.protocol import Frame, FrameParser
from stompmq.storage.memory import MemoryStore

ACKS_PER_READ = 1000
#: The messages of the task-queue modes, as the integrations send them (stompmq/integrations/).
CELERY_ENVELOPE = (
    '{"h":{"lang":"py","task":"tasks.add","id":"6f1b2c7e-8a7d-4b8e-9f1e-2a3b4c5d6e7f","shadow":null,"eta":null,'
    '"expires":null,"group":null,"group_index":null,"retries":0,"timelimit":[null,null],'
    '"root_id":"6f1b2c7e-8a7d-4b8e-9f1e-2a3b4c5d6e7f","parent_id":null,"argsrepr":"(2, 2)","kwargsrepr":"{}",'
    '"origin":"gen4242@worker-1","ignore_result":false,"replaced_task_nesting":0,"stamped_headers":null,"stamps":{}},'
    '"p":{"correlation_id":"6f1b2c7e-8a7d-4b8e-9f1e-2a3b4c5d6e7f","reply_to":"0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5",'
    '"delivery_mode":2,"priority":0},"t":"application/json","e":"utf-8","x":"","k":"celery"}')
CELERY_BODY = b'[[2, 2], {}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'
DRAMATIQ_BODY = (b'{"queue_name":"default","actor_name":"add","args":[2,2],"kwargs":{},"options":{},'
                 b'"message_id":"6f1b2c7e-8a7d-4b8e-9f1e-2a3b4c5d6e7f","message_timestamp":1764720000000}')
#: mode -> (headers the SEND adds, body, the subscriber ACKs each, its selector)
MODES: dict[str, tuple[dict[str, str], bytes, bool, str | None]] = {
    "plain": ({"colour": "blue"}, b"x" * 100, False, None),
    "ttl": ({"colour": "blue", "ttl": "60000"}, b"x" * 100, False, None),
    "extra": ({"colour": "blue", "xyz": "60000"}, b"x" * 100, False, None),
    "ack": ({"colour": "blue"}, b"x" * 100, True, None),
    "selector": ({"colour": "blue", "size": "5", "kind": "a"}, b"x" * 100, False,
                 "colour = 'blue' AND size BETWEEN 1 AND 10 AND kind IN ('a', 'b')"),
    "celery": ({"priority": "0", "kombu": CELERY_ENVELOPE}, CELERY_BODY, True, None),
    "dramatiq": ({}, DRAMATIQ_BODY, True, None),
    "text": ({"colour": "blue"}, b"x" * 100, False, None),
}
#: Every mode's SEND carries content-length, as stomp.py and stompmq's own clients send it,
#: but ``text``'s: a SEND without it is a text message, delivered without one
#: (docs/decisions/text-messages.md), which takes the MESSAGE path of its own.
TEXT_MODES = {"text"}


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
    extra, body, acks, selector = MODES[mode]
    broker = Broker(MemoryStore())
    broker.advance(0.0, 1.7e9)
    outbox = CountingOutbox()
    subscriber = broker.open_session("s", "1.2", outbox)
    subscribe = {"id": "1", "destination": "/queue/q"}
    if acks:
        subscribe.update({"ack": "client-individual", "prefetch": str(ACKS_PER_READ)})
    if selector is not None:
        subscribe["selector"] = selector
    broker.handle(subscriber, Frame("SUBSCRIBE", subscribe, b""))
    producer = broker.open_session("p", "1.2", CountingOutbox())
    length = {} if mode in TEXT_MODES else {"content-length": str(len(body))}
    frame = Frame("SEND", {"destination": "/queue/q", **length, **extra}, body)
    if not acks:
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
