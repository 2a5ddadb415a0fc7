"""Operator tools: console producer (stdin lines -> messages), console consumer, topic listing.

Each tool takes either ``--brokers id:host:port,...`` (static) or ``--zk CONNECT``
(discovery through ``/brokers`` in ZooKeeper). The console consumer joins a
consumer group when given ``--zk`` (offsets in ZooKeeper); with ``--brokers`` it
reads every partition directly with a SimpleConsumer and keeps no offsets.

Kafka-format topics (docs/kafka-protocol.md D5): the console producer and consumer also take
``--bootstrap-server host:port,...`` (Kafka's flag; with ``--zk`` the listeners registered under
``/brokers/endpoints`` are used without it). The producer's :class:`~ingest.client.producer.Producer`
picks the path per topic. The consumer reads a topic the Kafka listeners know with the Kafka protocol,
every partition directly from its leader, keeping no offsets (``--group`` is refused for it: consumer
groups of Kafka-format topics do not exist yet); any other topic as before.
"""
from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from typing import BinaryIO, Iterable, TextIO

from ingest.client.consumer_config import CONSUMER_CONFIG
from ingest.client.consumer_group import ConsumerConnector, ConsumerTimeoutError
from ingest.client.discovery import (Discovery, make_discovery, read_topic_partition_counts, read_topics,
                                     start_kazoo)
from ingest.client.group_registry import replicated_assignment
from ingest.client.discovery import read_kafka_servers
from ingest.client.kafka.config import HostPorts
from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.client.leader_consumer import LeaderConsumer
from ingest.client.producer import Producer, SendResult
from ingest.client.producer_config import PRODUCER_CONFIG
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.client.simple_consumer import SimpleConsumer
from ingest.errors import (BrokerUnavailableError, WrongTopicKindError, ConfigError, IngestError, InvalidTopicError, LeaderNotAvailableError,
                           OffsetOutOfRangeError, UnknownTopicError)

log = logging.getLogger(__name__)

# docs/operations.md, "the command line": an unreachable service exits 2, like every product error
EXIT_UNREACHABLE = 2


def _discovery_keys(brokers: str | None, zk: str | None, bootstrap: str | None = None) -> dict[str, str]:
    if brokers and zk or not (brokers or zk or bootstrap):
        raise ConfigError("give exactly one of --brokers id:host:port,... or --zk host:port[/chroot]"
                          + (" (or --bootstrap-server host:port,... alone, for Kafka-format topics)"
                             if bootstrap is not None else ""))
    keys = {"broker.list": brokers} if brokers else {"zk.connect": zk} if zk else {}
    if bootstrap:
        keys["bootstrap.servers"] = bootstrap
    return keys


def console_producer(*, brokers: str | None, zk: str | None, topic: str, lines: BinaryIO,
                     key: str | None = None, overrides: dict[str, str] | None = None,
                     err: TextIO = sys.stderr, bootstrap: str | None = None) -> int:
    """Send each line of ``lines`` (without its newline) as one message; returns an exit code."""
    raw = {"producer.type": "async", "batch.size": "200", "queue.time": "100",
           "queue.enqueue.timeout.ms": "-1", **_discovery_keys(brokers, zk, bootstrap), **(overrides or {})}
    config = PRODUCER_CONFIG.parse(raw, source="console-producer")
    counts = {"acked": 0, "failed": 0}

    def on_result(result: SendResult) -> None:
        counts["acked" if result.error is None else "failed"] += result.count
        if result.error is not None:
            print(f"failed to send {result.count} messages: {result.error}", file=err)

    n = 0
    with Producer(config) as producer:
        for line in lines:
            payload = line[:-1] if line.endswith(b"\n") else line
            producer.send(topic, [payload], key=key, callback=on_result)
            n += 1
        producer.flush()
    print(f"console-producer: {n} messages read, {counts['acked']} acknowledged, {counts['failed']} failed",
          file=err)
    return 0 if counts["failed"] == 0 else 1


def _format(topic: str, broker_id: int, partition: int, offset: int, payload: bytes, show: bool) -> bytes:
    if not show:
        return payload + b"\n"
    return f"{topic}\t{broker_id}-{partition}\t{offset}\t".encode() + payload + b"\n"


