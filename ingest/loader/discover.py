"""Find every broker/topic/partition and its offsets, as the run's fixed snapshot.

Brokers come from ``brokers`` (``host:port`` list, each asked METADATA for its id
and topics) or from ZooKeeper (``zk.connect``: ``/brokers/ids/<id> -> host:port``).
The latest offsets in the answers are the run's end offsets: data arriving later
waits for the next run.

Replicated topics are not in METADATA answers: they come from TOPIC_METADATA
(:class:`~ingest.client.replica_metadata.ReplicaMetadata`, asked of the same
brokers). Each partition is named by its home broker (its first replica) and its
offsets are asked of its current leader (:class:`~ingest.client.leader_consumer.LeaderConsumer`,
which follows a failover): earliest, and latest = the high watermark, so a run
loads only what every in-sync replica has. The snapshot carries the brokers'
``host:port`` list, from which a task finds the leader again.

What cannot be reached is left out of the run, not fatal to it (as Camus skips a
partition whose leader is not available): a broker that does not answer METADATA
(one SIGKILLed moments ago stays registered in ZooKeeper until its session
expires), with all its Kafka 0.7 partitions; a replicated partition that has no
leader when the run plans, or none reachable within ``socket.timeout.ms``. Each
is logged and returned as a :class:`~ingest.loader.plan.LeftOut` (the run record
and summary list them); committed offsets stay, and the next run loads them. Only
when no broker answers does discovery fail (``BrokerUnavailableError``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from ingest import znodes
from ingest.client.deleted_segments import DeletedSegment
from ingest.client.discovery import BrokerAddress, read_brokers, start_kazoo
from ingest.client.fetch_settings import FetchSettings
from ingest.client.leader_consumer import LeaderConsumer, static_metadata
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.client.partition_reader import open_consumer
from ingest.client.simple_consumer import EARLIEST, LATEST, SimpleConsumer
from ingest.config import non_ascii_note
from ingest.errors import (BrokerUnavailableError, ConfigError, IngestError, LeaderNotAvailableError,
                           NotLeaderForPartitionError)
from ingest.loader.fetch import raw_fetch
from ingest.loader.kafka_topics import kafka_partitions, kafka_probe
from ingest.loader.plan import LeftOut, PartitionSnapshot, Probe
from ingest.loader.records import PartitionKey
from ingest.records.message_batch import iter_messages
from ingest.zk_security import ZkSecurity
from ingest.registry_client_config import RegistryAuth

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Discovery:
    """What discovery found: the partitions a run can plan, and what it left out (and why)."""

    snapshots: list[PartitionSnapshot]
    left_out: list[LeftOut]

    def complete(self, what: str) -> list[PartitionSnapshot]:
        """The snapshots, when nothing was left out.

        Raises:
            BrokerUnavailableError: ``what`` (a replay) must see every partition, and some were left out.
        """
        if self.left_out:
            raise BrokerUnavailableError(
                f"{what} needs every partition, and these cannot be reached now: "
                + "; ".join(lo.describe() for lo in self.left_out) + ". Retry once they are back")
        return self.snapshots


def registered_brokers(config) -> list[tuple[int | None, str, int]]:
    """``(id, host, port)`` of every broker, from ZooKeeper, or from ``brokers`` (id None: unknown)."""
    if config["brokers"]:
        out: list[tuple[int | None, str, int]] = []
        for item in config["brokers"]:
            host, sep, port = item.rpartition(":")
            if not sep or not (port.isascii() and port.isdigit()) or not host:
                raise ConfigError(f"brokers: {item!r} is not host:port{non_ascii_note(item)}")
            out.append((None, host, int(port)))
        return out
    if config["zk.connect"]:
        zk = start_kazoo(config["zk.connect"], connection_timeout_ms=config["zk.connectiontimeout.ms"],
                         security=ZkSecurity.from_config(config))
        try:
            found = [(bid, a.host, a.port) for bid, a in sorted(read_brokers(zk).items())]
        finally:
            zk.stop()
            zk.close()
        if not found:
            raise BrokerUnavailableError(f"no broker registered under {znodes.BROKER_IDS} in {config['zk.connect']}")
        return found
    if config.get("bootstrap.servers"):
        return []   # Kafka-format topics only
    raise ConfigError("loader config needs 'brokers' (host:port list), 'zk.connect' or 'bootstrap.servers' "
                      "(Kafka listeners, host:port list)")


def broker_addresses(config) -> list[tuple[str, int]]:
    """``(host, port)`` of every broker, from ``brokers`` or ZooKeeper."""
    return [(host, port) for _, host, port in registered_brokers(config)]


def _consumer(host: str, port: int, config):
    return SimpleConsumer(host, port, settings=FetchSettings.from_config(config))


def replicated_partitions(config, addresses: list[tuple[str, int]]) -> tuple[list[PartitionSnapshot], list[LeftOut]]:
    """Every partition of every replicated topic, named by its home broker, offsets from its leader;
    and those left out (no leader, none reachable). ``addresses``: those that answer first."""
    shipped = ",".join(f"{h}:{p}" for h, p in addresses)
    metadata = static_metadata(shipped, timeout_s=config["socket.timeout.ms"] / 1000.0)
    out: list[PartitionSnapshot] = []
    left_out: list[LeftOut] = []
    try:
        topics = metadata.topics()
    except BrokerUnavailableError as exc:
        # every broker just answered METADATA: these cannot answer TOPIC_METADATA (a broker
        # of a version before replication); a replicated topic's data waits for a run that sees it
        log.warning("no replicated topic is loaded in this run: %s", exc)
        return [], [LeftOut(f"every replicated topic: no broker answered TOPIC_METADATA ({exc})")]
    found = []
    for topic in topics:
        t = metadata.topic(topic)
        found += [(topic, part) for part in (t.partitions if t is not None else ())]
    with LeaderConsumer(metadata, settings=FetchSettings.from_config(config)) as lc:
        asked = offsets_by_leader(lc, metadata, [(topic, part.partition) for topic, part in found if part.leader >= 0])
        for topic, part in found:
            p = part.partition
            if part.leader < 0:
                reason = f"no leader now (in-sync {list(part.isr)})"
                log.warning("replicated %s-%d (home broker %d): %s: left out of this run", topic, p, part.home,
                            reason)
                left_out.append(LeftOut(reason, part.home, topic=topic, partition=p))
                continue
            try:
                # what the leader's pipelined answers did not give is asked alone, following a failover
                earliest, latest = asked.get((topic, p)) or (lc.earliest_offset(topic, p), lc.latest_offset(topic, p))
                leader: BrokerAddress = metadata.leader(topic, p)
            except (LeaderNotAvailableError, NotLeaderForPartitionError, BrokerUnavailableError) as exc:
                log.warning("replicated %s-%d (home broker %d) left out of this run: %s", topic, p, part.home, exc)
                left_out.append(LeftOut(f"no reachable leader: {exc}", part.home, topic=topic, partition=p))
                continue
            out.append(PartitionSnapshot(topic, part.home, p, leader.host, leader.port, shipped, earliest=earliest,
                                         latest=latest))
    return out, left_out


def offsets_by_leader(lc: LeaderConsumer, metadata: ReplicaMetadata,
                      partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """``(earliest, latest)`` of replicated partitions, asked of each leader on one connection with its
    OFFSETS questions pipelined (an OFFSETS request names one partition: the questions share round trips,
    as the partitions of one Kafka ListOffsets share a request). A partition whose leader is unknown,
    answered an error for it, or did not answer is missing from the result: the caller asks it alone."""
    by_leader: dict[BrokerAddress, list[tuple[str, int]]] = {}
    for topic, p in partitions:
        try:
            addr = metadata.leader(topic, p)
        except (LeaderNotAvailableError, BrokerUnavailableError, ValueError):
            continue
        by_leader.setdefault(addr, []).append((topic, p))
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for addr, parts in by_leader.items():
        questions = [(t, p, when, 1) for t, p in parts for when in (EARLIEST, LATEST)]
        try:
            answers = lc.consumer_at(addr).offsets_many(questions)
        except IngestError as exc:
            log.info("pipelined OFFSETS of %d partition(s) from broker %s failed (%s): each is asked alone",
                     len(parts), addr, exc)
            continue
        for i, key in enumerate(parts):
            (e_err, e_offs), (l_err, l_offs) = answers[2 * i], answers[2 * i + 1]
            if e_err == 0 and l_err == 0:
                out[key] = (e_offs[0] if e_offs else 0, l_offs[0] if l_offs else 0)
    return out


def discover_all(config) -> Discovery:
    """Every partition of every broker that answers, with its earliest and latest offsets (all
    topics), then every partition of every replicated topic, then every partition of the Kafka-format
    topics of the clusters ``bootstrap.servers`` reach (:mod:`ingest.loader.kafka_topics`), and what
    was left out (see the module docstring).

    Raises:
        BrokerUnavailableError: no broker (and no Kafka listener) answered.
        ConfigError: one broker id answered at two addresses, or one partition key was found twice.
    """
    out: list[PartitionSnapshot] = []
    left_out: list[LeftOut] = []
    seen: set[int] = set()
    answered: list[tuple[str, int]] = []
    silent: list[tuple[str, int]] = []
    registered = registered_brokers(config)
    for bid, host, port in registered:
        try:
            with _consumer(host, port, config) as c:
                md = c.metadata()
        except IngestError as exc:
            if not exc.retriable:
                raise
            log.warning("broker %s at %s:%d did not answer METADATA (%s): its Kafka 0.7 partitions are left out "
                        "of this run", "?" if bid is None else bid, host, port, exc)
            left_out.append(LeftOut(f"did not answer METADATA ({exc})", bid, f"{host}:{port}"))
            silent.append((host, port))
            continue
        if md.broker_id in seen:
            raise ConfigError(f"broker id {md.broker_id} answered at two addresses (second: {host}:{port})")
        seen.add(md.broker_id)
        answered.append((host, port))
        for topic, parts in md.topics.items():
            for p in parts:
                out.append(PartitionSnapshot(topic, md.broker_id, p.partition, host, port, earliest=p.earliest,
                                             latest=p.latest))
    kafka, kafka_left_out, kafka_answered = kafka_partitions(config)
    if not answered and not kafka_answered:
        raise BrokerUnavailableError("no broker answered METADATA: "
                                     + "; ".join(lo.describe() for lo in left_out + kafka_left_out))
    replicated, unreachable = replicated_partitions(config, answered + silent) if registered else ([], [])
    found = out + replicated + kafka
    keys: dict = {}
    for snap in found:
        other = keys.setdefault(snap.key, snap)
        if other is not snap:
            raise ConfigError(f"{snap.topic} b{snap.broker_id} p{snap.partition} was found twice: as a {other.kind} "
                              f"topic's partition at {other.host}:{other.port} and as a {snap.kind} topic's at "
                              f"{snap.host}:{snap.port}; a topic has one kind, and broker ids are unique across the "
                              "brokers and Kafka listeners of one loader config")
    return Discovery(found, left_out + unreachable + kafka_left_out)


def discover(config) -> list[PartitionSnapshot]:
    """The partitions :func:`discover_all` finds (what it leaves out is logged)."""
    return discover_all(config).snapshots


def segment_starts(config, snapshots: Sequence[PartitionSnapshot] = ()):
    """A callable: a partition's segment start offsets (cut points for splitting, and each task's last
    segment start for the tally).

    The first question about a partition of ``snapshots`` asks every Kafka 0.7 partition of them at
    once: one connection per broker (a replicated partition's: its leader when discovered), its OFFSETS
    questions pipelined (:func:`segment_starts_by_broker`), instead of a connection and a round trip per
    partition. A partition that exchange could not answer (its leader moved, its broker went silent), and
    any other partition, is asked alone, following a failover."""
    batched: dict[PartitionKey, tuple[int, ...]] | None = None

    def fetch(snap: PartitionSnapshot) -> Sequence[int]:
        nonlocal batched
        if snap.kafka:
            return ()   # record offsets: a Kafka-format partition's range is not cut at segments
        if batched is None:
            batched = segment_starts_by_broker(config, [s for s in snapshots if not s.kafka])
        if snap.key in batched:
            return batched[snap.key]
        with open_consumer(snap, FetchSettings.from_config(config)) as c:
            return c.offsets_before(snap.topic, snap.partition, -1, 1 << 30)

    return fetch


def segment_starts_by_broker(config, snapshots: Sequence[PartitionSnapshot]) -> dict[PartitionKey, tuple[int, ...]]:
    """The segment starts of Kafka 0.7 partitions, asked of each partition's broker (``host:port``: a
    replicated partition's leader when discovered) on one connection with the questions pipelined; a
    partition missing from the result was not answered (an error, a silent broker)."""
    by_broker: dict[tuple[str, int], list[PartitionSnapshot]] = {}
    for snap in snapshots:
        by_broker.setdefault((snap.host, snap.port), []).append(snap)
    out: dict[PartitionKey, tuple[int, ...]] = {}
    for (host, port), snaps in by_broker.items():
        try:
            with _consumer(host, port, config) as c:
                answers = c.offsets_many([(s.topic, s.partition, LATEST, 1 << 30) for s in snaps])
        except IngestError as exc:
            log.info("pipelined segment starts of %d partition(s) from %s:%d failed (%s): each is asked alone",
                     len(snaps), host, port, exc)
            continue
        out.update((s.key, tuple(offsets)) for s, (error, offsets) in zip(snaps, answers) if error == 0)
    return out


def deleted_segments_asker(config, questions: Sequence[tuple[PartitionSnapshot, int, int]] = ()):
    """A callable: the broker's records of the segments it deleted overlapping ``[start, end)`` of a partition
    (request 16 DELETED_SEGMENTS; for a replicated partition, its leader's), None when the broker cannot say
    (an older broker, an error): the lost range is then estimated (:mod:`ingest.loader.gaps`).

    The first call asks every question of ``questions`` (the plan's, :func:`ingest.loader.plan.gap_questions`)
    at once: one connection per broker (a replicated partition's: its leader when discovered), its
    DELETED_SEGMENTS questions pipelined (:func:`deleted_segments_by_broker`), instead of a connection and a
    round trip per partition. A question that exchange could not answer (an error, a leader that moved, a
    silent broker), and any other, is asked alone, following a failover."""
    batched: dict[tuple[PartitionKey, int, int], list[DeletedSegment]] | None = None

    def ask(snap: PartitionSnapshot, start: int, end: int):
        nonlocal batched
        if batched is None:
            batched = deleted_segments_by_broker(config, questions)
        if (snap.key, start, end) in batched:
            return batched[(snap.key, start, end)]
        try:
            with open_consumer(snap, FetchSettings.from_config(config)) as c:
                if snap.replicated:
                    return c.call(snap.topic, snap.partition,
                                  lambda sc: sc.deleted_segments(snap.topic, snap.partition, start, end))
                return c.deleted_segments(snap.topic, snap.partition, start, end)
        except (IngestError, OSError) as exc:  # an exact count only: never fail the plan for it
            log.warning("cannot ask %s b%d p%d which segments were deleted in [%d, %d) (the lost range is "
                        "estimated): %s", snap.topic, snap.broker_id, snap.partition, start, end, exc)
            return None

    return ask


def deleted_segments_by_broker(config, questions: Sequence[tuple[PartitionSnapshot, int, int]]
                               ) -> dict[tuple[PartitionKey, int, int], list[DeletedSegment]]:
    """The answers to DELETED_SEGMENTS ``questions`` of Kafka 0.7 partitions, asked of each partition's broker
    (``host:port``: a replicated partition's leader when discovered) on one connection with the questions
    pipelined, keyed ``(partition key, start, end)``; a question missing from the result was not answered
    (an error, a silent broker)."""
    by_broker: dict[tuple[str, int], list[tuple[PartitionSnapshot, int, int]]] = {}
    for q in questions:
        by_broker.setdefault((q[0].host, q[0].port), []).append(q)
    out: dict[tuple[PartitionKey, int, int], list[DeletedSegment]] = {}
    for (host, port), qs in by_broker.items():
        try:
            with _consumer(host, port, config) as c:
                answers = c.deleted_segments_many([(s.topic, s.partition, start, end) for s, start, end in qs])
        except IngestError as exc:
            log.info("pipelined DELETED_SEGMENTS of %d partition(s) from %s:%d failed (%s): each is asked alone",
                     len(qs), host, port, exc)
            continue
        out.update(((s.key, start, end), records) for (s, start, end), (error, records) in zip(qs, answers)
                   if error == 0)
    return out


def prober(config):
    """A callable: average message size and first event time at an offset (lost-range estimates)."""

    def probe(snap: PartitionSnapshot, offset: int) -> Probe:
        if snap.kafka:
            return kafka_probe(config, snap, offset)
        try:
            with open_consumer(snap, FetchSettings.from_config(config)) as c:
                buf = raw_fetch(c, snap.topic, snap.partition, offset, 256 * 1024)
            msgs = list(iter_messages(buf, offset))
        except Exception as exc:  # an estimate only: never fail the plan for it
            log.warning("cannot probe %s b%d p%d at %d: %s", snap.topic, snap.broker_id, snap.partition, offset, exc)
            return Probe(None, None)
        if not msgs:
            return Probe(None, None)
        outer = len({m.offset for m in msgs})
        avg = (msgs[-1].next_offset - offset) / len(msgs) if outer else None
        first_time = None
        try:
            # deferred: fastavro, needed only when a gap is probed
            from ingest.events.registry_client import RegistryClient
            from ingest.events.serde import EventDeserializer

            registry = RegistryClient(config["registry.url"], auth=RegistryAuth.from_config(config))
            rec = EventDeserializer(registry).deserialize(
                msgs[0].payload, topic=snap.topic, offset=msgs[0].offset)
            first_time = rec["header"]["time"]
        except Exception as exc:
            log.warning("cannot decode the first message after the gap in %s p%d: %s", snap.topic, snap.partition, exc)
        return Probe(avg, first_time)

    return probe
