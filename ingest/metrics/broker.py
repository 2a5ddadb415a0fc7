"""The broker's series: traffic counters fed by the handlers, and a collector that reads the logs at scrape time.

Three parts, all on one per-process registry (:func:`ingest.metrics.exporter.new_registry`):

- :class:`BrokerMetrics`: counters and histograms the request path updates. The
  handlers call :meth:`~BrokerMetrics.produced` after a set is appended (messages
  and bytes in per topic), :meth:`~BrokerMetrics.fetched` for the bytes a FETCH or
  MULTIFETCH part answers (bytes out per topic) and :meth:`~BrokerMetrics.error`
  when a request is refused; the logs call :meth:`~BrokerMetrics.flushed` with each
  fsync's duration. Children are cached per label value, so an update is one dict
  lookup and one locked add. A broker without metrics uses :data:`NO_METRICS`,
  whose methods do nothing.
- :class:`MeteredDispatcher`: wraps the handlers for the network layer; counts
  every request and observes the time the handler took, by request type.
- :class:`BrokerCollector`: a custom collector that, when scraped, reads what
  the broker already keeps: log size and segment count per partition
  (:class:`~ingest.broker.log_manager.LogManager`), under-replicated partitions
  (the replica manager's in-sync sets), refused requests
  (:meth:`ProduceRefusals.totals <ingest.broker.refusals.ProduceRefusals.totals>` and
  the network layer's refused frames) and open connections. Nothing is updated per
  write for these.

Messages out are not counted: a fetch answers a byte range of a segment with
``sendfile`` (zero copy) and never parses it, so the broker knows the bytes it
sends, not the messages (Kafka's ``BrokerTopicMetrics`` has BytesOutPerSec and no
MessagesOutPerSec for the same reason). Consumers count what they read (the
loader's run record). Messages are counted as stored: a compressed wrapper is one.

prometheus_client is imported inside the constructors: with ``metrics.port=-1``
the broker never imports it.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from ingest.broker.protocol_codec import RequestType

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)
"""Request latency buckets (seconds): a PRODUCE is tens of microseconds, a deferred acks=-1 answer up to seconds."""
FLUSH_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""fsync latency buckets (seconds): page-cache flushes on tmpfs are microseconds, a busy disk seconds."""


def request_name(kind: int) -> str:
    """The request type's name (``PRODUCE``...), ``UNKNOWN`` for a key the broker does not know."""
    try:
        return RequestType(kind).name
    except ValueError:
        return "UNKNOWN"


class NoBrokerMetrics:
    """What the handlers call when metrics are off: nothing happens."""

    def produced(self, topic: str, message_set: Any) -> None:
        pass

    def fetched(self, topic: str, nbytes: int) -> None:
        pass

    def error(self, kind: int, code: str) -> None:
        pass

    def flushed(self, seconds: float) -> None:
        pass


NO_METRICS = NoBrokerMetrics()


class BrokerMetrics(NoBrokerMetrics):
    """The counters and histograms of one broker (see the module docstring). Thread-safe."""

    def __init__(self, registry) -> None:
        # deferred: prometheus_client is only imported when metrics are on
        from prometheus_client import Counter, Histogram

        self.messages_in = Counter("ingest_broker_messages_in", "Messages appended by produce requests "
                                   "(a compressed wrapper counts as one)", ["topic"], registry=registry)
        self.bytes_in = Counter("ingest_broker_bytes_in", "Bytes of message sets appended by produce requests",
                                ["topic"], registry=registry)
        self.bytes_out = Counter("ingest_broker_bytes_out", "Message-set bytes answered to FETCH and MULTIFETCH",
                                 ["topic"], registry=registry)
        self.requests = Counter("ingest_broker_requests", "Requests dispatched, by request type", ["type"],
                                registry=registry)
        self.errors = Counter("ingest_broker_request_errors", "Requests refused with an error code (answered, "
                              "or dropped for responseless PRODUCE/MULTIPRODUCE)", ["type", "code"],
                              registry=registry)
        self.latency = Histogram("ingest_broker_request_latency_seconds", "Time the handler took, by request type "
                                 "(a deferred acks=-1 answer: until it was queued)", ["type"],
                                 buckets=LATENCY_BUCKETS, registry=registry)
        self.flush_latency = Histogram("ingest_broker_log_flush_latency_seconds", "Duration of each log fsync",
                                       buckets=FLUSH_BUCKETS, registry=registry)
        self._in: dict[str, tuple[Any, Any]] = {}
        self._out: dict[str, Any] = {}
        self._req: dict[int, tuple[Any, Any]] = {}

    def produced(self, topic: str, message_set) -> None:
        """A set (``count`` messages, ``size`` bytes) was appended to a partition of ``topic``."""
        pair = self._in.get(topic)
        if pair is None:
            pair = self._in.setdefault(topic, (self.messages_in.labels(topic), self.bytes_in.labels(topic)))
        pair[0].inc(message_set.count)
        pair[1].inc(message_set.size)

    def fetched(self, topic: str, nbytes: int) -> None:
        child = self._out.get(topic)
        if child is None:
            child = self._out.setdefault(topic, self.bytes_out.labels(topic))
        child.inc(nbytes)

    def error(self, kind: int, code: str) -> None:
        self.errors.labels(request_name(kind), code).inc()

    def request(self, kind: int, seconds: float) -> None:
        pair = self._req.get(kind)
        if pair is None:
            name = request_name(kind)
            pair = self._req.setdefault(kind, (self.requests.labels(name), self.latency.labels(name)))
        pair[0].inc()
        pair[1].observe(seconds)

    def flushed(self, seconds: float) -> None:
        self.flush_latency.observe(seconds)


