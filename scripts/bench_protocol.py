"""Micro-benchmark of the sans-IO STOMP layer: frames per second, no pass/fail.

Measures the two per-message costs the broker pays on its single thread:
parsing SEND frames (and a client-ack consumer's ACK frames) out of 64 KiB
receive buffers (as the server reads them) and encoding MESSAGE frames for
delivery.  Run it from the repository root with ``PYTHONPATH=. python
scripts/bench_protocol.py [--seconds S]`` (or with stompmq installed) and
compare numbers taken on the same machine only.  Rates are per CPU second of
this process (``time.process_time``): the broker is single-threaded, so that
is its capacity, and it stays meaningful when other work shares the machine.

For instructions per frame, run ``--count`` at two counts under callgrind and
divide the difference by 100,000::

  for n in 20000 120000; do
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python scripts/bench_protocol.py --count $n --kind ack
  done
"""

from __future__ import annotations

import argparse
import time

from stompmq.protocol import Frame, FrameParser, encode_frame

READ_SIZE = 64 * 1024
"""The server's receive size, so the parser sees what it will see in production."""

BODY = b"x" * 100
"""A small task-queue payload; per-frame overhead dominates, which is what we measure."""


SEND_FRAME = b"SEND\ndestination:/queue/bench\ncontent-length:%d\n\n%s\0" % (len(BODY), BODY)
ACK_FRAME = b"ACK\nid:1234567\n\n\0"
"""What a STOMP 1.2 client-ack consumer sends per message (ACK/NACK take a short path)."""
FRAMES = {"send": SEND_FRAME, "ack": ACK_FRAME, "ack11": b"ACK\nsubscription:0\nmessage-id:1234567\n\n\0"}
"""What ``--count`` parses (``ack11``: a STOMP 1.1 ACK)."""


def parse_count(kind: str, count: int) -> None:
    """Parse about ``count`` frames of ``kind`` in 64 KiB buffers, with the broker's GC settings:
    run under callgrind at two counts, the difference / the count difference is per frame."""
    from stompmq.server.app import tune_gc

    tune_gc()
    frame = FRAMES[kind]
    per_buffer = READ_SIZE // len(frame)
    buffer = frame * per_buffer
    parser = FrameParser()
    for _ in range(count // per_buffer):
        parser.feed(buffer)


def bench_parse(seconds: float, frame: bytes = SEND_FRAME) -> float:
    """Return frames/s parsing ``frame`` fed as 64 KiB chunks (frames straddle chunk ends)."""
    per_buffer = READ_SIZE // len(frame) + 1
    stream = frame * per_buffer * 16
    chunks = [stream[i : i + READ_SIZE] for i in range(0, len(stream), READ_SIZE)]
    frames = 0
    start = time.process_time()
    elapsed = 0.0
    while elapsed < seconds:
        parser = FrameParser()
        for chunk in chunks:
            frames += len(parser.feed(chunk))
        elapsed = time.process_time() - start
    return frames / elapsed


def bench_encode(seconds: float) -> float:
    """Return frames/s encoding MESSAGE frames with the headers the broker adds."""
    messages = [
        Frame(
            "MESSAGE",
            {
                "destination": "/queue/bench",
                "message-id": str(1_000_000 + i),
                "subscription": "sub-0",
                "ack": str(2_000_000 + i),
                "priority": "4",
                "redelivered": "false",
            },
            BODY,
        )
        for i in range(1000)
    ]
    frames = 0
    start = time.process_time()
    elapsed = 0.0
    while elapsed < seconds:
        for message in messages:
            encode_frame(message, "1.2")
        frames += len(messages)
        elapsed = time.process_time() - start
    return frames / elapsed


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    arguments.add_argument("--count", type=int, default=None,
                           help="parse this many frames of --kind and print nothing (for callgrind)")
    arguments.add_argument("--kind", choices=sorted(FRAMES), default="ack")
    options = arguments.parse_args()
    if options.count is not None:
        parse_count(options.kind, options.count)
        return
    print(f"parse  SEND (64 KiB buffers, 100-byte body): {bench_parse(options.seconds):>12,.0f} frames/CPU-s")
    print(f"parse  ACK (64 KiB buffers, id header):      {bench_parse(options.seconds, ACK_FRAME):>12,.0f} frames/CPU-s")
    print(f"encode MESSAGE (6 headers, 100-byte body):   {bench_encode(options.seconds):>12,.0f} frames/CPU-s")


if __name__ == "__main__":
    main()
