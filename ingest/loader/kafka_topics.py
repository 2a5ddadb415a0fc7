"""Kafka-format topics in a load run: partitions, leaders and offsets through the Kafka listeners.

``bootstrap.servers`` names Kafka listeners (without it, a ``zk.connect`` loader takes those the brokers
registered under ``/brokers/endpoints``). Each is asked Metadata for every topic (a null topic
list). Listeners that answer with the same cluster id are one cluster (with ZooKeeper every broker
of the cluster answers the same; without it a broker is a cluster of its own), whose topics are
read once. Each partition is named by its first replica, its home broker (so committed offsets
survive leader changes, as for replicated 0.7 topics; a broker without ZooKeeper is the only
replica of its partitions), and its offsets are asked of its leader with ListOffsets: earliest
(the log start) and latest (the high watermark, so a run loads only what every in-sync replica
has). A snapshot carries its cluster's answering listeners (``metadata_brokers``), from which a
task finds the current leader again.

Offsets are record numbers (the next offset after a record is its offset + 1): a range's size is
a count of records, not bytes; a gap's count is exact, ``end - start``.

What cannot be reached is left out of the run, not fatal to it (as for 0.7 brokers): a listener
that does not answer Metadata, a partition without a leader, or whose leader does not answer
ListOffsets within ``socket.timeout.ms``. Each is logged and returned as a
:class:`~ingest.loader.plan.LeftOut`.
"""
from __future__ import annotations

import logging

from ingest.client.discovery import read_kafka_servers, start_kazoo
from ingest.client.fetch_settings import FetchSettings
from ingest.client.partition_reader import KAFKA, BrokerPartition, open_kafka_fetcher
from ingest.config import non_ascii_note
from ingest.errors import ConfigError, IngestError
from ingest.loader.gaps import Probe
from ingest.loader.plan import LeftOut, PartitionSnapshot
from ingest.zk_security import ZkSecurity
from ingest.registry_client_config import RegistryAuth

log = logging.getLogger(__name__)


def kafka_listeners(config) -> tuple[list[str], bool]:
    """The Kafka listeners the loader asks: ``bootstrap.servers``, or, without it, the listeners the
    brokers registered under ``/brokers/endpoints`` in ``zk.connect`` with the protocol of ``security.protocol`` (so a ZooKeeper-configured loader
    loads the cluster's Kafka-format topics too, as it loads its 0.7 topics); ``host:port`` strings,
    and whether they came from ZooKeeper (all of one cluster).

    Raises:
        ConfigError: an item of ``bootstrap.servers`` is not host:port.
    """
    if config["bootstrap.servers"] or not config.get("zk.connect"):
        return bootstrap_servers(config), False
    zk = start_kazoo(config["zk.connect"], connection_timeout_ms=config["zk.connectiontimeout.ms"],
                     security=ZkSecurity.from_config(config))
    protocol = config.get("security.protocol", "PLAINTEXT")
    try:
        found = read_kafka_servers(zk, protocol)
        if not found and read_kafka_servers(zk):
            log.warning("the brokers registered Kafka listeners, none with security.protocol %s: the Kafka-format "
                        "topics are not loaded (set security.protocol to a listener's protocol)", protocol)
        return [f"{host}:{port}" for host, port in found], True
    finally:
        zk.stop()
        zk.close()


def bootstrap_servers(config) -> list[str]:
    """``bootstrap.servers`` as ``host:port`` strings.

    Raises:
        ConfigError: an item is not host:port.
    """
    out = []
    for item in config["bootstrap.servers"]:
        host, sep, port = item.rpartition(":")
        if not sep or not host or not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
            raise ConfigError(f"bootstrap.servers: {item!r} is not host:port (port 1-65535){non_ascii_note(item)}")
        out.append(item)
    return out


