"""The broker's series: traffic counters fed by the handlers, and a collector that reads the logs at scrape time.

Three parts, all on one per-process registry (:func:`ingest.metrics.exporter.new_registry`):

- :class:`BrokerMetrics`: counters and histograms the request path updates. The
  handlers call :meth:`~BrokerMetrics.produced` after a set is appended (messages
  and bytes in per topic), :meth:`~BrokerMetrics.fetched` for the bytes a FETCH or
  MULTIFETCH part answers (bytes out per topic) and :meth:`~BrokerMetrics.error`
  when a request is refused; the logs call :meth:`~BrokerMetrics.flushed` with each
  fsync's duration. They are per-thread tallies (:mod:`ingest.metrics.tally`: no
  lock, under 0.5 us an update, where prometheus_client's own Counter and Histogram
  cost about 2 us each), turned into prometheus_client families when scraped. A
  broker without metrics uses :data:`NO_METRICS`, whose methods do nothing.
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

prometheus_client is imported inside the collecting functions: with
``metrics.port=-1`` the broker never imports it.
"""
from __future__ import annotations

import logging
from bisect import bisect_left
from time import perf_counter
from typing import Any

from ingest.metrics.tally import Tallies, add, observe
from ingest.wire.protocol import RequestType

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

    def authenticated(self, listener: str, mechanism: str, ok: bool) -> None:
        pass


NO_METRICS = NoBrokerMetrics()


class BrokerMetrics(NoBrokerMetrics):
    """The traffic tallies of one broker (see the module docstring). Thread-safe: per-thread tallies."""

    def __init__(self) -> None:
        self.tallies = Tallies(("messages_in", "bytes_in", "bytes_out", "errors", "latency", "flush",
                                "authentications"))
        self._local = self.tallies.local

    def _mine(self) -> dict[str, dict]:
        try:
            return self._local.t
        except AttributeError:
            return self.tallies.mine()

    def produced(self, topic: str, message_set) -> None:
        """A set (``count`` messages, ``size`` bytes) was appended to a partition of ``topic``."""
        try:
            t = self._local.t
        except AttributeError:
            t = self.tallies.mine()
        d = t["messages_in"]           # inlined add(): this runs once per produced set
        d[topic] = d.get(topic, 0) + message_set.count
        d = t["bytes_in"]
        d[topic] = d.get(topic, 0) + message_set.size

    def fetched(self, topic: str, nbytes: int) -> None:
        add(self._mine()["bytes_out"], topic, nbytes)

    def error(self, kind: int, code: str) -> None:
        add(self._mine()["errors"], (request_name(kind), code), 1)

    def request(self, kind: int, seconds: float) -> None:
        observe(self._mine()["latency"], kind, LATENCY_BUCKETS, seconds)

    def flushed(self, seconds: float) -> None:
        observe(self._mine()["flush"], None, FLUSH_BUCKETS, seconds)

    def authenticated(self, listener: str, mechanism: str, ok: bool) -> None:
        """A SASL authentication on ``listener`` with ``mechanism`` succeeded (``ok``) or failed."""
        add(self._mine()["authentications"], (listener, mechanism, "success" if ok else "failure"), 1)

    def families(self):
        """The tallies as prometheus_client families (called by :class:`BrokerCollector` at scrape time)."""
        # deferred: prometheus_client is only imported when metrics are on
        from prometheus_client.core import CounterMetricFamily

        t = self.tallies
        yield t.counter_family("messages_in", "ingest_broker_messages_in", "Messages appended by produce "
                               "requests (a compressed wrapper counts as one)", ["topic"])
        yield t.counter_family("bytes_in", "ingest_broker_bytes_in", "Bytes of message sets appended by produce "
                               "requests", ["topic"])
        yield t.counter_family("bytes_out", "ingest_broker_bytes_out", "Message-set bytes answered to FETCH and "
                               "MULTIFETCH", ["topic"])
        latency = t.histograms("latency", len(LATENCY_BUCKETS))
        requests = CounterMetricFamily("ingest_broker_requests", "Requests dispatched, by request type",
                                       labels=["type"])
        for kind, cells in sorted(latency.items()):
            requests.add_metric([request_name(kind)], sum(cells[:-1]))
        yield requests
        yield t.counter_family("errors", "ingest_broker_request_errors", "Requests refused with an error code "
                               "(answered, or dropped for responseless PRODUCE/MULTIPRODUCE)", ["type", "code"],
                               lambda key: list(key))
        yield t.histogram_family("latency", "ingest_broker_request_latency_seconds", "Time the handler took, by "
                                 "request type (a deferred acks=-1 answer: until it was queued)", LATENCY_BUCKETS,
                                 ["type"], lambda kind: [request_name(kind)])
        yield t.counter_family("authentications", "ingest_broker_sasl_authentications", "SASL authentications on "
                               "the Kafka listeners, by listener, mechanism and result (success, failure)",
                               ["listener", "mechanism", "result"], lambda key: list(key))
        yield t.histogram_family("flush", "ingest_broker_log_flush_latency_seconds", "Duration of each log fsync",
                                 FLUSH_BUCKETS, [])