class MeteredDispatcher:
    """The handlers as the network layer sees them, with each request counted and timed."""

    def __init__(self, handlers, metrics: BrokerMetrics) -> None:
        self._dispatch = handlers.dispatch
        self._metrics = metrics
        self.connection_closed = handlers.connection_closed

    def dispatch(self, kind: int, body: memoryview, client: str):
        began = time.perf_counter()
        try:
            return self._dispatch(kind, body, client)
        finally:
            self._metrics.request(kind, time.perf_counter() - began)


class BrokerCollector:
    """Series read from the broker's own state at scrape time (see the module docstring).

    ``broker``: the :class:`~ingest.broker.broker.BrokerServer` (its ``log_manager``,
    ``handlers``, ``replicas`` and ``network`` are read when scraped; any may be None
    while it starts or stops).
    """

    def __init__(self, broker) -> None:
        self.broker = broker

    def describe(self):
        return []   # the series depend on the logs present at scrape time

    def collect(self):
        # deferred: prometheus_client is only imported when metrics are on
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        b = self.broker
        size = GaugeMetricFamily("ingest_broker_log_size_bytes", "Bytes in the partition's segment files "
                                 "(unflushed included)", labels=["topic", "partition"])
        segments = GaugeMetricFamily("ingest_broker_log_segments", "Segment files of the partition",
                                     labels=["topic", "partition"])
        offline = GaugeMetricFamily("ingest_broker_offline_logs", "Partition logs an I/O error took offline")
        n_offline = 0
        if b.log_manager is not None:
            for (topic, partition), lg in sorted(b.log_manager.logs().items()):
                size.add_metric([topic, str(partition)], lg.size)
                segments.add_metric([topic, str(partition)], len(lg.segments()))
                n_offline += lg.offline
        offline.add_metric([], n_offline)
        yield size
        yield segments
        yield offline
        yield from self._replication(b.replicas)
        yield self._refusals(CounterMetricFamily)
        conns = GaugeMetricFamily("ingest_broker_connections", "Open client connections")
        conns.add_metric([], b.network.connection_count() if b.network is not None else 0)
        yield conns

    def _replication(self, replicas):
        from prometheus_client.core import GaugeMetricFamily

        under = GaugeMetricFamily("ingest_broker_under_replicated_partitions",
                                  "Partitions this broker leads whose in-sync set is smaller than their replica set")
        isr = GaugeMetricFamily("ingest_broker_partition_in_sync_replicas", "In-sync replicas of a partition this "
                                "broker leads", labels=["topic", "partition"])
        count = 0
        if replicas is not None:
            for (topic, partition), part in sorted(dict(replicas.partitions).items()):
                if part.role.name != "LEADER":
                    continue
                in_sync = len(part.isr)
                isr.add_metric([topic, str(partition)], in_sync)
                count += in_sync < len(part.replicas)
        under.add_metric([], count)
        return under, isr

    def _refusals(self, family):
        refused = family("ingest_broker_refused_requests", "Requests refused by the broker: responseless produce "
                         "refusals (the reason is the error code) and frames the network layer refused",
                         labels=["request", "reason"])
        totals: dict[tuple[str, str], int] = {}
        h = self.broker.handlers
        if h is not None:
            for reason, n in h.produce_refusals.totals().items():
                request, _, code = reason.partition(" ")
                totals[(request, code)] = totals.get((request, code), 0) + n
        net = self.broker.network
        if net is not None:
            for code, n in net.refused_frames().items():
                totals[("FRAME", code)] = totals.get(("FRAME", code), 0) + n
        for (request, code), n in sorted(totals.items()):
            refused.add_metric([request, code], n)
        return refused
