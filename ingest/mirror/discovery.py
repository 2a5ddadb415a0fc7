"""The topics and partitions of each source cluster: the mirror's units of work.

A **unit** is one source partition: ``(source, topic, broker_id, partition)``. A replicated topic's
partition is named by its home broker (the first replica of its assignment), a Kafka 0.7 topic's
by the broker that registered it, as everywhere in this project.

Two ways to find them, per source (``source.<name>.zk.connect`` or ``.broker.list``):

* **ZooKeeper**: :func:`ingest.client.topics_admin.read_all_topics` (replicated topics'
  assignments, and which of them are Kafka topics, ``"format":"kafka"``; 0.7 registrations ``/brokers/topics/[topic]/[broker_id]`` -> partition count, which
  are ephemeral: only live brokers' partitions are listed). Watches on ``/brokers/ids`` and
  ``/brokers/topics`` wake the mirror's control loop (``on_change``) when topics come or go.
* **broker list**: METADATA (request 11) to every listed broker gives its 0.7 partitions;
  TOPIC_METADATA (request 14) gives the replicated topics (with their replicas). Both are 0.7-port
  requests: a broker-list source's Kafka topics are not listed (mirror them from a ZooKeeper source). A broker that
  does not answer contributes nothing this round (its partitions come back when it answers).

Topics are filtered by :class:`TopicFilter` (whole-name ``whitelist`` / ``blacklist`` regexes;
the mirror's own ``monitoring.topic`` and ``lost.topic`` never pass). New topics are picked up at
the next poll (``topic.refresh.ms``) or watch event.
"""
from __future__ import annotations

import logging
import re
from typing import Callable, Iterable, NamedTuple

from kazoo.exceptions import KazooException

from ingest import znodes
from ingest.client.discovery import StaticDiscovery, ZkDiscovery, start_kazoo
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.client.simple_consumer import SimpleConsumer
from ingest.client.topics_admin import read_all_topics
from ingest.config import Config
from ingest.errors import IngestError, MirrorConfigError
from ingest.mirror.config import SourceSpec, excluded_topics, source_specs
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

_unreadable = RateLimitedLog(log, interval_s=60.0)
"""A source that stays unreadable is asked again every refresh: logged once a minute per source and cause."""


class UnitKey(NamedTuple):
    """One source partition the mirror copies (sortable; the group assigns these)."""

    source: str
    topic: str
    broker_id: int
    partition: int

    def __str__(self) -> str:
        return f"{self.source}:{self.topic}:{self.broker_id}-{self.partition}"


class TopicFilter:
    """Whole-name whitelist / blacklist regexes plus topics that are never mirrored.

    Raises:
        MirrorConfigError: a regex does not compile (names it and the error).
    """

    def __init__(self, whitelist: str = ".*", blacklist: str = "", excluded: Iterable[str] = ()) -> None:
        self.whitelist = _compile("whitelist", whitelist or ".*")
        self.blacklist = _compile("blacklist", blacklist) if blacklist else None
        self.excluded = frozenset(excluded)

    @classmethod
    def from_config(cls, config: Config) -> "TopicFilter":
        return cls(config["whitelist"], config["blacklist"], excluded_topics(config))

    def accepts(self, topic: str) -> bool:
        if topic in self.excluded or not self.whitelist.fullmatch(topic):
            return False
        return not (self.blacklist is not None and self.blacklist.fullmatch(topic))


