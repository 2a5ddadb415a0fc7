"""The broker wire protocol: request types, one class per request and response.

All integers are big-endian. Strings are ``len:int16`` + UTF-8 bytes.
Full grammar, error codes and the server's handling of bad input are in
``docs/protocol.md``; this docstring is the byte layout::

    request frame   size:int32 (bytes that follow)  type:int16  body
    response frame  size:int32 (bytes that follow)  error:int16 body

    0  PRODUCE        topic:string partition:int32 set_size:int32 message_set    (no response)
    1  FETCH          topic:string partition:int32 offset:int64 max_size:int32
                      -> message_set (sent with sendfile from the segment file); error 20
                         CORRUPT_RANGE: next_offset:int64 start_offset:int64 messages:int32
    2  MULTIFETCH     count:int16 then count FETCH bodies
                      -> per fetch, in order: size:int32 error:int16 message_set
                         (size counts the error field and the set)
    3  MULTIPRODUCE   count:int16 then count PRODUCE bodies                       (no response)
    4  OFFSETS        topic:string partition:int32 time:int64 max_offsets:int32
                      -> count:int32 then count offsets:int64, newest first
                         (time -1 = latest, -2 = earliest)
    10 PRODUCE_ACK    body as PRODUCE
                      -> offset:int64 (offset of the first appended message; -1 on error)
    11 METADATA       count:int16 then count topic:string (0 = every topic)
                      -> broker_id:int32 host:string port:int32 topic_count:int32
                         then per topic   name:string partition_count:int32
                         then per partition partition:int32 earliest:int64 latest:int64
                         (this broker's own partitions; replicated topics are not listed)
    12 PRODUCE_ACKS   required_acks:int16 timeout_ms:int32 then a PRODUCE body
                      -> offset:int64 (as PRODUCE_ACK; acks -1 answers once every in-sync
                         replica has the set, or REQUEST_TIMED_OUT after timeout_ms)
    13 REPLICA_FETCH  replica_id:int32 leader_epoch:int32 max_wait_ms:int32 then a FETCH body
                      -> high_watermark:int64 log_start:int64 log_end:int64 message_set (a
                         follower's fetch: up to the leader's log end; waits up to max_wait_ms
                         for data; OFFSET_OUT_OF_RANGE keeps the three offsets)
    14 TOPIC_METADATA count:int16 then count topic:string (0 = every replicated topic)
                      -> broker_count:int32 then per broker id:int32 host:string port:int32
                         topic_count:int32 then per topic name:string error:int16 partition_count:int32
                         then per partition partition:int32 leader:int32 leader_epoch:int32
                              replica_count:int32 replicas:int32... isr_count:int32 isr:int32...
                         (partition_count 0: not a replicated topic, ask METADATA)
    15 APPEND_AT / 16 DELETED_SEGMENTS: see :mod:`ingest.broker.protocol_mirror`.

A response whose ``error`` is not 0 may have an empty body (the broker sends
one when it cannot even decode the request); every ``decode`` here accepts
that and fills the body fields with their empty values.

Primitives (struct layouts, :class:`Reader`, frame builders, socket helpers) live in
:mod:`ingest.broker.protocol_codec` and are re-exported here.

``Request.decode(body)`` takes the bytes after ``type``; ``Response.decode(data)``
takes the bytes after ``size`` (starting with ``error``). ``encode()`` returns
the whole frame including ``size``. A layout violation (a short buffer, named
as "buffer underrun decoding <Class>.<field>", a negative length or count,
trailing bytes, bad UTF-8) raises :class:`~ingest.errors.MalformedRequestError`
when decoding a request (the broker answers it with MALFORMED_REQUEST) and
:class:`~ingest.errors.MalformedResponseError` when decoding a response (the
client's side). Instances are immutable and safe to share between threads.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

from ingest.broker.protocol_codec import (  # noqa: F401  (re-exported: callers use protocol.X)
    ACKS_HEAD, EARLIEST_TIME, FETCH_TAIL, INT16, INT32, INT64, LATEST_TIME, MAX_STRING_BYTES, OFFSETS_TAIL,
    PARTITION_META, PARTITION_STATE_HEAD, PRODUCE_TAIL, REPLICA_FETCH_HEAD, REPLICA_HEAD, REQUEST_HEADER,
    RESPONSE_HEADER, SIZE, Reader, RequestType, count16 as _count16, encode_string, recv_exact, recv_response,
    request_frame, response_frame)
from ingest.broker.protocol_mirror import (  # noqa: F401  (re-exported)
    AppendAtRequest, AppendAtResponse, DeletedSegmentsRequest, DeletedSegmentsResponse, DeletionRecord)
from ingest.errors import ErrorCode, MalformedRequestError, MalformedResponseError, UnknownRequestTypeError

CORRUPT_RANGE_TAIL = struct.Struct(">qi")  # start_offset, messages: after next_offset in a CORRUPT_RANGE body


# --- requests -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """Append ``message_set`` to a topic-partition; no response."""

    topic: str
    partition: int
    message_set: bytes
    TYPE: ClassVar[RequestType] = RequestType.PRODUCE

    def encode_body(self) -> bytes:
        return (encode_string(self.topic)
                + PRODUCE_TAIL.pack(self.partition, len(self.message_set)) + self.message_set)

    def encode(self) -> bytes:
        return request_frame(self.TYPE, self.encode_body())

    @classmethod
    def read(cls, r: Reader):
        topic = r.string("topic")
        partition, set_size = r.unpack(PRODUCE_TAIL, "partition+set_size")
        if set_size < 0:
            raise MalformedRequestError(f"{r.what}.set_size: negative size {set_size}")
        return cls(topic, partition, r.raw(set_size, "message_set"))

    @classmethod
    def decode(cls, body: bytes | memoryview):
        # fast path for the hottest request: plain unpacks, no Reader
        try:
            (n,) = INT16.unpack_from(body, 0)
            end = INT16.size + n
            partition, set_size = PRODUCE_TAIL.unpack_from(body, end)
            start = end + PRODUCE_TAIL.size
            if n >= 0 and set_size >= 0 and start + set_size == len(body):
                return cls(str(body[INT16.size:end], "utf-8"), partition, bytes(body[start:]))
        except (struct.error, UnicodeDecodeError):
            pass
        r = Reader(body, cls.__name__)   # slow path: names exactly what is wrong
        req = cls.read(r)
        r.done()
        return req


@dataclass(frozen=True, slots=True)
class ProduceAckRequest(ProduceRequest):
    """PRODUCE that is answered with the offset of the first appended message."""

    TYPE: ClassVar[RequestType] = RequestType.PRODUCE_ACK


@dataclass(frozen=True, slots=True)
class MultiProduceRequest:
    """Several PRODUCE bodies in one frame; no response."""

    produces: tuple[ProduceRequest, ...]
    TYPE: ClassVar[RequestType] = RequestType.MULTIPRODUCE

    def encode(self) -> bytes:
        body = INT16.pack(len(self.produces)) + b"".join(p.encode_body() for p in self.produces)
        return request_frame(self.TYPE, body)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> "MultiProduceRequest":
        r = Reader(body, cls.__name__)
        n = _count16(r, "count")
        out = tuple(ProduceRequest.read(r) for _ in range(n))
        r.done()
        return cls(out)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Read whole messages of a topic-partition from ``offset``, at most ``max_size`` bytes."""

    topic: str
    partition: int
    offset: int
    max_size: int
    TYPE: ClassVar[RequestType] = RequestType.FETCH

    def encode_body(self) -> bytes:
        return encode_string(self.topic) + FETCH_TAIL.pack(self.partition, self.offset, self.max_size)

    def encode(self) -> bytes:
        return request_frame(self.TYPE, self.encode_body())

    @classmethod
    def read(cls, r: Reader) -> "FetchRequest":
        topic = r.string("topic")
        partition, offset, max_size = r.unpack(FETCH_TAIL, "partition+offset+max_size")
        return cls(topic, partition, offset, max_size)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> "FetchRequest":
        r = Reader(body, cls.__name__)
        req = cls.read(r)
        r.done()
        return req


