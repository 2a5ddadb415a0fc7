"""The hostile-client harness builds real protocol bytes, real bombs, and only ever targets loopback."""
from __future__ import annotations

import os
import random

import pytest

from ingest.wire import protocol as p
from ingest.records import message_codecs
from ingest.records.message import CODEC_GZIP, HEADER_SIZE, decode_message
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set
from tests.harness import hostile as h
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.wait import wait_until


def split_frames(buf: bytes) -> list[bytes]:
    frames, pos = [], 0
    while pos < len(buf):
        (size,) = p.SIZE.unpack_from(buf, pos)
        frames.append(buf[pos:pos + p.SIZE.size + size])
        pos += p.SIZE.size + size
    assert pos == len(buf), "the buffer ends inside a frame"
    return frames


def test_frames_decode_with_the_protocols_own_decoders():
    assert p.decode_request(h.metadata_all_topics()) == p.MetadataRequest(())
    assert p.decode_request(h.offsets_latest("t", 3)) == p.OffsetsRequest("t", 3, p.LATEST_TIME, 1)
    kinds = {type(p.decode_request(f)) for f in h.valid_frames("fz")}
    assert kinds == set(p.REQUEST_CLASSES.values())


def test_pipeline_is_whole_frames_filling_the_budget():
    one = h.metadata_all_topics()
    buf = h.pipeline(one, 256 * 1024)
    frames = split_frames(buf)
    assert len(frames) == 256 * 1024 // len(one) == 32768     # the 32,768 requests in 256 KB
    assert all(p.decode_request(f) == p.MetadataRequest(()) for f in frames[:10] + frames[-10:])


def test_half_frame_prefix_is_a_genuine_produce_prefix():
    announced = 5000
    prefix = h.half_frame_prefix("half", announced)
    size, kind = p.REQUEST_HEADER.unpack_from(prefix)
    assert (size, kind) == (announced, p.RequestType.PRODUCE)
    whole = prefix + bytes(announced + p.SIZE.size - len(prefix))   # what the broker waits for
    req = p.decode_request(whole)
    assert (req.topic, req.partition, len(req.message_set)) == ("half", 0, len(whole) - len(prefix))


def test_mutations_are_replayable_from_the_seed_and_really_mutate():
    seeds = h.valid_frames()
    a = [h.mutate_frame(random.Random(7), seeds) for _ in range(1)]
    b = [h.mutate_frame(random.Random(7), seeds) for _ in range(1)]
    assert a == b
    rng = random.Random(11)
    out = [h.mutate_frame(rng, seeds) for _ in range(300)]
    assert sum(f not in seeds for f in out) > 250


@pytest.mark.parametrize("inflated", [HEADER_SIZE, 5000, (1 << 20) + 7])
def test_gzip_bomb_is_byte_identical_to_the_codec(inflated):
    assert h.gzip_bomb_message_set(inflated) == encode_message_set([bytes(inflated - HEADER_SIZE)], CODEC_GZIP)


def test_gzip_bomb_really_inflates_to_the_stated_size():
    inflated = 32 << 20
    bomb = h.gzip_bomb_message_set(inflated)
    assert len(bomb) < inflated // 500                      # small on the wire
    wrapper = decode_message(bomb)
    assert wrapper.codec == CODEC_GZIP and wrapper.size == len(bomb)
    inner = message_codecs.decompress(CODEC_GZIP, wrapper.payload, limit=inflated)
    assert len(inner) == inflated
    msg = decode_message(inner)                             # one valid message, CRC checked
    assert msg.size == inflated and msg.codec == 0
    assert [len(m.payload) for m in iter_messages(bomb)] == [inflated - HEADER_SIZE]


@pytest.mark.parametrize("host", ["10.0.0.1", "192.168.1.1", "8.8.8.8", "::1", "0.0.0.0"])
def test_loopback_guard_refuses_other_addresses_before_any_socket(host):
    with pytest.raises(h.NotLoopbackError):
        h.check_loopback((host, 9092))
    with pytest.raises(h.NotLoopbackError):
        h.pipelined_burst((host, 9092), h.metadata_all_topics(), 1024)
    with pytest.raises(h.NotLoopbackError):
        h.half_frames((host, 9092), n_conns=1, announced=100, sent=50)
    with pytest.raises(h.NotLoopbackError):
        h.ControlClient((host, 9092), "t")


def test_loopback_guard_accepts_the_whole_127_network():
    assert h.check_loopback(("127.0.0.1", 1)) == ("127.0.0.1", 1)
    assert h.check_loopback(("127.8.9.10", 65535)) == ("127.8.9.10", 65535)
    assert h.check_loopback(("localhost", 9092))[0].startswith("127.")


def test_process_figures_from_proc(tmp_path):
    assert 0 < h.rss_bytes(os.getpid()) <= h.peak_rss_bytes(os.getpid())
    assert h.open_fds(os.getpid()) > 2
    log = tmp_path / "b.out"
    log.write_text("a WARNING x\nb INFO y\nc WARNING z\n")
    assert h.count_log_lines(log) == 3
    assert h.count_log_lines(log, ["WARNING"]) == 2
    assert h.count_log_lines(tmp_path / "missing") == 0


def test_attacks_run_bounded_against_a_real_broker(broker_factory):
    (b,) = broker_factory(n=1, max_socket_request_bytes=4 << 20)
    addr = (b.host, b.port)
    with h.ControlClient(addr, "ctl", n_conns=2) as ctl:
        ctl.probe_for(0.3)
        one = h.metadata_all_topics()
        burst = h.pipelined_burst(addr, one, 64 * 1024, send_timeout_s=5)
        assert burst.bytes_sent == len(h.pipeline(one, 64 * 1024))
        with h.half_frames(addr, n_conns=2, announced=1 << 20, sent=512 * 1024) as held:
            assert held.bytes_sent == 2 * 512 * 1024 and held.alive() == 2
        with h.connection_flood(addr, 20) as flood:
            assert len(flood.socks) == 20 and flood.failed == 0
        fz = h.fuzz_frames(addr, count=40, seed=3, max_seconds=20)
        assert fz.frames == 40
        assert h.send_produce_ack(addr, "ok", 0, encode_message_set([b"x"])) == 0
        with h.connect(addr) as sock:
            sock.sendall(h.offsets_latest("ok"))
            wait_until(lambda: h.unread_by_peer(sock) == 0, 10, "the broker to read the request")
            assert p.OffsetsResponse.decode(p.recv_response(sock)).error == 0
        ctl.probe_for(0.3)
        s = ctl.summary()
    assert s["probes"] > 2 and s["errors"] == 0 and 0 < s["p50_s"] <= s["p99_s"]
    assert b.ping()