def _compile(key: str, pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise MirrorConfigError(f"{key} {pattern!r} is not a valid regular expression: {exc}") from None


class SourceCluster:
    """One source cluster's brokers and topics (ZooKeeper or a static broker list).

    Attributes:
        spec: the source's name and where it is.
        discovery: the live brokers (:class:`ingest.client.discovery.Discovery`), for readers.
        metadata: TOPIC_METADATA cache (leaders of replicated partitions), for readers.
    """

    def __init__(self, spec: SourceSpec, *, session_timeout_ms: int = 6000, connection_timeout_ms: int = 10_000,
                 socket_timeout_ms: int = 30_000, zk=None) -> None:
        self.spec = spec
        self.name = spec.name
        self.timeout_s = socket_timeout_ms / 1000.0
        self.zk = zk
        if zk is not None:  # the caller's client (the target's, shared with the group)
            self.discovery = ZkDiscovery(zk, own_client=False)
        elif spec.zk_connect:
            self.zk = start_kazoo(spec.zk_connect, session_timeout_ms=session_timeout_ms,
                                  connection_timeout_ms=connection_timeout_ms)
            self.discovery = ZkDiscovery(self.zk, own_client=True)
        else:
            self.discovery = StaticDiscovery(spec.broker_list or "")
        self.metadata = ReplicaMetadata(lambda: self.discovery.brokers().values(), timeout_s=self.timeout_s)
        self._listed: dict[int, dict[str, list[tuple[int, int]]]] = {}   # broker id -> its last METADATA answer
        self.kafka_topics: frozenset[str] = frozenset()   # its Kafka topics (ZooKeeper: "format":"kafka")
        self.replicated_topics: frozenset[str] = frozenset()   # its replicated topics (0.7 and Kafka), last listing

    def add_listener(self, fn: Callable[[], None]) -> None:
        """``fn()`` after the broker or topic registry changed (ZooKeeper sources only)."""
        self.discovery.add_listener(fn)

    def partitions(self) -> dict[str, list[tuple[int, int]]]:
        """``{topic: sorted [(broker_id, partition)]}`` of every topic of this cluster now."""
        return self._zk_partitions() if self.zk is not None else self._listed_partitions()

    def _zk_partitions(self) -> dict[str, list[tuple[int, int]]]:
        topics = read_all_topics(self.zk)
        self.kafka_topics = topics.kafka
        self.replicated_topics = frozenset(topics.replicated)
        for name, why in topics.unreadable.items():
            _unreadable.warning(self.name, f"topic {name} skipped", "source %s: topic %s skipped: %s",
                                self.name, name, why)
        out = {t: sorted((replicas[0], p) for p, replicas in plan.items() if replicas)
               for t, plan in topics.replicated.items()}
        for t, counts in topics.legacy.items():
            out[t] = sorted((b, p) for b, n in counts.items() for p in range(n))
        return {t: parts for t, parts in out.items() if parts}

    def _listed_partitions(self) -> dict[str, list[tuple[int, int]]]:
        out: dict[str, list[tuple[int, int]]] = {}
        replicated: set[str] = set()
        try:
            for name in self.metadata.topics():
                t = self.metadata.topic(name)
                if t is not None:
                    replicated.add(name)
                    out[name] = sorted((p.home, p.partition) for p in t.partitions)
            self.replicated_topics = frozenset(replicated)
        except IngestError as exc:   # the last answer's replicated topics hold
            _unreadable.warning(self.name, "TOPIC_METADATA", "source %s: no broker answered TOPIC_METADATA: %s",
                                self.name, exc)
        for addr in self.discovery.brokers().values():
            try:
                with SimpleConsumer(addr.host, addr.port, timeout_s=self.timeout_s) as c:
                    answer = c.metadata()
                self._listed[addr.broker_id] = {t: [(addr.broker_id, p.partition) for p in parts]
                                                for t, parts in answer.topics.items()}
            except (IngestError, OSError) as exc:   # keep its last answer: a blip must not stop its copiers
                _unreadable.warning(self.name, f"METADATA of broker {addr.broker_id}",
                                    "source %s: broker %s did not answer METADATA (its last answer is used): %s",
                                    self.name, addr, exc)
            for topic, parts in self._listed.get(addr.broker_id, {}).items():
                if topic not in replicated:
                    out.setdefault(topic, []).extend(parts)
        return {t: sorted(set(parts)) for t, parts in out.items() if parts}

    def topic_format(self, topic: str) -> str | None:
        """``"kafka"`` for a Kafka topic of this cluster (as its last listing said), None for a 0.7 one."""
        return znodes.KAFKA_FORMAT if topic in self.kafka_topics else None

    def latest_offset(self, topic: str, broker_id: int, partition: int) -> int | None:
        """The partition's end (OFFSETS latest at its leader, or at its 0.7 broker); None when no broker
        answers now."""
        try:
            replicated = self.metadata.topic(topic)
            if replicated is not None:
                addr = self.metadata.leader(topic, partition)
            else:
                addr = self.discovery.brokers().get(broker_id)
                if addr is None:
                    return None
            with SimpleConsumer(addr.host, addr.port, timeout_s=self.timeout_s) as c:
                return c.latest_offset(topic, partition)
        except (IngestError, OSError, ValueError) as exc:
            log.debug("%s: no end of %s/%d-%d: %s", self.name, topic, broker_id, partition, exc)
            return None

    def close(self) -> None:
        self.discovery.close()


class SourceDiscovery:
    """Every source cluster of a mirror config; :meth:`units` lists what passes the filter."""

    def __init__(self, config: Config, *, topic_filter: TopicFilter | None = None) -> None:
        self.filter = topic_filter or TopicFilter.from_config(config)
        self.sources: dict[str, SourceCluster] = {}
        self._last: dict[str, dict[str, list[tuple[int, int]]]] = {}
        try:
            for spec in source_specs(config):
                self.sources[spec.name] = SourceCluster(
                    spec, session_timeout_ms=config["zk.sessiontimeout.ms"],
                    connection_timeout_ms=config["zk.connectiontimeout.ms"],
                    socket_timeout_ms=config["socket.timeout.ms"])
        except BaseException:
            self.close()
            raise

    def add_listener(self, fn: Callable[[], None]) -> None:
        for cluster in self.sources.values():
            cluster.add_listener(fn)

    def topic_partitions(self) -> dict[str, dict[str, list[tuple[int, int]]]]:
        """``{topic: {source: sorted [(broker_id, partition)]}}`` of the topics that pass the filter,
        sources in config order (the mapping order). A source that cannot be read now contributes its
        last answer (none before its first)."""
        out: dict[str, dict[str, list[tuple[int, int]]]] = {}
        for name, cluster in self.sources.items():
            try:
                self._last[name] = cluster.partitions()
            except (IngestError, KazooException) as exc:   # ZooKeeper away: the last answer holds (no copier stops for a blip)
                _unreadable.warning(name, "topics", "source %s: topics unreadable now (the last answer is used): %s",
                                    name, exc)
            for topic, parts in self._last.get(name, {}).items():
                if self.filter.accepts(topic):
                    out.setdefault(topic, {})[name] = parts
        return out

    def topic_format(self, topic: str) -> str | None:
        """``"kafka"`` when a source (the first, in ``sources`` order, that has the topic) lists ``topic`` as a
        Kafka topic, else None (0.7): the kind the target topic is created with."""
        for cluster in self.sources.values():
            if topic in self._last.get(cluster.name, {}):
                return cluster.topic_format(topic)
        return None

    def replicated_sources(self, topic: str) -> frozenset[str]:
        """The sources that list ``topic`` as a replicated topic (its partitions named by home broker), as their
        last listing said."""
        return frozenset(c.name for c in self.sources.values()
                         if topic in c.replicated_topics and topic in self._last.get(c.name, {}))

    def units(self) -> list[UnitKey]:
        """Every source partition to mirror now, sorted."""
        return units_of(self.topic_partitions())

    def close(self) -> None:
        for cluster in self.sources.values():
            try:
                cluster.close()
            except Exception:  # closing the others matters more than this one's error
                log.exception("closing source %s", cluster.name)


def units_of(topic_partitions: dict[str, dict[str, list[tuple[int, int]]]]) -> list[UnitKey]:
    return sorted(UnitKey(source, topic, b, p)
                  for topic, per_source in topic_partitions.items()
                  for source, parts in per_source.items() for b, p in parts)
