"""The internal topic ``__consumer_offsets``: which partition holds a group, and its records' layout (Kafka's).

A group lives in partition ``abs(hashCode(group id)) % offsets.topic.num.partitions`` (Kafka's
``GroupMetadataManager.partitionFor``, Java's ``String.hashCode`` over UTF-16 code units, ``abs`` as
Kafka's ``Utils.abs``: the sign bit cleared); the leader of that partition coordinates the group.

Records are Kafka's own (``GroupCoordinatorRecordSerde``), so Kafka's tools read them::

    offset commit key    version:int16 (0 or 1) group:string topic:string partition:int32
    offset commit value  version:int16=3 offset:int64 leader_epoch:int32 metadata:string commit_timestamp:int64
                         (versions 0-2 read too; a record without a value deletes the commit)
    group metadata key   version:int16=2 group:string   (written by Kafka for membership; skipped when read)
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from ingest.errors import InvalidRecordError
from ingest.wire.schema import Field, Schema, Struct, declare
from ingest.wire.types import INT32, INT64, STRING

OFFSETS_TOPIC = "__consumer_offsets"
VERSION = struct.Struct(">h")
COMMIT_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
VALUE_VERSION = 3


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (an int32) of ``text``."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` that holds ``group_id`` (Kafka's rule)."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions


@declare
class OffsetCommitKey(Struct):
    SCHEMA = Schema(Field("group", STRING), Field("topic", STRING), Field("partition", INT32))


@declare
class OffsetCommitValueV3(Struct):
    SCHEMA = Schema(Field("offset", INT64), Field("leader_epoch", INT32), Field("metadata", STRING),
                    Field("commit_timestamp", INT64))


@declare
class OffsetCommitValueV1(Struct):
    """Versions 0 and 1 (1 adds an expire timestamp, unused since Kafka 2.1) and 2 (as 0 plus the timestamp)."""

    SCHEMA = Schema(Field("offset", INT64), Field("metadata", STRING), Field("commit_timestamp", INT64))


class Committed(NamedTuple):
    """One committed offset as a group's coordinator keeps it."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


def commit_key(group: str, topic: str, partition: int) -> bytes:
    return VERSION.pack(COMMIT_KEY_VERSION) + OffsetCommitKey._encode(OffsetCommitKey(group, topic, partition))


def commit_value(c: Committed) -> bytes:
    return VERSION.pack(VALUE_VERSION) + OffsetCommitValueV3._encode(OffsetCommitValueV3(c.offset, c.leader_epoch, c.metadata or "",
                                                                                 c.commit_timestamp))


def read_key(key) -> OffsetCommitKey | None:
    """An offset commit's key; None for another record type (group metadata).

    Raises:
        InvalidRecordError: a key this layout does not describe (naming its version).
    """
    if key is None or len(key) < VERSION.size:
        raise InvalidRecordError(f"{OFFSETS_TOPIC}: a record key of {0 if key is None else len(key)} bytes")
    (version,) = VERSION.unpack_from(key, 0)
    if version in (0, 1):
        return OffsetCommitKey.decode(bytes(key[VERSION.size:]))
    if version == GROUP_KEY_VERSION:
        return None
    raise InvalidRecordError(f"{OFFSETS_TOPIC}: record key version {version}: expected 0, 1 or 2")


def read_value(value) -> Committed | None:
    """An offset commit's value; None for a tombstone (the commit deleted).

    Raises:
        InvalidRecordError: a value this layout does not describe (naming its version).
    """
    if value is None:
        return None
    (version,) = VERSION.unpack_from(value, 0)
    body = bytes(value[VERSION.size:])
    if version == VALUE_VERSION:
        v = OffsetCommitValueV3.decode(body)
        return Committed(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
    if version in (0, 1, 2):
        v = OffsetCommitValueV1.decode_from(body, 0, len(body))[0]   # a v1 value ends with an expire time
        return Committed(v.offset, -1, v.metadata, v.commit_timestamp)
    raise InvalidRecordError(f"{OFFSETS_TOPIC}: offset commit value version {version}: expected 0 to 3")
