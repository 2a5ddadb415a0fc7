"""The broker's own protocol (the 0.7 port): Kafka 0.7's requests 0-4 and the product's 10-17, declared.

Frames (:mod:`ingest.wire.frames`)::

    request frame   size:int32 (bytes that follow)  type:int16  body
    response frame  size:int32 (bytes that follow)  error:int16 body

Each request and response below is declared once, as a schema: its layout is its field list, and
its codec is compiled from it (:mod:`ingest.wire.schema`, :mod:`ingest.wire.codegen`). What each
request does, its errors and the server's handling of bad input are in docs/protocol.md. Strings
are ``length:int16`` + UTF-8; the requests' lists count with an int16, the responses' with an int32.

``Request.decode(body)`` takes the bytes after ``type``; ``Response.decode(data)`` the bytes after
``size`` (starting with ``error``); ``encode()`` returns the whole frame. A response whose ``error``
is not 0 may have an empty body (the broker sends one when it cannot even decode the request): its
other fields then take their defaults. A layout violation (a short buffer, named as "buffer
underrun decoding <Class>.<field>", a negative length or count, trailing bytes, bad UTF-8) raises
:class:`~ingest.errors.MalformedRequestError` for a request (the broker answers MALFORMED_REQUEST)
and :class:`~ingest.errors.MalformedResponseError` for a response (the client's side). Values are
immutable and safe to share between threads.
"""
from __future__ import annotations

import struct
from enum import IntEnum
from typing import ClassVar

from ingest.errors import MalformedRequestError, MalformedResponseError, UnknownRequestTypeError
from ingest.wire import codegen
from ingest.wire.errors import ErrorCode
from ingest.wire.frames import (  # noqa: F401  (the frame around every request: part of this protocol's API)
    REQUEST_HEADER, RESPONSE_HEADER, SIZE, frame, recv_exact, recv_response, request_frame, response_frame)
from ingest.wire.schema import Field, Record, Schema, Struct, declare
from ingest.wire.types import BYTES, INT16, INT32, INT64, REST, STRING, UNTIL_END, Array, Framed

LATEST_TIME = -1
EARLIEST_TIME = -2
QUERY = -1
"""APPEND_AT's ``expected_offset`` of the query form (with an empty set): answers the log end, appends nothing."""


class RequestType(IntEnum):
    """Request keys: 0-4 fixed by the Kafka 0.7 protocol, ours from 10 up."""

    PRODUCE = 0
    FETCH = 1
    MULTIFETCH = 2
    MULTIPRODUCE = 3
    OFFSETS = 4
    PRODUCE_ACK = 10
    METADATA = 11
    PRODUCE_ACKS = 12
    REPLICA_FETCH = 13
    TOPIC_METADATA = 14
    APPEND_AT = 15
    DELETED_SEGMENTS = 16
    REPLICA_FETCHES = 17


class Request(Struct):
    """A request: ``encode()`` is the whole frame (compiled: ``size`` and ``type`` are packed with
    the body's first fields), ``decode(body)`` reads the bytes after ``type``."""

    __slots__ = ()
    TYPE: ClassVar[RequestType]
    MALFORMED = MalformedRequestError

    @classmethod
    def frame_head(cls) -> tuple[tuple[str, str], ...]:
        return (("h", str(int(cls.TYPE))),)

    def encode_body(self) -> bytes:
        return self._encode(self)


class Response(Struct):
    """A response: ``encode()`` is the whole frame, ``decode(data)`` reads the bytes after ``size``."""

    __slots__ = ()
    MALFORMED = MalformedResponseError

    @classmethod
    def frame_head(cls) -> tuple[tuple[str, str], ...]:
        return ()


def with_header(cls: type) -> type:
    """Give a response that ends in a message set ``header(field, ..., set_length)``: the frame up
    to the set, for a set sent with sendfile (compiled from the schema, one pack)."""
    cls.header = staticmethod(codegen.compile_head(cls))
    return cls


ERROR = Field("error", INT16, may_end="if_set")
"""The first field of every response; the body may end after it when it is not 0."""

