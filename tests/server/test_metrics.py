"""The store's commit histograms: plain counts rendered as prometheus-client renders its own."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client import Histogram as PrometheusHistogram
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from stompmq.server.metrics import histogram
from stompmq.server.runtime import GROUP_SIZE_BUCKETS, LATENCY_BUCKETS, Histogram


class Rendered(Collector):
    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterable[Metric]:
        return [self.metric]


def test_plain_counts_render_like_a_prometheus_histogram() -> None:
    values = [0.0001, 0.0005, 0.0007, 0.01, 0.3, 2.5, 7.0]
    for bounds, observed in ((LATENCY_BUCKETS, values), (GROUP_SIZE_BUCKETS, [1, 2, 3, 50, 60_000])):
        ours = Histogram(bounds)
        registry = CollectorRegistry()
        theirs = PrometheusHistogram("h", "doc", buckets=bounds, registry=registry)
        for value in observed:
            ours.observe(value)
            theirs.observe(value)

        expected = [line for line in generate_latest(registry).splitlines() if b"_created" not in line]
        assert generate_latest(Rendered(histogram("h", "doc", ours))).splitlines() == expected