class MeteredDispatcher:
    """The handlers as the network layer sees them, with each request counted and timed.

    :meth:`dispatch` is :meth:`BrokerMetrics.request` inlined (it runs once per request):
    the handlers' ``dispatch`` never raises (it answers every failure), so no
    ``try``/``finally`` is needed either.
    """

    def __init__(self, handlers, metrics: BrokerMetrics) -> None:
        self._dispatch = handlers.dispatch
        self._metrics = metrics
        self._local = metrics.tallies.local
        self.connection_closed = handlers.connection_closed

    def dispatch(self, kind: int, body: memoryview, client: str):
        began = perf_counter()
        reply = self._dispatch(kind, body, client)
        seconds = perf_counter() - began
        try:
            latency = self._local.t["latency"]
        except AttributeError:
            latency = self._metrics.tallies.mine()["latency"]
        cells = latency.get(kind)
        if cells is None:
            cells = latency[kind] = [0] * (len(LATENCY_BUCKETS) + 1) + [0.0]
        cells[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        cells[-1] += seconds
        return reply


class BrokerCollector:
    """Series read from the broker's own state at scrape time (see the module docstring).

    ``broker``: the :class:`~ingest.broker.broker.BrokerServer` (its ``log_manager``,
    ``handlers``, ``replicas`` and ``network`` are read when scraped; any may be None
    while it starts or stops).
    """

    def __init__(self, broker) -> None:
        self.broker = broker   # its ``metrics`` (BrokerMetrics) are exposed too

    def describe(self):
        return []   # the series depend on the logs present at scrape time

    def collect(self):
        # deferred: prometheus_client is only imported when metrics are on
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        b = self.broker
        yield from b.metrics.families()
        size = GaugeMetricFamily("ingest_broker_log_size_bytes", "Bytes in the partition's segment files "
                                 "(unflushed included)", labels=["topic", "partition"])
        segments = GaugeMetricFamily("ingest_broker_log_segments", "Segment files of the partition",
                                     labels=["topic", "partition"])
        offline = GaugeMetricFamily("ingest_broker_offline_logs", "Partition logs an I/O error took offline")
        damaged = GaugeMetricFamily("ingest_broker_log_damaged_ranges", "Damaged ranges known in the partition's "
                                    "log (bytes that failed validation on disk; only partitions with some)",
                                    labels=["topic", "partition"])
        n_offline = 0
        if b.log_manager is not None:
            for (topic, partition), lg in sorted(b.log_manager.logs().items()):
                size.add_metric([topic, str(partition)], lg.size)
                segments.add_metric([topic, str(partition)], len(lg.segments()))
                n_offline += lg.offline
                n_damaged = len(lg.damaged_ranges())
                if n_damaged:
                    damaged.add_metric([topic, str(partition)], n_damaged)
        offline.add_metric([], n_offline)
        yield size
        yield segments
        yield offline
        yield damaged
        yield from self._replication(b.replicas)
        yield self._group_lag(b)
        yield self._refusals(CounterMetricFamily)
        yield self._denials(CounterMetricFamily)
        conns = GaugeMetricFamily("ingest_broker_connections", "Open client connections")
        conns.add_metric([], b.network.connection_count() if b.network is not None else 0)
        yield conns

    @staticmethod
    def _group_lag(b):
        # deferred: prometheus_client is only imported when metrics are on
        from prometheus_client.core import GaugeMetricFamily

        lag = GaugeMetricFamily("ingest_group_lag", "Records between a consumer group's committed offset and the "
                                "partition's log end (groups this broker coordinates, partitions it has a replica "
                                "of)", labels=["group", "topic", "partition"])
        apis, logs = getattr(b, "kafka_apis", None), b.log_manager
        if apis is not None and logs is not None:
            def log_end(topic: str, partition: int) -> int | None:
                lg = logs.get_log(topic, partition)
                return None if lg is None else lg.end_offset
            for group, topic, partition, n in apis.groups.lags(log_end):
                lag.add_metric([group, topic, str(partition)], n)
        return lag

    def _replication(self, replicas):
        # deferred: prometheus_client is only imported when metrics are on
        from prometheus_client.core import GaugeMetricFamily

        under = GaugeMetricFamily("ingest_broker_under_replicated_partitions",
                                  "Partitions this broker leads whose in-sync set is smaller than their replica set")
        isr = GaugeMetricFamily("ingest_broker_partition_in_sync_replicas", "In-sync replicas of a partition this "
                                "broker leads", labels=["topic", "partition"])
        stalled = GaugeMetricFamily("ingest_broker_replica_fetch_stalled", "1 for each partition this broker "
                                    "follows whose fetcher cannot copy past its position (the leader's bytes there "
                                    "are damaged); ingest topics describe says why", labels=["topic", "partition",
                                                                                             "leader"])
        failed = GaugeMetricFamily("ingest_broker_storage_failed_replicas", "Replicas on this broker that cannot "
                                   "write (disk full, a failed write or fsync, the log offline); they lead nothing "
                                   "and are out of the in-sync sets")
        count = n_failed = 0
        if replicas is not None:
            for (topic, partition), part in sorted(dict(replicas.partitions).items()):
                n_failed += part.storage_failure is not None
                if part.role.name != "LEADER":
                    continue
                in_sync = len(part.isr)
                isr.add_metric([topic, str(partition)], in_sync)
                count += in_sync < len(part.replicas)
            for (topic, partition), stall in sorted(replicas.stalls.stalls().items()):
                stalled.add_metric([topic, str(partition), str(stall.leader)], 1)
        under.add_metric([], count)
        failed.add_metric([], n_failed)
        return under, isr, stalled, failed

    def _denials(self, family):
        denied = family("ingest_broker_authorization_denials", "Requests (or parts of requests) the authorizer "
                        "denied, by request, resource type and operation (resource type Replica: a replica id "
                        "claimed by a principal that is not that broker's)",
                        labels=["request", "resource_type", "operation"])
        apis = self.broker.kafka_apis
        authorizer = apis.authorizer if apis is not None else None
        if authorizer is not None:
            for (request, rtype, op), n in sorted(authorizer.denials().items()):
                denied.add_metric([request, rtype, op], n)
        return denied

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
