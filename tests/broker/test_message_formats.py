"""Message formats by magic: Kafka 0.7's magic 0 and 1, this product's magic 2, legacy magic 1.

Each magic is validated by its own CRC rule (docs/log-format.md): magic 0 and 1 over the
payload (Kafka 0.7's ``Message``), magic 2 over the attributes byte + payload. Logs written
before magic 2 existed hold magic 1 with the attributes + payload rule; they stay readable.
"""
from __future__ import annotations

import io
import os
import random
import struct
import time
import zlib

import pytest

from ingest.wire import protocol as p
from ingest.records.message_codecs import compress
from ingest.broker.dump import dump_records
from ingest.broker.log import Log, LogSettings
from ingest.broker.segment import segment_name
from ingest.client.console import console_producer
from ingest.client.producer import Producer
from ingest.errors import InvalidMessageError
from ingest.records.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    HEADER_SIZE,
    HEADER_SIZE_V0,
    MAGIC,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    RULE_ATTRIBUTES_PAYLOAD,
    RULE_PAYLOAD,
    decode_message,
    encode_message,
)
from ingest.records.message_batch import MessageBatch, iter_messages
from ingest.records.message_set import encode_message_set, scan
from tests.harness.brokers import RawClient, broker_cluster, stop_all
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)


def legacy_v1(payload: bytes, codec: int = CODEC_NONE) -> bytes:
    """A message as this product wrote it before magic 2: magic 1, CRC over attributes + payload."""
    return struct.pack(">ibbI", 6 + len(payload), 1, codec, zlib.crc32(bytes([codec]) + payload)) + payload


def kafka07(payload: bytes, magic: int = 1, codec: int = CODEC_NONE) -> bytes:
    """A message built from Kafka 0.7's Message.java layout, written out by hand (not by our encoder)."""
    if magic == 0:
        return struct.pack(">ibI", 5 + len(payload), 0, zlib.crc32(payload)) + payload
    return struct.pack(">ibbI", 6 + len(payload), 1, codec, zlib.crc32(payload)) + payload


def test_magic_constants_and_default():
    assert (MAGIC_V0, MAGIC_V1, MAGIC_V2, MAGIC) == (0, 1, 2, 2)
    assert (HEADER_SIZE_V0, HEADER_SIZE) == (9, 10)


@pytest.mark.parametrize("magic", [0, 1])
def test_encoder_writes_kafka_07_bytes_exactly(magic):
    for payload in (b"", b"x", os.urandom(300)):
        assert encode_message(payload, magic=magic) == kafka07(payload, magic)
        assert encode_message_set([payload, b"two"], magic=magic) == kafka07(payload, magic) + kafka07(b"two", magic)


def test_magic_2_is_magic_1_layout_with_the_crc_over_attributes_and_payload():
    m = encode_message(b"hello", CODEC_NONE, MAGIC_V2)
    assert m == struct.pack(">ibbI", 11, 2, 0, zlib.crc32(b"\x00hello")) + b"hello"


@pytest.mark.parametrize("magic,rule", [(0, RULE_PAYLOAD), (1, RULE_PAYLOAD), (2, RULE_ATTRIBUTES_PAYLOAD)])
def test_each_magic_round_trips_with_its_rule_and_offsets(magic, rule):
    payloads = [b"", b"a", b"b" * 300]
    buf = encode_message_set(payloads, magic=magic)
    hs = 9 if magic == 0 else 10
    got = list(iter_messages(buf, 500))
    assert [m.payload for m in got] == payloads
    assert [m.offset for m in got] == [500, 500 + hs, 500 + 2 * hs + 1]
    assert got[-1].next_offset == 500 + len(buf) == 500 + 3 * hs + 301
    assert MessageBatch.for_append(buf).count == 3
    m = decode_message(buf, hs)
    assert (m.magic, m.rule, m.payload, m.size) == (magic, rule, b"a", hs + 1)


