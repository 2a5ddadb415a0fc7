"""Mapping: which target partition each source partition of a mirrored topic is copied to.

The documented order (docs/mirroring.md, "Mapping"): for topic T, the source
partitions are listed source by source in the ``sources`` order of the mirror's
config, and within one source sorted by ``(broker_id, partition)`` (a replicated
source partition is named by its home broker, ``replicas[0]``, as everywhere in
this project). They get target partitions 0, 1, 2, ... of T: the target topic has
(at least) the sum of the sources' partitions and every copy is one to one (verbatim
message sets, exactly once).

The mirror creates T on the target as a *replicated* topic with those partitions plus a
reserve of spare ones (``target.partitions.reserve``; -1, the default, means ``max(4, needed)``;
:func:`ingest.client.topics_admin.create_topic`) and records the mapping as JSON in
``znodes.mirror_mapping_path(group, T)``; every process of the group reads the recorded mapping,
so a mapped partition never moves under a running copy. A source partition that appears later
(a new partition, or a source that was down or slower to show the topic) gets the next unused
target partition, in the documented order among the new ones, by a version-conditional update of
the mapping: still one to one. When no spare one is left (the source topic grew by more than the
reserve), the target topic grows first (:func:`ingest.client.topics_alter.add_partitions`, the rule of
``ingest topics alter``) to the partitions the mapping then needs plus the reserve. A target-topic
creation that fails records nothing (MirrorError: the caller tries again later).

**A moved replicated partition** (a reassignment moved its first replica, so it has a new name) is not a
new partition: it keeps the target partition of its former home's entry (recorded as an entry of its own,
without taking a spare one), and its copier resumes from the former home's checkpoint
(:func:`ingest.mirror.checkpoint.former_home_checkpoint`, the rule of :mod:`ingest.home_broker`), so the
target partition goes on one to one and nothing is copied twice.

**Fallback** (``target_partition=None``: repartitioned by ``header.session`` with the ordinary
producer, at least once) is left for what cannot be one to one: the spares are used up and the target
topic cannot grow (being reassigned or deleted, too few live brokers for its replication factor), or the
target topic already existed with fewer partitions than the mapping needs or as an unreplicated (Kafka 0.7)
topic.

:func:`plan_units` is the pure planning function; :func:`ensure_mapping` does the
ZooKeeper work (every kazoo call through ``client.retry``).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ingest import znodes
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.broker.assignment import MAX_PARTITIONS
from ingest.errors import MirrorError, ReplicationConfigError
from ingest.home_broker import furthest_former

log = logging.getLogger(__name__)

FALLBACK_STATUS = "at-least-once (repartitioned)"
EXACT_STATUS = "exactly-once (one to one)"


@dataclass(frozen=True, slots=True, order=True)
class MirrorUnit:
    """One source partition and where it goes: ``target_partition`` None = fallback (repartitioned).
    ``replicated``: the source topic is replicated (``broker_id`` is the home broker, which a reassignment
    can move); not part of the unit's identity."""

    source: str
    topic: str
    broker_id: int
    partition: int
    target_partition: int | None
    replicated: bool = field(default=False, compare=False)

    @property
    def key(self) -> tuple[str, str, int, int]:
        """The source partition (what the group assigns): ``(source, topic, broker_id, partition)``."""
        return (self.source, self.topic, self.broker_id, self.partition)

    @property
    def fallback(self) -> bool:
        return self.target_partition is None

    def session(self, group: str) -> str:
        """The unit's monitoring session: ``mirror:<group>:<source>:<topic>:<broker_id>-<partition>``."""
        return f"mirror:{group}:{self.source}:{self.topic}:{znodes.partition_name(self.broker_id, self.partition)}"

    def __str__(self) -> str:
        to = "fallback" if self.target_partition is None else f"target {self.target_partition}"
        return f"{self.source}:{self.topic}:{self.broker_id}-{self.partition} -> {to}"


# --- pure planning ---------------------------------------------------------------------------