@dataclass(frozen=True, slots=True)
class MultiFetchRequest:
    """Several fetches answered in one response, in order."""

    fetches: tuple[FetchRequest, ...]
    TYPE: ClassVar[RequestType] = RequestType.MULTIFETCH

    def encode(self) -> bytes:
        body = INT16.pack(len(self.fetches)) + b"".join(f.encode_body() for f in self.fetches)
        return request_frame(self.TYPE, body)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> "MultiFetchRequest":
        r = Reader(body, cls.__name__)
        n = _count16(r, "count")
        out = tuple(FetchRequest.read(r) for _ in range(n))
        r.done()
        return cls(out)


@dataclass(frozen=True, slots=True)
class OffsetsRequest:
    """Valid offsets before ``time`` (ms; -1 latest, -2 earliest), newest first."""

    topic: str
    partition: int
    time: int
    max_offsets: int
    TYPE: ClassVar[RequestType] = RequestType.OFFSETS

    def encode(self) -> bytes:
        body = encode_string(self.topic) + OFFSETS_TAIL.pack(self.partition, self.time, self.max_offsets)
        return request_frame(self.TYPE, body)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> "OffsetsRequest":
        r = Reader(body, cls.__name__)
        topic = r.string("topic")
        partition, time_ms, max_offsets = r.unpack(OFFSETS_TAIL, "partition+time+max_offsets")
        r.done()
        return cls(topic, partition, time_ms, max_offsets)


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """Topics, partitions and earliest/latest offsets of one broker (empty = all topics)."""

    topics: tuple[str, ...] = ()
    TYPE: ClassVar[RequestType] = RequestType.METADATA

    def encode(self) -> bytes:
        body = INT16.pack(len(self.topics)) + b"".join(encode_string(t) for t in self.topics)
        return request_frame(self.TYPE, body)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> "MetadataRequest":
        r = Reader(body, cls.__name__)
        n = _count16(r, "count")
        topics = tuple(r.string("topic") for _ in range(n))
        r.done()
        return cls(topics)


