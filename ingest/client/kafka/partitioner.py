"""Which partition a record goes to: Kafka's built-in partitioner (murmur2 of the key; sticky without one).

- A record with a key goes to ``toPositive(murmur2(key)) % partitions`` (Kafka's
  ``BuiltInPartitioner.partitionForKey``, ``Utils.murmur2`` with seed 0x9747b28c), so a key lands
  on the partition the Java client (and kafka-python) would pick for it.
- A record without a key goes to the topic's *sticky* partition, chosen at random and kept until
  its batch is sent (KIP-480, KIP-794): batches fill up instead of spreading one record per
  partition.

librdkafka's default (``consistent_random``, CRC-32 of the key) differs from the Java client's; the
Java client's is Kafka's and is followed here.
"""
from __future__ import annotations

import random

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | memoryview) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 of ``data`` as a signed int."""
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes | memoryview, partitions: int) -> int:
    """The partition of a keyed record among ``partitions`` (Kafka's ``toPositive(murmur2(key)) % n``)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class StickyPartitions:
    """The sticky partition of each topic for records without a key; moved on when its batch is sent."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, partitions: int) -> int:
        p = self._current.get(topic)
        if p is None or p >= partitions:
            p = self._current[topic] = self._rng.randrange(partitions)
        return p

    def batch_sent(self, topic: str, partition: int, partitions: int) -> None:
        """The sticky partition's batch left: the next keyless record picks another partition."""
        if self._current.get(topic) == partition and partitions > 1:
            others = self._rng.randrange(partitions - 1)
            self._current[topic] = others if others < partition else others + 1
