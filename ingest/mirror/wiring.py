"""What the copiers of one mirror process share, and how one copier is built.

* **mappings**: before a topic's first unit starts, :func:`ingest.mirror.mapping.ensure_mapping`
  creates the target topic (replicated, one partition per source partition plus
  ``target.partitions.reserve`` spares) and records the mapping (or reads the recorded one). It is
  asked again when the topic's source partitions change (a new one takes the next spare). A topic is held back (its units wait, nothing is recorded) while the target has fewer
  live brokers than ``target.replication.factor``: creating it then would fail and fix the topic
  in the at-least-once fallback for good.
* **kinds**: a topic that its first source lists as a Kafka topic is created on the target as a Kafka
  topic, and its units copy through the Kafka listeners (found in each cluster's ZooKeeper);
* **clients**: the source clusters' discoveries and TOPIC_METADATA caches, the target's, one
  fallback producer (made on first need), and, when ``registry.url`` is set, the header reader and
  the tier-event publisher with one :class:`PartitionCounter` per unit (without a registry the
  mirror publishes no monitoring events: the audit then has no mirror tiers for these topics).
"""
from __future__ import annotations

import logging
import socket
import threading
from typing import Any

from ingest import znodes
from ingest.client.discovery import read_brokers
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.errors import IngestError
from ingest.mirror.config import fetch_settings, target_security
from ingest.mirror.copier_factory import make_copier, make_fallback_producer
from ingest.mirror.discovery import SourceCluster, SourceDiscovery, UnitKey
from ingest.mirror.kafka_io import kafka_bootstrap
from ingest.mirror.mapping import MirrorUnit, TopicMapping, ensure_mapping
from ingest.ratelimited_log import RateLimitedLog
from ingest.registry_client_config import RegistryAuth

log = logging.getLogger(__name__)

_waiting = RateLimitedLog(log, interval_s=60.0)
"""A topic whose mapping cannot be made is tried again each round: logged once a minute per topic and cause."""

Partitions = dict[str, list[tuple[int, int]]]