@dataclass(frozen=True, slots=True)
class ProduceAcksRequest:
    """A PRODUCE with an acknowledgement level: 1 = the leader appended it, -1 = every in-sync
    replica has it (answered after that, or REQUEST_TIMED_OUT after ``timeout_ms``)."""

    required_acks: int
    timeout_ms: int
    produce: ProduceRequest
    TYPE: ClassVar[RequestType] = RequestType.PRODUCE_ACKS

    @property
    def topic(self) -> str:
        return self.produce.topic

    @property
    def partition(self) -> int:
        return self.produce.partition

    @property
    def message_set(self) -> bytes:
        return self.produce.message_set

    def encode(self) -> bytes:
        return request_frame(self.TYPE, ACKS_HEAD.pack(self.required_acks, self.timeout_ms)
                             + self.produce.encode_body())

    @classmethod
    def decode(cls, body: bytes | memoryview) -> "ProduceAcksRequest":
        r = Reader(body, cls.__name__)
        acks, timeout_ms = r.unpack(ACKS_HEAD, "required_acks+timeout_ms")
        produce = ProduceRequest.read(r)
        r.done()
        return cls(acks, timeout_ms, produce)


@dataclass(frozen=True, slots=True)
class ReplicaFetchRequest:
    """A follower's fetch from the leader: its replica id and the leader epoch it follows, and how
    long the leader may hold the answer while it has nothing past ``fetch.offset``."""

    replica_id: int
    leader_epoch: int
    max_wait_ms: int
    fetch: FetchRequest
    TYPE: ClassVar[RequestType] = RequestType.REPLICA_FETCH

    def encode(self) -> bytes:
        return request_frame(self.TYPE, REPLICA_HEAD.pack(self.replica_id, self.leader_epoch, self.max_wait_ms)
                             + self.fetch.encode_body())

    @classmethod
    def decode(cls, body: bytes | memoryview) -> "ReplicaFetchRequest":
        r = Reader(body, cls.__name__)
        replica_id, epoch, wait = r.unpack(REPLICA_HEAD, "replica_id+leader_epoch+max_wait_ms")
        f = FetchRequest.read(r)
        r.done()
        return cls(replica_id, epoch, wait, f)


@dataclass(frozen=True, slots=True)
class TopicMetadataRequest:
    """Leaders, replicas and in-sync sets of replicated topics (empty = every replicated topic)."""

    topics: tuple[str, ...] = ()
    TYPE: ClassVar[RequestType] = RequestType.TOPIC_METADATA

    def encode(self) -> bytes:
        body = INT16.pack(len(self.topics)) + b"".join(encode_string(t) for t in self.topics)
        return request_frame(self.TYPE, body)

    @classmethod
    def decode(cls, body: bytes | memoryview) -> "TopicMetadataRequest":
        r = Reader(body, cls.__name__)
        n = _count16(r, "count")
        topics = tuple(r.string("topic") for _ in range(n))
        r.done()
        return cls(topics)


