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
``host:port`` list, from which a task finds the leader again. A partition that
has no leader within ``socket.timeout.ms`` is left out of the run (logged; its
committed offset stays and the next run loads it); so is one without a leader
when the run plans.
"""
from __future__ import annotations

import logging
from typing import Sequence

from ingest import znodes
from ingest.client.discovery import read_brokers, start_kazoo
from ingest.errors import (BrokerUnavailableError, ConfigError, IngestError, LeaderNotAvailableError,
                           NotLeaderForPartitionError)
from ingest.loader.plan import PartitionSnapshot, Probe

log = logging.getLogger(__name__)


def broker_addresses(config) -> list[tuple[str, int]]:
    """``(host, port)`` of every broker, from ``brokers`` or ZooKeeper."""
    if config["brokers"]:
        out = []
        for item in config["brokers"]:
            host, sep, port = item.rpartition(":")
            if not sep or not port.isdigit() or not host:
                raise ConfigError(f"brokers: {item!r} is not host:port")
            out.append((host, int(port)))
        return out
    if config["zk.connect"]:
        zk = start_kazoo(config["zk.connect"], connection_timeout_ms=config["zk.connectiontimeout.ms"])
        try:
            addrs = [(a.host, a.port) for _, a in sorted(read_brokers(zk).items())]
        finally:
            zk.stop()
            zk.close()
        if not addrs:
            raise BrokerUnavailableError(f"no broker registered under {znodes.BROKER_IDS} in {config['zk.connect']}")
        return addrs
    raise ConfigError("loader config needs 'brokers' (host:port list) or 'zk.connect'")


def _consumer(host: str, port: int, config):
    from ingest.client.simple_consumer import SimpleConsumer

    return SimpleConsumer(host, port, timeout_s=config["socket.timeout.ms"] / 1000.0,
                          fetch_size=config["fetch.size"], max_fetch_size=config["max.fetch.size"])


def _leader_consumer(metadata, config):
    from ingest.client.leader_consumer import LeaderConsumer

    timeout_s = config["socket.timeout.ms"] / 1000.0
    return LeaderConsumer(metadata, timeout_s=timeout_s, fetch_size=config["fetch.size"],
                          max_fetch_size=config["max.fetch.size"], leader_wait_s=timeout_s)


def _snapshot_consumer(snap: PartitionSnapshot, config):
    """A consumer of ``snap``'s partition: its broker's, or its current leader's (replicated)."""
    if snap.replicated:
        from ingest.client.leader_consumer import static_metadata

        return _leader_consumer(static_metadata(snap.metadata_brokers,
                                                timeout_s=config["socket.timeout.ms"] / 1000.0), config)
    return _consumer(snap.host, snap.port, config)


def replicated_partitions(config, addresses: list[tuple[str, int]]) -> list[PartitionSnapshot]:
    """Every partition of every replicated topic, named by its home broker, offsets from its leader."""
    from ingest.client.discovery import BrokerAddress
    from ingest.client.leader_consumer import static_metadata

    shipped = ",".join(f"{h}:{p}" for h, p in addresses)
    metadata = static_metadata(shipped, timeout_s=config["socket.timeout.ms"] / 1000.0)
    out: list[PartitionSnapshot] = []
    try:
        topics = metadata.topics()
    except BrokerUnavailableError as exc:
        # every broker just answered METADATA: these cannot answer TOPIC_METADATA (a broker
        # of a version before replication); a replicated topic's data waits for a run that sees it
        log.warning("no replicated topic is loaded in this run: %s", exc)
        return []
    with _leader_consumer(metadata, config) as lc:
        for topic in topics:
            t = metadata.topic(topic)
            for part in (t.partitions if t is not None else ()):
                p = part.partition
                if part.leader < 0:
                    log.warning("replicated %s-%d (home broker %d) has no leader now (in-sync %s): left out of "
                                "this run", topic, p, part.home, list(part.isr))
                    continue
                try:
                    earliest = lc.earliest_offset(topic, p)
                    latest = lc.latest_offset(topic, p)
                    leader: BrokerAddress = metadata.leader(topic, p)
                except (LeaderNotAvailableError, NotLeaderForPartitionError, BrokerUnavailableError) as exc:
                    log.warning("replicated %s-%d (home broker %d) left out of this run: %s", topic, p, part.home, exc)
                    continue
                out.append(PartitionSnapshot(topic, part.home, leader.host, leader.port, p, earliest, latest, shipped))
    return out


def discover(config) -> list[PartitionSnapshot]:
    """Every partition of every broker with its earliest and latest offsets (all topics), then
    every partition of every replicated topic (see the module docstring)."""
    out: list[PartitionSnapshot] = []
    seen: set[int] = set()
    addresses = broker_addresses(config)
    for host, port in addresses:
        with _consumer(host, port, config) as c:
            md = c.metadata()
        if md.broker_id in seen:
            raise ConfigError(f"broker id {md.broker_id} answered at two addresses (second: {host}:{port})")
        seen.add(md.broker_id)
        for topic, parts in md.topics.items():
            for p in parts:
                out.append(PartitionSnapshot(topic, md.broker_id, host, port, p.partition, p.earliest, p.latest))
    out.extend(replicated_partitions(config, addresses))
    return out


def segment_starts(config):
    """A callable: a partition's segment start offsets (cut points for splitting)."""

    def fetch(snap: PartitionSnapshot) -> Sequence[int]:
        with _snapshot_consumer(snap, config) as c:
            return c.offsets_before(snap.topic, snap.partition, -1, 1 << 30)

    return fetch


def deleted_segments_asker(config):
    """A callable: the broker's records of the segments it deleted overlapping ``[start, end)`` of a partition
    (request 16 DELETED_SEGMENTS; for a replicated partition, its leader's), None when the broker cannot say
    (an older broker, an error): the lost range is then estimated (:mod:`ingest.loader.lost_ranges`)."""

    def ask(snap: PartitionSnapshot, start: int, end: int):
        try:
            with _snapshot_consumer(snap, config) as c:
                if snap.replicated:
                    return c.call(snap.topic, snap.partition,
                                  lambda sc: sc.deleted_segments(snap.topic, snap.partition, start, end))
                return c.deleted_segments(snap.topic, snap.partition, start, end)
        except (IngestError, OSError) as exc:  # an exact count only: never fail the plan for it
            log.warning("cannot ask %s b%d p%d which segments were deleted in [%d, %d) (the lost range is "
                        "estimated): %s", snap.topic, snap.broker_id, snap.partition, start, end, exc)
            return None

    return ask


def prober(config):
    """A callable: average message size and first event time at an offset (lost-range estimates)."""

    def probe(snap: PartitionSnapshot, offset: int) -> Probe:
        from ingest.broker.message_set import iter_messages
        from ingest.loader.fetch import raw_fetch

        try:
            with _snapshot_consumer(snap, config) as c:
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
            from ingest.events.registry_client import RegistryClient
            from ingest.events.serde import EventDeserializer

            rec = EventDeserializer(RegistryClient(config["registry.url"])).deserialize(
                msgs[0].payload, topic=snap.topic, offset=msgs[0].offset)
            first_time = rec["header"]["time"]
        except Exception as exc:
            log.warning("cannot decode the first message after the gap in %s p%d: %s", snap.topic, snap.partition, exc)
        return Probe(avg, first_time)

    return probe
