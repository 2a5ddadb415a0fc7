"""Bad input: each kind gets an error response (or, for the responseless PRODUCE and
MULTIPRODUCE, none, the connection staying usable) or a closed connection (bad frames), is
logged once with the client address, appends nothing, and a second client keeps being served."""
from __future__ import annotations

import logging
import struct

import pytest

from ingest.wire import protocol as p
from ingest.broker.broker import BrokerServer
from ingest.broker.server_config import SERVER_CONFIG
from ingest.wire.errors import ErrorCode
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set
from tests.harness.brokers import RawClient

MAX_REQUEST = 64 * 1024
GOOD = encode_message_set([b"good-1", b"good-2"])


@pytest.fixture
def broker(tmp_path):
    cfg = SERVER_CONFIG.parse({"brokerid": 1, "port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": str(tmp_path / "logs"),
                               "log.flush.interval": 1, "num.partitions": 2,
                               "max.socket.request.bytes": MAX_REQUEST, "num.threads": 1})
    b = BrokerServer(cfg).start()
    yield b
    b.stop()


@pytest.fixture
def bystander(broker):
    """A healthy client connected before the bad input and used after it."""
    c = RawClient(broker.host, broker.port)
    assert p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("ok", 0, GOOD))).error == 0
    yield c
    # the bystander is still served, on the same connection
    assert p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("ok", 0, GOOD))).error == 0
    data = p.FetchResponse.decode(c.request(p.FetchRequest("ok", 0, 0, 10_000))).message_set
    assert [m.payload for m in iter_messages(data)] == [b"good-1", b"good-2"] * 2
    c.close()


def log_end(broker, topic="victim", partition=0) -> int:
    lg = broker.log_manager.get_log(topic, partition)
    return 0 if lg is None else lg.end_offset


def warnings_naming(caplog, client: RawClient) -> list[str]:
    host, port = client.sock.getsockname()[:2]
    addr = f"{host}:{port}"
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and addr in r.getMessage()]


def corrupt(message_set: bytes) -> bytes:
    bad = bytearray(message_set)
    bad[-1] ^= 0x01      # flip one payload bit: CRC no longer matches
    return bytes(bad)


def test_frame_larger_than_max_socket_request_bytes(broker, bystander, caplog):
    with RawClient(broker.host, broker.port) as c:
        c.send(struct.pack(">ih", MAX_REQUEST + 1, p.RequestType.PRODUCE_ACK) + b"\x00" * 100)
        assert p.ErrorResponse.decode(p.recv_response(c.sock)).error == ErrorCode.REQUEST_TOO_LARGE
        assert c.closed_by_peer()
        assert len(warnings_naming(caplog, c)) == 1
        assert "max.socket.request.bytes" in warnings_naming(caplog, c)[0]


@pytest.mark.parametrize("size", [-1, -2**31, 0, 1])
def test_negative_or_too_small_frame_size(broker, bystander, caplog, size):
    with RawClient(broker.host, broker.port) as c:
        c.send(struct.pack(">i", size) + b"\x00\x01\x02")
        assert p.ErrorResponse.decode(p.recv_response(c.sock)).error == ErrorCode.MALFORMED_REQUEST
        assert c.closed_by_peer()
        assert len(warnings_naming(caplog, c)) == 1


def test_absurd_frame_size_is_refused_without_waiting_for_the_bytes(broker, bystander):
    with RawClient(broker.host, broker.port) as c:
        c.send(struct.pack(">i", 2**31 - 1))
        assert p.ErrorResponse.decode(p.recv_response(c.sock)).error == ErrorCode.REQUEST_TOO_LARGE


def test_unknown_request_type_keeps_the_connection_usable(broker, bystander, caplog):
    with RawClient(broker.host, broker.port) as c:
        resp = p.ErrorResponse.decode(c.request(struct.pack(">ih", 6, 77) + b"abcd"))
        assert resp.error == ErrorCode.UNKNOWN_REQUEST_TYPE
        assert "77" in warnings_naming(caplog, c)[0] and len(warnings_naming(caplog, c)) == 1
        assert p.FetchResponse.decode(c.request(p.FetchRequest("ok", 0, 0, 100))).error == 0


def test_truncated_fetch_body_gets_malformed_request(broker, bystander, caplog):
    with RawClient(broker.host, broker.port) as c:
        body = p.FetchRequest("ok", 0, 0, 100).encode()[6:-3]
        resp = p.ErrorResponse.decode(c.request(p.request_frame(p.RequestType.FETCH, body)))
        assert resp.error == ErrorCode.MALFORMED_REQUEST
        assert len(warnings_naming(caplog, c)) == 1
        assert "underrun" in warnings_naming(caplog, c)[0]


def still_served(c: RawClient) -> bool:
    """The connection answers the next request (a refused PRODUCE has no response)."""
    return p.FetchResponse.decode(c.request(p.FetchRequest("ok", 0, 0, 100))).error == 0


def test_truncated_produce_body_is_refused_and_the_connection_serves_on(broker, bystander, caplog):
    with RawClient(broker.host, broker.port) as c:
        frame = p.ProduceRequest("victim", 0, GOOD).encode()
        body = frame[6:-5]
        c.send(p.request_frame(p.RequestType.PRODUCE, body))
        assert still_served(c)
        assert len(warnings_naming(caplog, c)) == 1 and "PRODUCE refused (MALFORMED_REQUEST)" in warnings_naming(caplog, c)[0]
    assert log_end(broker) == 0


