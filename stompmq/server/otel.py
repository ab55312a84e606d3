"""OpenTelemetry spans of queue messages, after the messaging semantic conventions.

Imported only when tracing is on (tracing.py).  Each vhost's engine is watched by a ``Spans``
(broker/events.py), which turns a message's steps into spans that are children of the
producer's span, whose context the SEND carried in ``traceparent``/``tracestate`` (W3C trace
context; the headers reach every MESSAGE unchanged, so the consumer's span is in the same
trace):

============  ==============  ===================  =========================================
span          kind            operation type       what else
============  ==============  ===================  =========================================
publish Q     CONSUMER        receive              priority; a delayed message's due time
deliver Q     PRODUCER        send                 subscription, connection, wait in queue
ack Q         SERVER          settle               subscription, connection
nack Q        SERVER          settle               requeue
dead-letter Q INTERNAL        settle               reason (its publish to DLQ.Q follows)
expire Q      INTERNAL        settle
============  ==============  ===================  =========================================

The broker continues traces and starts none: a message without ``traceparent`` makes no span
(a span per step of an untraced message would be a trace of its own, which nobody could
follow).  Whether a message is traced is decided once, at its first step (``follows``, which
the engine asks once per message and remembers, broker/events.py): a standard sampler decides
from the header's text alone, its sampled flag and trace id (``decider``), parsing nothing, and
the later steps of a message not sampled are never told, so they cost the engine an identity
test.  A sampled message's parent context is cached by ``traceparent`` (bounded) for its
other steps, which are sampled all or none.  Spans are ended at once, with
``BatchSpanProcessor`` exporting them on its own thread: the engine's thread only appends to
its queue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import __version__
from ..broker import Subscription
from ..storage.base import StoredMessage

log = logging.getLogger(__name__)

SYSTEM = "stompmq"
#: Parent contexts kept, by (traceparent, tracestate): cleared when full.
CONTEXTS_KEPT = 4096
#: ``OTEL_EXPORTER_OTLP_*PROTOCOL`` values and the exporter entry point each means.
OTLP_PROTOCOLS = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}

_PROPAGATOR = TraceContextTextMapPropagator()
#: The last hex digit of a ``traceparent`` whose sampled flag (the flags' lowest bit) is set:
#: tested without parsing the flags (a malformed header is the propagator's to refuse).
_ODD_HEX = frozenset("13579bdf")


class Tracing:
    """The tracer provider, and a ``Spans`` per vhost engine."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("stompmq", __version__)

    @classmethod
    def from_environment(cls, names: Sequence[str], environ: Mapping[str, str]) -> Tracing | None:
        """A provider whose exporters ``names`` gives (``OTEL_TRACES_EXPORTER``), its sampler and
        resource from ``OTEL_TRACES_SAMPLER``, ``OTEL_SERVICE_NAME``, ... (the SDK reads them)."""
        exporters = [exporter for exporter in map(lambda name: _exporter(name, environ), names) if exporter]
        if not exporters:
            return None
        named = "OTEL_SERVICE_NAME" in environ or "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
        provider = TracerProvider(resource=Resource.create({} if named else {"service.name": SYSTEM}),
                                  shutdown_on_exit=False)
        for exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        log.info("tracing on: spans exported by %s", ", ".join(type(e).__name__ for e in exporters))
        return cls(provider)

    def spans(self, vhost: str) -> Spans:
        return Spans(self.tracer, self.provider.sampler, vhost)

    def shutdown(self) -> None:
        """Export what is buffered and stop (blocking: run it off the trio thread)."""
        self.provider.shutdown()


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter | None:
    """The exporter an ``OTEL_TRACES_EXPORTER`` name means, through the entry points the
    exporter packages register, as the SDK's own configuration does (``otlp``: by protocol)."""
    if name == "otlp":
        protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        name = OTLP_PROTOCOLS.get(protocol.strip(), "")
        if not name:
            log.error("OTLP protocol %r is not one of %s: no traces", protocol, ", ".join(OTLP_PROTOCOLS))
            return None
    found = entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        hint = " (pip install opentelemetry-exporter-otlp-proto-grpc)" if name == "otlp_proto_grpc" else ""
        log.error("no OpenTelemetry span exporter named %r is installed%s: no traces", name, hint)
        return None
    exporter: SpanExporter = next(iter(found)).load()()
    return exporter


