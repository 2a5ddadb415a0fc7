"""Round trips and bad-buffer behaviour of the 0.7 port's requests and responses (ingest.wire.protocol)."""
from __future__ import annotations

import socket
import struct

import pytest

from ingest.errors import MalformedRequestError, MalformedResponseError, UnknownRequestTypeError
from ingest.wire import protocol as p

REQUESTS = [
    p.ProduceRequest("clicks", 3, b"\x00\x00\x00\x06\x01\x00abcdXY"),
    p.ProduceAckRequest("page-views.v1", 0, b""),
    p.MultiProduceRequest((p.ProduceRequest("a", 0, b"xyz"), p.ProduceRequest("b_c", 7, b"q" * 1000))),
    p.FetchRequest("t", 1, 123456789012, 300 * 1024),
    p.MultiFetchRequest((p.FetchRequest("t", 0, 0, 10), p.FetchRequest("u", 2, 99, -1))),
    p.MultiFetchRequest(()),
    p.OffsetsRequest("t", 0, p.LATEST_TIME, 10),
    p.OffsetsRequest("t", 0, p.EARLIEST_TIME, 1),
    p.MetadataRequest(()),
    p.MetadataRequest(("a", "bé")),
]


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_round_trip_through_whole_frame(req):
    frame = req.encode()
    size, kind = p.REQUEST_HEADER.unpack_from(frame)
    assert size == len(frame) - 4
    assert kind == req.TYPE
    assert p.decode_request(frame) == req
    assert type(p.decode_request(frame)) is type(req)


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: type(r).__name__)
def test_every_truncation_of_a_request_body_raises_a_typed_error(req):
    body = req.encode()[p.REQUEST_HEADER.size:]
    for cut in range(len(body)):
        with pytest.raises(MalformedRequestError):
            type(req).decode(body[:cut])


def test_underrun_names_the_field_expected():
    body = p.FetchRequest("topic", 1, 2, 3).encode()[p.REQUEST_HEADER.size:]
    with pytest.raises(MalformedRequestError, match=r"buffer underrun decoding FetchRequest\.partition\+offset\+max_size"):
        p.FetchRequest.decode(body[:-1])
    with pytest.raises(MalformedRequestError, match=r"topic\.length"):
        p.FetchRequest.decode(b"\x00")


def test_trailing_bytes_are_refused():
    body = p.OffsetsRequest("t", 0, -1, 1).encode()[p.REQUEST_HEADER.size:]
    with pytest.raises(MalformedRequestError, match="trailing"):
        p.OffsetsRequest.decode(body + b"\x00")


def test_negative_lengths_and_counts_are_refused():
    bad_set = struct.pack(">h", 1) + b"t" + struct.pack(">ii", 0, -5)
    with pytest.raises(MalformedRequestError, match=r"message_set\.length: negative length -5"):
        p.ProduceRequest.decode(bad_set)
    with pytest.raises(MalformedRequestError, match="negative"):
        p.FetchRequest.decode(b"\xff\xff")
    with pytest.raises(MalformedRequestError, match="negative count"):
        p.MultiFetchRequest.decode(b"\x80\x00")


def test_set_size_larger_than_the_body_is_an_underrun():
    body = struct.pack(">h", 1) + b"t" + struct.pack(">ii", 0, 100) + b"x" * 10
    with pytest.raises(MalformedRequestError, match="underrun.*message_set"):
        p.ProduceRequest.decode(body)


def test_invalid_utf8_topic_is_malformed():
    body = struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">iqi", 0, 0, 10)
    with pytest.raises(MalformedRequestError, match="UTF-8"):
        p.FetchRequest.decode(body)


def test_unknown_request_type():
    frame = struct.pack(">ih", 2, 77)
    with pytest.raises(UnknownRequestTypeError, match="77"):
        p.decode_request(frame)


def test_size_field_must_match_frame():
    frame = bytearray(p.FetchRequest("t", 0, 0, 1).encode())
    frame[3] += 1
    with pytest.raises(MalformedRequestError, match="size field"):
        p.decode_request(bytes(frame))