def test_legacy_magic_1_stays_readable():
    buf = legacy_v1(b"old-1") + legacy_v1(b"") + legacy_v1(compress(CODEC_GZIP, legacy_v1(b"in") + legacy_v1(b"ner")),
                                                         CODEC_GZIP)
    assert [m.payload for m in iter_messages(buf)] == [b"old-1", b"", b"in", b"ner"]
    assert MessageBatch.for_append(buf).count == 3
    assert decode_message(buf).rule == RULE_ATTRIBUTES_PAYLOAD
    # with codec none the two rules agree only by accident; this one differs:
    assert zlib.crc32(b"old-1") != zlib.crc32(b"\x00old-1")


def test_mixed_magics_in_one_set():
    buf = (encode_message(b"zero", magic=0) + kafka07(b"one") + encode_message(b"two")
           + legacy_v1(b"legacy") + encode_message(b"", magic=0)
           + encode_message_set([b"g1", b"g2"], CODEC_GZIP, MAGIC_V1) + encode_message(b"last", magic=0))
    got = list(iter_messages(buf))
    assert [m.payload for m in got] == [b"zero", b"one", b"two", b"legacy", b"", b"g1", b"g2", b"last"]
    assert got[-1].next_offset == len(buf)
    assert scan(buf).count == 7 and MessageBatch.for_append(buf).count == 7
    assert len({(m.offset, m.next_offset) for m in got}) == 7   # g1 and g2 share their wrapper's offsets


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_kafka_07_compressed_wrapper_with_magic_1_inner_messages(codec):
    inner = kafka07(b"first") + kafka07(b"second") + kafka07(b"")
    wrapper = kafka07(compress(codec, inner), 1, codec)
    assert encode_message_set([b"first", b"second", b""], codec, MAGIC_V1)[:5] == wrapper[:5]
    assert [m.payload for m in iter_messages(wrapper, 7)] == [b"first", b"second", b""]
    assert {(m.offset, m.next_offset) for m in iter_messages(wrapper, 7)} == {(7, 7 + len(wrapper))}
    assert MessageBatch.for_append(wrapper).count == 1
    # inner messages are validated by their own magic: a bad inner magic-1 CRC is caught
    bad_inner = bytearray(inner)
    bad_inner[HEADER_SIZE] ^= 0x01
    with pytest.raises(InvalidMessageError, match="inner set: message at 0: CRC mismatch"):
        MessageBatch.for_append(kafka07(compress(codec, bytes(bad_inner)), 1, codec))
    # magic-0 inner messages (0.6 producers) are fine too
    assert [m.payload for m in iter_messages(kafka07(compress(codec, kafka07(b"z", 0)), 1, codec))] == [b"z"]


def test_magic_0_with_a_codec_is_impossible():
    with pytest.raises(InvalidMessageError, match="codec gzip is impossible with magic 0"):
        encode_message(b"x", CODEC_GZIP, MAGIC_V0)
    with pytest.raises(InvalidMessageError, match="codec snappy is impossible with magic 0"):
        encode_message_set([b"x"], CODEC_SNAPPY, MAGIC_V0)
    with pytest.raises(InvalidMessageError, match=r"unknown magic 3; allowed are \[0, 1, 2\]"):
        encode_message(b"x", magic=3)


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_every_payload_bit_flip_is_caught_for_every_magic(magic):
    first = encode_message(b"first", magic=magic)
    target = encode_message(b"the payload under test", magic=magic)
    hs = 9 if magic == 0 else 10
    stored = zlib.crc32(b"the payload under test", zlib.crc32(b"\x00") if magic == 2 else 0)
    for i in range(len(first) + hs, len(first) + len(target)):
        for bit in range(8):
            bad = bytearray(first + target)
            bad[i] ^= 1 << bit
            r = scan(bad)
            assert (r.end, r.count) == (len(first), 1), (i, bit)
            assert f"CRC mismatch (stored 0x{stored:08x}; magic {magic} requires" in r.error


