"""The mirror's two ends for Kafka topics: read a source partition's batches, append them at the target keeping their offsets.

A Kafka topic (docs/kafka-protocol.md, D2) is read and written through the Kafka listeners, never the
0.7 port (D5): :class:`KafkaSourceReader` fetches whole, CRC-checked record batches
(:class:`~ingest.client.kafka.fetcher.KafkaFetcher`) and :class:`KafkaTargetWriter` appends them with
AppendAt (:class:`~ingest.client.kafka_append_at.KafkaAppender`) at the target's expected log end.
Both have the surface the copier uses of the 0.7 ends (:mod:`ingest.mirror.source_reader`,
:mod:`ingest.mirror.target_writer`), with offsets that number records: a copied batch keeps its base
offset, so the target's offsets are the source's and the next position after a set is its last
batch's next offset (``logical`` is True).

Counting (the mirror tier's counts) reads the records' values (event headers behind the Confluent
framing); without a counter only the batch headers are read (their record counts). The lag's event
time is the last batch's largest timestamp.

The Kafka listeners are found in the cluster's ZooKeeper (``/brokers/endpoints/[id]``, D3): of each broker
the listener whose security protocol is the one the mirror speaks to that cluster (:func:`kafka_bootstrap`);
each end connects with its cluster's security settings (``source.<name>.security.protocol``,
``target.security.protocol`` and their ``ssl.*``, ``sasl.*``: docs/mirroring.md).

Concurrency: one reader and one writer per copier thread.
"""
from __future__ import annotations

import logging

from kazoo.exceptions import NoNodeError  # the endpoints are read from ZooKeeper, as the 0.7 discovery does

from ingest import znodes
from ingest.client.discovery import read_brokers
from ingest.client.fetch_settings import FetchSettings
from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.client.kafka.security import ClientSecurity, listener_protocols, matching_listener
from ingest.client.kafka_append_at import KafkaAppender
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import BrokerUnavailableError, MirrorError, OffsetOutOfRangeError
from ingest.records.batch import iter_batches
from ingest.records.record import iter_records
from ingest.wire.kafka.port07 import APPEND_AT_KEY

log = logging.getLogger(__name__)

FETCH_WAIT_MS = 200
"""How long a source leader may hold a fetch with nothing new (long polling; bounds a stop's delay)."""


def kafka_bootstrap(zk, security_protocol: str = "PLAINTEXT") -> str:
    """``host:port,...`` of the Kafka listeners of protocol ``security_protocol`` the live brokers of ``zk``'s
    cluster registered (one per broker).

    Raises:
        BrokerUnavailableError: no live broker registered a Kafka listener of that protocol.
    """
    out, others = [], set()
    for broker_id in sorted(read_brokers(zk)):
        try:
            data, _ = zk.retry(zk.get, znodes.broker_endpoints_path(broker_id))
            found = matching_listener(data, security_protocol)
            if found is None:
                others.update(p for _h, _p, p in listener_protocols(data).values())
                continue
        except (NoNodeError, ValueError):
            continue
        out.append(f"{found[0]}:{found[1]}")
    if not out:
        raise BrokerUnavailableError(
            f"no live broker of the cluster registered a Kafka listener with security protocol {security_protocol} "
            f"(/brokers/endpoints; protocols registered: {', '.join(sorted(others)) or 'none'}): set the "
            "cluster's security.protocol to one of them, or add such a listener")
    return ",".join(out)


def port07_endpoint(zk, broker_id: int, security_protocol: str = "PLAINTEXT",
                    api_key: int = APPEND_AT_KEY) -> tuple[str, int] | None:
    """``(host, port)`` of the Kafka listener of protocol ``security_protocol`` (as :func:`kafka_bootstrap`
    picks) on which ``broker_id`` of ``zk``'s cluster serves a 0.7 broker-only request as the private
    ``api_key`` (AppendAt07: ``private_apis`` of ``/brokers/endpoints/[id]``, registered only by a broker that
    refuses it on its 0.7 port or has none); None when it registered no such key or no such listener: then its
    0.7 port serves the request."""
    try:
        data, _ = zk.retry(zk.get, znodes.broker_endpoints_path(broker_id))
        if api_key not in znodes.parse_private_apis(data):
            return None
        return matching_listener(data, security_protocol)
    except (NoNodeError, ValueError):
        return None


def _client_config(bootstrap: str, settings: FetchSettings, security: ClientSecurity) -> dict:
    return {**security.client_keys(), "bootstrap.servers": bootstrap, "client.id": "ingest-mirror",
            "request.timeout.ms": max(1, int(settings.socket_timeout_s * 1000))}


def _batch_span(data) -> tuple[int, int, int]:
    """``(first base offset, next offset, largest timestamp)`` of whole batches ``data`` (non-empty)."""
    first = nxt = ts = None
    for _pos, h in iter_batches(data):
        if first is None:
            first = h.base_offset
        nxt, ts = h.next_offset, h.max_timestamp if ts is None else max(ts, h.max_timestamp)
    if first is None:
        raise MirrorError(f"a copied set of {len(data)} bytes holds no whole record batch")
    return first, nxt, ts