TOPIC_PARTITION = (Field("topic", STRING), Field("partition", INT32))
"""The first fields of every request about one partition."""


# --- requests -------------------------------------------------------------------------


@declare
class ProduceRequest(Request):
    """0 PRODUCE: append ``message_set`` to a topic-partition; no response."""

    TYPE = RequestType.PRODUCE
    SCHEMA = Schema(*TOPIC_PARTITION, ("message_set", BYTES))


@declare
class ProduceAckRequest(ProduceRequest):
    """10 PRODUCE_ACK: a PRODUCE answered with the offset of the first appended message."""

    TYPE = RequestType.PRODUCE_ACK


@declare
class FetchRequest(Request):
    """1 FETCH: whole messages of a topic-partition from ``offset``, at most ``max_size`` bytes."""

    TYPE = RequestType.FETCH
    SCHEMA = Schema(*TOPIC_PARTITION, ("offset", INT64), ("max_size", INT32))


@declare
class MultiFetchRequest(Request):
    """2 MULTIFETCH: several fetches answered in one response, in order."""

    TYPE = RequestType.MULTIFETCH
    SCHEMA = Schema(("fetches", Array(FetchRequest, count=INT16)))


@declare
class MultiProduceRequest(Request):
    """3 MULTIPRODUCE: several PRODUCE bodies in one frame; no response."""

    TYPE = RequestType.MULTIPRODUCE
    SCHEMA = Schema(("produces", Array(ProduceRequest, count=INT16)))


@declare
class OffsetsRequest(Request):
    """4 OFFSETS: valid offsets before ``time`` (ms; -1 latest, -2 earliest), newest first."""

    TYPE = RequestType.OFFSETS
    SCHEMA = Schema(*TOPIC_PARTITION, ("time", INT64), ("max_offsets", INT32))


@declare
class MetadataRequest(Request):
    """11 METADATA: topics, partitions and earliest/latest offsets of one broker (empty = all topics)."""

    TYPE = RequestType.METADATA
    SCHEMA = Schema(Field("topics", Array(STRING, count=INT16), default=()))


@declare
class ProduceAcksRequest(Request):
    """12 PRODUCE_ACKS: a PRODUCE with an acknowledgement level: 1 = the leader appended it, -1 =
    every in-sync replica has it (answered after that, or REQUEST_TIMED_OUT after ``timeout_ms``)."""

    TYPE = RequestType.PRODUCE_ACKS
    SCHEMA = Schema(("required_acks", INT16), ("timeout_ms", INT32), ("produce", ProduceRequest))

    @property
    def topic(self) -> str:
        return self.produce.topic

    @property
    def partition(self) -> int:
        return self.produce.partition

    @property
    def message_set(self) -> bytes:
        return self.produce.message_set


@declare
class ReplicaFetchRequest(Request):
    """13 REPLICA_FETCH: a follower's fetch from the leader: its replica id and the leader epoch it
    follows, and how long the leader may hold the answer while it has nothing past ``fetch.offset``."""

    TYPE = RequestType.REPLICA_FETCH
    SCHEMA = Schema(("replica_id", INT32), ("leader_epoch", INT32), ("max_wait_ms", INT32),
                    ("fetch", FetchRequest))


@declare
class TopicMetadataRequest(Request):
    """14 TOPIC_METADATA: leaders, replicas and in-sync sets of replicated topics (empty = all)."""

    TYPE = RequestType.TOPIC_METADATA
    SCHEMA = Schema(Field("topics", Array(STRING, count=INT16), default=()))


@declare
class AppendAtRequest(Request):
    """15 APPEND_AT: append ``message_set`` only if the partition's log end is ``expected_offset``
    (checked atomically with the append); ``expected_offset`` -1 with an empty set asks for the log end."""

    TYPE = RequestType.APPEND_AT
    SCHEMA = Schema(*TOPIC_PARTITION, ("expected_offset", INT64), ("required_acks", INT16),
                    ("timeout_ms", INT32), ("message_set", BYTES))

    @property
    def is_query(self) -> bool:
        return self.expected_offset == QUERY and not self.message_set