def plan_units(topic: str, sources: Sequence[str],
               partitions: Mapping[str, Iterable[tuple[int, int]]]) -> list[MirrorUnit]:
    """The documented order: sources in ``sources`` order, each sorted by ``(broker_id, partition)``,
    numbered 0, 1, 2, ... A source in ``partitions`` but not in ``sources`` is refused.

    Raises:
        MirrorError: a source name not in ``sources``.
    """
    unknown = sorted(set(partitions) - set(sources))
    if unknown:
        raise MirrorError(f"topic {topic!r}: partitions of source(s) {unknown} which are not in the "
                          f"configured sources {list(sources)}")
    units: list[MirrorUnit] = []
    for source in sources:
        for broker_id, partition in sorted(set(partitions.get(source, ()))):
            units.append(MirrorUnit(source, topic, broker_id, partition, len(units)))
    return units


def apply_mapping(recorded: Sequence[MirrorUnit], topic: str,
                  partitions: Mapping[str, Iterable[tuple[int, int]]],
                  target_partitions: int | None, replicated: Iterable[str] = ()) -> list[MirrorUnit]:
    """The units of the source partitions seen now, against the recorded mapping.

    A partition in the recorded mapping keeps its target partition when the target topic (replicated,
    ``target_partitions`` partitions; None = missing or unreplicated) has it; any other partition is a
    fallback unit. The units of the sources in ``replicated`` (whose topic is replicated there) say so.
    Sorted in the documented order of the recorded sources first.
    """
    replicated = frozenset(replicated)
    by_key = {u.key: u.target_partition for u in recorded}
    out = []
    for source in partitions:
        for broker_id, partition in sorted(set(partitions[source])):
            tp = by_key.get((source, topic, broker_id, partition))
            if tp is not None and (target_partitions is None or tp >= target_partitions):
                tp = None
            out.append(MirrorUnit(source, topic, broker_id, partition, tp, source in replicated))
    order = {u.key: i for i, u in enumerate(recorded)}
    return sorted(out, key=lambda u: (order.get(u.key, len(order)), u.key))


def mapping_value(units: Sequence[MirrorUnit], *, target_partitions: int | None, created_at_ms: int,
                  reason: str | None = None) -> bytes:
    """The JSON recorded in ``/mirrors/[group]/mappings/[topic]``."""
    return json.dumps({
        "version": 1,
        "target_partitions": target_partitions,
        "fallback_reason": reason,
        "created_at_ms": created_at_ms,
        "partitions": [{"source": u.source, "broker_id": u.broker_id, "partition": u.partition,
                        "target_partition": u.target_partition} for u in units],
    }, sort_keys=True).encode()


def parse_mapping(topic: str, data: bytes) -> tuple[list[MirrorUnit], str | None]:
    """``(units, fallback_reason)`` of a recorded mapping.

    Raises:
        MirrorError: the znode does not hold a mapping of this layout (names the bad value).
    """
    try:
        obj = json.loads(data.decode())
        units = [MirrorUnit(str(p["source"]), topic, int(p["broker_id"]), int(p["partition"]),
                            None if p["target_partition"] is None else int(p["target_partition"]))
                 for p in obj["partitions"]]
        return units, obj.get("fallback_reason")
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise MirrorError(f"the mirror mapping of topic {topic!r} is unreadable ({exc}): {data[:120]!r}; expected "
                          "JSON {\"partitions\": [{\"source\", \"broker_id\", \"partition\", "
                          "\"target_partition\"}, ...]}") from None


# --- ZooKeeper -----------------------------------------------------------------------------

@dataclass(frozen=True)
class TopicMapping:
    """What :func:`ensure_mapping` found: the units now, and why some are fallback (None: none are)."""

    topic: str
    units: list[MirrorUnit]
    target_partitions: int | None
    fallback_reason: str | None

    def status(self, unit: MirrorUnit) -> str:
        return FALLBACK_STATUS if unit.fallback else EXACT_STATUS


