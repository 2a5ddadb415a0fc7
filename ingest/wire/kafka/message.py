"""Kafka protocol messages: versioned requests and responses, their headers, and their frames.

A Kafka API is one request and one response, each declared once for every version it has (its
``SCHEMA`` names ``versions`` and ``flexible`` versions, as ``validVersions`` and
``flexibleVersions`` of Kafka's JSON specs under ``clients/src/main/resources/common/message/``).
``message.encode(version)`` writes the body of that version; ``Cls.decode(body, version)`` reads it.

Frames (Kafka's protocol guide; KIP-482 for the flexible header versions)::

    request   size:int32 header body    header v0: api_key:int16 api_version:int16 correlation_id:int32
                                        v1: + client_id:nullable_string   v2: + tagged_fields
    response  size:int32 header body    header v0: correlation_id:int32   v1: + tagged_fields

A request uses header v2 when its version is flexible, v1 otherwise; a response header v1 when
flexible, v0 otherwise, except ApiVersions, whose response header is always v0 (a client must read
it before it knows which versions the broker speaks). The client id stays a non-compact nullable
string even in header v2 (its field opts out of the flexible form).
"""
from __future__ import annotations

from typing import ClassVar

from ingest.errors import MalformedRequestError, MalformedResponseError
from ingest.wire.frames import SIZE, frame
from ingest.wire.schema import Field, Schema, Struct, declare
from ingest.wire.types import INT16, INT32, STRING


class KafkaMessage(Struct):
    """A versioned message: ``encode(version)`` is its body, ``decode(body, version)`` reads one."""

    __slots__ = ()
    API_KEY: ClassVar[int]

    def encode(self, version: int) -> bytes:
        return self.codec(version).encode(self)

    def parts(self, version: int) -> list:
        """The body of ``version`` as its pieces in order, not joined: a RECORDS field may hold any
        sized object (a file region sent with ``sendfile``), which stays a piece of its own."""
        return self.codec(version).parts(self)

    @classmethod
    def decode(cls, body: bytes | memoryview, version: int):
        return cls.codec(version).decode(body)

    @classmethod
    def decode_from(cls, buf: bytes | memoryview, pos: int, end: int, version: int):
        """One value from ``buf[pos:end]`` and the position after it."""
        return cls.codec(version).decode_from(buf, pos, end)

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.SCHEMA.is_flexible(version)


class KafkaRequest(KafkaMessage):
    __slots__ = ()
    MALFORMED = MalformedRequestError


class KafkaResponse(KafkaMessage):
    __slots__ = ()
    MALFORMED = MalformedResponseError
    FLEXIBLE_HEADER: ClassVar[bool] = True
    """False for an API whose response header stays v0 in flexible versions (ApiVersions)."""


@declare
class RequestHeader(KafkaRequest):
    """The header of every Kafka request (Kafka's RequestHeader.json)."""

    SCHEMA = Schema(
        Field("request_api_key", INT16),
        Field("request_api_version", INT16),
        Field("correlation_id", INT32),
        Field("client_id", STRING, versions="1+", nullable="1+", flexible="none", default=None),
        versions="0-2", flexible="2+")


@declare
class ResponseHeader(KafkaResponse):
    """The header of every Kafka response (Kafka's ResponseHeader.json)."""

    SCHEMA = Schema(Field("correlation_id", INT32), versions="0-1", flexible="1+")


def request_header_version(cls: type[KafkaRequest], version: int) -> int:
    return 2 if cls.is_flexible(version) else 1


def response_header_version(cls: type[KafkaResponse], version: int) -> int:
    return 1 if cls.FLEXIBLE_HEADER and cls.is_flexible(version) else 0


def encode_request(request: KafkaRequest, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """The whole frame of ``request`` at ``version``: size, header, body."""
    header = RequestHeader(request.API_KEY, version, correlation_id, client_id)
    head = header.encode(request_header_version(type(request), version))
    return frame([head, request.encode(version)])


def decode_request_header(cls: type[KafkaRequest], data: bytes | memoryview) -> tuple[RequestHeader, int]:
    """The header of a request frame without its ``size`` (api key and version first) and the position
    of its body; the header's version follows the request version's (flexible: v2)."""
    version = RequestHeader.decode_from(data, 0, len(data), 0)[0].request_api_version   # v0: key, version, id
    return RequestHeader.decode_from(data, 0, len(data), request_header_version(cls, version))


def decode_request(cls: type[KafkaRequest], data: bytes | memoryview) -> tuple[RequestHeader, KafkaRequest]:
    """A request frame without its ``size`` (api key and version first): its header and its body.

    Bytes after the body are ignored, as Kafka's broker ignores them (``AbstractRequest.parseRequest``
    reads what the version declares and no more): librdkafka 2.16 sends a Metadata v9 request for all
    topics with one byte more than its fields (tests/kafka/golden/). A body that is cut off is malformed.
    """
    header, pos = decode_request_header(cls, data)
    return header, cls.codec(header.request_api_version).decode_from(data, pos, len(data))[0]


def encode_response(response: KafkaResponse, version: int, correlation_id: int) -> bytes:
    """The whole frame of ``response`` at ``version``: size, header, body."""
    head = ResponseHeader(correlation_id).encode(response_header_version(type(response), version))
    return frame([head, response.encode(version)])


def response_parts(response: KafkaResponse, version: int, correlation_id: int) -> list:
    """The whole frame of ``response`` at ``version`` as pieces (size, header, body pieces): adjacent
    byte strings joined, every other piece (a file region in a RECORDS field) kept as it is."""
    head = ResponseHeader(correlation_id).encode(response_header_version(type(response), version))
    body = response.parts(version)
    out: list = []
    run: list = [b"", head]        # the size, filled in below
    total = len(head)
    for piece in body:
        total += len(piece)
        if isinstance(piece, (bytes, bytearray, memoryview)):
            run.append(piece)
        else:
            if run:
                out.append(b"".join(run))
            out.append(piece)
            run = []
    if run:
        out.append(b"".join(run))
    out[0] = SIZE.pack(total) + out[0]
    return out


def decode_response(cls: type[KafkaResponse], data: bytes | memoryview, version: int) -> tuple[int, KafkaResponse]:
    """A response frame without its ``size``: its correlation id and its body."""
    header, pos = ResponseHeader.decode_from(data, 0, len(data), response_header_version(cls, version))
    return header.correlation_id, cls.codec(version).decode(memoryview(data)[pos:])