REQUEST_CLASSES: dict[RequestType, type] = {
    RequestType.PRODUCE: ProduceRequest,
    RequestType.FETCH: FetchRequest,
    RequestType.MULTIFETCH: MultiFetchRequest,
    RequestType.MULTIPRODUCE: MultiProduceRequest,
    RequestType.OFFSETS: OffsetsRequest,
    RequestType.PRODUCE_ACK: ProduceAckRequest,
    RequestType.METADATA: MetadataRequest,
    RequestType.PRODUCE_ACKS: ProduceAcksRequest,
    RequestType.REPLICA_FETCH: ReplicaFetchRequest,
    RequestType.TOPIC_METADATA: TopicMetadataRequest,
    RequestType.APPEND_AT: AppendAtRequest,
    RequestType.DELETED_SEGMENTS: DeletedSegmentsRequest,
}

RESPONSELESS = frozenset({RequestType.PRODUCE, RequestType.MULTIPRODUCE})
"""Request types the broker never answers (fire and forget)."""


def decode_request(frame: bytes | memoryview):
    """Decode a whole request frame (``size`` included) into its request object."""
    r = Reader(frame, "request")
    size, kind = r.unpack(REQUEST_HEADER, "size+type")
    if size != len(frame) - SIZE.size:
        raise MalformedRequestError(f"request size field {size} does not match frame of {len(frame)} bytes")
    try:
        cls = REQUEST_CLASSES[RequestType(kind)]
    except ValueError:
        raise UnknownRequestTypeError(f"unknown request type {kind}; known: {[int(t) for t in RequestType]}") from None
    return cls.decode(memoryview(frame)[REQUEST_HEADER.size:])


# --- responses ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """A response carrying only an error code (any request type)."""

    error: int

    def encode(self) -> bytes:
        return response_frame(self.error)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> "ErrorResponse":
        return cls(Reader(data, cls.__name__, MalformedResponseError).int16("error"))


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """The message set of one fetch (whole messages; the last one may be cut off)."""

    error: int
    message_set: bytes = b""

    @staticmethod
    def header(error: int, set_length: int) -> bytes:
        """The frame header to send before ``set_length`` bytes sent with sendfile."""
        return RESPONSE_HEADER.pack(set_length + INT16.size, error)

    def encode(self) -> bytes:
        return response_frame(self.error, self.message_set)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> "FetchResponse":
        r = Reader(data, cls.__name__, MalformedResponseError)
        error = r.int16("error")
        return cls(error, r.raw(r.remaining(), "message_set"))

    @classmethod
    def corrupt_range(cls, next_offset: int, start_offset: int = -1, messages: int = -1) -> "FetchResponse":
        """The answer to a fetch at or inside a damaged range: error CORRUPT_RANGE, body
        ``next_offset:int64 start_offset:int64 messages:int32`` (the next valid message, where the
        damaged range starts, how many messages it held or -1) instead of a message set. Brokers
        before the last two fields sent ``next_offset`` alone."""
        return cls(ErrorCode.CORRUPT_RANGE, INT64.pack(next_offset) + CORRUPT_RANGE_TAIL.pack(start_offset, messages))

    @property
    def next_valid_offset(self) -> int:
        """The ``next_offset`` of a CORRUPT_RANGE answer (see :meth:`corrupt_range`)."""
        return self.damaged_range()[0]

    def damaged_range(self) -> tuple[int, int, int]:
        """``(next_offset, start_offset, messages)`` of a CORRUPT_RANGE answer; -1 for the two
        fields a broker did not send."""
        r = Reader(self.message_set, "FetchResponse(CORRUPT_RANGE)", MalformedResponseError)
        nxt = r.int64("next_offset")
        if r.remaining() < CORRUPT_RANGE_TAIL.size:
            return nxt, -1, -1
        start, messages = r.unpack(CORRUPT_RANGE_TAIL, "start_offset+messages")
        return nxt, start, messages


@dataclass(frozen=True, slots=True)
class MultiFetchResponse:
    """One :class:`FetchResponse` per fetch of the request, in order."""

    error: int
    responses: tuple[FetchResponse, ...] = ()

    @staticmethod
    def part_header(error: int, set_length: int) -> bytes:
        """``size:int32 error:int16`` before one fetch's message set."""
        return RESPONSE_HEADER.pack(set_length + INT16.size, error)

    def encode(self) -> bytes:
        body = b"".join(self.part_header(p.error, len(p.message_set)) + p.message_set for p in self.responses)
        return response_frame(self.error, body)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> "MultiFetchResponse":
        r = Reader(data, cls.__name__, MalformedResponseError)
        error = r.int16("error")
        parts = []
        while r.remaining():
            size, part_error = r.unpack(RESPONSE_HEADER, f"responses[{len(parts)}].size+error")
            if size < INT16.size:
                raise MalformedResponseError(f"{cls.__name__}.responses[{len(parts)}].size: {size} < 2")
            parts.append(FetchResponse(part_error, r.raw(size - INT16.size, f"responses[{len(parts)}].message_set")))
        return cls(error, tuple(parts))