def console_consumer(*, brokers: str | None, zk: str | None, topic: str, group: str | None = None,
                     from_beginning: bool = False, max_messages: int | None = None,
                     timeout_ms: int = -1, print_offsets: bool = False,
                     overrides: dict[str, str] | None = None, out: BinaryIO | None = None,
                     bootstrap: str | None = None) -> int:
    """Print messages of ``topic``, one per line; returns an exit code."""
    out = out if out is not None else sys.stdout.buffer
    if max_messages is not None and max_messages < 1:
        raise ConfigError(f"--max-messages {max_messages}: allowed is an integer >= 1 (omit it for no limit)")
    if timeout_ms < -1:
        raise ConfigError(f"--timeout-ms {timeout_ms}: allowed is -1 (wait forever) or milliseconds >= 0")
    _discovery_keys(brokers, zk, bootstrap)
    servers = _kafka_servers(bootstrap, zk)
    if servers and _kafka_topic(servers, topic, v07=bool(brokers or zk)):
        if group:
            raise ConfigError(f"topic {topic!r} is a Kafka-format topic: consumer groups of Kafka-format topics do "
                              "not exist yet; read it without --group (every partition, no offsets kept)")
        return _direct_kafka(servers, topic, from_beginning, max_messages, timeout_ms, print_offsets, out)
    if zk:
        _check_topic_registered(zk, topic)
        return _group_consumer(zk, topic, group, from_beginning, max_messages, timeout_ms, print_offsets,
                               overrides or {}, out)
    if group:
        raise ConfigError("--group needs --zk (group offsets live in ZooKeeper)")
    discovery = make_discovery(PRODUCER_CONFIG.parse(_discovery_keys(brokers, zk)))
    try:
        return _direct_consumer(discovery, topic, from_beginning, max_messages, timeout_ms, print_offsets, out)
    finally:
        discovery.close()


def _kafka_servers(bootstrap: str | None, zk: str | None) -> tuple[tuple[str, int], ...]:
    """``--bootstrap-server``, else the Kafka listeners registered in ZooKeeper (none without ``--zk``)."""
    if bootstrap:
        try:
            return HostPorts().parse(bootstrap)
        except ValueError as exc:
            raise ConfigError(f"--bootstrap-server {bootstrap!r}: {exc}; allowed is {HostPorts().allowed}") from None
    if not zk:
        return ()
    client = start_kazoo(zk)
    try:
        return read_kafka_servers(client)
    finally:
        client.stop()
        client.close()


def _kafka_topic(servers, topic: str, *, v07: bool) -> bool:
    """Whether the Kafka listeners at ``servers`` hold ``topic`` (a 0.7 topic or an unknown one: False).

    Raises:
        WrongTopicKindError / UnknownTopicError: not a Kafka topic, and no 0.7 broker was named to read it from.
    """
    with KafkaFetcher({"bootstrap.servers": servers, "client.id": "console-consumer"}) as f:
        try:
            f.cluster.partitions(topic, f.clock.monotonic())
            return True
        except LeaderNotAvailableError:
            return True
        except (InvalidTopicError, UnknownTopicError) as exc:
            if v07:
                return False
            where = ",".join(f"{h}:{p}" for h, p in servers)
            if isinstance(exc, InvalidTopicError):
                raise WrongTopicKindError(f"topic {topic!r} is a 0.7 topic: give --brokers or --zk to read it "
                                          f"(the Kafka listeners at {where} serve only Kafka-format topics)") from None
            raise UnknownTopicError(f"topic {topic!r} does not exist on the Kafka listeners at {where}") from None


class _Fetched:
    """One partition's messages of one round, in the shape the printing loop reads (``messages``)."""

    __slots__ = ("messages",)

    def __init__(self, messages: list) -> None:
        self.messages = messages


class _Record:
    __slots__ = ("offset", "payload")

    def __init__(self, offset: int, payload: bytes) -> None:
        self.offset, self.payload = offset, payload


def _direct_kafka(servers, topic, from_beginning, max_messages, timeout_ms, print_offsets, out) -> int:
    """The console consumer of a Kafka-format topic: every partition from its leader (named by its first
    replica, as the loader names it), from the earliest or the latest offset; a position that retention
    deleted meanwhile restarts at the earliest (logged)."""
    with KafkaFetcher({"bootstrap.servers": servers, "client.id": "console-consumer"}) as f:
        parts = f.cluster.partitions(topic, f.clock.monotonic() + f.timeout_s)
        homes = {p.partition: p.replicas[0] if p.replicas else p.leader for p in parts}
        positions = {p: f.earliest(topic, p) if from_beginning else f.latest(topic, p) for p in sorted(homes)}
        wait_ms = 100 if len(positions) == 1 else 0

        def fetch_round():
            for p, offset in positions.items():
                try:
                    fetched = f.fetch(topic, p, offset, max_wait_ms=wait_ms)
                except OffsetOutOfRangeError as exc:
                    positions[p] = f.earliest(topic, p)
                    log.warning("%s; reading on from the earliest offset %d", exc, positions[p])
                    continue
                records = [_Record(r.offset, b"" if r.value is None else bytes(r.value)) for r in fetched.records()]
                yield homes[p], p, _Fetched(records)
                positions[p] = fetched.next_offset

        return _print_rounds(topic, fetch_round, max_messages, timeout_ms, print_offsets, out)


