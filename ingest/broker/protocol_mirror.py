"""The mirror's requests: APPEND_AT (15, a conditional append) and DELETED_SEGMENTS (16, what
retention deleted), their request and response classes.

Byte layouts (after ``size:int32 type:int16``; responses after ``size:int32 error:int16``)::

    15 APPEND_AT         topic:string partition:int32 expected_offset:int64 required_acks:int16
                         timeout_ms:int32 set_size:int32 message_set
                         -> offset:int64 (success: where the set starts = expected_offset;
                            OFFSET_MISMATCH: the broker's log end; -1 on other errors)
    16 DELETED_SEGMENTS  topic:string partition:int32 start_offset:int64 end_offset:int64
                         -> count:int32 then count x (start:int64 end:int64 messages:int64
                            bytes:int64 deleted_at_ms:int64), oldest first

APPEND_AT appends only if the partition's log end equals ``expected_offset`` (checked atomically
with the append); ``expected_offset`` -1 with an empty set asks for the log end. DELETED_SEGMENTS
lists the segments retention deleted that overlap ``[start_offset, end_offset)``. Semantics and
errors: docs/protocol.md. Decoding follows :mod:`ingest.broker.protocol`'s rules (named
underruns, no trailing bytes, an error response may have an empty body).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from ingest.broker.protocol_codec import (ACKS_HEAD, INT32, INT64, Reader, RequestType,
                                          encode_string, request_frame, response_frame)
from ingest.errors import MalformedRequestError, MalformedResponseError

EXPECTED_OFFSET = INT64                    # expected_offset
RANGE = struct.Struct(">qq")               # start_offset, end_offset
RECORD = struct.Struct(">qqqqq")           # start, end, messages, bytes, deleted_at_ms
QUERY = -1
"""``expected_offset`` of the query form (with an empty set): answers the log end, appends nothing."""


@dataclass(frozen=True, slots=True)
class AppendAtRequest:
    """Append ``message_set`` only if the partition's log end is ``expected_offset``."""

    topic: str
    partition: int
    expected_offset: int
    required_acks: int
    timeout_ms: int
    message_set: bytes
    TYPE: ClassVar[RequestType] = RequestType.APPEND_AT

    @property
    def is_query(self) -> bool:
        return self.expected_offset == QUERY and not self.message_set

    def encode(self) -> bytes:
        body = (encode_string(self.topic) + INT32.pack(self.partition) + EXPECTED_OFFSET.pack(self.expected_offset)
                + ACKS_HEAD.pack(self.required_acks, self.timeout_ms) + INT32.pack(len(self.message_set))
                + self.message_set)
        return request_frame(self.TYPE, body)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> "AppendAtRequest":
        r = Reader(body, cls.__name__)
        topic = r.string("topic")
        partition = r.int32("partition")
        expected = r.int64("expected_offset")
        acks, timeout_ms = r.unpack(ACKS_HEAD, "required_acks+timeout_ms")
        set_size = r.int32("set_size")
        if set_size < 0:
            raise MalformedRequestError(f"{r.what}.set_size: negative size {set_size}")
        data = r.raw(set_size, "message_set")
        r.done()
        return cls(topic, partition, expected, acks, timeout_ms, data)


@dataclass(frozen=True, slots=True)
class AppendAtResponse:
    """``offset``: where the set starts on success, the broker's log end on OFFSET_MISMATCH and
    for the query form, -1 on any other error."""

    error: int
    offset: int = -1

    def encode(self) -> bytes:
        return response_frame(self.error, INT64.pack(self.offset))

    @classmethod
    def decode(cls, data: bytes | memoryview) -> "AppendAtResponse":
        r = Reader(data, cls.__name__, MalformedResponseError)
        error = r.int16("error")
        if error and not r.remaining():
            return cls(error)
        offset = r.int64("offset")
        r.done()
        return cls(error, offset)


@dataclass(frozen=True, slots=True)
class DeletedSegmentsRequest:
    """The retention deletions of one partition that overlap ``[start_offset, end_offset)``."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    TYPE: ClassVar[RequestType] = RequestType.DELETED_SEGMENTS

    def encode(self) -> bytes:
        body = encode_string(self.topic) + INT32.pack(self.partition) + RANGE.pack(self.start_offset,
                                                                                    self.end_offset)
        return request_frame(self.TYPE, body)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> "DeletedSegmentsRequest":
        r = Reader(body, cls.__name__)
        topic = r.string("topic")
        partition = r.int32("partition")
        start, end = r.unpack(RANGE, "start_offset+end_offset")
        r.done()
        return cls(topic, partition, start, end)


class DeletionRecord(NamedTuple):
    """One segment deleted by retention: offsets ``[start, end)``, the messages a consumer would
    have seen in it (inner messages of compressed sets each count), its bytes, when (epoch ms)."""

    start: int
    end: int
    messages: int
    bytes: int
    deleted_at_ms: int


@dataclass(frozen=True, slots=True)
class DeletedSegmentsResponse:
    """The deletion records, oldest first."""

    error: int
    records: tuple[DeletionRecord, ...] = ()

    def encode(self) -> bytes:
        return response_frame(self.error, INT32.pack(len(self.records))
                              + b"".join(RECORD.pack(*rec) for rec in self.records))

    @classmethod
    def decode(cls, data: bytes | memoryview) -> "DeletedSegmentsResponse":
        r = Reader(data, cls.__name__, MalformedResponseError)
        error = r.int16("error")
        if error and not r.remaining():
            return cls(error)
        n = r.int32("count")
        if n < 0:
            raise MalformedResponseError(f"{cls.__name__}.count: negative count {n}")
        records = tuple(DeletionRecord(*r.unpack(RECORD, f"records[{i}]")) for i in range(n))
        r.done()
        return cls(error, records)