class Wiring:
    """Mappings and shared clients of one mirror process (thread-safe)."""

    def __init__(self, config: Config, zk, sources: SourceDiscovery, target: SourceCluster, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.zk = zk
        self.sources = sources
        self.target = target
        self.clock = clock
        self.group = config["mirror.group"]
        self.server = socket.gethostname()
        self._lock = threading.Lock()
        self._mappings: dict[str, tuple[Partitions, TopicMapping]] = {}
        self._fallback = None
        self._events: tuple[Any, Any] | None = None   # (header reader, publisher)
        self._held: set[str] = set()

    # --- mappings ------------------------------------------------------------------------------

    def prepare(self, topics: dict[str, Partitions]) -> set[str]:
        """Ensure the mapping of each topic (``{topic: {source: [(broker, partition)]}}``); returns the
        topics whose units may start."""
        ready = set()
        live = None
        for topic, parts in sorted(topics.items()):
            with self._lock:
                cached = self._mappings.get(topic)
            if cached is not None and cached[0] == parts:
                ready.add(topic)
                continue
            if cached is None:
                live = len(read_brokers(self.zk)) if live is None else live
                if live < self.config["target.replication.factor"]:
                    if topic not in self._held:
                        log.warning("topic %s waits: the target has %d live broker(s), target.replication.factor "
                                    "is %d", topic, live, self.config["target.replication.factor"])
                        self._held.add(topic)
                    continue
            self._held.discard(topic)
            try:
                mapping = ensure_mapping(self.zk, self.group, topic, list(self.sources.sources), parts,
                                         replication_factor=self.config["target.replication.factor"],
                                         reserve=self.config["target.partitions.reserve"],
                                         topic_format=self.sources.topic_format(topic),
                                         replicated=self.sources.replicated_sources(topic), clock=self.clock)
            except IngestError as exc:   # this topic waits (logged once a minute); the others go on
                _waiting.warning(topic, type(exc).__name__, "topic %s: no mapping now: %s", topic, exc)
                continue
            if mapping.fallback_reason:
                log.warning("topic %s: %s", topic, mapping.fallback_reason)
            with self._lock:
                self._mappings[topic] = (parts, mapping)
            ready.add(topic)
        return ready

    def unit(self, key: UnitKey) -> MirrorUnit:
        with self._lock:
            _, mapping = self._mappings[key.topic]
        for u in mapping.units:
            if u.key == tuple(key):
                return u
        raise KeyError(f"{key} is not in the mapping of topic {key.topic!r}")

    # --- copiers ------------------------------------------------------------------------------

    def copier(self, key: UnitKey):
        """The data path's copier of ``key`` (its topic prepared)."""
        c = self.config
        unit = self.unit(key)
        cluster = self.sources.sources[key.source]
        header_reader, publisher = self._event_parts()
        kafka = None
        security = (cluster.spec.security, target_security(c))
        if cluster.topic_format(key.topic) == znodes.KAFKA_FORMAT:
            kafka = (kafka_bootstrap(cluster.zk, security[0].protocol), kafka_bootstrap(self.zk, security[1].protocol))
        return make_copier(
            unit, group=self.group, zk=self.zk, source_discovery=cluster.discovery,
            target_metadata=self.target.metadata, source_metadata=cluster.metadata,
            fallback_producer=self._fallback_producer() if unit.fallback else None,
            counter_factory=self._counter_factory(unit, header_reader) if publisher is not None else None,
            publisher=publisher, header_reader=header_reader, fetch=fetch_settings(c), acks=c["target.acks"],
            timeout_ms=c["target.timeout.ms"], checkpoint_interval_ms=c["checkpoint.interval.ms"],
            mirror_server=self.server, kafka_bootstrap=kafka, kafka_security=security, clock=self.clock)

    def _fallback_producer(self):
        with self._lock:
            if self._fallback is None:
                self._fallback = make_fallback_producer(self.target.discovery, acks=self.config["target.acks"],
                                                        timeout_ms=self.config["target.timeout.ms"])
            return self._fallback

    def _event_parts(self) -> tuple[Any, Any]:
        """(HeaderReader, TierEventPublisher), both None without ``registry.url``."""
        url = self.config["registry.url"]
        if not url:
            return None, None
        with self._lock:
            if self._events is None:
                # deferred: the event modules import fastavro (Avro), needed only with a registry
                from ingest.events.header_reader import HeaderReader
                from ingest.events.registry_client import RegistryClient
                from ingest.mirror.tier_events import TierEventPublisher

                registry = RegistryClient(url, auth=RegistryAuth.from_config(self.config))
                # the target's security settings: the events' topics are Kafka-format topics by default
                producer_config = {**target_security(self.config).client_keys(),
                                   "zk.connect": self.config["target.zk.connect"], "producer.type": "sync",
                                   "request.required.acks": self.config["target.acks"],
                                   "request.timeout.ms": self.config["target.timeout.ms"]}
                self._events = (HeaderReader(registry), TierEventPublisher(
                    producer_config, registry, monitoring_topic=self.config["monitoring.topic"],
                    lost_topic=self.config["lost.topic"]))
            return self._events

    def _counter_factory(self, unit: MirrorUnit, header_reader):
        # deferred: tier_counts imports the event envelope (fastavro)
        from ingest.mirror.tier_counts import PartitionCounter

        c = self.config

        def make(state):
            return PartitionCounter(session=unit.session(self.group), topic=unit.topic, source=unit.source,
                                    mirror_server=self.server, window_ms=c["monitoring.window.ms"],
                                    interval_ms=c["monitoring.interval.ms"], header_reader=header_reader,
                                    clock=self.clock, state=state)
        return make

    def close(self) -> None:
        with self._lock:
            closing = [self._fallback, self._events[1] if self._events else None]
            self._fallback = self._events = None
        for part in closing:
            if part is not None and hasattr(part, "close"):
                try:
                    part.close()
                except Exception:
                    log.exception("closing %s", part)
