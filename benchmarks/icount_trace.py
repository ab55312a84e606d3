"""What OpenTelemetry tracing costs per message, in instructions: N traced queue SENDs through
the engine, each delivered to a client-individual subscriber and ACKed (the ACKs of 1,000
messages handed over as one read), as benchmarks/icount_send.py's ``ack`` mode does.

Every SEND carries its own ``traceparent`` (a trace id of its own, sampled flag set), in every
mode, so the modes differ only in the broker's tracing: ``off`` (not watched: the engine as
without the otel extra), ``on`` (sampling 1.0: publish, deliver and ack spans per message) and
``sampled`` (``traceidratio`` 0.01); ``untraced`` is ``on`` with SENDs that carry no
``traceparent``, and ``plain`` the same SENDs with tracing off (the base ``untraced`` is
compared with).  Spans go through the SDK's BatchSpanProcessor to an
exporter that encodes them as OTLP protobuf and drops the bytes (no network), so the count
includes the export thread's encoding.  Run it twice under callgrind and take the difference:

  for n in 2000 7000; do
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m benchmarks.icount_trace $n on
  done   # instructions per message = (Collected[7000] - Collected[2000]) / 5000
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, TraceIdRatioBased

from stompmq.broker import Broker
from stompmq.protocol import Frame, FrameParser
from stompmq.server.otel import Tracing
from stompmq.storage.memory import MemoryStore

from .icount_send import ACKS_PER_READ, CountingOutbox


class EncodingExporter(SpanExporter):
    """Encodes each batch as an OTLP/HTTP exporter would, then drops it."""

    encoded = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.encoded += len(encode_spans(spans).SerializePartialToString())
        return SpanExportResult.SUCCESS


def main() -> None:
    n, mode = int(sys.argv[1]), sys.argv[2]
    broker = Broker(MemoryStore())
    broker.advance(0.0, 1.7e9)
    provider = None
    if mode not in ("off", "plain"):
        provider = TracerProvider(sampler=TraceIdRatioBased(0.01) if mode == "sampled" else ALWAYS_ON)
        provider.add_span_processor(BatchSpanProcessor(EncodingExporter()))
        broker.observers.watch(Tracing(provider).spans("/"))
    outbox = CountingOutbox()
    subscriber = broker.open_session("s", "1.2", outbox)
    broker.handle(subscriber, Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": "client-individual",
                                                  "prefetch": str(ACKS_PER_READ)}, b""))
    producer = broker.open_session("p", "1.2", CountingOutbox())
    rng = random.Random(46)
    frames = [Frame("SEND", {"destination": "/queue/q", "colour": "blue"} if mode in ("untraced", "plain") else {
        "destination": "/queue/q", "colour": "blue",
        "traceparent": f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01"}, b"x" * 100) for _ in range(n)]
    parser = FrameParser()
    for first in range(1, n + 1, ACKS_PER_READ):
        last = min(first + ACKS_PER_READ, n + 1)
        for i in range(first, last):
            broker.handle(producer, frames[i - 1])
        acks = parser.feed(b"".join(b"ACK\nid:%d\n\n\0" % i for i in range(first, last)))
        broker.handle_frames(subscriber, acks)
    if provider is not None:
        provider.shutdown()  # the last batches are exported (and counted)


if __name__ == "__main__":
    main()
