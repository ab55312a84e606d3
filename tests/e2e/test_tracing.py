"""OpenTelemetry spans of queue messages on a real broker: the producer's span, the broker's
and the consumer's in one trace, across a delay and a dead letter (the SDK's in-memory
exporter); OTLP/HTTP export to a receiver on loopback, configured by OTEL_* variables alone;
no tracing, and no hook in the engine, without them."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")  # the otel extra

from opentelemetry import trace  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: E402

from stompmq.broker import BrokerConfig  # noqa: E402
from stompmq.broker.ages import ages_here  # noqa: E402
from stompmq.server.otel import Spans, Tracing  # noqa: E402
from stompmq.storage.base import StoredMessage  # noqa: E402

from ..support.broker_thread import BrokerThread  # noqa: E402
from ..support.stompclient import Client  # noqa: E402
from ..support.stores import make_store_factory  # noqa: E402
from ..support.waiting import wait_until  # noqa: E402

PROPAGATOR = TraceContextTextMapPropagator()


@pytest.fixture
def exported() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider
    provider.shutdown()


def test_one_trace_from_producer_through_a_delay_and_a_dead_letter_to_the_consumer(
        exported: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path) -> None:
    exporter, provider = exported
    tracer = provider.get_tracer("test clients")
    broker = BrokerThread(make_store_factory("sqlite", tmp_path), config=BrokerConfig(dead_letter_rejected=True),
                          tracing=Tracing(provider)).start()
    try:
        with Client(broker.port) as c:
            with tracer.start_as_current_span("send orders", kind=trace.SpanKind.PRODUCER) as producer:
                carrier: dict[str, str] = {}
                PROPAGATOR.inject(carrier)
                c.send_to("/queue/orders", "o-1", headers={**carrier, "delay": "100"})
            c.send_to("/queue/orders", "untraced")  # no traceparent: no span
            c.subscribe("/queue/orders", ack="client-individual")
            plain, first = c.messages(2)  # the delayed one comes second
            assert first.body == b"o-1" and first["traceparent"] == carrier["traceparent"]
            c.ack(plain)
            c.nack(first, requeue="false")
            c.subscribe("/queue/DLQ.orders", ack="client-individual")
            dead = c.message()
            with tracer.start_as_current_span("process orders", context=PROPAGATOR.extract(dead.headers),
                                              kind=trace.SpanKind.CONSUMER):
                c.ack(dead)
        wait_until(lambda: any(s.name == "ack /queue/DLQ.orders" for s in exporter.get_finished_spans()),
                   "the last broker span")
    finally:
        broker.stop()
    spans = exporter.get_finished_spans()
    trace_id = producer.get_span_context().trace_id
    assert {s.context.trace_id for s in spans} == {trace_id}  # one trace, nothing for "untraced"
    broker_spans = [s for s in spans if s.instrumentation_scope.name == "stompmq"]
    assert [s.name for s in broker_spans] == [
        "publish /queue/orders",  # delayed
        "publish /queue/orders",  # due
        "deliver /queue/orders",
        "nack /queue/orders",
        "dead-letter /queue/orders",
        "publish /queue/DLQ.orders",
        "deliver /queue/DLQ.orders",
        "ack /queue/DLQ.orders",
    ]
    producer_id = producer.get_span_context().span_id
    assert all(s.parent is not None and s.parent.span_id == producer_id for s in broker_spans)
    [consumer] = [s for s in spans if s.name == "process orders"]
    assert consumer.parent is not None and consumer.parent.span_id == producer_id
    attributes = [dict(s.attributes or {}) for s in broker_spans]
    for a in attributes:
        assert a["messaging.system"] == "stompmq" and a["stompmq.vhost"] == "/"
    assert "stompmq.deliver_at_ms" in attributes[0] and "stompmq.deliver_at_ms" not in attributes[1]
    assert attributes[2]["messaging.operation.type"] == "send" and attributes[2]["stompmq.queue.wait_seconds"] >= 0
    assert attributes[2]["messaging.message.id"] == first["message-id"]
    assert attributes[3]["stompmq.requeue"] is False
    assert attributes[4]["stompmq.dead_letter.reason"] == "rejected with NACK requeue:false"
    assert attributes[5]["messaging.destination.name"] == "/queue/DLQ.orders"
    assert attributes[7]["messaging.operation.type"] == "settle"
    assert attributes[7]["messaging.destination.subscription.name"] == dead["subscription"]
    assert _kinds(broker_spans[:3]) == [trace.SpanKind.CONSUMER, trace.SpanKind.CONSUMER, trace.SpanKind.PRODUCER]


def _kinds(spans: list[ReadableSpan]) -> list[trace.SpanKind]:
    return [s.kind for s in spans]


class _Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps each request's spans, answers 200."""

    requests: list[ExportTraceServiceRequest] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["content-length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        assert self.path == "/v1/traces" and self.headers["content-type"] == "application/x-protobuf"
        self.requests.append(request)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_otlp_http_export_configured_by_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Receiver.requests = []
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{server.server_port}/v1/traces")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "broker-under-test")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    try:
        with BrokerThread(make_store_factory("memory", tmp_path)).start() as broker:
            assert broker.broker is not None and broker.broker.observers.watching  # watched
            with Client(broker.port) as c:
                c.subscribe("/queue/exported")
                c.send_to("/queue/exported", "x", headers={"traceparent": traceparent})
                c.message()
        # stopping exported what was buffered
        spans = [(span.name, span.trace_id.hex(), span.parent_span_id.hex(), resource.resource)
                 for request in _Receiver.requests for resource in request.resource_spans
                 for scope in resource.scope_spans for span in scope.spans]
        assert [s[:3] for s in spans] == [
            ("publish /queue/exported", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"),
            ("deliver /queue/exported", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"),
        ]
        names = {a.value.string_value for a in spans[0][3].attributes if a.key == "service.name"}
        assert names == {"broker-under-test"}
    finally:
        server.shutdown()
        server.server_close()


def test_without_otel_variables_nothing_watches_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    with BrokerThread(make_store_factory("memory", tmp_path)).start() as broker:
        engine = broker.broker
        assert engine is not None and engine.observers.watching == ()
        assert engine.dispatcher.watch is None and engine.acks.watch is None


def test_an_expiry_is_a_span_of_the_message(exported: tuple[InMemorySpanExporter, TracerProvider],
                                            tmp_path: Path) -> None:
    exporter, provider = exported
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with BrokerThread(make_store_factory("memory", tmp_path), tracing=Tracing(provider)).start() as broker:
        with Client(broker.port) as c:
            c.request("SEND", {"destination": "/control/declare/queue/brief", "message-ttl": "50"})
            c.send_to("/queue/brief", "x", headers={"traceparent": traceparent})
            engine = broker.broker
            assert engine is not None
            published = broker.call(lambda: ages_here(engine.queues.get("brief"))[0])
            assert isinstance(published, int)
            wait_until(lambda: time.time() * 1000 > published + 100, "past its TTL")
            c.subscribe("/queue/brief")  # dispatch finds it expired
            wait_until(lambda: any(s.name == "expire /queue/brief" for s in exporter.get_finished_spans()),
                       "the expire span")
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["publish /queue/brief", "expire /queue/brief"]


class _Told(Spans):
    """The broker's spans, recording which messages it was asked about and the steps it began
    a span for (the bodies name the messages)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.asked: list[bytes] = []
        self.started: list[tuple[str, bytes]] = []

    def follows(self, msg: StoredMessage) -> bool:
        self.asked.append(msg.body)
        return super().follows(msg)

    def _start(self, operation: str, kind: SpanKind, msg: StoredMessage) -> trace.Span | None:
        self.started.append((operation, msg.body))
        return super()._start(operation, kind, msg)


class _ToldTracing(Tracing):
    told: _Told | None = None

    def spans(self, vhost: str) -> Spans:
        self.told = _Told(self.tracer, self.provider.sampler, vhost)
        return self.told


def test_a_message_not_sampled_never_reaches_the_spans(tmp_path: Path) -> None:
    """Sampling is decided once per message, at its publish: the later steps of a message not
    sampled (by its parent's flag, by the trace-id ratio, or untraced) never reach the code
    that makes spans, while a sampled one gets all of its spans."""
    exporter = InMemorySpanExporter()
    # The trace-id ratio samples a parent-sampled trace whose id's low 64 bits are under 2**63.
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.5),
                                                  remote_parent_sampled=TraceIdRatioBased(0.5)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = _ToldTracing(provider)
    sampled = "00-4bf92f3577b34da6" + "0000000000000001" + "-00f067aa0ba902b7-01"
    messages = {
        b"sampled": sampled,
        b"parent not sampled": sampled[:-2] + "00",
        b"ratio not sampled": "00-4bf92f3577b34da6" + "f000000000000001" + "-00f067aa0ba902b7-01",
        b"untraced": None,
    }
    steps = ["publish", "deliver", "nack", "deliver", "ack"]
    try:
        with BrokerThread(make_store_factory("memory", tmp_path), tracing=tracing).start() as broker:
            with Client(broker.port) as c:
                for body, traceparent in messages.items():
                    c.send_to("/queue/followed", body, headers={} if traceparent is None else {"traceparent": traceparent})
                c.subscribe("/queue/followed", ack="client-individual")
                for msg in c.messages(len(messages)):
                    c.nack(msg, requeue="true")  # each is delivered again, then acked
                for msg in c.messages(len(messages)):
                    c.ack(msg)
                wait_until(lambda: len(exporter.get_finished_spans()) == len(steps), "the sampled message's spans")
    finally:
        provider.shutdown()
    told = tracing.told
    assert told is not None
    assert sorted(told.asked) == sorted(messages)  # once each
    assert told.started == [(step, b"sampled") for step in steps]
    assert [s.name.split()[0] for s in exporter.get_finished_spans()] == steps
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == {int(sampled[3:35], 16)}