def test_set_size_beyond_the_frame_is_refused(broker, bystander):
    with RawClient(broker.host, broker.port) as c:
        body = struct.pack(">h", 6) + b"victim" + struct.pack(">ii", 0, 10_000) + GOOD
        resp = p.ProduceAckResponse.decode(c.request(p.request_frame(p.RequestType.PRODUCE_ACK, body)))
        assert resp.error == ErrorCode.MALFORMED_REQUEST and resp.offset == -1
    assert log_end(broker) == 0


@pytest.mark.parametrize("topic", ["", ".", "..", "../etc", "a/b", "x" * 250, "sp ace", "é"])
def test_bad_topic_name(broker, bystander, caplog, topic, tmp_path):
    with RawClient(broker.host, broker.port) as c:
        resp = p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest(topic, 0, GOOD)))
        assert resp.error == ErrorCode.INVALID_TOPIC
        assert len(warnings_naming(caplog, c)) == 1
        assert p.FetchResponse.decode(c.request(p.FetchRequest(topic, 0, 0, 100))).error == ErrorCode.INVALID_TOPIC
        md = p.MetadataResponse.decode(c.request(p.MetadataRequest((topic,))))
        assert md.error == ErrorCode.INVALID_TOPIC
        c.send(p.ProduceRequest(topic, 0, GOOD))
        assert still_served(c)
    # nothing under log.dir but the bystander's partition
    # no partition directory for a bad name (meta.properties is the Kafka listener's cluster id)
    assert sorted(x.name for x in (tmp_path / "logs").iterdir() if x.is_dir()) == ["ok-0"]


def test_wrong_partition(broker, bystander):
    with RawClient(broker.host, broker.port) as c:
        for part in (2, -1, 2**31 - 1):
            resp = p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("victim", part, GOOD)))
            assert resp.error == ErrorCode.WRONG_PARTITION
    assert broker.log_manager.get_log("victim", 0) is None


def test_message_set_failing_its_crc_appends_nothing(broker, bystander, caplog):
    with RawClient(broker.host, broker.port) as c:
        assert p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("victim", 0, GOOD))).error == 0
        before = log_end(broker)
        bad = GOOD + corrupt(GOOD)
        resp = p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("victim", 0, bad)))
        assert resp.error == ErrorCode.INVALID_MESSAGE
        assert len(warnings_naming(caplog, c)) == 1
        assert f"victim-0: rejected message set of {len(bad)} bytes: message at " in warnings_naming(caplog, c)[0]
        c.send(p.ProduceRequest("victim", 0, corrupt(GOOD)))
        assert still_served(c)
        assert len(warnings_naming(caplog, c)) == 2 and "PRODUCE refused (INVALID_MESSAGE)" in warnings_naming(caplog, c)[1]
    assert log_end(broker) == before


def test_multiproduce_with_one_bad_part_appends_no_part(broker, bystander, caplog):
    with RawClient(broker.host, broker.port) as c:
        c.send(p.MultiProduceRequest((p.ProduceRequest("victim", 0, GOOD),
                                      p.ProduceRequest("victim", 1, corrupt(GOOD)))))
        assert still_served(c)
        assert "victim-1: rejected message set" in warnings_naming(caplog, c)[0]
    assert log_end(broker, "victim", 0) == 0 and log_end(broker, "victim", 1) == 0


def test_negative_fetch_size(broker, bystander, caplog):
    with RawClient(broker.host, broker.port) as c:
        resp = p.FetchResponse.decode(c.request(p.FetchRequest("ok", 0, 0, -1)))
        assert resp.error == ErrorCode.INVALID_FETCH_SIZE and resp.message_set == b""
        assert len(warnings_naming(caplog, c)) == 1


def test_fetch_at_non_boundary_offsets_never_returns_data(broker, bystander):
    with RawClient(broker.host, broker.port) as c:
        size = len(GOOD)
        for _ in range(3):
            p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("victim", 0, GOOD)))
        end = log_end(broker)
        boundaries = {m.offset for m in iter_messages(
            p.FetchResponse.decode(c.request(p.FetchRequest("victim", 0, 0, 10_000))).message_set)}
        assert end == 3 * size
        for offset in range(-3, end + 5):
            resp = p.FetchResponse.decode(c.request(p.FetchRequest("victim", 0, offset, 10_000)))
            if offset in boundaries or offset == end:
                assert resp.error == 0
            else:
                assert resp.error == ErrorCode.OFFSET_OUT_OF_RANGE, offset
                assert resp.message_set == b""


def test_offsets_with_negative_max_is_malformed(broker, bystander):
    with RawClient(broker.host, broker.port) as c:
        resp = p.OffsetsResponse.decode(c.request(p.OffsetsRequest("ok", 0, -1, -5)))
        assert resp.error == ErrorCode.MALFORMED_REQUEST


def test_handler_bug_answers_unknown_and_broker_keeps_serving(broker, bystander, monkeypatch):
    def boom(body, client):
        raise RuntimeError("simulated handler bug")

    monkeypatch.setitem(broker.handlers.table, p.RequestType.OFFSETS, boom)
    with RawClient(broker.host, broker.port) as c:
        resp = p.OffsetsResponse.decode(c.request(p.OffsetsRequest("ok", 0, -1, 1)))
        assert resp.error == ErrorCode.UNKNOWN
        assert p.FetchResponse.decode(c.request(p.FetchRequest("ok", 0, 0, 100))).error == 0