def _unknown_topics(topics: Iterable[str], where: str, known: Iterable[str]) -> UnknownTopicError:
    names = sorted(topics)
    which = f"topic {names[0]!r} does not" if len(names) == 1 else f"topics {', '.join(map(repr, names))} do not"
    return UnknownTopicError(f"{which} exist on {where}; topics there: {', '.join(sorted(known)) or 'none yet'} "
                       f"(a topic is created by its first message)")


def _check_topic_registered(zk: str, topic: str) -> None:
    """Refuse a topic no broker registered in ZooKeeper: a group would wait for it silently forever."""
    config = PRODUCER_CONFIG.parse(_discovery_keys(None, zk))
    client = start_kazoo(zk, session_timeout_ms=config["zk.sessiontimeout.ms"],
                         connection_timeout_ms=config["zk.connectiontimeout.ms"])
    try:
        if not read_topic_partition_counts(client, topic) and replicated_assignment(client, topic) is None:
            raise _unknown_topics([topic], f"any broker registered in ZooKeeper at {zk}", read_topics(client))
    finally:
        client.stop()
        client.close()


def _group_consumer(zk, topic, group, from_beginning, max_messages, timeout_ms, print_offsets, overrides, out):
    raw = {"zk.connect": zk, "groupid": group or f"console-consumer-{uuid.uuid4().hex[:8]}",
           "autooffset.reset": "smallest" if from_beginning else "largest",
           "consumer.timeout.ms": str(timeout_ms), "autocommit.interval.ms": "1000", **overrides}
    connector = ConsumerConnector(CONSUMER_CONFIG.parse(raw, source="console-consumer"))
    n = 0
    try:
        stream = connector.create_streams({topic: 1})[topic][0]
        for m in stream:
            out.write(_format(m.topic, m.broker_id, m.partition, m.offset, m.payload, print_offsets))
            out.flush()
            n += 1
            if max_messages is not None and n >= max_messages:
                break
    except ConsumerTimeoutError:
        pass
    finally:
        connector.commit_offsets(include_current=True)
        connector.shutdown()
    log.info("console-consumer: %d messages", n)
    return 0


def _direct_consumer(discovery: Discovery, topic, from_beginning, max_messages, timeout_ms, print_offsets, out):
    consumers = {bid: SimpleConsumer(a.host, a.port) for bid, a in discovery.brokers().items()}
    positions: dict[tuple[int, int], int] = {}
    known: set[str] = set()
    try:
        for bid, c in consumers.items():
            topics = c.metadata().topics
            known.update(topics)
            for info in topics.get(topic, []):
                positions[(bid, info.partition)] = info.earliest if from_beginning else info.latest
        if not positions:
            for c in consumers.values():
                c.close()
            replicated = _replicated_topic(discovery, topic)
            if replicated is not None:
                return _direct_replicated(discovery, replicated, from_beginning, max_messages, timeout_ms,
                                          print_offsets, out)
            raise _unknown_topics([topic], "any broker (" + ", ".join(str(a) for a in discovery.brokers().values())
                                  + ")", known)
    except BaseException:
        for c in consumers.values():
            c.close()
        raise
    def fetch_round():
        for bid, c in consumers.items():
            mine = [(p, o) for (b, p), o in positions.items() if b == bid]
            if not mine:
                continue
            results = c.multifetch([(topic, p, o, c.fetch_size) for p, o in mine])
            for (p, _), r in zip(mine, results):
                yield bid, p, r
                if r.messages:
                    positions[(bid, p)] = r.next_offset

    try:
        return _print_rounds(topic, fetch_round, max_messages, timeout_ms, print_offsets, out)
    finally:
        for c in consumers.values():
            c.close()