@declare
class DeletedSegmentsRequest(Request):
    """16 DELETED_SEGMENTS: the retention deletions of one partition that overlap ``[start_offset, end_offset)``."""

    TYPE = RequestType.DELETED_SEGMENTS
    SCHEMA = Schema(*TOPIC_PARTITION, ("start_offset", INT64), ("end_offset", INT64))


@declare
class ReplicaPartitionFetch(Record):
    """One partition of a REPLICA_FETCHES request: the leader epoch the follower follows, the offset
    (the follower's position, which the leader records) and at most ``max_size`` bytes."""

    MALFORMED = MalformedRequestError
    SCHEMA = Schema(*TOPIC_PARTITION, ("leader_epoch", INT32), ("offset", INT64), ("max_size", INT32))


@declare
class ReplicaFetchesRequest(Request):
    """17 REPLICA_FETCHES: a follower's fetch of many partitions led by one broker (Kafka's Fetch with a
    ``replica_id``): the leader holds the answer up to ``max_wait_ms`` while the partitions have fewer
    than ``min_bytes`` new bytes, and answers at most ``max_bytes`` in all (at least the first partition's
    first message)."""

    TYPE = RequestType.REPLICA_FETCHES
    SCHEMA = Schema(("replica_id", INT32), ("max_wait_ms", INT32), ("min_bytes", INT32), ("max_bytes", INT32),
                    ("partitions", Array(ReplicaPartitionFetch, count=INT16)))


REQUEST_CLASSES: dict[RequestType, type[Request]] = {
    cls.TYPE: cls for cls in (ProduceRequest, FetchRequest, MultiFetchRequest, MultiProduceRequest, OffsetsRequest,
                              ProduceAckRequest, MetadataRequest, ProduceAcksRequest, ReplicaFetchRequest,
                              TopicMetadataRequest, AppendAtRequest, DeletedSegmentsRequest, ReplicaFetchesRequest)}

RESPONSELESS = frozenset({RequestType.PRODUCE, RequestType.MULTIPRODUCE})
"""Request types the broker never answers (fire and forget)."""


def decode_request(data: bytes | memoryview) -> Request:
    """Decode a whole request frame (``size`` included) into its request object."""
    if len(data) < REQUEST_HEADER.size:
        raise MalformedRequestError(f"buffer underrun decoding request.size+type: need {REQUEST_HEADER.size} bytes "
                                    f"at position 0, only {len(data)} left")
    size, kind = REQUEST_HEADER.unpack_from(data)
    if size != len(data) - SIZE.size:
        raise MalformedRequestError(f"request size field {size} does not match frame of {len(data)} bytes")
    try:
        cls = REQUEST_CLASSES[RequestType(kind)]
    except ValueError:
        raise UnknownRequestTypeError(f"unknown request type {kind}; known: {[int(t) for t in RequestType]}") from None
    return cls.decode(memoryview(data)[REQUEST_HEADER.size:])


# --- responses ------------------------------------------------------------------------


@declare
class ErrorResponse(Response):
    """A response carrying only an error code; reads the error of any response."""

    SCHEMA = Schema(("error", INT16), trailing="ignore")


@declare
class CorruptRange(Record):
    """The body of a CORRUPT_RANGE answer to a fetch: the next valid message, where the damaged range
    starts and how many messages it held (-1: unknown). Brokers before the last two fields sent
    ``next_offset`` alone."""

    MALFORMED = MalformedResponseError
    SCHEMA = Schema(Field("next_offset", INT64, may_end="always"), Field("start_offset", INT64, default=-1),
                    Field("messages", INT32, default=-1), trailing="ignore")