class KafkaSourceReader:
    """Reads one partition of a Kafka topic of a source cluster, at its leader (``bootstrap``: its Kafka listeners)."""

    logical = True

    def __init__(self, bootstrap: str, topic: str, partition: int, *, settings: FetchSettings,
                 security: ClientSecurity = ClientSecurity(), clock: Clock = SYSTEM_CLOCK) -> None:
        self.topic, self.partition = topic, partition
        self.fetch_size = settings.fetch_size
        self.fetcher = KafkaFetcher(_client_config(bootstrap, settings, security), clock=clock)

    def __repr__(self) -> str:
        return f"KafkaSourceReader({self.topic}-{self.partition})"

    def fetch_set(self, offset: int, max_bytes: int | None = None) -> bytes:
        """Whole batches from the one starting at ``offset`` (b"" when there is none yet; one batch at least,
        however large).

        Raises:
            OffsetOutOfRangeError: ``offset`` is below the log start (retention) or above its end.
            MirrorError: ``offset`` falls inside a batch (a position that is not a batch boundary).
            CorruptRecordError, BrokerUnavailableError, NotLeaderForPartitionError, ...: as the fetch.
        """
        got = self.fetcher.fetch(self.topic, self.partition, offset, max_wait_ms=FETCH_WAIT_MS,
                                 partition_max_bytes=self.fetch_size if max_bytes is None else max_bytes)
        if not got.batches:
            return b""
        first_pos, first = got.batches[0]
        if first.base_offset < offset:
            raise MirrorError(f"{self}: offset {offset} lies inside the batch {first.base_offset}.."
                              f"{first.last_offset}; the mirror's positions are batch boundaries (was the source "
                              "topic re-created?)")
        last_pos, last = got.batches[-1]
        return bytes(got.data[first_pos:last_pos + last.size])

    def range_set(self, start: int, end: int) -> bytes:
        """Whole batches of ``[start, end)`` (b"" when they are gone), for counting only."""
        try:
            data = self.fetch_set(start)
        except OffsetOutOfRangeError:
            return b""
        cut = 0
        for pos, h in iter_batches(data):
            if h.next_offset > end:
                break
            cut = pos + h.size
        return data[:cut]

    @staticmethod
    def next_offset(offset: int, data) -> int:
        """The source position after copying ``data`` from ``offset``: its last batch's next offset."""
        return _batch_span(data)[1]

    @staticmethod
    def count(counter, data) -> int:
        """Records of ``data`` (control batches left out), counted by ``counter`` (per event-time window) if given."""
        if counter is None:
            return sum(h.records_count for _p, h in iter_batches(data) if not h.is_control)
        return counter.count_payloads((bytes(r.value or b"") for p, h in iter_batches(data) if not h.is_control
                                       for r in iter_records(data, p)), acked=True)

    @staticmethod
    def last_time_ms(data, header_reader) -> int | None:
        """The event time of the newest record of ``data``: its batch's largest timestamp."""
        return _batch_span(data)[2]

    def earliest(self) -> int:
        return self.fetcher.earliest(self.topic, self.partition)

    def latest(self) -> int:
        """The end a consumer may read to (the leader's high watermark)."""
        return self.fetcher.latest(self.topic, self.partition)

    def deleted_segments(self, start: int, end: int) -> list:
        raise MirrorError(f"{self}: a Kafka topic's lost range is counted from its offsets, not from "
                          "DELETED_SEGMENTS")

    def close(self) -> None:
        self.fetcher.close()


class KafkaTargetWriter:
    """AppendAt to one partition of a Kafka topic of the target cluster (``bootstrap``: its Kafka listeners)."""

    def __init__(self, bootstrap: str, topic: str, partition: int, *, acks: int = -1, timeout_ms: int = 10_000,
                 settings: FetchSettings, security: ClientSecurity = ClientSecurity(),
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.topic, self.partition = topic, partition
        self.acks, self.timeout_ms = acks, timeout_ms
        self.appender = KafkaAppender(_client_config(bootstrap, settings, security), clock=clock)

    def __repr__(self) -> str:
        return f"KafkaTargetWriter({self.topic}-{self.partition})"

    def log_end(self) -> int:
        """The leader's log end: the AppendAt query."""
        return self.appender.log_end(self.topic, self.partition)

    def append(self, expected_offset: int, data) -> int:
        """Append whole batches (keeping their offsets) at ``expected_offset``; returns the new log end.

        Raises:
            OffsetMismatchError: the log end is not ``expected_offset`` (``.log_end``); nothing was appended.
            NotEnoughReplicasError, RequestTimedOutError, ...: as AppendAt answers (the batches may be stored).
        """
        return self.appender.append(self.topic, self.partition, expected_offset, data, acks=self.acks,
                                    timeout_ms=self.timeout_ms)

    def fetch_raw(self, offset: int, max_bytes: int) -> bytes:
        raise MirrorError(f"{self}: a Kafka topic's target is not read back (lost ranges are counted from offsets)")

    def close(self) -> None:
        self.appender.close()