@dataclass(frozen=True, slots=True)
class OffsetsResponse:
    """Offsets, newest first."""

    error: int
    offsets: tuple[int, ...] = ()

    def encode(self) -> bytes:
        body = INT32.pack(len(self.offsets)) + b"".join(INT64.pack(o) for o in self.offsets)
        return response_frame(self.error, body)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> "OffsetsResponse":
        r = Reader(data, cls.__name__, MalformedResponseError)
        error = r.int16("error")
        if error and not r.remaining():
            return cls(error)
        n = r.int32("count")
        if n < 0:
            raise MalformedResponseError(f"{cls.__name__}.count: negative count {n}")
        offsets = tuple(r.int64(f"offsets[{i}]") for i in range(n))
        r.done()
        return cls(error, offsets)


@dataclass(frozen=True, slots=True)
class ProduceAckResponse:
    """Offset of the first appended message (-1 when ``error`` is set)."""

    error: int
    offset: int = -1

    def encode(self) -> bytes:
        return response_frame(self.error, INT64.pack(self.offset))

    @classmethod
    def decode(cls, data: bytes | memoryview) -> "ProduceAckResponse":
        r = Reader(data, cls.__name__, MalformedResponseError)
        error = r.int16("error")
        if error and not r.remaining():
            return cls(error)
        offset = r.int64("offset")
        r.done()
        return cls(error, offset)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition in a METADATA answer: its number and earliest/latest offsets (clients use it as is)."""

    partition: int
    earliest: int
    latest: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: tuple[PartitionMetadata, ...]


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    """The answering broker and, per topic, its partitions with earliest/latest offsets."""

    error: int
    broker_id: int = -1
    host: str = ""
    port: int = -1
    topics: tuple[TopicMetadata, ...] = field(default=())

    def encode(self) -> bytes:
        parts = [INT32.pack(self.broker_id), encode_string(self.host),
                 INT32.pack(self.port), INT32.pack(len(self.topics))]
        for t in self.topics:
            parts.append(encode_string(t.name))
            parts.append(INT32.pack(len(t.partitions)))
            parts.extend(PARTITION_META.pack(p.partition, p.earliest, p.latest) for p in t.partitions)
        return response_frame(self.error, b"".join(parts))

    @classmethod
    def decode(cls, data: bytes | memoryview) -> "MetadataResponse":
        r = Reader(data, cls.__name__, MalformedResponseError)
        error = r.int16("error")
        if error and not r.remaining():
            return cls(error)
        broker_id = r.int32("broker_id")
        host = r.string("host")
        port = r.int32("port")
        n_topics = r.int32("topic_count")
        if n_topics < 0:
            raise MalformedResponseError(f"{cls.__name__}.topic_count: negative count {n_topics}")
        topics = []
        for i in range(n_topics):
            name = r.string(f"topics[{i}].name")
            n_parts = r.int32(f"topics[{i}].partition_count")
            if n_parts < 0:
                raise MalformedResponseError(f"{cls.__name__}.topics[{i}].partition_count: negative {n_parts}")
            parts = tuple(PartitionMetadata(*r.unpack(PARTITION_META, f"topics[{i}].partitions[{j}]"))
                          for j in range(n_parts))
            topics.append(TopicMetadata(name, parts))
        r.done()
        return cls(error, broker_id, host, port, tuple(topics))

    def topic(self, name: str) -> TopicMetadata | None:
        return next((t for t in self.topics if t.name == name), None)


@dataclass(frozen=True, slots=True)
class ReplicaFetchResponse:
    """The leader's answer to a follower: its high watermark and log end, then the bytes."""

    error: int
    high_watermark: int = -1
    log_start: int = -1
    log_end: int = -1
    message_set: bytes = b""

    @staticmethod
    def header(error: int, high_watermark: int, log_start: int, log_end: int, set_length: int) -> bytes:
        """Everything before ``set_length`` bytes sent with sendfile."""
        return (RESPONSE_HEADER.pack(set_length + INT16.size + REPLICA_FETCH_HEAD.size, error)
                + REPLICA_FETCH_HEAD.pack(high_watermark, log_start, log_end))

    def encode(self) -> bytes:
        return response_frame(self.error, REPLICA_FETCH_HEAD.pack(self.high_watermark, self.log_start, self.log_end)
                              + self.message_set)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> "ReplicaFetchResponse":
        r = Reader(data, cls.__name__, MalformedResponseError)
        error = r.int16("error")
        if error and not r.remaining():
            return cls(error)
        hw, start, end = r.unpack(REPLICA_FETCH_HEAD, "high_watermark+log_start+log_end")
        return cls(error, hw, start, end, r.raw(r.remaining(), "message_set"))