RESPONSES = [
    (p.FetchResponse, p.FetchResponse(0, b"abc" * 10)),
    (p.FetchResponse, p.FetchResponse(1)),
    (p.MultiFetchResponse, p.MultiFetchResponse(0, (p.FetchResponse(0, b"x"), p.FetchResponse(1), p.FetchResponse(0, b"yy")))),
    (p.MultiFetchResponse, p.MultiFetchResponse(0, ())),
    (p.OffsetsResponse, p.OffsetsResponse(0, (900, 500, 0))),
    (p.OffsetsResponse, p.OffsetsResponse(0, ())),
    (p.ProduceAckResponse, p.ProduceAckResponse(0, 4096)),
    (p.ProduceAckResponse, p.ProduceAckResponse(11, -1)),
    (p.MetadataResponse, p.MetadataResponse(0, 7, "127.0.0.1", 9092, (
        p.TopicMetadata("a", (p.PartitionMetadata(0, 0, 100), p.PartitionMetadata(1, 50, 60))),
        p.TopicMetadata("b", ()),
    ))),
    (p.ErrorResponse, p.ErrorResponse(13)),
]


@pytest.mark.parametrize("cls,resp", RESPONSES, ids=lambda x: getattr(x, "__name__", ""))
def test_response_round_trip(cls, resp):
    frame = resp.encode()
    (size,) = p.SIZE.unpack_from(frame)
    assert size == len(frame) - 4
    assert cls.decode(frame[4:]) == resp


@pytest.mark.parametrize("cls", [p.FetchResponse, p.MultiFetchResponse, p.OffsetsResponse,
                                 p.ProduceAckResponse, p.MetadataResponse, p.ErrorResponse])
def test_bare_error_response_decodes_as_every_response_type(cls):
    frame = p.ErrorResponse(14).encode()
    assert cls.decode(frame[4:]).error == 14


def test_truncated_responses_raise_malformed_response_not_malformed_request():
    resp = p.MetadataResponse(0, 1, "h", 1, (p.TopicMetadata("a", (p.PartitionMetadata(0, 1, 2),)),))
    data = resp.encode()[4:]
    for cut in range(1, len(data)):
        with pytest.raises(MalformedResponseError, match="buffer underrun decoding MetadataResponse"):
            p.MetadataResponse.decode(data[:cut])
    with pytest.raises(MalformedResponseError):
        p.MultiFetchResponse.decode(p.MultiFetchResponse(0, (p.FetchResponse(0, b"abc"),)).encode()[4:-1])
    assert not issubclass(MalformedResponseError, MalformedRequestError)


@pytest.mark.parametrize("cls,data,match", [
    (p.OffsetsResponse, struct.pack(">hi", 0, -1), "negative count"),
    (p.OffsetsResponse, struct.pack(">hiqb", 0, 1, 5, 0), "trailing"),
    (p.MultiFetchResponse, struct.pack(">hih", 0, 1, 0), "size: 1 < 2"),
    (p.MetadataResponse, struct.pack(">hih", 0, 1, 2) + b"\xff\xfe", "UTF-8"),
])
def test_layout_violations_in_responses_are_malformed_responses(cls, data, match):
    with pytest.raises(MalformedResponseError, match=match):
        cls.decode(data)


def test_fetch_header_matches_encoded_frame():
    assert p.FetchResponse.header(0, 5) + b"hello" == p.FetchResponse(0, b"hello").encode()


def test_recv_response_over_a_socket_pair():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(p.OffsetsResponse(0, (1, 2)).encode() + p.ErrorResponse(4).encode())
        assert p.OffsetsResponse.decode(p.recv_response(b)) == p.OffsetsResponse(0, (1, 2))
        assert p.ErrorResponse.decode(p.recv_response(b)).error == 4
        a.sendall(struct.pack(">i", 1))
        with pytest.raises(MalformedResponseError, match="response size 1 outside"):
            p.recv_response(b)
        a.close()
        with pytest.raises(ConnectionError):
            p.recv_response(b)


def test_string_too_long_for_int16():
    with pytest.raises(MalformedRequestError, match=r"FetchRequest\.topic: string of 40000 bytes does not fit"):
        p.FetchRequest("x" * 40000, 0, 0, 1).encode()