def test_a_flipped_attributes_bit_is_caught_for_magic_2_not_for_magic_1():
    inner = encode_message_set([b"x"])
    for magic in (1, 2):
        m = bytearray(encode_message(inner, CODEC_NONE, magic))
        m[5] = CODEC_GZIP  # a valid codec value, so only the CRC can catch it
        r = scan(bytes(m))
        if magic == 2:
            assert (r.count, "CRC mismatch" in r.error) == (0, True)
        else:  # Kafka 0.7's weakness: its CRC does not cover the attributes byte
            assert (r.count, r.error) == (1, None)
            # only the deep check (the broker's) notices, because the payload is not gzip
            assert "gzip" in scan(bytes(m), deep=True).error


def test_unknown_magics_and_bad_lengths_are_named():
    for magic in (3, 0x7F, -1):
        m = bytearray(encode_message(b"x"))
        m[4] = magic & 0xFF
        assert f"unknown magic {magic} (allowed are [0, 1, 2])" in scan(bytes(m)).error
    short0 = struct.pack(">ib", 4, 0) + b"\x00" * 8
    assert "length 4 below the minimum 5 of magic 0" in scan(short0).error
    short1 = struct.pack(">ibb", 5, 1, 0) + b"\x00" * 8
    assert "length 5 below the minimum 6 of magic 1" in scan(short1).error


def test_cut_off_magic_0_tail_is_a_cut_off():
    buf = encode_message_set([b"a" * 20, b"b" * 20], magic=0)
    for cut in range(30, len(buf)):
        r = scan(buf[:cut])
        assert (r.end, r.count, r.cut_off) == (29, 1, True), cut
        assert [m.payload for m in iter_messages(buf[:cut])] == [b"a" * 20]


def make_log(path, clock) -> Log:
    return Log(path, LogSettings(flush_interval_messages=1, index_interval=64), clock)


def test_a_segment_of_legacy_magic_1_recovers_and_reads_unchanged(tmp_path, fake_clock):
    """A segment file written by the previous code (magic 1, CRC over attributes + payload), with a
    torn tail, recovers to the same bytes and reads with the same offsets."""
    d = tmp_path / "old-0"
    d.mkdir()
    msgs = [legacy_v1(b"event-%d" % i * (i % 7)) for i in range(200)]
    msgs.append(legacy_v1(compress(CODEC_GZIP, b"".join(legacy_v1(b"z%d" % i) for i in range(5))), CODEC_GZIP))
    body = b"".join(msgs)
    (d / segment_name(0)).write_bytes(body + legacy_v1(b"torn")[:7])
    lg = make_log(d, fake_clock)
    try:
        assert lg.end_offset == len(body)
        assert (d / segment_name(0)).read_bytes() == body
        got = list(iter_messages(lg.read_bytes(0, len(body) + 100), 0))
        assert [m.payload for m in got] == [b"event-%d" % i * (i % 7) for i in range(200)] + [b"z%d" % i for i in range(5)]
        assert got[150].offset == sum(len(m) for m in msgs[:150])
        # appends of the new default format go after it in the same log
        off = lg.append(encode_message_set([b"new"]))
        assert off == len(body)
        assert [m.payload for m in iter_messages(lg.read_bytes(off, 100), off)] == [b"new"]
    finally:
        lg.close()
    recs = list(dump_records(d / segment_name(0), 0))
    assert [r["magic"] for r in recs] == [1] * 201 + [2]
    assert {r["rule"] for r in recs[:201]} == {RULE_ATTRIBUTES_PAYLOAD} and all(r["valid"] for r in recs)


def test_resync_finds_magic_0_and_1_messages_after_damage(tmp_path, fake_clock):
    """Recovery skips a damaged header and resynchronises on the next valid message, whatever its magic."""
    d = tmp_path / "mixed-0"
    d.mkdir()
    head = encode_message_set([b"h" * 50] * 3, magic=0)
    rng = random.Random(14)
    tail = b"".join(kafka07(rng.randbytes(40) + b"%d" % i, i % 2) for i in range(3000))
    damaged = bytearray(encode_message(b"damaged" * 10))
    damaged[0:6] = b"\xff\xee\xdd\xcc\xbb\xaa"  # length and magic destroyed
    (d / segment_name(0)).write_bytes(head + bytes(damaged) + tail)
    lg = make_log(d, fake_clock)
    try:
        assert lg.end_offset == len(head) + len(damaged) + len(tail)
        start = len(head) + len(damaged)
        got = list(iter_messages(lg.read_bytes(start, len(tail) + 100), start))
        assert len(got) == 3000 and got[-1].next_offset == lg.end_offset
    finally:
        lg.close()