def target_topic_partitions(zk, topic: str, topic_format: str | None = None) -> tuple[int | None, str | None]:
    """``(partition count of the replicated target topic, None)``, or ``(None, why)`` when it is missing,
    unreplicated, unreadable, or of the other kind than ``topic_format`` (``"kafka"``, or None: 0.7)."""
    from ingest.client.topics_admin import read_all_topics  # deferred: it imports kazoo

    topics = read_all_topics(zk, only=topic)
    if topic in topics.replicated:
        if (topic in topics.kafka) != (topic_format == znodes.KAFKA_FORMAT):
            kind = "a Kafka topic" if topic in topics.kafka else "a 0.7 topic"
            return None, f"target topic {topic!r} exists as {kind}, and the source's is the other kind"
        return len(topics.replicated[topic]), None
    if topic in topics.legacy:
        return None, f"target topic {topic!r} exists as an unreplicated (Kafka 0.7) topic"
    if topic in topics.unreadable:
        return None, f"target topic {topic!r}: {topics.unreadable[topic]}"
    return None, f"target topic {topic!r} does not exist"


def reserve_partitions(needed: int, reserve: int) -> int:
    """Spare target partitions for source partitions that appear later: ``reserve``, or when -1
    (auto) ``max(4, needed)``."""
    return max(4, needed) if reserve < 0 else reserve


def read_mapping(zk, group: str, topic: str) -> tuple[list[MirrorUnit], str | None, int] | None:
    """``(units, fallback_reason, znode version)`` of the recorded mapping of ``topic``, or None."""
    from kazoo.exceptions import NoNodeError  # deferred: kazoo

    try:
        data, stat = zk.retry(zk.get, znodes.mirror_mapping_path(group, topic))
    except NoNodeError:
        return None
    units, reason = parse_mapping(topic, data)
    return units, reason, stat.version


def _create_target(zk, topic: str, needed: int, reserve: int, replication_factor: int,
                   topic_format: str | None = None) -> tuple[int, str | None]:
    """Create the replicated target topic with ``needed`` + reserve partitions, of the source's kind
    (``topic_format``: ``"kafka"`` or None for 0.7), or find it.

    Returns ``(partitions, None)``, or ``(partitions or 0, why it cannot take the mapping one to one)``
    when it exists unreplicated or with fewer than ``needed`` partitions.

    Raises:
        MirrorError: the topic could not be created (no target broker, too few for the replication
            factor, ...): nothing is recorded, the caller tries again later.
    """
    count, why = target_topic_partitions(zk, topic, topic_format)
    if count is None and why is not None and why.endswith("does not exist"):
        total = needed + reserve_partitions(needed, reserve)
        try:
            from ingest.client.topics_admin import create_topic  # deferred: it imports kazoo

            create_topic(zk, topic, partitions=total, replication_factor=replication_factor, manual=None,
                         topic_format=topic_format)
            log.info("created target topic %s (%s): %d partition(s) (%d mapped now, %d spare), replication factor %d",
                     topic, "Kafka" if topic_format == znodes.KAFKA_FORMAT else "0.7", total, needed, total - needed,
                     replication_factor)
        except ReplicationConfigError as exc:
            count, why = target_topic_partitions(zk, topic, topic_format)  # created by someone else meanwhile?
            if count is None and why.endswith("does not exist"):
                raise MirrorError(f"target topic {topic!r} could not be created ({exc}); the mirror tries again "
                                  "later and records no mapping before it exists") from None
        count, why = target_topic_partitions(zk, topic, topic_format)
    if count is not None and count < needed:
        return count, (f"target topic {topic!r} has {count} partition(s), fewer than the {needed} source "
                       "partitions of the mapping")
    return count or 0, why


def _plan_order(sources: Sequence[str], key: tuple[str, str, int, int]) -> tuple:
    return (list(sources).index(key[0]) if key[0] in sources else len(sources), key[2], key[3])