@with_header
@declare
class FetchResponse(Response):
    """1 FETCH: the message set of one fetch (whole messages; the last one may be cut off).
    ``header(error, set_length)`` is the frame up to a set sent with sendfile."""

    SCHEMA = Schema(ERROR, Field("message_set", REST, default=b""))

    @classmethod
    def corrupt_range(cls, next_offset: int, start_offset: int = -1, messages: int = -1) -> "FetchResponse":
        """The answer to a fetch at or inside a damaged range: error CORRUPT_RANGE, its body a
        :class:`CorruptRange` instead of a message set."""
        body = CorruptRange._encode(CorruptRange(next_offset, start_offset, messages))
        return cls(ErrorCode.CORRUPT_RANGE, body)

    @property
    def next_valid_offset(self) -> int:
        """The ``next_offset`` of a CORRUPT_RANGE answer (see :meth:`corrupt_range`)."""
        return self.damaged_range()[0]

    def damaged_range(self) -> tuple[int, int, int]:
        """``(next_offset, start_offset, messages)`` of a CORRUPT_RANGE answer; -1 for the two
        fields a broker did not send."""
        return tuple(CorruptRange.decode(self.message_set))


@declare
class MultiFetchResponse(Response):
    """2 MULTIFETCH: one framed :class:`FetchResponse` (``size:int32 error:int16 message_set``) per
    fetch of the request, in order, to the end of the body."""

    SCHEMA = Schema(ERROR, Field("responses", Array(Framed(FetchResponse), count=UNTIL_END), default=()))


@declare
class OffsetsResponse(Response):
    """4 OFFSETS: offsets, newest first."""

    SCHEMA = Schema(ERROR, Field("offsets", Array(INT64), default=()))


@declare
class ProduceAckResponse(Response):
    """10 PRODUCE_ACK, 12 PRODUCE_ACKS, 15 APPEND_AT: ``offset`` of the first appended message (-1
    on error); APPEND_AT's answers the broker's log end on OFFSET_MISMATCH and to the query form."""

    SCHEMA = Schema(ERROR, Field("offset", INT64, default=-1))


@declare
class PartitionMetadata(Record):
    """One partition in a METADATA answer: its number and earliest/latest offsets."""

    SCHEMA = Schema(("partition", INT32), ("earliest", INT64), ("latest", INT64))


@declare
class TopicMetadata(Record):
    SCHEMA = Schema(("name", STRING), ("partitions", Array(PartitionMetadata)))


@declare
class MetadataResponse(Response):
    """11 METADATA: the answering broker and, per topic, its partitions with earliest/latest offsets
    (this broker's own partitions; replicated topics are not listed)."""

    SCHEMA = Schema(ERROR, Field("broker_id", INT32, default=-1), Field("host", STRING, default=""),
                    Field("port", INT32, default=-1), Field("topics", Array(TopicMetadata), default=()))

    def topic(self, name: str) -> TopicMetadata | None:
        return next((t for t in self.topics if t.name == name), None)


@with_header
@declare
class ReplicaFetchResponse(Response):
    """13 REPLICA_FETCH: the leader's answer to a follower: its high watermark, log start and log end,
    then the bytes (OFFSET_OUT_OF_RANGE keeps the three offsets). ``header(error, high_watermark,
    log_start, log_end, set_length)`` is the frame up to a set sent with sendfile."""

    SCHEMA = Schema(ERROR, Field("high_watermark", INT64, default=-1), Field("log_start", INT64, default=-1),
                    Field("log_end", INT64, default=-1), Field("message_set", REST, default=b""))


@declare
class Broker(Record):
    """A live broker in a TOPIC_METADATA answer."""

    SCHEMA = Schema(("broker_id", INT32), ("host", STRING), ("port", INT32))


@declare
class PartitionReplicas(Record):
    """One replicated partition in a TOPIC_METADATA answer (leader -1: none now)."""

    SCHEMA = Schema(("partition", INT32), ("leader", INT32), ("leader_epoch", INT32), ("replicas", Array(INT32)),
                    ("isr", Array(INT32)))

    @property
    def home(self) -> int:
        """The preferred replica (first of the assignment): the broker id that names this
        partition wherever the 0.7 model names a partition by ``(broker_id, partition)``."""
        return self.replicas[0] if self.replicas else -1


@declare
class ReplicatedTopic(Record):
    """A topic in a TOPIC_METADATA answer (no partitions: not a replicated topic, ask METADATA)."""

    SCHEMA = Schema(("name", STRING), ("error", INT16), ("partitions", Array(PartitionReplicas)))