def test_dump_shows_magic_and_rule(tmp_path):
    d = tmp_path / "d-0"
    d.mkdir()
    (d / segment_name(0)).write_bytes(kafka07(b"a", 0) + kafka07(b"b") + legacy_v1(b"c") + encode_message(b"d")
                                       + encode_message_set([b"e", b"f"], CODEC_GZIP, MAGIC_V1))
    recs = list(dump_records(d / segment_name(0), 0, deep=True))
    assert [(r["magic"], r["rule"], r["payload_size"], r["valid"]) for r in recs] == [
        (0, RULE_PAYLOAD, 1, True), (1, RULE_PAYLOAD, 1, True), (1, RULE_ATTRIBUTES_PAYLOAD, 1, True),
        (2, RULE_ATTRIBUTES_PAYLOAD, 1, True), (1, RULE_PAYLOAD, recs[4]["payload_size"], True),
        (1, RULE_PAYLOAD, 1, True), (1, RULE_PAYLOAD, 1, True)]
    assert [r.get("inner", False) for r in recs] == [False] * 5 + [True, True]


# --- a real broker process: stored and served byte for byte, producer format, refusals -------------------

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    (b,) = broker_cluster(tmp_path_factory, 1, num_partitions=1)
    yield b
    stop_all([b])


def fetch_all(c: RawClient, topic: str) -> bytes:
    resp = p.FetchResponse.decode(c.request(p.FetchRequest(topic, 0, 0, 1 << 20)))
    assert resp.error == 0
    return bytes(resp.message_set)


@pytest.mark.processes
def test_each_magic_is_stored_and_served_byte_for_byte(broker):
    sets = [
        encode_message_set([b"m0-a", b"", b"m0-b"], magic=0),
        kafka07(b"m1-a") + kafka07(b"m1-b"),
        encode_message_set([b"m2-a", b"m2-b"]),
        legacy_v1(b"legacy-a") + legacy_v1(b"legacy-b"),
        kafka07(compress(CODEC_GZIP, kafka07(b"z1") + kafka07(b"z2")), 1, CODEC_GZIP),
        encode_message_set([b"s1", b"s2"], CODEC_SNAPPY, MAGIC_V1),
        encode_message(b"mixed-0", magic=0) + kafka07(b"mixed-1") + encode_message(b"mixed-2"),
    ]
    with RawClient(broker.host, broker.port) as c:
        offsets = [p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("formats", 0, s))).offset for s in sets]
        # 0.7's own request: PRODUCE (no response), then MULTIPRODUCE
        c.send(p.ProduceRequest("formats", 0, kafka07(b"plain-produce", 0)))
        c.send(p.MultiProduceRequest((p.ProduceRequest("formats", 0, kafka07(b"multi-1")),
                                      p.ProduceRequest("formats", 0, kafka07(b"multi-2", 0)))))
        data = fetch_all(c, "formats")
    assert offsets == [sum(len(s) for s in sets[:i]) for i in range(len(sets))]
    stored = b"".join(sets) + kafka07(b"plain-produce", 0) + kafka07(b"multi-1") + kafka07(b"multi-2", 0)
    assert data == stored  # the bytes as sent, header and CRC untouched
    assert [m.payload for m in iter_messages(data)] == [
        b"m0-a", b"", b"m0-b", b"m1-a", b"m1-b", b"m2-a", b"m2-b", b"legacy-a", b"legacy-b", b"z1", b"z2",
        b"s1", b"s2", b"mixed-0", b"mixed-1", b"mixed-2", b"plain-produce", b"multi-1", b"multi-2"]
    (segment,) = (broker.log_dir / "formats-0").glob("*.kafka")
    assert segment.read_bytes() == stored