def moved_units(recorded: Sequence[MirrorUnit], topic: str, parts: Mapping[str, Iterable[tuple[int, int]]],
                replicated: Iterable[str]) -> list[MirrorUnit]:
    """The source partitions not in the recorded mapping that are a recorded partition of a replicated source
    under a new home broker (a reassignment moved its first replica): each with the target partition of its
    former home's entry (the last recorded one, when it moved more than once)."""
    known = {u.key for u in recorded}
    out = []
    for source in sorted(set(replicated) & set(parts)):
        former = [(u.broker_id, u.partition, (i, u)) for i, u in enumerate(recorded) if u.source == source]
        for b, p in sorted(set(parts[source])):
            if (source, topic, b, p) in known:
                continue
            found = furthest_former(former, b, p, offset=lambda iu: iu[0])
            if found is not None:
                out.append(MirrorUnit(source, topic, b, p, found[1][1].target_partition, True))
    return out


def _grow(zk, group: str, topic: str, sources: Sequence[str], recorded: list[MirrorUnit], version: int,
          parts: Mapping[str, list[tuple[int, int]]], count: int, replicated: Iterable[str] = ()) -> bool:
    """Record the moved partitions of replicated sources (:func:`moved_units`) with their former home's target
    partition, and give the other source partitions not in the recorded mapping the next unused target
    partitions (one to one), in the documented order among them, while the target topic has spare ones. True
    if the mapping was updated (or someone else updated it meanwhile: read it again)."""
    from kazoo.exceptions import BadVersionError  # deferred: kazoo

    unknown = sorted({s for s in parts} - set(sources))
    if unknown:
        raise MirrorError(f"topic {topic!r}: partitions of source(s) {unknown} which are not in the configured "
                          f"sources {list(sources)}")
    moved = moved_units(recorded, topic, parts, replicated)
    known = {u.key for u in recorded} | {u.key for u in moved}
    new = sorted(((s, topic, b, p) for s in parts for b, p in parts[s] if (s, topic, b, p) not in known),
                 key=lambda k: _plan_order(sources, k))
    nxt = max((u.target_partition for u in recorded if u.target_partition is not None), default=-1) + 1
    added = moved + [MirrorUnit(k[0], topic, k[2], k[3], tp) for k, tp in zip(new, range(nxt, count))]
    if not added:
        return False
    data, _ = zk.retry(zk.get, znodes.mirror_mapping_path(group, topic))
    obj = json.loads(data.decode())
    value = mapping_value(recorded + added, target_partitions=obj.get("target_partitions"),
                          created_at_ms=obj.get("created_at_ms", 0), reason=None)
    try:
        zk.retry(zk.set, znodes.mirror_mapping_path(group, topic), value, version=version)
    except BadVersionError:
        return True
    if moved:
        log.info("topic %s: source partition(s) under a new home broker (reassigned) keep their target partition: "
                 "%s", topic, ", ".join(str(u) for u in moved))
    if len(added) > len(moved):
        log.info("topic %s: new source partition(s) mapped one to one to spare target partitions: %s", topic,
                 ", ".join(str(u) for u in added[len(moved):]))
    return True


def _grow_target(zk, topic: str, recorded: list[MirrorUnit], parts: Mapping[str, list[tuple[int, int]]],
                 count: int, reserve: int, topic_format: str | None, replicated: Iterable[str] = ()) -> bool:
    """Add partitions to the target topic when source partitions not in the recorded mapping find no spare
    one left (the source topic grew, ``ingest topics alter``): to the partitions the mapping then needs plus
    the reserve, the rule of its creation. True if the target grew (or someone else grew it meanwhile: read
    it again); False when there is nothing to do or it cannot grow (logged; those partitions fall back)."""
    from ingest.client.topics_alter import add_partitions  # deferred: it imports kazoo

    known = {u.key for u in recorded} | {u.key for u in moved_units(recorded, topic, parts, replicated)}
    new = [(s, b, p) for s in parts for b, p in parts[s] if (s, topic, b, p) not in known]
    nxt = max((u.target_partition for u in recorded if u.target_partition is not None), default=-1) + 1
    if not new or nxt + len(new) <= count:
        return False
    needed = nxt + len(new)
    total = min(needed + reserve_partitions(needed, reserve), MAX_PARTITIONS)
    try:
        growth = add_partitions(zk, topic, total)
    except ReplicationConfigError as exc:
        now, _ = target_topic_partitions(zk, topic, topic_format)
        if now is not None and now > count:
            return True   # grown by another member of the group meanwhile
        log.warning("topic %s: %d new source partition(s) found no spare target partition, and the target topic "
                    "could not grow to %d: %s", topic, len(new), total, exc)
        return False
    log.info("topic %s: the source topic grew; target topic %s: %d -> %d partition(s) (%d mapped, %d spare)",
             topic, topic, growth.before, growth.after, needed, growth.after - needed)
    return True