@dataclass(frozen=True, slots=True)
class PartitionReplicas:
    """One replicated partition in a TOPIC_METADATA answer (leader -1: none now)."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def home(self) -> int:
        """The preferred replica (first of the assignment): the broker id that names this
        partition wherever the 0.7 model names a partition by ``(broker_id, partition)``."""
        return self.replicas[0] if self.replicas else -1


@dataclass(frozen=True, slots=True)
class ReplicatedTopic:
    name: str
    error: int
    partitions: tuple[PartitionReplicas, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadataResponse:
    """Live brokers and, per requested topic, each partition's leader, replicas and in-sync set."""

    error: int
    brokers: tuple[tuple[int, str, int], ...] = ()
    topics: tuple[ReplicatedTopic, ...] = ()

    def encode(self) -> bytes:
        parts = [INT32.pack(len(self.brokers))]
        for bid, host, port in self.brokers:
            parts += [INT32.pack(bid), encode_string(host), INT32.pack(port)]
        parts.append(INT32.pack(len(self.topics)))
        for t in self.topics:
            parts += [encode_string(t.name), INT16.pack(t.error), INT32.pack(len(t.partitions))]
            for pr in t.partitions:
                parts.append(PARTITION_STATE_HEAD.pack(pr.partition, pr.leader, pr.leader_epoch))
                parts.append(INT32.pack(len(pr.replicas)) + b"".join(INT32.pack(x) for x in pr.replicas))
                parts.append(INT32.pack(len(pr.isr)) + b"".join(INT32.pack(x) for x in pr.isr))
        return response_frame(self.error, b"".join(parts))

    @classmethod
    def decode(cls, data: bytes | memoryview) -> "TopicMetadataResponse":
        r = Reader(data, cls.__name__, MalformedResponseError)
        error = r.int16("error")
        if error and not r.remaining():
            return cls(error)

        def count(name: str) -> int:
            n = r.int32(name)
            if n < 0:
                raise MalformedResponseError(f"{cls.__name__}.{name}: negative count {n}")
            return n

        brokers = tuple((r.int32("broker.id"), r.string("broker.host"), r.int32("broker.port"))
                        for _ in range(count("broker_count")))
        topics = []
        for i in range(count("topic_count")):
            name = r.string(f"topics[{i}].name")
            terr = r.int16(f"topics[{i}].error")
            parts = []
            for j in range(count(f"topics[{i}].partition_count")):
                pn, leader, epoch = r.unpack(PARTITION_STATE_HEAD, f"topics[{i}].partitions[{j}]")
                replicas = tuple(r.int32("replica") for _ in range(count("replica_count")))
                isr = tuple(r.int32("isr") for _ in range(count("isr_count")))
                parts.append(PartitionReplicas(pn, leader, epoch, replicas, isr))
            topics.append(ReplicatedTopic(name, terr, tuple(parts)))
        r.done()
        return cls(error, brokers, tuple(topics))

    def topic(self, name: str) -> ReplicatedTopic | None:
        return next((t for t in self.topics if t.name == name), None)


RESPONSE_CLASSES: dict[RequestType, type] = {
    RequestType.FETCH: FetchResponse,
    RequestType.MULTIFETCH: MultiFetchResponse,
    RequestType.OFFSETS: OffsetsResponse,
    RequestType.PRODUCE_ACK: ProduceAckResponse,
    RequestType.METADATA: MetadataResponse,
    RequestType.PRODUCE_ACKS: ProduceAckResponse,
    RequestType.REPLICA_FETCH: ReplicaFetchResponse,
    RequestType.TOPIC_METADATA: TopicMetadataResponse,
    RequestType.APPEND_AT: AppendAtResponse,
    RequestType.DELETED_SEGMENTS: DeletedSegmentsResponse,
}
