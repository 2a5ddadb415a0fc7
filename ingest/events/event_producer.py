"""The event producer: fills headers, frames Avro, counts per window, publishes monitoring events.

Applications call :meth:`EventProducer.send` with records that lack the
``header``; the producer fills it (time, server, service, session, seq),
serializes with the topic's registered schema (subject ``<topic>-value``) and
hands the bytes to :class:`ingest.client.producer.Producer`. Its per-send
callback settles the counts (acked / failed) in the :class:`MonitoringCounter`.

A reporter thread (``monitoring.tick.ms``) collects due snapshots into the
bounded :class:`ReportBuffer` and publishes them, oldest first, through a
separate sync Producer (no internal retries) to the audit topic. A failed
publish is retried with back-off; the application's sends never wait for it.
On :meth:`close` the data producer is drained, every window gets a last report
(``is_final`` when all its sends settled), and the buffer is published, all within
the close's ``timeout_s``: data messages still queued (async) or being retried when
the time is up are reported failed, monitoring events not published stay pending
(counted and logged); nothing unsent is ever counted acknowledged.

Concurrency contract: ``send`` may be called from any thread; ``poll`` and
``close`` serialize on one lock.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ingest.client.producer import Producer, SendResult
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.errors import ConfigError, IngestError, MessageTooLargeError, SchemaError
from ingest.events.event_producer_config import EVENTS_CONFIG
from ingest.events.envelope import HEADER_FIELD, HeaderFactory, ProducerIdentity, has_header
from ingest.events.window_counts import MonitoringCounter, ReportBuffer
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import MONITORING_EVENT, load_schema, schema_for_topic
from ingest.events.serde import EventSerializer, subject_for_topic
from ingest.registry_client_config import RegistryAuth

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 10.0


@dataclass
class _Tracker:
    """One ``send`` call's messages, settled in order as per-batch callbacks arrive."""

    topic: str
    windows: list[int]
    sizes: list[int]
    pos: int = 0


