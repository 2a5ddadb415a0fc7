"""The in-process broker: every request type end to end, concurrency, slow clients, shutdown."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from ingest.wire import protocol as p
from ingest.broker.broker import BrokerServer
from ingest.broker.server_config import SERVER_CONFIG
from ingest.errors import ConfigError
from ingest.wire.errors import ErrorCode
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set
from tests.harness.brokers import RawClient


def make_config(log_dir, **extra):
    raw = {"brokerid": 5, "port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": str(log_dir), "log.flush.interval": 1, "num.partitions": 2}
    raw.update(extra)
    return SERVER_CONFIG.parse(raw)


@pytest.fixture
def broker(tmp_path):
    b = BrokerServer(make_config(tmp_path / "logs")).start()
    yield b
    b.stop()


def client(b: BrokerServer) -> RawClient:
    return RawClient(b.host, b.port)


def produce_ack(c: RawClient, topic: str, partition: int, payloads, codec: int = 0) -> p.ProduceAckResponse:
    return p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest(topic, partition, encode_message_set(payloads, codec))))


def fetch(c: RawClient, topic: str, partition: int, offset: int, max_size: int = 1 << 20) -> p.FetchResponse:
    return p.FetchResponse.decode(c.request(p.FetchRequest(topic, partition, offset, max_size)))


def payloads_of(message_set: bytes, base: int = 0) -> list[bytes]:
    return [m.payload for m in iter_messages(message_set, base)]


def test_produce_ack_then_fetch_returns_the_same_messages(broker):
    with client(broker) as c:
        first = produce_ack(c, "clicks", 1, [b"a", b"bb"])
        second = produce_ack(c, "clicks", 1, [b"ccc"])
        assert (first.error, first.offset) == (0, 0)
        assert second.error == 0 and second.offset == len(encode_message_set([b"a", b"bb"]))
        resp = fetch(c, "clicks", 1, 0)
        assert resp.error == 0
        assert payloads_of(resp.message_set) == [b"a", b"bb", b"ccc"]
        # from the second append's offset, only its message
        assert payloads_of(fetch(c, "clicks", 1, second.offset).message_set) == [b"ccc"]
        # at the end: empty, no error
        end = second.offset + len(encode_message_set([b"ccc"]))
        assert fetch(c, "clicks", 1, end) == p.FetchResponse(0, b"")


def test_gzip_set_stays_compressed_and_round_trips(broker):
    with client(broker) as c:
        assert produce_ack(c, "z", 0, [b"x" * 1000, b"y" * 1000], codec=1).error == 0
        resp = fetch(c, "z", 0, 0)
        assert len(resp.message_set) < 500   # one compressed wrapper on disk and on the wire
        assert payloads_of(resp.message_set) == [b"x" * 1000, b"y" * 1000]


def test_fire_and_forget_produce_and_multiproduce_are_appended(broker):
    with client(broker) as c:
        c.send(p.ProduceRequest("t", 0, encode_message_set([b"one"])))
        c.send(p.MultiProduceRequest((p.ProduceRequest("t", 0, encode_message_set([b"two"])),
                                      p.ProduceRequest("u", 1, encode_message_set([b"three"])))))
        # requests on one connection are served in order: this ack comes after both
        assert produce_ack(c, "t", 0, [b"four"]).error == 0
        assert payloads_of(fetch(c, "t", 0, 0).message_set) == [b"one", b"two", b"four"]
        assert payloads_of(fetch(c, "u", 1, 0).message_set) == [b"three"]


def test_fetch_cut_off_by_max_size_returns_a_detectable_partial_message(broker):
    with client(broker) as c:
        produce_ack(c, "t", 0, [b"1" * 100, b"2" * 100])
        resp = fetch(c, "t", 0, 0, max_size=150)
        assert len(resp.message_set) == 150
        assert payloads_of(resp.message_set) == [b"1" * 100]     # cut-off second message is dropped quietly


def test_multifetch_answers_each_fetch_in_order_with_its_own_error(broker):
    with client(broker) as c:
        produce_ack(c, "a", 0, [b"A"])
        produce_ack(c, "b", 1, [b"B"])
        req = p.MultiFetchRequest((p.FetchRequest("a", 0, 0, 1000), p.FetchRequest("b", 1, 0, 1000),
                                   p.FetchRequest("a", 0, 99999, 1000), p.FetchRequest("never-written", 0, 0, 1000),
                                   p.FetchRequest("a", 9, 0, 1000)))
        resp = p.MultiFetchResponse.decode(c.request(req))
        assert resp.error == 0
        assert [r.error for r in resp.responses] == [0, 0, ErrorCode.OFFSET_OUT_OF_RANGE, 0, ErrorCode.WRONG_PARTITION]
        assert payloads_of(resp.responses[0].message_set) == [b"A"]
        assert payloads_of(resp.responses[1].message_set) == [b"B"]
        assert resp.responses[3].message_set == b""


def test_offsets_latest_earliest_and_unknown_partition(broker):
    with client(broker) as c:
        for _ in range(3):
            produce_ack(c, "t", 0, [b"m"])
        size = len(encode_message_set([b"m"]))
        latest = p.OffsetsResponse.decode(c.request(p.OffsetsRequest("t", 0, p.LATEST_TIME, 10)))
        earliest = p.OffsetsResponse.decode(c.request(p.OffsetsRequest("t", 0, p.EARLIEST_TIME, 10)))
        empty = p.OffsetsResponse.decode(c.request(p.OffsetsRequest("t", 1, p.LATEST_TIME, 10)))
        assert latest.error == 0 and latest.offsets[0] == 3 * size
        assert earliest.offsets == (0,)
        assert empty.offsets == (0,)


def test_metadata_lists_topics_partitions_and_offsets(broker):
    with client(broker) as c:
        produce_ack(c, "t", 1, [b"x"])
        md = p.MetadataResponse.decode(c.request(p.MetadataRequest()))
        assert (md.error, md.broker_id, md.host, md.port) == (0, 5, "127.0.0.1", broker.port)
        t = md.topic("t")
        assert [(q.partition, q.earliest) for q in t.partitions] == [(0, 0), (1, 0)]
        assert t.partitions[1].latest == len(encode_message_set([b"x"]))
        asked = p.MetadataResponse.decode(c.request(p.MetadataRequest(("not-yet",))))
        assert [tm.name for tm in asked.topics] == ["not-yet"]
        assert len(asked.topics[0].partitions) == 2      # num.partitions for a topic to be created


def test_many_clients_at_once_each_see_their_own_data(broker):
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with client(broker) as c:
                topic = f"w{i}"
                offsets = [produce_ack(c, topic, 0, [f"{i}-{k}".encode()]).offset for k in range(20)]
                assert offsets == sorted(offsets)
                got = payloads_of(fetch(c, topic, 0, 0).message_set)
                assert got == [f"{i}-{k}".encode() for k in range(20)]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]


def test_slow_clients_do_not_stall_others(tmp_path):
    # one network thread: a stalled client shares the processor with the healthy one
    b = BrokerServer(make_config(tmp_path / "l", **{"num.threads": 1})).start()
    try:
        with client(b) as c:
            for _ in range(40):
                assert produce_ack(c, "big", 0, [b"x" * 100_000]).error == 0
        # client 1 sends half a frame and stops
        half = socket.create_connection((b.host, b.port))
        half.sendall(p.FetchRequest("big", 0, 0, 1000).encode()[:7])
        # client 2 asks for 4 MB and never reads: its reply waits on a full socket buffer
        hog = socket.create_connection((b.host, b.port))
        hog.sendall(p.FetchRequest("big", 0, 0, 4_000_000).encode())
        started = time.monotonic()
        with client(b) as c:
            for _ in range(20):
                assert produce_ack(c, "other", 0, [b"ok"]).error == 0
                assert fetch(c, "big", 0, 0, 1000).error == 0
        assert time.monotonic() - started < 10
        # the hog still gets its whole, correct response when it finally reads
        hog.settimeout(10)
        data = p.recv_response(hog)
        assert data[:2] == b"\x00\x00"
        assert len(payloads_of(data[2:])) == 39    # 4 MB cuts the 40th message
        half.close()
        hog.close()
    finally:
        b.stop()


def test_stop_finishes_in_flight_and_flushes(tmp_path):
    cfg = make_config(tmp_path / "l", **{"log.flush.interval": 100000, "log.default.flush.interval.ms": 3_600_000})
    b = BrokerServer(cfg).start()
    with client(b) as c:
        for i in range(10):
            c.send(p.ProduceRequest("t", 0, encode_message_set([str(i).encode()])))
        # unflushed data is not visible yet
        assert fetch(c, "t", 0, 0).message_set == b""
    b.stop()
    b.stop()  # idempotent
    again = BrokerServer(cfg).start()
    try:
        with client(again) as c:
            assert payloads_of(fetch(c, "t", 0, 0).message_set) == [str(i).encode() for i in range(10)]
    finally:
        again.stop()


def test_stopped_broker_refuses_connections(tmp_path):
    b = BrokerServer(make_config(tmp_path / "l")).start()
    port = b.port
    b.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


def test_zookeeper_without_connect_string_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="zk.connect"):
        BrokerServer(make_config(tmp_path / "l", **{"enable.zookeeper": "true"})).start()


def test_bad_server_config_names_key_and_range(tmp_path):
    with pytest.raises(ConfigError, match=r"'num.threads'.*\[1, 64\]"):
        make_config(tmp_path, **{"num.threads": 0})


def test_fetch_is_sent_with_sendfile_from_the_segment_file(broker, monkeypatch):
    import os

    calls = []
    real = os.sendfile

    def spy(out_fd, in_fd, offset, count):
        # recorded before sending: the client may assert as soon as the bytes arrive
        calls.append((os.readlink(f"/proc/self/fd/{in_fd}"), offset, count))
        return real(out_fd, in_fd, offset, count)

    with client(broker) as c:
        first = produce_ack(c, "zc", 0, [b"a" * 50])
        second = produce_ack(c, "zc", 0, [b"b" * 50])
        monkeypatch.setattr(os, "sendfile", spy)
        assert payloads_of(fetch(c, "zc", 0, second.offset).message_set) == [b"b" * 50]
    assert calls and calls[0][0].endswith("zc-0/00000000000000000000.kafka")
    assert calls[0][1:] == (second.offset, second.offset - first.offset)


def test_sample_server_properties_is_ready_to_run(tmp_path):
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "conf" / "server.properties"
    cfg = SERVER_CONFIG.load(sample, {"port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": str(tmp_path / "logs")})
    assert cfg["brokerid"] == 0 and cfg["hostname"] == "127.0.0.1" and not cfg["enable.zookeeper"]
    with BrokerServer(cfg) as b, client(b) as c:
        assert p.MetadataResponse.decode(c.request(p.MetadataRequest())).broker_id == 0


def test_port_in_use_is_a_clear_error(broker, tmp_path):
    cfg = make_config(tmp_path / "other", port=broker.port)
    with pytest.raises(ConfigError, match=rf"cannot listen on 127.0.0.1:{broker.port}.*another broker"):
        BrokerServer(cfg).start()


def test_a_storage_failure_goes_out_as_storage_error_not_unknown(broker):
    # A produce after the logs are shut down fails in storage: the broker answers
    # STORAGE_ERROR (16), which the client turns back into StorageError.
    from ingest.wire.errors import error_for
    from ingest.errors import StorageError

    broker.log_manager.shutdown()
    with client(broker) as c:
        resp = produce_ack(c, "after-shutdown", 0, [b"x"])
        assert (resp.error, resp.offset) == (ErrorCode.STORAGE_ERROR, -1)
        assert type(error_for(resp.error, "PRODUCE_ACK")) is StorageError


def test_pipelined_requests_are_all_answered_in_order(broker):
    # the per-turn dispatch bound and the pending-reply bound delay requests, never drop or reorder them
    n = 3000
    frames = b"".join(p.ProduceAckRequest("pipe", 0, encode_message_set([str(i).encode()])).encode()
                      for i in range(n))
    with client(broker) as c:
        sender = threading.Thread(target=c.sock.sendall, args=(frames,))
        sender.start()
        offsets = [p.ProduceAckResponse.decode(p.recv_response(c.sock)).offset for _ in range(n)]
        sender.join()
        assert offsets == sorted(offsets) and len(set(offsets)) == n
        got = payloads_of(fetch(c, "pipe", 0, 0, max_size=1 << 24).message_set)
        assert got == [str(i).encode() for i in range(n)]


def big_produce_ack(topic: str, size: int) -> bytes:
    chunk = 10_000
    return p.ProduceAckRequest(topic, 0, encode_message_set([b"b" * chunk] * (size // chunk))).encode()


def test_a_frame_larger_than_the_request_budget_is_refused(tmp_path):
    cfg = make_config(tmp_path / "l", **{"max.socket.request.bytes": 8 << 20, "queued.max.request.bytes": 1 << 20})
    with BrokerServer(cfg) as b, client(b) as c:
        frame = big_produce_ack("t", 2 << 20)
        c.send(frame[:100_000])
        assert p.ErrorResponse.decode(p.recv_response(c.sock)).error == ErrorCode.REQUEST_TOO_LARGE
        assert c.closed_by_peer()
        with client(b) as ok:        # a frame that fits is served
            assert produce_ack(ok, "t", 0, [b"x" * 1000]).error == 0


def test_a_large_frame_waits_for_request_budget_then_is_served(tmp_path):
    cfg = make_config(tmp_path / "l", **{"queued.max.request.bytes": 1 << 20})
    with BrokerServer(cfg) as b, client(b) as first, client(b) as second:
        a, z = big_produce_ack("a", 600_000), big_produce_ack("z", 600_000)
        first.send(a[:-1000])             # holds 600 KB of the 1 MB budget, incomplete
        time.sleep(0.3)
        second.send(z)                    # does not fit: not read until the first frame is done
        second.sock.settimeout(1.0)
        with pytest.raises(socket.timeout):
            p.recv_response(second.sock)
        first.send(a[-1000:])
        second.sock.settimeout(10)
        assert p.ProduceAckResponse.decode(p.recv_response(first.sock)).error == 0
        assert p.ProduceAckResponse.decode(p.recv_response(second.sock)).error == 0
        assert len(payloads_of(fetch(second, "z", 0, 0, max_size=1 << 21).message_set)) == 60


def test_hardening_keys_are_validated_with_their_ranges(tmp_path):
    with pytest.raises(ConfigError, match=r"'queued.max.request.bytes'.*\[1048576, "):
        make_config(tmp_path, **{"queued.max.request.bytes": 1000})
    with pytest.raises(ConfigError, match=r"'connections.max.idle.ms'.*\[1000, "):
        make_config(tmp_path, **{"connections.max.idle.ms": 0})
    with pytest.raises(ConfigError, match=r"'request.partial.timeout.ms'.*\[100, 3600000\]"):
        make_config(tmp_path, **{"request.partial.timeout.ms": 10})
    cfg = make_config(tmp_path)
    assert (cfg["queued.max.request.bytes"], cfg["connections.max.idle.ms"], cfg["request.partial.timeout.ms"]) \
        == (128 << 20, 600_000, 30_000)


def test_a_network_layer_that_never_started_stops_cleanly():
    # BrokerServer.start stops the network layer when ZooKeeper registration fails before it started
    from ingest.broker.server import SocketServer

    server = SocketServer("127.0.0.1", 0, dispatcher=None, max_request_bytes=1024)
    server.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2)
