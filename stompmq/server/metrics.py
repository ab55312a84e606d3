"""Prometheus ``/metrics``: the engine's plain counters rendered at scrape time.

Theory of operation
-------------------
Nothing here runs on the hot path: the engine keeps plain integers
(``broker/stats.py``) and a scrape turns them into metric families with
prometheus-client's exposition code.  Per-queue series exist only for
``--metrics-top-queues`` queues (the busiest, then those holding the most messages, touched
since start or not), and the dead-letter queues holding messages besides (metrics_queues.py),
so label cardinality stays bounded however many queues there are; the ``*_all_total`` series
cover every queue.  A queue's ready/unacked gauges need the store (a durable queue's messages
are on disk): the scrape reads the store's queue list, in pages, then each listed queue's ages
(``..._oldest_ready_age_seconds``, ``..._oldest_unacked_age_seconds``: broker/ages.py), one
short read each.  Stream consumer groups' lag
(``stompmq_stream_group_lag``, entries, and ``..._seconds``) has series for the ``--metrics-top-queues`` groups lagging most,
over every stream and vhost; ``stompmq_stream_group_lag_max`` and ``stompmq_stream_groups`` cover all.  Per-queue and per-exchange series
carry a ``vhost`` label: the same name in two vhosts is two queues.  prometheus-client's
process collector adds the usual ``process_*`` series (memory, open files, CPU seconds;
Linux), and ``stompmq_build_info`` the version, frame codec and broker as labels.

Whose numbers: the counters are this broker's own, so the per-queue ones carry a ``broker``
label (its node id: one value per process, so it adds no series beyond the busiest queues);
the ready and unacked gauges are the store's counts, every broker's on PostgreSQL, so they
have none (take their ``max``, not their ``sum``, over the brokers of one database).
"""

from __future__ import annotations

import heapq
import itertools
import math
import platform
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sized
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from starlette.requests import Request
from starlette.responses import Response

from .. import __version__
from ..protocol import native as native_codec
from .alarms import RESOURCES
from .metrics_queues import listed_queues

if TYPE_CHECKING:
    from ..broker import Broker
    from ..storage.base import Store
    from .alarms import ResourceAlarms
    from .runtime import Histogram, StoreMetrics
    from .settings import ServerSettings

QUEUE_COUNTERS = ("published", "delivered", "acked", "redelivered", "dead_lettered", "expired", "dropped", "rejected")
#: This process's memory, open files and CPU time (read from /proc at each scrape).
PROCESS = ProcessCollector(registry=None)


def age_seconds(timestamp_ms: int | None, now: float) -> float:
    """Seconds from ``timestamp_ms`` to ``now`` (0 for none: an empty queue has nothing waiting)."""
    return 0.0 if timestamp_ms is None else round(max(0.0, now - timestamp_ms / 1000), 3)


#: A bucket bound as Prometheus writes it (``+Inf``, ``1.23456789e+08``); typed here, since
#: prometheus_client leaves it untyped.
_go_float: Callable[[float], str] = floatToGoString


def histogram(name: str, documentation: str, counts: Histogram) -> HistogramMetricFamily:
    """A histogram family from plain bucket counts (``runtime.Histogram``)."""
    bounds = [_go_float(bound) for bound in (*counts.bounds, math.inf)]
    return HistogramMetricFamily(name, documentation, buckets=list(zip(bounds, itertools.accumulate(counts.counts))),
                                 sum_value=counts.total)


class ScrapedRuntime(Protocol):
    """What a scrape reads of the runtime (``runtime.Runtime``): its store, alarms and default engine."""

    @property
    def store(self) -> Store: ...
    @property
    def alarms(self) -> ResourceAlarms: ...
    @property
    def broker(self) -> Broker: ...


class Scraped(Protocol):
    """What a scrape reads: the management API's view of the broker (``api.management.Management``)."""

    @property
    def engines(self) -> Mapping[str, Broker]: ...
    @property
    def settings(self) -> ServerSettings: ...
    @property
    def runtime(self) -> ScrapedRuntime: ...
    @property
    def connections(self) -> Sized: ...
    @property
    def broker_id(self) -> str: ...
    @property
    def store_metrics(self) -> StoreMetrics: ...

    async def answer(self, engine: Broker, answer: Any) -> Any: ...

    def administer(self, engine: Broker, path: str, headers: dict[str, str] | None = None) -> Any: ...