@pytest.mark.processes
def test_refused_produce_is_logged_once_counted_and_the_next_request_is_served(broker):
    wrong_rule = bytearray(encode_message(b"crc by the 0.7 rule under magic 2", magic=2))
    wrong_rule[6:10] = struct.pack(">I", zlib.crc32(b"crc by the 0.7 rule under magic 2"))
    unknown_magic = bytearray(kafka07(b"magic 5"))
    unknown_magic[4] = 5
    with RawClient(broker.host, broker.port) as c:
        addr = "%s:%d" % c.sock.getsockname()[:2]
        c.send(p.ProduceRequest("refusals", 0, bytes(wrong_rule)))
        c.send(p.ProduceRequest("refusals", 0, bytes(unknown_magic)))
        c.send(p.MultiProduceRequest((p.ProduceRequest("refusals", 0, kafka07(b"fine")),
                                      p.ProduceRequest("refusals", 0, bytes(wrong_rule)))))
        c.send(p.ProduceRequest("refusals", 0, kafka07(b"the good one")))
        assert fetch_all(c, "refusals") == kafka07(b"the good one")
    summary = f"client {addr}: connection closed after 3 refused produce request(s)"
    deadline = time.monotonic() + 30
    while summary not in broker.output() and time.monotonic() < deadline:
        time.sleep(0.05)  # the summary is written when the broker notices the close
    lines = [line for line in broker.output().splitlines() if f"client {addr}:" in line]
    assert len(lines) == 2, lines
    assert "WARNING" in lines[0] and f"client {addr}: PRODUCE refused (INVALID_MESSAGE):" in lines[0]
    assert "CRC mismatch" in lines[0] and "magic 2 requires crc(attributes+payload)" in lines[0]
    assert "WARNING" in lines[1] and summary in lines[1]
    assert "(MULTIPRODUCE INVALID_MESSAGE: 1, PRODUCE INVALID_MESSAGE: 2)" in lines[1]


@pytest.mark.processes
def test_producer_message_format_07_writes_magic_1_with_the_payload_crc(broker):
    base = {"broker.list": f"{broker.broker_id}:{broker.host}:{broker.port}"}
    with Producer({**base, "message.format": "0.7"}) as prod:
        prod.send("p07", [b"one", b"two"])
    with Producer({**base, "message.format": "0.7", "compression.codec": "gzip"}) as prod:
        prod.send("p07", [b"three", b"four"])
    with Producer(base) as prod:
        prod.send("p07", [b"five"])
    with RawClient(broker.host, broker.port) as c:
        data = fetch_all(c, "p07")
    wrapper_at = 2 * 13
    wrapper = decode_message(data, wrapper_at)
    assert data[:wrapper_at] == kafka07(b"one") + kafka07(b"two")
    assert (wrapper.magic, wrapper.codec, wrapper.rule, wrapper.crc) == (1, CODEC_GZIP, RULE_PAYLOAD, zlib.crc32(wrapper.payload))
    assert zlib.decompress(wrapper.payload, 47) == kafka07(b"three") + kafka07(b"four")
    assert data[wrapper_at + wrapper.size:] == encode_message(b"five")  # the default: magic 2
    assert [m.payload for m in iter_messages(data)] == [b"one", b"two", b"three", b"four", b"five"]


@pytest.mark.processes
def test_console_producer_passes_message_format_through(broker):
    out = io.StringIO()
    assert console_producer(brokers=f"{broker.broker_id}:{broker.host}:{broker.port}", zk=None, topic="c07",
                            lines=io.BytesIO(b"x\ny\n"), overrides={"message.format": "0.7"}, err=out) == 0
    with RawClient(broker.host, broker.port) as c:
        assert fetch_all(c, "c07") == kafka07(b"x") + kafka07(b"y")


def test_magic_1_with_reserved_attribute_bits_is_refused():
    m = bytearray(kafka07(b"x"))
    m[5] = 0x04
    assert "unknown attributes 0x04" in scan(bytes(m)).error


