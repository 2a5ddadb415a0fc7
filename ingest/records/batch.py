"""Record batch v2 (Kafka's "magic 2"): the header layout, reading a header, in-place rewrites.

Field grammar (big-endian; Kafka's ``DefaultRecordBatch``)::

    RecordBatch => base_offset:int64 batch_length:int32 partition_leader_epoch:int32 magic:int8=2
                   crc:uint32 attributes:int16 last_offset_delta:int32 base_timestamp:int64
                   max_timestamp:int64 producer_id:int64 producer_epoch:int16 base_sequence:int32
                   records_count:int32 records
    records    => Record * records_count            (codec none)
                | compressed(Record * records_count) (codec in attributes bits 0-2)
    Record     => length:varint attributes:int8 timestamp_delta:varlong offset_delta:varint
                  key_length:varint key value_length:varint value headers_count:varint Header*
    Header     => key_length:varint key(UTF-8) value_length:varint value
                  (a length of -1 is null; a header key is never null)

``batch_length`` counts the bytes after itself (a batch is ``12 + batch_length``
bytes). The CRC-32C covers attributes .. end of the batch, so ``base_offset``
and ``partition_leader_epoch``, which the broker assigns, are rewritten in
place without recomputing it (:func:`set_base_offset`,
:func:`set_partition_leader_epoch`). Attributes: bits 0-2 compression, bit 3
timestamp type (1 = LOG_APPEND_TIME), bit 4 transactional, bit 5 control,
bit 6 delete horizon. With LOG_APPEND_TIME every record's timestamp is the
batch's ``max_timestamp``.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from ingest.errors import CorruptRecordError
from ingest.records.crc import crc32c

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
"""The 61-byte header, every field: see :class:`BatchHeader`."""
LOG_OVERHEAD = struct.calcsize(">qi")                 # 12: base_offset + batch_length
BASE_OFFSET = struct.Struct(">q")
BASE_OFFSET_OFFSET = 0
LENGTH = struct.Struct(">i")
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH = struct.Struct(">i")
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC = struct.Struct(">I")
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = HEADER.size                           # 61
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET
MIN_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD      # 49: the smallest batch_length

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40
CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


class BatchHeader(NamedTuple):
    """The header of one record batch, as written (see the module docstring)."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch."""
        return LOG_OVERHEAD + self.length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset after the batch's last record."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """CREATE_TIME (0) or LOG_APPEND_TIME (1)."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


def read_header(buf, pos: int = 0) -> BatchHeader:
    """The batch header at ``pos`` of ``buf`` (any buffer), without touching the records.

    Raises:
        CorruptRecordError: fewer than 61 bytes are left at ``pos``.
    """
    if len(buf) - pos < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(f"record batch header at byte {pos} is cut off: {len(buf) - pos} bytes left, "
                                 f"a header takes {RECORD_BATCH_OVERHEAD}")
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def batch_size_at(buf, pos: int = 0) -> int | None:
    """``12 + batch_length`` of the entry at ``pos``, None when fewer than 12 bytes are left."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return LOG_OVERHEAD + LENGTH.unpack_from(buf, pos + LENGTH_OFFSET)[0]


def compute_crc(buf, pos: int, size: int) -> int:
    """CRC-32C of the batch of ``size`` bytes at ``pos``: attributes .. end."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size])


def set_base_offset(buf, pos: int, base_offset: int) -> None:
    """Rewrite the base offset of the batch at ``pos`` in place (outside the CRC)."""
    BASE_OFFSET.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf, pos: int, epoch: int) -> None:
    """Rewrite the partition leader epoch of the batch at ``pos`` in place (outside the CRC)."""
    PARTITION_LEADER_EPOCH.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def iter_batches(buf, pos: int = 0, end: int | None = None):
    """``(position, header)`` of every whole batch of ``buf[pos:end]`` in order (a fetch response, a
    segment region); stops quietly at a batch cut off by ``end``. Nothing is validated: see
    :mod:`ingest.records.validation`."""
    if end is None:
        end = len(buf)
    while end - pos >= RECORD_BATCH_OVERHEAD:
        h = BatchHeader._make(HEADER.unpack_from(buf, pos))
        if h.length < MIN_LENGTH or pos + h.size > end:
            return
        yield pos, h
        pos += h.size