class _Scrape(Collector):
    """One scrape's metric families (prometheus-client renders any ``Collector``)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


async def scrape(management: Scraped) -> bytes:
    engines = management.engines
    stats = {(vhost, name): s for vhost, engine in engines.items() for name, s in engine.queue_stats.items()}
    listed = await listed_queues(management.engines, management.answer, management.settings.metrics_top_queues)
    top = [(row.vhost, row.name) for row in listed]
    metrics: list[Metric] = []

    def gauge(name: str, doc: str, value: float) -> None:
        metrics.append(GaugeMetricFamily(name, doc, value=value))

    def counter(name: str, doc: str, of_engine: Callable[[Broker], int]) -> None:
        """A counter summed over every vhost's engine."""
        metrics.append(CounterMetricFamily(name, doc, value=sum(of_engine(engine) for engine in engines.values())))

    info = GaugeMetricFamily("stompmq_build_info", "The running broker: version, Python, frame codec (always 1)",
                             labels=["version", "python", "frame_codec", "broker"])
    info.add_metric([__version__, platform.python_version(), "native" if native_codec.NATIVE else "python",
                     management.broker_id], 1)
    metrics.append(info)
    metrics += PROCESS.collect()
    health = management.runtime.store.health()
    disk = health.disk_bytes
    if disk is not None:
        gauge("stompmq_store_disk_bytes", "Bytes the store takes on disk (SQLite: the database and its WAL)", disk)
    alarm = GaugeMetricFamily("stompmq_alarm", "1 while a resource alarm blocks publishers (--disk-free-limit, "
                              "--memory-high-watermark)", labels=["resource"])
    for resource in RESOURCES:
        alarm.add_metric([resource], int(resource in management.runtime.alarms.active))
    metrics.append(alarm)
    gauge("stompmq_native_frame_codec", "1 when frames are parsed and encoded by the native fast path "
          "(protocol/_frames.c), 0 in pure Python", int(native_codec.NATIVE))
    gauge("stompmq_connections", "Open client connections", len(management.connections))
    gauge("stompmq_subscriptions", "Subscriptions of open connections",
          sum(engine.subscription_count() for engine in engines.values()))
    gauge("stompmq_vhosts", "Declared virtual hosts", len(engines))
    gauge("stompmq_queues_in_use", "Queues published to or consumed from since start", len(stats))
    gauge("stompmq_queues_active", "Queues in memory (with consumers or deliveries in flight)",
          sum(len(engine.queues) for engine in engines.values()))
    gauge("stompmq_store_backlog", "Store writes buffered, not yet committed", health.backlog)
    metrics.append(CounterMetricFamily("stompmq_store_outages", "Times the store became unavailable (a failed "
                                       "commit or read, until the next success)", value=health.outages))
    metrics.append(CounterMetricFamily("stompmq_store_outage_seconds", "Seconds the store was unavailable, the "
                                       "outage going on included (receipts waited meanwhile)",
                                       value=health.outage_seconds))
    counter("stompmq_topic_drops", "Topic deliveries missed by subscribers that could not take them (outbox "
            "over its hard limit, prefetch full)", lambda engine: engine.topic_drops)
    counter("stompmq_topic_lagging", "Topic subscribers singled out as slow (--topic-block-timeout): they miss "
            "messages while over the limit", lambda engine: engine.topic_lagging)
    counter("stompmq_reply_queue_drops", "SENDs to temporary reply queues that were gone (dropped)",
            lambda engine: engine.reply_drops)
    counter("stompmq_queue_pace_timeouts", "Queues that held their producers back for --queue-pace-timeout, "
            "after which their backlog could spill to the store", lambda engine: engine.pace_timeouts)
    counter("stompmq_page_reads", "Pages of ready messages read from the store", lambda engine: engine.page_reads)
    gauge("stompmq_delayed_in_memory", "Delayed messages held in memory (the ones due first)",
          sum(engine.delayed_in_memory() for engine in engines.values()))
    counter("stompmq_expiry_sweeps", "Store reads looking for expired messages", lambda engine: engine.expiry_sweeps)

    totals = [0] * len(QUEUE_COUNTERS)
    for s in stats.values():  # one pass: with many queues this loop is most of a scrape
        totals[0] += s.published
        totals[1] += s.delivered
        totals[2] += s.acked
        totals[3] += s.redelivered
        totals[4] += s.dead_lettered
        totals[5] += s.expired
        totals[6] += s.dropped
        totals[7] += s.rejected
    for key, total in zip(QUEUE_COUNTERS, totals):
        what = key.replace("_", "-")
        metrics.append(CounterMetricFamily(f"stompmq_{key}_all", f"Messages {what} in every queue, through "
                                           "this broker", value=total))
        family = CounterMetricFamily(f"stompmq_queue_{key}", f"Messages {what} through this broker, per queue "
                                     "(listed queues)", labels=["vhost", "queue", "broker"])
        for queue in top:
            counters = stats.get(queue)
            family.add_metric([*queue, management.broker_id], getattr(counters, key) if counters is not None else 0)
        metrics.append(family)

    ready = GaugeMetricFamily("stompmq_queue_ready", "Ready messages, per queue (listed queues)",
                              labels=["vhost", "queue"])
    unacked = GaugeMetricFamily("stompmq_queue_unacked", "Unacked messages, per queue (listed queues)",
                                labels=["vhost", "queue"])
    consumers = GaugeMetricFamily("stompmq_queue_consumers", "Subscriptions of this broker's connections, per "
                                  "queue (listed queues)", labels=["vhost", "queue"])
    ready_age = GaugeMetricFamily("stompmq_queue_oldest_ready_age_seconds", "Seconds since the oldest ready "
                                  "message was published, per queue (listed queues; 0: none ready)",
                                  labels=["vhost", "queue"])
    unacked_age = GaugeMetricFamily("stompmq_queue_oldest_unacked_age_seconds", "Seconds since the oldest "
                                    "unacked message was published, per queue (listed queues; 0: none)",
                                    labels=["vhost", "queue"])
    for row in listed:
        ready.add_metric([row.vhost, row.name], row.ready)
        unacked.add_metric([row.vhost, row.name], row.unacked)
        consumers.add_metric([row.vhost, row.name], row.consumers)
        engine = engines[row.vhost]
        oldest_ready, oldest_unacked = await management.answer(engine, engine.queue_ages(row.name))
        now = time.time()
        ready_age.add_metric([row.vhost, row.name], age_seconds(oldest_ready, now))
        unacked_age.add_metric([row.vhost, row.name], age_seconds(oldest_unacked, now))
    metrics += [ready, unacked, consumers, ready_age, unacked_age]

    now = time.time()
    lags = [(lag.entries, age_seconds(lag.oldest_ms, now), vhost, lag.stream, lag.group)
            for vhost, engine in engines.items() for lag in engine.stream_group_lags()]
    gauge("stompmq_stream_groups", "Consumer groups of streams (x-stream-group)", len(lags))
    gauge("stompmq_stream_group_lag_max", "The largest lag of any stream consumer group (entries)",
          max((lag[0] for lag in lags), default=0))
    gauge("stompmq_stream_group_lag_seconds_max", "The largest lag of any stream consumer group (seconds "
          "since its first unconsumed entry was appended)", max((lag[1] for lag in lags), default=0))
    group_lag = GaugeMetricFamily("stompmq_stream_group_lag", "Entries of a stream after its consumer group's "
                                  "committed offset (groups lagging most)", labels=["vhost", "stream", "group"])
    group_seconds = GaugeMetricFamily("stompmq_stream_group_lag_seconds", "Seconds since a consumer group's first "
                                      "unconsumed entry was appended, at most a segment early (groups lagging "
                                      "most)", labels=["vhost", "stream", "group"])
    for entries, seconds, vhost, stream, group in heapq.nlargest(management.settings.metrics_top_queues, lags):
        group_lag.add_metric([vhost, stream, group], entries)
        group_seconds.add_metric([vhost, stream, group], seconds)
    metrics += [group_lag, group_seconds]

    refusals = CounterMetricFamily("stompmq_limit_refusals", "Frames and connections a limit against one "
                                   "client holding the broker's memory refused (limit = its option)",
                                   labels=["limit"])
    for limit, count in sorted(management.runtime.broker.config.limit_hits.counts.items()):
        refusals.add_metric([limit], count)
    metrics.append(refusals)
    commits = management.store_metrics
    metrics.append(histogram("stompmq_store_commit_seconds", "Seconds from a commit group's submission to its "
                             "durable commit (fsync included)", commits.latency))
    metrics.append(histogram("stompmq_store_commit_group_size", "Operations per commit group", commits.size))
    routed = CounterMetricFamily("stompmq_exchange_routed", "Messages routed by an exchange",
                                 labels=["vhost", "exchange"])
    for vhost, engine in engines.items():
        for name, exchange in engine.exchanges.items():
            routed.add_metric([vhost, name], exchange.routed)
    metrics.append(routed)
    return generate_latest(_Scrape(metrics))


def metrics_route(management: Scraped) -> Callable[[Request], Awaitable[Response]]:
    async def metrics(request: Request) -> Response:
        return Response(await scrape(management), media_type=CONTENT_TYPE_LATEST)

    return metrics