def test_deletion_counts_and_mirror_runs_read_every_magic(tmp_path):
    """Deletion records count messages, and the mirror's audit counts cut payloads, by each magic's header."""
    from ingest.broker.deletion_log import count_messages
    from ingest.mirror.tier_counts import plain_runs

    data = (encode_message(b"zero", magic=0) + kafka07(b"one") + encode_message(b"two")
            + encode_message_set([b"g1", b"g2", b"g3"], CODEC_GZIP, MAGIC_V1)
            + kafka07(compress(CODEC_GZIP, kafka07(b"i0", 0) + kafka07(b"i1")), 1, CODEC_GZIP)
            + encode_message(b"", magic=0))
    f = tmp_path / segment_name(0)
    f.write_bytes(data)
    assert count_messages(f, len(data)) == (9, False)
    payloads = sorted(run[0][s + hs:e] for run in plain_runs(data) for s, e, hs in
                      ((s, e, run[3]) for s, e in zip(run[1], run[2])))
    assert payloads == sorted([b"zero", b"one", b"two", b"g1", b"g2", b"g3", b"i0", b"i1", b""])


@pytest.mark.processes
def test_event_producer_passes_message_format_through_to_data_and_monitoring(broker, tmp_path):
    """EventProducer builds its producers from the producer config: message.format=0.7 reaches the
    data topic and the monitoring (audit) topic alike."""
    from ingest.clock import FakeClock
    from ingest.events.event_producer import EventProducer
    from ingest.events.loadgen import EventGenerator
    from ingest.events.registry_client import RegistryClient
    from tests.harness.registry import RegistryProcess

    reg = RegistryProcess(tmp_path / "registry").start()
    try:
        clock = FakeClock(1_700_000_040_000)
        cfg = {"broker.list": f"{broker.broker_id}:{broker.host}:{broker.port}", "message.format": "0.7"}
        ep = EventProducer(cfg, RegistryClient(reg.url), clock=clock, background=False,
                           monitoring_window_ms=60_000, monitoring_grace_ms=1000, audit_topic="audit07",
                           service_name="fmt")
        ep.send("events07", EventGenerator(seed=14).batch(3), time_ms=clock.time_ms())
        ep.flush()
        clock.advance(90_000)
        assert ep.poll() == 1  # the window's final monitoring event
        stats = ep.close()
    finally:
        reg.stop()
    assert (stats["acked"], stats["monitoring_published"]) == (3, 2)  # closing reports the open window too
    with RawClient(broker.host, broker.port) as c:
        for topic, n in (("events07", 3), ("audit07", 2)):
            data = fetch_all(c, topic)
            msgs, pos = [], 0
            while pos < len(data):
                m = decode_message(data, pos)
                msgs.append(m)
                pos += m.size
            assert [(m.magic, m.rule, m.crc == zlib.crc32(m.payload)) for m in msgs] == [(1, RULE_PAYLOAD, True)] * n


@pytest.mark.parametrize("payload_size", [9, 251])  # lengths 0x0E and 0x0100: zero bytes next to the hole
def test_a_zero_filled_hole_is_stepped_over_to_magic_0_messages(tmp_path, fake_clock, payload_size):
    """0 is a magic value, yet a zero-filled hole (a crash's) is skipped, and the magic-0 messages after it,
    whose length fields start with zero bytes, are found again with their offsets."""
    d = tmp_path / "hole-0"
    d.mkdir()
    head = encode_message_set([b"h" * 30] * 2)
    hole = bytes(300_000)
    rng = random.Random(payload_size)
    tail = b"".join(encode_message(rng.randbytes(payload_size), magic=0) for _ in range(400))
    (d / segment_name(0)).write_bytes(head + hole + tail)
    lg = make_log(d, fake_clock)
    try:
        start = len(head) + len(hole)
        got = list(iter_messages(lg.read_bytes(start, len(tail)), start))
        assert len(got) == 400 and got[0].offset == start and got[-1].next_offset == lg.end_offset
    finally:
        lg.close()
