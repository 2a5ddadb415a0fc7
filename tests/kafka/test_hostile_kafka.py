"""Bad input on the Kafka listener of a real broker process: each gets one clear Kafka answer (the partition's
error code in the Produce response, or a closed connection where Kafka closes it), nothing is appended,
and the broker keeps serving other clients; then a bounded fuzz of mutated valid frames.
"""
from __future__ import annotations

import gzip
import random
import socket
import struct

import pytest

from ingest.records.batch import (ATTRIBUTES_OFFSET, CRC_OFFSET, LENGTH_OFFSET, RECORDS_COUNT_OFFSET,
                                  RECORDS_OFFSET, compute_crc)
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.compression import GZIP
from ingest.wire.errors import KafkaErrorCode as K
from ingest.wire.kafka.api_versions import ApiVersionsRequest, ApiVersionsResponse
from ingest.wire.kafka.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopic
from ingest.wire.kafka.message import decode_response, encode_request
from ingest.wire.kafka.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from ingest.wire.kafka.produce import PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData
from tests.harness import hostile as h
from tests.harness.brokers import broker_cluster, stop_all

pytestmark = pytest.mark.processes

TOPIC = "hostile"
PRODUCE_V = 9


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1)
    yield brokers[0]
    stop_all(brokers)


def _recv(sock: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def _call(addr, request, version: int, response_cls):
    with h.connect(addr, timeout=10) as s:
        s.sendall(encode_request(request, version, 7, "hostile"))
        body = _recv(s)
    assert body is not None, f"{type(request).__name__} v{version}: connection closed"
    corr, resp = decode_response(response_cls, body, version)
    assert corr == 7
    return resp


def _end(addr) -> int:
    req = ListOffsetsRequest(-1, 0, (ListOffsetsTopic(TOPIC, (ListOffsetsPartition(0, -1, -1),)),))
    return _call(addr, req, 7, ListOffsetsResponse).topics[0].partitions[0].offset


def _produce(addr, records) -> int:
    req = ProduceRequest(None, 1, 10_000, (TopicProduceData(TOPIC, (PartitionProduceData(0, bytes(records)),)),))
    return _call(addr, req, PRODUCE_V, ProduceResponse).responses[0].partition_responses[0].error_code


def _good(n: int = 3, codec: int = 0) -> bytearray:
    return build_batch([SimpleRecord(b"v%d" % i, b"k", (("h", b"x"),), 1_700_000_000_000 + i) for i in range(n)],
                       codec=codec)


def _recrc(b: bytearray) -> bytearray:
    struct.pack_into(">I", b, CRC_OFFSET, compute_crc(b, 0, len(b)))
    return b


def _bad_batches() -> dict[str, tuple[bytes, set[int]]]:
    out = {}
    b = _good()
    b[-1] ^= 0xFF
    out["bad crc"] = (b, {K.CORRUPT_MESSAGE})
    b = _good()
    struct.pack_into(">i", b, LENGTH_OFFSET, len(b) + 100)
    out["length past the end"] = (b, {K.CORRUPT_MESSAGE, K.INVALID_RECORD})
    b = _good()
    struct.pack_into(">i", b, LENGTH_OFFSET, 20)
    out["length too short"] = (b, {K.CORRUPT_MESSAGE, K.INVALID_RECORD})
    b = _good()
    struct.pack_into(">i", b, RECORDS_COUNT_OFFSET, 5)
    out["count lies"] = (_recrc(b), {K.CORRUPT_MESSAGE, K.INVALID_RECORD})
    b = _good()
    struct.pack_into(">i", b, ATTRIBUTES_OFFSET + 2, 9)        # last_offset_delta lies
    out["offsets lie"] = (_recrc(b), {K.CORRUPT_MESSAGE, K.INVALID_RECORD})
    b = _good()
    b[RECORDS_OFFSET:RECORDS_OFFSET + 6] = b"\xff" * 6            # a record length varint that never ends
    out["bad varint"] = (_recrc(b), {K.CORRUPT_MESSAGE, K.INVALID_RECORD})
    bomb = _good(1, codec=GZIP)
    inflated = gzip.compress(b"\0" * (300 << 20), 9)
    bomb = bomb[:RECORDS_OFFSET] + inflated
    struct.pack_into(">i", bomb, LENGTH_OFFSET, len(bomb) - 12)
    out["compression bomb"] = (_recrc(bytearray(bomb)), {K.CORRUPT_MESSAGE, K.INVALID_RECORD, K.RECORD_LIST_TOO_LARGE,
                                                         K.MESSAGE_TOO_LARGE})
    out["empty"] = (b"", {K.INVALID_RECORD, K.CORRUPT_MESSAGE})
    out["magic 1 on v9"] = (b"\0" * 16 + b"\x01" + b"\0" * 40, {K.INVALID_RECORD, K.CORRUPT_MESSAGE})
    return out


def test_each_bad_batch_gets_its_code_and_nothing_is_appended(broker):
    addr = (broker.host, broker.kafka_port)
    assert _produce(addr, _good()) == 0
    end = _end(addr)
    for name, (records, codes) in _bad_batches().items():
        code = _produce(addr, records)
        assert code in codes, f"{name}: answered {code}, expected one of {codes}"
        assert _end(addr) == end, f"{name}: something was appended"
    assert _produce(addr, _good()) == 0 and _end(addr) == end + 3


def test_bad_frames_close_the_connection_as_kafka_does_and_apiversions_answers_35(broker):
    addr = (broker.host, broker.kafka_port)
    frames = {
        "truncated header": struct.pack(">ih", 2, 3),
        "unknown api key": struct.pack(">ihhi", 10, 999, 0, 1) + b"\xff\xff",
        "unsupported version": struct.pack(">ihhi", 10, 3, 99, 1) + b"\xff\xff",
        "negative size": struct.pack(">i", -5) + b"\0" * 8,
        "truncated body": encode_request(MetadataRequest((MetadataRequestTopic(TOPIC),)), 1, 1, "x")[:-3],
    }
    for name, frame in frames.items():
        with h.connect(addr, timeout=10) as s:
            if name == "truncated body":   # the frame's size says more than the body holds: fix it to match
                frame = struct.pack(">i", len(frame) - 4) + frame[4:]
            s.sendall(frame)
            assert _recv(s) is None, f"{name}: answered instead of closed"
    # an ApiVersions newer than served: error 35 in the v0 layout, with the range served
    with h.connect(addr, timeout=10) as s:
        s.sendall(encode_request(ApiVersionsRequest("x", "1"), 4, 9, "c")[:6] + struct.pack(">h", 77)
                  + encode_request(ApiVersionsRequest("x", "1"), 4, 9, "c")[8:])
        corr, resp = decode_response(ApiVersionsResponse, _recv(s), 0)
    assert corr == 9 and resp.error_code == K.UNSUPPORTED_VERSION and resp.api_keys[0].max_version == 4
    md = _call(addr, MetadataRequest(None), 9, MetadataResponse)
    assert md.brokers and md.brokers[0].port == broker.kafka_port


def test_fuzzed_frames_leave_the_broker_serving(broker):
    addr = (broker.host, broker.kafka_port)
    valid = [encode_request(ProduceRequest(None, 1, 5000, (TopicProduceData(TOPIC, (PartitionProduceData(0, bytes(_good())),)),)),
                            PRODUCE_V, 1, "f"),
             encode_request(MetadataRequest((MetadataRequestTopic(TOPIC),)), 9, 2, "f"),
             encode_request(ListOffsetsRequest(-1, 0, (ListOffsetsTopic(TOPIC, (ListOffsetsPartition(0, -1, -1),)),)), 7, 3, "f")]
    rng = random.Random(26)
    for _ in range(1000):
        frame = bytearray(rng.choice(valid))
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(4, len(frame))
            frame[i] = rng.randrange(256)
        with h.connect(addr, timeout=10) as s:
            s.sendall(frame)
            s.shutdown(socket.SHUT_WR)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
    end = _end(addr)
    assert _produce(addr, _good()) == 0 and _end(addr) == end + 3