def _print_rounds(topic, fetch_round, max_messages, timeout_ms, print_offsets, out) -> int:
    """Print what each round of fetches brings (``fetch_round()`` yields ``(broker_id, partition,
    result)``) until ``max_messages`` or ``timeout_ms`` without a message; returns the exit code 0."""
    n = 0
    idle_since = time.monotonic()
    while True:
        got = False
        for bid, p, r in fetch_round():
            for m in r.messages:
                out.write(_format(topic, bid, p, m.offset, m.payload, print_offsets))
                n += 1
                if max_messages is not None and n >= max_messages:
                    out.flush()
                    return 0
            got = got or bool(r.messages)
        out.flush()
        if got:
            idle_since = time.monotonic()
        elif timeout_ms >= 0 and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
            return 0
        else:
            time.sleep(0.1)


def _replicated_topic(discovery: Discovery, topic: str):
    """``topic``'s TOPIC_METADATA answer if it is a replicated topic, else None."""
    try:
        return ReplicaMetadata(lambda: discovery.brokers().values(), timeout_s=10).topic(topic)
    except BrokerUnavailableError:  # brokers without replication: a legacy cluster
        return None


def _direct_replicated(discovery: Discovery, replicated, from_beginning, max_messages, timeout_ms, print_offsets,
                       out):
    """The direct console consumer of a replicated topic: each partition (named home-p) from its current
    leader, following failovers (:class:`~ingest.client.leader_consumer.LeaderConsumer`)."""
    topic = replicated.name
    homes = {p.partition: p.home for p in replicated.partitions}
    with LeaderConsumer(ReplicaMetadata(lambda: discovery.brokers().values(), timeout_s=10)) as lc:
        positions = {p: lc.earliest_offset(topic, p) if from_beginning else lc.latest_offset(topic, p)
                     for p in sorted(homes)}

        def fetch_round():
            for p, offset in positions.items():
                r = lc.fetch(topic, p, offset)
                yield homes[p], p, r
                positions[p] = r.next_offset

        return _print_rounds(topic, fetch_round, max_messages, timeout_ms, print_offsets, out)


def list_topics(*, brokers: str | None, zk: str | None, topics: Iterable[str] = (),
                as_json: bool = False, out: TextIO = sys.stdout) -> int:
    """Print every topic's partitions per broker with earliest/latest offsets.

    Returns 0 when every known broker answered; :data:`EXIT_UNREACHABLE` when one
    did not (it is named on stderr; the others' rows are still printed, but a partial
    listing must not pass as complete in a script).

    Raises:
        BrokerUnavailableError: no broker is known, or none answered (nothing to list).
    """
    discovery = make_discovery(PRODUCER_CONFIG.parse(_discovery_keys(brokers, zk)))
    rows = []
    unreachable: list[tuple[object, IngestError]] = []
    wanted, existing = set(topics), set()
    try:
        known = sorted(discovery.brokers().items())
        if not known:
            where = f"broker.list {brokers!r}" if brokers else f"none registered in ZooKeeper at {zk}"
            raise BrokerUnavailableError(f"no broker known ({where})")
        for bid, addr in known:
            try:
                with SimpleConsumer(addr.host, addr.port, timeout_s=10) as c:
                    # every topic: a broker answers an unknown *named* topic with empty partitions
                    meta = c.metadata()
            except IngestError as exc:
                unreachable.append((addr, exc))
                continue
            existing.update(meta.topics)
            for name, parts in sorted(meta.topics.items()):
                if wanted and name not in wanted:
                    continue
                for p in parts:
                    rows.append({"topic": name, "broker_id": bid, "partition": p.partition,
                                 "earliest": p.earliest, "latest": p.latest, "bytes": p.latest - p.earliest})
    finally:
        discovery.close()
    if len(unreachable) == len(known):
        raise BrokerUnavailableError("no broker answered: " + "; ".join(f"{a} ({e})" for a, e in unreachable))
    for addr, exc in unreachable:
        print(f"broker {addr}: unreachable: {exc}", file=sys.stderr)
    if wanted - existing:
        raise _unknown_topics(wanted - existing, "any broker that answered", existing)
    code = EXIT_UNREACHABLE if unreachable else 0
    rows.sort(key=lambda r: (r["topic"], r["broker_id"], r["partition"]))
    if as_json:
        for r in rows:
            out.write(json.dumps(r) + "\n")
        return code
    header = ("topic", "broker", "partition", "earliest", "latest", "bytes")
    table = [header] + [(r["topic"], str(r["broker_id"]), str(r["partition"]), str(r["earliest"]),
                         str(r["latest"]), str(r["bytes"])) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        out.write("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                            for i, (cell, w) in enumerate(zip(row, widths))).rstrip() + "\n")
    return code