def kafka_partitions(config) -> tuple[list[PartitionSnapshot], list[LeftOut], int]:
    """Every partition of every Kafka-format topic of the clusters ``bootstrap.servers`` reach, with its
    earliest and latest offsets; what was left out; how many listeners answered."""
    settings = FetchSettings.from_config(config)
    clusters: dict[str, list[str]] = {}   # cluster id -> the listeners that answered for it
    left_out: list[LeftOut] = []
    silent: list[LeftOut] = []   # listeners that did not answer
    answered = 0
    servers, registered = kafka_listeners(config)
    for server in servers:
        host, _, port = server.rpartition(":")
        probe = BrokerPartition("", -1, -1, host, int(port), server, KAFKA)
        try:
            with open_kafka_fetcher(probe, settings) as f:
                f.cluster.topic_names(f.clock.monotonic() + settings.socket_timeout_s)
                cluster_id = f.cluster.cluster_id or server
        except IngestError as exc:
            if not exc.retriable:
                raise
            log.warning("Kafka listener %s did not answer Metadata (%s): its cluster's Kafka-format topics are "
                        "left out of this run unless another listener of it answers", server, exc)
            silent.append(LeftOut(f"Kafka listener did not answer Metadata ({exc})", None, server))
            continue
        answered += 1
        clusters.setdefault(cluster_id, []).append(server)
    if not (registered and answered):
        # the listeners registered in one ZooKeeper are one cluster: one that answers speaks for it (a
        # partition whose leader is silent is left out below); listeners named by hand may be several
        left_out += silent
    out: list[PartitionSnapshot] = []
    for cluster_id, servers in clusters.items():
        found, missing = _cluster_partitions(",".join(servers), settings)
        out += found
        left_out += missing
    return out, left_out, answered


def _cluster_partitions(servers: str, settings: FetchSettings) -> tuple[list[PartitionSnapshot], list[LeftOut]]:
    host, _, port = servers.split(",")[0].rpartition(":")
    out: list[PartitionSnapshot] = []
    left_out: list[LeftOut] = []
    with open_kafka_fetcher(BrokerPartition("", -1, -1, host, int(port), servers, KAFKA), settings) as f:
        cluster = f.cluster
        for topic in cluster.topic_names(f.clock.monotonic() + settings.socket_timeout_s):
            for p in cluster.known_partitions(topic):
                home = p.replicas[0] if p.replicas else p.leader
                if p.leader < 0:
                    log.warning("Kafka topic %s-%d (home broker %d): no leader now; left out of this run", topic,
                                p.partition, home)
                    left_out.append(LeftOut(f"no leader now (in-sync {list(p.isr)})", home, topic=topic,
                                            partition=p.partition))
                    continue
                try:
                    earliest = f.earliest(topic, p.partition)
                    latest = f.latest(topic, p.partition)
                except IngestError as exc:
                    if not exc.retriable:
                        raise
                    log.warning("Kafka topic %s-%d (home broker %d) left out of this run: %s", topic, p.partition,
                                home, exc)
                    left_out.append(LeftOut(f"no reachable leader: {exc}", home, topic=topic, partition=p.partition))
                    continue
                leader = cluster.nodes[p.leader]
                out.append(PartitionSnapshot(topic, home, p.partition, leader.host, leader.port, servers, KAFKA,
                                             earliest=earliest, latest=latest))
    return out, left_out


def kafka_probe(config, snap: BrokerPartition, offset: int) -> Probe:
    """The event time of the first record at ``offset`` (its ``header.time`` when its payload is a
    product event, else the record's timestamp), for a lost range's edge; never fails the plan."""
    try:
        with open_kafka_fetcher(snap, FetchSettings.from_config(config)) as f:
            fetched = f.fetch(snap.topic, snap.partition, offset)
            first = next(iter(fetched.records()), None)
    except Exception as exc:  # an edge only: never fail the plan for it
        log.warning("cannot probe %s b%d p%d at %d: %s", snap.topic, snap.broker_id, snap.partition, offset, exc)
        return Probe(None, None)
    if first is None:
        return Probe(None, None)
    try:
        # deferred: fastavro, needed only when a gap is probed
        from ingest.events.registry_client import RegistryClient
        from ingest.events.serde import EventDeserializer

        registry = RegistryClient(config["registry.url"], auth=RegistryAuth.from_config(config))
        rec = EventDeserializer(registry).deserialize(
            bytes(first.value or b""), topic=snap.topic, offset=first.offset)
        return Probe(None, int(rec["header"]["time"]))
    except Exception:  # noqa: BLE001 - no product header: the record's own time
        return Probe(None, first.timestamp)