@declare
class TopicMetadataResponse(Response):
    """14 TOPIC_METADATA: live brokers and, per requested topic, each partition's leader, replicas and
    in-sync set."""

    SCHEMA = Schema(ERROR, Field("brokers", Array(Broker), default=()),
                    Field("topics", Array(ReplicatedTopic), default=()))

    def topic(self, name: str) -> ReplicatedTopic | None:
        return next((t for t in self.topics if t.name == name), None)


@declare
class DeletionRecord(Record):
    """One segment deleted by retention: offsets ``[start, end)``, the messages a consumer would have
    seen in it (inner messages of compressed sets each count), its bytes, when (epoch ms)."""

    SCHEMA = Schema(("start", INT64), ("end", INT64), ("messages", INT64), ("bytes", INT64), ("deleted_at_ms", INT64))


@declare
class DeletedSegmentsResponse(Response):
    """16 DELETED_SEGMENTS: the deletion records, oldest first."""

    SCHEMA = Schema(ERROR, Field("records", Array(DeletionRecord), default=()))


@declare
class ReplicaPartitionData(Record):
    """One partition of a REPLICA_FETCHES answer: as a REPLICA_FETCH answer (its error, the leader's high
    watermark, log start and log end, the bytes; CORRUPT_RANGE's body in place of the bytes)."""

    MALFORMED = MalformedResponseError
    SCHEMA = Schema(*TOPIC_PARTITION, ("error", INT16), ("high_watermark", INT64), ("log_start", INT64),
                    ("log_end", INT64), ("message_set", BYTES))


_ANSWER_HEAD = struct.Struct(">hi")   # a REPLICA_FETCHES answer's error and partition count


@declare
class ReplicaFetchesResponse(Response):
    """17 REPLICA_FETCHES: one :class:`ReplicaPartitionData` per partition of the request, in its order
    (a partition the leader left out for the size bound answers NONE with no bytes).
    ``parts(error, entries)`` is the frame with each entry's bytes kept as a file region (sendfile)."""

    SCHEMA = Schema(ERROR, Field("partitions", Array(ReplicaPartitionData), default=()))

    @staticmethod
    def parts(error: int, entries: list) -> list:
        """The whole frame as pieces: ``entries`` are ``(ReplicaPartitionData, region)``, the entry's own
        ``message_set`` empty and ``region`` (a file region or bytes: anything with a length) its bytes.
        Adjacent byte strings are joined (one write each, not one per partition); regions stay pieces."""
        out: list = []
        run = [b"", _ANSWER_HEAD.pack(error, len(entries))]   # the size, filled in below
        total = len(run[1])
        for entry, region in entries:
            head = ReplicaPartitionData._encode(entry)   # ends with the empty set's length: int32 0
            n = len(region)
            run.append(head[:-SIZE.size] + SIZE.pack(n))
            total += len(run[-1]) + n
            if n:
                if isinstance(region, (bytes, bytearray, memoryview)):
                    run.append(region)
                else:
                    out.append(b"".join(run))
                    out.append(region)
                    run = []
        if run:
            out.append(b"".join(run))
        out[0] = SIZE.pack(total) + out[0]
        return out


RESPONSE_CLASSES: dict[RequestType, type[Response]] = {
    RequestType.FETCH: FetchResponse,
    RequestType.MULTIFETCH: MultiFetchResponse,
    RequestType.OFFSETS: OffsetsResponse,
    RequestType.PRODUCE_ACK: ProduceAckResponse,
    RequestType.METADATA: MetadataResponse,
    RequestType.PRODUCE_ACKS: ProduceAckResponse,
    RequestType.REPLICA_FETCH: ReplicaFetchResponse,
    RequestType.TOPIC_METADATA: TopicMetadataResponse,
    RequestType.APPEND_AT: ProduceAckResponse,
    RequestType.DELETED_SEGMENTS: DeletedSegmentsResponse,
    RequestType.REPLICA_FETCHES: ReplicaFetchesResponse,
}
