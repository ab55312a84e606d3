"""Micro-benchmark of the sans-IO STOMP layer: frames per second, no pass/fail.

Measures the two per-message costs the broker pays on its single thread:
parsing SEND frames (and a client-ack consumer's ACK frames) out of 64 KiB
receive buffers (as the server reads them) and encoding MESSAGE frames for
delivery (``encode_message_tail`` + ``encode_message``, as ``broker/delivery.py``
does), each with the native fast path (``protocol/_frames.c``) and in pure
Python.  Run it from the repository root with ``PYTHONPATH=. python
python -m benchmarks.codec [--seconds S]`` (or with stompmq installed) and
compare numbers taken on the same machine only.  Rates are per CPU second of
this process (``time.process_time``): the broker is single-threaded, so that
is its capacity, and it stays meaningful when other work shares the machine.

For instructions per frame, run ``--count`` at two counts under callgrind and
divide the difference by 100,000::

  for n in 20000 120000; do
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m benchmarks.codec --count $n --kind ack
  done
"""

from __future__ import annotations

import argparse
import time

from stompmq.protocol import FrameParser, encoder
from stompmq.protocol import native as native_codec

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


def bench_parse(seconds: float, native: bool, frame: bytes = SEND_FRAME) -> float:
    """Return frames/s parsing ``frame`` fed as 64 KiB chunks (frames straddle chunk ends)."""
    per_buffer = READ_SIZE // len(frame) + 1
    stream = frame * per_buffer * 16
    chunks = [stream[i : i + READ_SIZE] for i in range(0, len(stream), READ_SIZE)]
    frames = 0
    start = time.process_time()
    elapsed = 0.0
    while elapsed < seconds:
        parser = FrameParser(native=native)
        for chunk in chunks:
            frames += len(parser.feed(chunk))
        elapsed = time.process_time() - start
    return frames / elapsed


def bench_encode(seconds: float, native: bool) -> float:
    """Return frames/s encoding MESSAGE frames as a queue delivery does (tail, then the whole frame)."""
    frames_c = native_codec.BUILT
    assert frames_c is not None or not native, "the native codec is not built"
    message = frames_c.encode_message if native and frames_c else encoder._message
    tail = frames_c.encode_message_tail if native and frames_c else encoder._message_tail
    headers = {"colour": "blue", "persistent": "true"}
    frames = 0
    start = time.process_time()
    elapsed = 0.0
    while elapsed < seconds:
        for seq in range(1_000_000, 1_001_000):
            message("sub-0", seq, "/queue/bench", str(seq), 0, "1.2", tail(4, 1_763_900_000_000, None, headers, BODY, "1.2"))
        frames += 1000
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
    for native in (True, False) if native_codec.BUILT is not None else (False,):
        name = "native" if native else "python"
        rate = bench_parse(options.seconds, native)
        print(f"{name}: parse  SEND (64 KiB buffers, 100-byte body):     {rate:>12,.0f} frames/CPU-s")
        rate = bench_parse(options.seconds, native, ACK_FRAME)
        print(f"{name}: parse  ACK (64 KiB buffers, id header):          {rate:>12,.0f} frames/CPU-s")
        rate = bench_encode(options.seconds, native)
        print(f"{name}: encode MESSAGE (2 user headers, 100-byte body): {rate:>12,.0f} frames/CPU-s")


if __name__ == "__main__":
    main()