def ensure_mapping(zk, group: str, topic: str, sources: Sequence[str],
                   partitions: Mapping[str, Iterable[tuple[int, int]]], *, replication_factor: int = 1,
                   reserve: int = -1, topic_format: str | None = None, replicated: Iterable[str] = (),
                   clock: Clock = SYSTEM_CLOCK) -> TopicMapping:
    """Create the target topic and record the mapping the first time ``topic`` is seen; afterwards read the
    recorded one, and give source partitions that appeared since the target topic's spare partitions.
    Returns the units of the source partitions in ``partitions`` (seen now).

    ``zk`` is a started kazoo client of the *target* ZooKeeper. The target topic gets the mapped
    partitions plus ``reserve`` spare ones (-1: ``max(4, needed)``), and the source's kind
    (``topic_format``: ``"kafka"`` for a Kafka topic, None for a 0.7 one). ``replicated`` names the sources whose
    topic is replicated: their partitions under a new home broker keep their target partition
    (:func:`moved_units`). Racing processes converge: the mapping
    is created with one ``create`` and grown with version-conditional ``set`` calls; a loser reads the
    winner's.

    Raises:
        MirrorError: the target topic could not be created (nothing recorded: call again later), a recorded
            mapping is unreadable, or ``partitions`` names a source not in ``sources``.
    """
    from kazoo.exceptions import NodeExistsError  # deferred: kazoo

    parts = {s: sorted(set(p)) for s, p in partitions.items()}
    replicated = frozenset(replicated)
    for _ in range(20):
        recorded = read_mapping(zk, group, topic)
        if recorded is None:
            planned = plan_units(topic, sources, parts)
            if not planned:
                return TopicMapping(topic, [], None, None)
            count, reason = _create_target(zk, topic, len(planned), reserve, replication_factor, topic_format)
            if reason is not None:
                planned = [MirrorUnit(u.source, u.topic, u.broker_id, u.partition, None) for u in planned]
                log.warning("topic %s: %s; its %d partition(s) are mirrored in fallback mode (%s)",
                            topic, reason, len(planned), FALLBACK_STATUS)
            value = mapping_value(planned, target_partitions=count, created_at_ms=clock.time_ms(), reason=reason)
            try:
                zk.retry(zk.create, znodes.mirror_mapping_path(group, topic), value, makepath=True)
                log.info("topic %s: recorded the mirror mapping of %d partition(s)", topic, len(planned))
            except NodeExistsError:
                pass
            continue
        units_recorded, reason, version = recorded
        count, why = target_topic_partitions(zk, topic, topic_format)
        if reason is None and count is not None and _grow(zk, group, topic, sources, units_recorded, version,
                                                          parts, count, replicated):
            continue
        if reason is None and count is not None and _grow_target(zk, topic, units_recorded, parts, count, reserve,
                                                                      topic_format, replicated):
            continue
        units = apply_mapping(units_recorded, topic, parts, count, replicated)
        fallback = [u for u in units if u.fallback]
        if fallback and reason is None:
            reason = why or (f"{len(fallback)} source partition(s) appeared after the mapping was made and the "
                             f"target topic has no spare partition left for them: "
                             f"{', '.join(str(u) for u in fallback[:5])}")
        return TopicMapping(topic, units, count, reason if fallback else None)
    raise MirrorError(f"topic {topic!r}: the mirror mapping kept changing under 20 attempts to read it")