class EventProducer:
    """Publishes events with headers and monitoring; see the module docstring.

    Args:
        producer: the data Producer (shared, not closed) or a producer config
            (mapping or Config) from which one is built (and closed on close()).
        registry: schema registry client; None: one for ``schema.registry.url`` with the credentials
            and TLS files of the config (``basic.auth.user.info``, ``schema.registry.ssl.*``).
        config: EVENTS_CONFIG keys (mapping or Config); keyword overrides win.
        clock: all window logic and header times use it.
        background: run the reporter thread; tests with a FakeClock pass False and call poll().
        topics: topics to track from the start (heartbeats even before their first send).
        monitoring_producer: Producer for monitoring events (default: sync, built from the data
            producer's config with no internal retries). It must be sync: an event is counted
            published when its send returns, which for an async producer means only enqueued.

    Raises:
        ConfigError: an async ``monitoring_producer``.
    """

    def __init__(self, producer: Producer | Config | Mapping[str, Any], registry: RegistryClient | None, *,
                 config: Config | Mapping[str, Any] | None = None, clock: Clock = SYSTEM_CLOCK,
                 background: bool = True, topics: Sequence[str] = (),
                 monitoring_producer: Producer | None = None, **overrides: Any) -> None:
        if monitoring_producer is not None and monitoring_producer.config["producer.type"] != "sync":
            raise ConfigError("monitoring_producer has producer.type=async: its send only enqueues, so a monitoring "
                              "event would count as published before a broker had it; give a sync Producer "
                              "(or none: the default is sync)")
        raw = dict(config.items()) if isinstance(config, Config) else dict(config or {})
        raw.update({k.replace("_", "."): v for k, v in overrides.items()})
        self.config = EVENTS_CONFIG.parse(raw, source="EventProducer")
        self.clock = clock
        if registry is None:
            if not self.config["schema.registry.url"]:
                raise ConfigError("EventProducer: give a RegistryClient or schema.registry.url in its config")
            registry = RegistryClient(self.config["schema.registry.url"], auth=RegistryAuth.from_config(self.config))
        self.registry = registry
        self._own_producer = not isinstance(producer, Producer)
        self.producer = Producer(producer, clock=clock) if self._own_producer else producer
        self.identity = ProducerIdentity.new(self.config["service.name"], self.config["server.name"])
        self.headers = HeaderFactory(self.identity, clock)
        self.audit_topic = self.config["audit.topic"]
        self.monitoring = self.config["monitoring.enable"]
        self.counter = MonitoringCounter(
            clock, self.config["monitoring.window.ms"], grace_ms=self.config["monitoring.grace.ms"],
            interval_ms=self.config["monitoring.interval.ms"], heartbeats=self.config["monitoring.heartbeats"])
        self.buffer = ReportBuffer(self.identity, self.config["monitoring.window.ms"],
                                   self.config["monitoring.buffer.size"])
        self._serializers: dict[str, EventSerializer] = {}
        self._ser_lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._own_mon_producer = monitoring_producer is None
        self._mon_producer = monitoring_producer
        self._retry_at = 0.0
        self._backoff = 0.0
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        log.info("event producer session %s (service %s on %s); monitoring %s to %s, window %d ms",
                 self.identity.session, self.identity.service, self.identity.server,
                 "on" if self.monitoring else "off", self.audit_topic, self.config["monitoring.window.ms"])
        for t in topics:
            self.counter.track(t)
        if self.monitoring:
            self._serializer(self.audit_topic, load_schema(MONITORING_EVENT))
            if background:
                self._thread = threading.Thread(target=self._run, name="monitoring-reporter", daemon=True)
                self._thread.start()

    @property
    def session(self) -> str:
        return self.identity.session

    # --- application sends ---------------------------------------------------------------

    def register_topic(self, topic: str, schema: dict | None = None) -> int:
        """Register the value schema of ``topic`` (default: the example schema for its name); returns the id."""
        return self._serializer(topic, schema).schema_id

    def _serializer(self, topic: str, schema: dict | None = None) -> EventSerializer:
        ser = self._serializers.get(topic)
        if ser is not None and (schema is None or schema == ser.schema):
            return ser
        with self._ser_lock:
            if schema is None:
                schema = load_schema(schema_for_topic(topic, self.audit_topic))
            if not has_header(schema):
                raise SchemaError(f"schema for topic {topic!r} has no field 'header' of record "
                                  "ingest.events.EventHeader; every event schema must carry it")
            ser = EventSerializer(self.registry, subject_for_topic(topic), schema)
            self._serializers[topic] = ser
            return ser

    def send(self, topic: str, records: dict | Sequence[dict], *, key: bytes | str | None = None,
             time_ms: int | None = None) -> list[dict]:
        """Fill headers, serialize and send ``records`` (one or many) to ``topic``.

        Returns the headers given to the records, in order. Counting: every record is
        ``attempted`` in the window of its ``header.time``; the producer's callback
        settles it as acked or failed.

        Raises:
            SchemaError: a record does not match the topic's schema (nothing was sent).
            IngestError: what the data Producer raises (sync: the batch failed; it is counted failed).
        """
        if self._closed:
            raise IngestError("event producer is closed")
        if topic == self.audit_topic:
            raise IngestError(f"topic {topic!r} is the audit topic; monitoring events are published by the producer")
        if isinstance(records, dict):
            records = [records]
        ser = self._serializer(topic)
        headers, payloads, windows = [], [], []
        for record in records:
            header = self.headers.next(time_ms)
            payloads.append(ser.serialize({**record, HEADER_FIELD: header}))
            headers.append(header)
        window_ms = self.counter.window_ms
        by_window: dict[int, list[int]] = {}
        for header in headers:  # one counter update per window, not per event
            start = header["time"] - header["time"] % window_ms
            windows.append(start)
            by_window.setdefault(start, []).append(header["seq"])
        for start, seqs in by_window.items():
            self.counter.attempted(topic, start, seqs)
        tracker = _Tracker(topic, windows, [len(p) for p in payloads])
        try:
            self.producer.send(topic, payloads, key=key, callback=lambda r: self._on_result(tracker, r))
        except MessageTooLargeError:
            self._settle(tracker, len(payloads) - tracker.pos, ok=False)  # refused before sending
            raise
        return headers

    def _on_result(self, tracker: _Tracker, result: SendResult) -> None:
        self._settle(tracker, result.count, ok=result.error is None)

    def _settle(self, tracker: _Tracker, count: int, *, ok: bool) -> None:
        lo, hi = tracker.pos, min(tracker.pos + count, len(tracker.windows))
        tracker.pos = hi
        per_window: dict[int, list[int]] = {}
        for i in range(lo, hi):
            per_window.setdefault(tracker.windows[i], []).append(tracker.sizes[i])
        for window, sizes in per_window.items():
            if ok:
                self.counter.settled(tracker.topic, window, acked=len(sizes), bytes_acked=sum(sizes))
            else:
                self.counter.settled(tracker.topic, window, failed=len(sizes))

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every data send so far is settled (async producer)."""
        self.producer.flush(timeout_s)

    # --- monitoring ---------------------------------------------------------------------------

    def _monitoring_producer(self) -> Producer:
        if self._mon_producer is None:
            # the reporter retries on its own schedule: one attempt, and no long wait for a broker
            overrides = {"producer.type": "sync", "message.send.max.retries": 0,
                         "socket.timeout.ms": min(5000, self.producer.config["socket.timeout.ms"]),
                         "delivery.timeout.ms": min(5000, self.producer.config["delivery.timeout.ms"])}
            self._mon_producer = Producer(self.producer.config.with_overrides(overrides), clock=self.clock)
        return self._mon_producer

    def poll(self, *, closing: bool = False) -> int:
        """One reporting pass: collect due snapshots, publish what the broker takes. Returns events published."""
        if not self.monitoring:
            return 0
        with self._poll_lock:
            for snap in self.counter.collect(closing=closing):
                self.buffer.offer(snap)
            return self._publish()

    def _publish(self) -> int:
        published = 0
        ser = self._serializers[self.audit_topic]
        while True:
            if self.clock.monotonic() < self._retry_at:
                return published
            event = self.buffer.head()
            if event is None:
                return published
            if event.payload is None:
                header = self.headers.next(event.record["emitted_at_ms"])
                event.payload = ser.serialize({**event.record, HEADER_FIELD: header})
            event.attempts += 1
            try:
                self._monitoring_producer().send(self.audit_topic, [event.payload])
            except Exception as exc:  # IngestError, or anything from building the producer: retry later
                self._backoff = min(MAX_BACKOFF_S, max(self._backoff * 2,
                                                       self.config["monitoring.retry.backoff.ms"] / 1000.0))
                self._retry_at = self.clock.monotonic() + self._backoff
                log.warning("monitoring event report_seq %d not published (attempt %d, %d pending): %s; "
                            "retrying in %.1f s", event.record["report_seq"], event.attempts, len(self.buffer),
                            exc, self._backoff)
                return published
            self._backoff = 0.0
            self.buffer.done(event)
            published += 1

    def _run(self) -> None:
        tick = self.config["monitoring.tick.ms"] / 1000.0
        while not self._stop.wait(tick):
            try:
                self.poll()
            except Exception:  # the reporter must survive anything; the next tick retries
                log.exception("monitoring reporter pass failed")

    def close(self, timeout_s: float = 30.0) -> dict[str, int]:
        """Drain data sends, report every window, publish monitoring events, within ``timeout_s``.

        When the time is up, the data messages still queued (async) or being retried are reported
        failed (an own producer is closed with the time left; a shared one is only flushed) and
        unpublished monitoring events stay pending (``monitoring_pending``, logged at ERROR). A
        request in flight at that moment may add its own timeout; monitoring events get at least
        one publish attempt. Returns the final stats (see :meth:`stats`).
        """
        if self._closed:
            return self.stats()
        self._closed = True
        deadline = self.clock.monotonic() + timeout_s
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._own_producer:
            self.producer.close(timeout_s=max(0.0, deadline - self.clock.monotonic()))
        else:
            try:
                self.producer.flush(max(0.0, deadline - self.clock.monotonic()))
            except IngestError as exc:
                log.warning("data producer flush: %s", exc)
        if self.monitoring:
            self.poll(closing=True)
            while len(self.buffer) and self.clock.monotonic() < deadline:
                self._retry_at = min(self._retry_at, self.clock.monotonic() + 0.5)
                self.clock.sleep(max(0.0, min(0.5, self._retry_at - self.clock.monotonic())))
                self.poll(closing=True)
            if len(self.buffer):
                log.error("closing with %d monitoring events unpublished (broker unreachable for %.0f s)",
                          len(self.buffer), timeout_s)
        if self._mon_producer is not None and self._own_mon_producer:
            self._mon_producer.close()
        stats = self.stats()
        log.info("event producer session %s closed: %s", self.session, stats)
        return stats

    def stats(self) -> dict[str, int]:
        """attempted / acked / failed / bytes_acked (data) and monitoring published / pending / dropped."""
        out = self.counter.totals()
        out.update(monitoring_published=self.buffer.published, monitoring_pending=len(self.buffer),
                   monitoring_dropped=self.buffer.dropped, monitoring_too_late=self.counter.too_late)
        return out

    def __enter__(self) -> "EventProducer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