class Spans:
    """Spans of one vhost's queue messages (a ``MessageEvents`` observer)."""

    def __init__(self, tracer: trace.Tracer, sampler: Sampler, vhost: str) -> None:
        self.tracer = tracer
        self.sampler = sampler
        self.decide = decider(sampler)
        self.vhost = vhost
        #: traceparent -> the parent context of a sampled message's spans (those not sampled
        #: are not kept: the engine remembers that nobody follows them)
        self.contexts: dict[str, Context] = {}

    def follows(self, msg: StoredMessage) -> bool:
        """Spans are made of a message whose ``traceparent`` the sampler samples."""
        headers = msg.headers
        traceparent = headers.get("traceparent")
        if traceparent is None:
            return False
        decide = self.decide
        if decide is not None and len(traceparent) == 55 and not decide(traceparent):
            return False  # a standard sampler decided from the header alone: nothing parsed
        return self._parent(traceparent, headers) is not None

    def _parent(self, traceparent: str, headers: dict[str, str]) -> Context | None:
        """The parent context of the spans of a message with ``traceparent``, None when the
        message is not sampled (or the header is malformed)."""
        context = self.contexts.get(traceparent)
        if context is not None:
            return context
        tracestate = headers.get("tracestate")
        extracted = _PROPAGATOR.extract(
            {"traceparent": traceparent} if tracestate is None else {"traceparent": traceparent, "tracestate": tracestate})
        parent = trace.get_current_span(extracted).get_span_context()
        if not parent.is_valid or not self.sampler.should_sample(extracted, parent.trace_id, "message").decision.is_sampled():  # type: ignore[no-untyped-call]
            return None
        if len(self.contexts) >= CONTEXTS_KEPT:
            self.contexts.clear()
        self.contexts[traceparent] = extracted
        return extracted

    def _start(self, operation: str, kind: SpanKind, msg: StoredMessage) -> trace.Span | None:
        """The span of one step of a message the engine was told this observer follows (None
        if the span is not recorded: then no attribute is even built, most of a span's cost)."""
        headers = msg.headers
        parent = self._parent(headers["traceparent"], headers)
        if parent is None:
            return None
        span = self.tracer.start_span(f"{operation} /queue/{msg.queue}", parent, kind)
        return span if span.is_recording() else None

    def _end(self, span: trace.Span, operation: str, kind_of_operation: str, msg: StoredMessage,
             attributes: dict[str, Any]) -> None:
        attributes.update({
            "messaging.system": SYSTEM,
            "messaging.operation.name": operation,
            "messaging.operation.type": kind_of_operation,
            "messaging.destination.name": "/queue/" + msg.queue,
            "messaging.message.id": str(msg.seq),
            "messaging.message.body.size": len(msg.body),
            "stompmq.vhost": self.vhost,
        })
        span.set_attributes(attributes)
        span.end()

    def published(self, msg: StoredMessage) -> None:
        span = self._start("publish", SpanKind.CONSUMER, msg)
        if span is None:
            return
        attributes: dict[str, Any] = {"stompmq.priority": msg.priority}
        if msg.deliver_at is not None:
            attributes["stompmq.deliver_at_ms"] = msg.deliver_at
        reason = msg.headers.get("dead-letter-reason")
        if reason is not None and "original-destination" in msg.headers:
            attributes["stompmq.dead_letter.reason"] = reason
        self._end(span, "publish", "receive", msg, attributes)

    def delivered(self, msg: StoredMessage, sub: Subscription) -> None:
        span = self._start("deliver", SpanKind.PRODUCER, msg)
        if span is not None:
            self._end(span, "deliver", "send", msg, {
                **_consumer(sub), "stompmq.queue.wait_seconds": max(0.0, time.time() - msg.timestamp / 1000),
                "stompmq.redelivery_count": msg.redeliveries,
            })

    def acked(self, msg: StoredMessage, sub: Subscription) -> None:
        span = self._start("ack", SpanKind.SERVER, msg)
        if span is not None:
            self._end(span, "ack", "settle", msg, _consumer(sub))

    def nacked(self, msg: StoredMessage, sub: Subscription, requeue: bool) -> None:
        span = self._start("nack", SpanKind.SERVER, msg)
        if span is not None:
            self._end(span, "nack", "settle", msg, {**_consumer(sub), "stompmq.requeue": requeue})

    def dead_lettered(self, msg: StoredMessage, reason: str) -> None:
        span = self._start("dead-letter", SpanKind.INTERNAL, msg)
        if span is not None:
            self._end(span, "dead-letter", "settle", msg, {"stompmq.dead_letter.reason": reason})

    def expired(self, msg: StoredMessage) -> None:
        span = self._start("expire", SpanKind.INTERNAL, msg)
        if span is not None:
            self._end(span, "expire", "settle", msg, {})


#: Whether a ``traceparent`` of the standard length (55 characters: version, trace id, parent
#: id, flags) is sampled.
Decide = Callable[[str], bool]


def decider(sampler: Sampler) -> Decide | None:
    """For the SDK's standard samplers (``OTEL_TRACES_SAMPLER``: always_on, always_off,
    traceidratio and their parentbased_ forms), the decision from the header's text alone, its
    sampled flag and its trace id's low 64 bits, without parsing it or building a context: what
    ``should_sample`` would say of a valid header, at a fraction of its cost (of a malformed
    one it may say anything: the propagator refuses it before any span).  The trace id's low 64
    bits are compared as text, 16 lowercase hex digits against the bound spelled the same way.
    None for any other sampler, which is asked."""
    if sampler is ALWAYS_ON:
        return lambda traceparent: True
    if sampler is ALWAYS_OFF:
        return lambda traceparent: False
    if isinstance(sampler, TraceIdRatioBased):
        if sampler.bound >= 1 << 64:
            return lambda traceparent: True
        bound = f"{sampler.bound:016x}"
        return lambda traceparent: traceparent[19:35] < bound
    if isinstance(sampler, ParentBased):
        when_sampled = decider(getattr(sampler, "_remote_parent_sampled", None))  # type: ignore[arg-type]
        when_not = decider(getattr(sampler, "_remote_parent_not_sampled", None))  # type: ignore[arg-type]
        if when_sampled is not None and when_not is not None:
            return lambda traceparent: (when_sampled if traceparent[54] in _ODD_HEX else when_not)(traceparent)
    return None


def _consumer(sub: Subscription) -> dict[str, Any]:
    return {"messaging.destination.subscription.name": sub.id, "messaging.client.id": sub.session.id}
