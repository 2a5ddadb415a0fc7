"""SourceReader: the raw bytes of one source partition, for the mirror's verbatim copy.

A Kafka 0.7 (unreplicated) partition is read from the broker that holds it
(``broker_id`` of the unit, found through the source cluster's discovery); a
replicated partition is read from its current leader
(:class:`~ingest.client.leader_consumer.LeaderConsumer`, which follows failovers:
byte offsets are the same on every replica). Whether the topic is replicated is
asked once (TOPIC_METADATA) and cached.

:meth:`SourceReader.fetch_set` returns whole valid messages only (the valid
prefix of the broker's answer, a cut-off last message dropped), growing the
fetch size up to ``max_fetch_size`` for one message larger than ``fetch_size``.
A compressed wrapper is one message here: it is copied as it is.

Concurrency: one reader per copier thread.
"""
from __future__ import annotations

import logging

from ingest.client.discovery import Discovery
from ingest.client.fetch_settings import FetchSettings
from ingest.client.leader_consumer import LeaderConsumer
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.client.simple_consumer import SimpleConsumer
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import BrokerUnavailableError, FetchSizeTooSmallError, InvalidMessageError, OffsetOutOfRangeError
from ingest.mirror.config import MIRROR_FETCH
from ingest.mirror.gaps import count_messages, scan_headers
from ingest.records.message_set import first_message_size, scan

log = logging.getLogger(__name__)


def cluster_metadata(discovery: Discovery, *, timeout_s: float = 10.0, clock: Clock = SYSTEM_CLOCK) -> ReplicaMetadata:
    """A ReplicaMetadata asking the brokers a discovery knows now."""
    return ReplicaMetadata(lambda: list(discovery.brokers().values()), timeout_s=timeout_s, max_age_s=30.0,
                           clock=clock)


class SourceReader:
    """Reads one partition (``topic``, home ``broker_id``, ``partition``) of a 0.7-format topic of a source cluster
    (offsets are byte positions: ``logical`` is False; :class:`ingest.mirror.kafka_io.KafkaSourceReader` reads
    Kafka topics with the same surface).

    Args:
        discovery: the source cluster's brokers (ZooKeeper or a static broker list).
        metadata: shared TOPIC_METADATA cache of that cluster (one is made when None).
        settings: bytes asked per fetch, the ceiling for one large message, the socket timeout
            and the failover wait (:data:`ingest.mirror.config.MIRROR_FETCH` when not given).
    """

    logical = False

    def __init__(self, discovery: Discovery, topic: str, broker_id: int, partition: int, *,
                 metadata: ReplicaMetadata | None = None, settings: FetchSettings = MIRROR_FETCH,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.discovery = discovery
        self.topic = topic
        self.broker_id = broker_id
        self.partition = partition
        self.fetch_size = settings.fetch_size
        self.max_fetch_size = max(settings.max_fetch_size, settings.fetch_size)
        self.timeout_s = settings.socket_timeout_s
        self.metadata = metadata or cluster_metadata(discovery, clock=clock)
        self._leader = LeaderConsumer(self.metadata, settings=settings, max_fetch_size=self.max_fetch_size, clock=clock)
        self._replicated: bool | None = None
        self._direct: SimpleConsumer | None = None

    def __repr__(self) -> str:
        return f"SourceReader({self.topic}:{self.broker_id}-{self.partition})"

    @property
    def replicated(self) -> bool:
        if self._replicated is None:
            self._replicated = self.metadata.is_replicated(self.topic)
        return self._replicated

    def _consumer(self) -> SimpleConsumer:
        """The 0.7 partition's broker, (re)connected to its current address."""
        addr = self.discovery.brokers().get(self.broker_id)
        if addr is None:
            raise BrokerUnavailableError(f"{self}: source broker {self.broker_id} is not registered now")
        c = self._direct
        if c is None or (c.host, c.port) != (addr.host, addr.port):
            if c is not None:
                c.close()
            c = self._direct = SimpleConsumer(addr.host, addr.port, timeout_s=self.timeout_s,
                                              fetch_size=self.fetch_size, max_fetch_size=self.max_fetch_size)
        return c

    def _call(self, fn):
        if self.replicated:
            return self._leader.call(self.topic, self.partition, fn)
        return fn(self._consumer())

    # --- reads ------------------------------------------------------------------------------

    def fetch_set(self, offset: int, max_bytes: int | None = None) -> bytes:
        """Whole valid messages from ``offset`` (b"" when there is none yet).

        Raises:
            OffsetOutOfRangeError: ``offset`` is not a visible message boundary (e.g. deleted by retention).
            CorruptRangeError: ``offset`` lies in a damaged range of the source log.
            FetchSizeTooSmallError: one message is larger than ``max_fetch_size``.
            InvalidMessageError: the broker returned bytes that fail validation at ``offset``.
            BrokerUnavailableError, NotLeaderForPartitionError, LeaderNotAvailableError: the source is away.
        """
        size = self.fetch_size if max_bytes is None else max_bytes
        while True:
            raw = self._call(lambda c: c.fetch_raw(self.topic, self.partition, offset, size))
            r = scan(raw)
            if r.end:
                return raw[:r.end] if r.end < len(raw) else raw
            if not raw:
                return b""
            if not r.cut_off:
                raise InvalidMessageError(f"{self}: the source returned an invalid message at offset {offset}: "
                                          f"{r.error}")
            needed = max(first_message_size(raw) or 0, size * 2)
            if needed > self.max_fetch_size:
                raise FetchSizeTooSmallError(
                    f"{self}: the message at offset {offset} needs a fetch of {needed} bytes, above the mirror's "
                    f"max fetch size {self.max_fetch_size}")
            log.info("%s: message at %d needs %d bytes; growing the fetch from %d", self, offset, needed, size)
            size = needed

    def range_set(self, start: int, end: int) -> bytes:
        """One set of whole messages of ``[start, end)`` (b"" when the bytes are gone), for counting only."""
        try:
            return self.fetch_set(start, min(self.fetch_size, end - start))[:end - start]
        except OffsetOutOfRangeError:
            return b""

    @staticmethod
    def next_offset(offset: int, data) -> int:
        """The source position after copying ``data`` from ``offset`` (byte offsets)."""
        return offset + len(data)

    @staticmethod
    def count(counter, data) -> int:
        """Messages of ``data`` (inner messages of compressed wrappers each count), by ``counter`` if given."""
        return counter.count(data) if counter is not None else count_messages(data)

    @staticmethod
    def last_time_ms(data, header_reader) -> int | None:
        """The event time (``header.time``) of the last message of ``data`` whose header reads."""
        return scan_headers(data, header_reader).last_time if header_reader is not None else None

    def earliest(self) -> int:
        return self._call(lambda c: c.earliest_offset(self.topic, self.partition))

    def latest(self) -> int:
        """The end a consumer may read to (a replicated partition's high watermark)."""
        return self._call(lambda c: c.latest_offset(self.topic, self.partition))

    def deleted_segments(self, start: int, end: int) -> list:
        """The source broker's DELETED_SEGMENTS records overlapping ``[start, end)`` (oldest first)."""
        return self._call(lambda c: c.deleted_segments(self.topic, self.partition, start, end))

    def close(self) -> None:
        self._leader.close()
        if self._direct is not None:
            self._direct.close()
            self._direct = None
