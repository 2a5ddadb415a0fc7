"""Flipped bytes in real segment files cost only the damaged messages.

Each test writes messages through the real log, flips bytes in the ``.kafka``
files on disk, restarts (a new LogManager, or a broker process) and reads the
whole partition: every other message is served at its original offset, the
damaged range is recorded in ``<base>.damaged`` and logged at ERROR, and a fetch
at or inside it answers CORRUPT_RANGE with the next valid offset.

On the code before this change, recovery truncated the newest segment at the
first bad message (every message after it was lost) and an older segment
refused every read at or after the damage.
"""
from __future__ import annotations

import json
import os
import logging
import socket

import pytest

from ingest.broker.log_config import LOG_CONFIG
from ingest.broker.log_manager import LogManager
from ingest.broker.segment import segment_name
from ingest.client.simple_consumer import SimpleConsumer
from ingest.errors import CorruptRangeError
from ingest.wire.errors import ErrorCode
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set
from ingest.wire import protocol as p
from tests.harness.brokers import BrokerProcess

SIZE = 100  # every message: 10 bytes of header + 90 of payload
PER_SEGMENT = 20
FILE_SIZE = SIZE * PER_SEGMENT


def payload(i: int) -> bytes:
    head = b"m%05d-" % i
    return head + b"x" * (SIZE - 10 - len(head))


def manager(tmp_path, clock) -> LogManager:
    raw = {"log.dir": str(tmp_path / "logs"), "log.flush.interval": 1, "log.file.size": FILE_SIZE,
           "log.index.interval.bytes": 256}
    return LogManager(LOG_CONFIG.parse(raw), clock)


def write(tmp_path, clock, n: int) -> list[int]:
    m = manager(tmp_path, clock)
    lg = m.get_or_create_log("t", 0)
    offsets = [lg.append(encode_message_set([payload(i)])) for i in range(n)]
    m.shutdown()
    return offsets


def flip(path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x5A
    path.write_bytes(bytes(data))


def read_all(lg) -> tuple[list[tuple[int, bytes]], list[tuple[int, int]]]:
    """Every message of the log by offset, skipping damaged ranges; and the ranges skipped."""
    out, skipped, off = [], [], lg.start_offset
    while off < lg.end_offset:
        try:
            msgs = list(iter_messages(lg.read_bytes(off, 1 << 20), off))
        except CorruptRangeError as exc:
            assert exc.start_offset <= off < exc.next_offset
            skipped.append((exc.start_offset, exc.next_offset))
            off = exc.next_offset
            continue
        out += [(m.offset, m.payload) for m in msgs]
        off = msgs[-1].next_offset
    return out, skipped


def test_flipped_bytes_in_a_sealed_and_the_active_segment_cost_only_those_messages(tmp_path, fake_clock, caplog):
    n = 50  # segments at 0, 2000, 4000 (the active one, 10 messages)
    offsets = write(tmp_path, fake_clock, n)
    d = tmp_path / "logs" / "t-0"
    sealed_victim, active_victim = 25, 44  # offsets 2500 (sealed segment 2000), 4400 (active segment 4000)
    flip(d / segment_name(2000), 500 + 50)  # inside the payload of message 25
    flip(d / segment_name(4000), 400 + 7)   # inside the CRC of message 44
    for f in d.glob("*.index"):
        f.unlink()  # make the first read scan the sealed segment (the saved-index path is in test_recovery)

    with caplog.at_level(logging.INFO, logger="ingest.broker.segment_recovery"):
        m = manager(tmp_path, fake_clock)
        m.startup()
        try:
            lg = m.get_log("t", 0)
            assert lg.end_offset == offsets[-1] + SIZE  # nothing truncated: valid messages follow the damage
            got, skipped = read_all(lg)
            m.verify_old_segments()
        finally:
            m.shutdown()
    expected = [(offsets[i], payload(i)) for i in range(n) if i not in (sealed_victim, active_victim)]
    assert got == expected  # every other message, at its original offset
    assert skipped == [(2500, 2600), (4400, 4500)]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "damaged range" in r.getMessage()]
    assert len(errors) == 2  # once each: recovery found the active one, the first read the sealed one
    assert any("2500..2600 (100 bytes" in e for e in errors) and any("4400..4500 (100 bytes" in e for e in errors)
    assert all("t-0" in e for e in errors)  # names the topic-partition (the log directory)

    # The sidecar records each range; it survives a restart, which does not log the known range at ERROR again.
    for base, start in ((2000, 2500), (4000, 4400)):
        lines = (d / segment_name(base)).with_suffix(".damaged").read_text().splitlines()
        rec = json.loads(lines[0])
        assert len(lines) == 1 and (rec["start_offset"], rec["end_offset"], rec["bytes"]) == (start, start + SIZE, SIZE)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ingest.broker.segment_recovery"):
        m = manager(tmp_path, fake_clock)
        m.startup()
        try:
            lg = m.get_log("t", 0)
            with pytest.raises(CorruptRangeError) as info:
                lg.read(4450, 1000)  # inside the damaged range of the active segment
            assert (info.value.start_offset, info.value.next_offset) == (4400, 4500)
            assert read_all(lg) == (got, skipped)
            assert lg.append(encode_message_set([b"after"])) == offsets[-1] + SIZE  # appends go on at the end
        finally:
            m.shutdown()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name == "ingest.broker.segment_recovery"]
    assert "already recorded" in caplog.text


def test_a_damaged_length_field_is_skipped_by_resynchronising(tmp_path, fake_clock):
    offsets = write(tmp_path, fake_clock, 10)
    path = tmp_path / "logs" / "t-0" / segment_name(0)
    data = bytearray(path.read_bytes())
    data[300] ^= 0x5A  # message 3's length, high byte: above max.message.size, running past the file
    path.write_bytes(bytes(data))
    m = manager(tmp_path, fake_clock)
    m.startup()
    try:
        got, skipped = read_all(m.get_log("t", 0))
    finally:
        m.shutdown()
    assert skipped == [(300, 400)]
    assert got == [(offsets[i], payload(i)) for i in range(10) if i != 3]


def test_a_torn_tail_is_still_truncated(tmp_path, fake_clock):
    offsets = write(tmp_path, fake_clock, 10)
    path = tmp_path / "logs" / "t-0" / segment_name(0)
    with open(path, "r+b") as f:
        f.truncate(offsets[-1] + 37)  # the last message cut: nothing valid follows
    m = manager(tmp_path, fake_clock)
    m.startup()
    try:
        lg = m.get_log("t", 0)
        assert lg.end_offset == offsets[-1]
        assert read_all(lg) == ([(offsets[i], payload(i)) for i in range(9)], [])
    finally:
        m.shutdown()
    assert not path.with_suffix(".damaged").exists()


@pytest.mark.processes
def test_a_broker_process_answers_corrupt_range_and_the_consumer_reads_across_it(tmp_path, fake_clock):
    n = 50
    b = BrokerProcess(0, tmp_path / "broker", overrides={"num.partitions": 1, "log.file.size": FILE_SIZE,
                                                          "log.flush.interval": 1})
    b.start()
    try:
        with SimpleConsumer(b.host, b.port) as c:
            with socket.create_connection((b.host, b.port), timeout=30) as s:
                for i in range(n):
                    s.sendall(p.ProduceAckRequest("t", 0, encode_message_set([payload(i)])).encode())
                    assert p.ProduceAckResponse.decode(p.recv_response(s)).error == ErrorCode.NONE
        b.stop()
        d = b.log_dir / "t-0"
        flip(d / segment_name(0), 1200 + 60)   # message 12, sealed segment
        flip(d / segment_name(4000), 300 + 3)  # message 43's length field, active segment
        for f in d.glob("*.index"):
            f.unlink()
        b.start()
        with SimpleConsumer(b.host, b.port, fetch_size=1000) as c:
            end = c.latest_offset("t", 0)
            assert end == n * SIZE
            got = [(m.offset, m.payload) for m in c.iter_range("t", 0, 0, end)]
            assert c.skipped == [("t", 0, 1200, 1300), ("t", 0, 4300, 4400)]
            with pytest.raises(CorruptRangeError) as info:
                c.fetch("t", 0, 1200)
            assert info.value.next_offset == 1300
            # MULTIFETCH: the damaged part answers CORRUPT_RANGE with its next offset, the other part its data
            raw = c.multifetch_raw([("t", 0, 4300, 1000), ("t", 0, 4400, 1000)])
            assert raw[0][0] == ErrorCode.CORRUPT_RANGE and raw[1][0] == ErrorCode.NONE
            assert raw[0][1].messages == [] and raw[0][1].next_offset == 4400
            # the high-level consumer's fetcher skips the damage too, instead of stalling on it
            fetched = _fetcher_payloads(c, "t", end)
        assert fetched == [(i * SIZE, payload(i)) for i in range(n) if i not in (12, 43)]
        assert got == [(i * SIZE, payload(i)) for i in range(n) if i not in (12, 43)]
    finally:
        b.stop()
    out = b.output()
    assert "damaged range 1200..1300" in out and "damaged range 4300..4400" in out


def _fetcher_payloads(consumer: SimpleConsumer, topic: str, end: int) -> list[tuple[int, bytes]]:
    """Run the consumer group's Fetcher over partition 0 until ``end``; every (offset, payload) it queued."""
    import queue
    from types import SimpleNamespace

    from ingest.client.consumer_stream import PartitionState
    from ingest.client.fetcher import Fetcher

    stream = SimpleNamespace(queue=queue.Queue(maxsize=1000))
    state = PartitionState(topic, 0, 0, 0, 0, 0, 0, 1000, stream)
    fetcher = Fetcher(consumer, [state], backoff_s=0.01, max_fetch_size=1 << 20, reset=lambda s: 0)
    fetcher.start()
    out: list[tuple[int, bytes]] = []
    try:
        while not out or out[-1][0] < end - SIZE:
            _, messages = stream.queue.get(timeout=20)
            out += [(m.offset, m.payload) for m in messages]
    finally:
        fetcher.stop()
    return out


def test_two_damaged_messages_close_together_are_two_ranges(tmp_path, fake_clock):
    offsets = write(tmp_path, fake_clock, 15)
    path = tmp_path / "logs" / "t-0" / segment_name(0)
    flip(path, 300 + 40)  # message 3's payload
    flip(path, 500 + 8)   # message 5's CRC: one valid message between the two
    m = manager(tmp_path, fake_clock)
    m.startup()
    try:
        got, skipped = read_all(m.get_log("t", 0))
    finally:
        m.shutdown()
    assert skipped == [(300, 400), (500, 600)]
    assert got == [(offsets[i], payload(i)) for i in range(15) if i not in (3, 5)]


def test_messages_inside_a_compressed_wrapper_are_never_taken_for_the_log(tmp_path, fake_clock):
    """Incompressible payloads: the gzip wrapper holds its inner messages verbatim (stored blocks).
    A torn wrapper is a torn tail, and a wrapper with a damaged header is one damaged range: the scan
    never resynchronises on the inner messages."""
    from ingest.broker.log import Log, LogSettings
    from ingest.records.message import CODEC_GZIP

    inner = [bytes([i]) * 7 + os.urandom(500) for i in range(20)]
    for damage in ("torn", "header"):
        d = tmp_path / damage / "t-0"
        lg = Log(d, LogSettings(flush_interval_messages=1, index_interval=256), fake_clock)
        before = [lg.append(encode_message_set([payload(i)])) for i in range(3)]
        wrapper = lg.append(encode_message_set(inner, CODEC_GZIP))
        after = [lg.append(encode_message_set([payload(i)])) for i in range(3, 6)]
        size = lg.end_offset
        lg.close()
        path = d / segment_name(0)
        if damage == "torn":
            with open(path, "r+b") as f:
                f.truncate(wrapper + (after[0] - wrapper) // 2)
        else:
            flip(path, wrapper + 4)  # its magic byte
        lg = Log(d, LogSettings(flush_interval_messages=1, index_interval=256), fake_clock)
        try:
            got, skipped = read_all(lg)
            plain = [(o, payload(i)) for i, o in enumerate(before)]
            if damage == "torn":
                assert lg.end_offset == wrapper and skipped == [] and got == plain
            else:
                assert lg.end_offset == size and skipped == [(wrapper, after[0])]
                assert got == plain + [(o, payload(i + 3)) for i, o in enumerate(after)]
        finally:
            lg.close()


@pytest.mark.processes
@pytest.mark.parametrize("cut, lost_start, messages", [
    (100, 5850, 1),    # inside the last message: its header names its end, the next segment's base
    (150, 5850, -1),   # exactly the last message: nothing of it is left to count
])
def test_a_short_middle_segment_strands_nothing_after_it(tmp_path, cut, lost_start, messages):
    """A sealed segment cut short while the broker is stopped: every intact message after it stays
    readable. The skip target of the damaged tail is the next segment's base offset, a fetch in the
    missing bytes answers CORRUPT_RANGE with that target too (it answered STORAGE_ERROR, so
    ``iter_range`` served 39 of 49 intact messages and then raised), and the damaged range is
    recorded with its exact message count when the bytes left say it."""
    size, n = 150, 50
    b = BrokerProcess(0, tmp_path / "broker", overrides={"num.partitions": 1, "log.file.size": size * 20,
                                                          "log.flush.interval": 1})
    b.start()
    try:
        with socket.create_connection((b.host, b.port), timeout=30) as s:
            for i in range(n):
                body = b"m%05d-" % i
                s.sendall(p.ProduceAckRequest("t", 0, encode_message_set([body + b"x" * (size - 10 - len(body))])).encode())
                assert p.ProduceAckResponse.decode(p.recv_response(s)).error == ErrorCode.NONE
        b.stop()
        d = b.log_dir / "t-0"
        assert sorted(f.name for f in d.glob("*.kafka")) == [segment_name(o) for o in (0, 3000, 6000)]
        with open(d / segment_name(3000), "r+b") as f:  # the middle segment: messages 20..39
            f.truncate(3000 - cut)
        b.start()
        intact = [(i * size, b"m%05d-" % i) for i in range(n) if i * size != 5850]
        for attempt in range(2):  # and again after a restart (the sidecar is read back)
            with SimpleConsumer(b.host, b.port, fetch_size=1000) as c:
                end = c.latest_offset("t", 0)
                assert end == n * size
                got = [(m.offset, bytes(m.payload[:7])) for m in c.iter_range("t", 0, 0, end)]
                assert got == intact
                assert c.skipped == [("t", 0, lost_start, 6000)]
                for at in (lost_start, 6000 - 30):  # at the damage, and in the bytes the file lost
                    with pytest.raises(CorruptRangeError) as info:
                        c.fetch("t", 0, at)
                    assert (info.value.start_offset, info.value.next_offset, info.value.messages) == \
                        (lost_start, 6000, messages)
            rec = json.loads((d / segment_name(3000)).with_suffix(".damaged").read_text())
            assert (rec["start_offset"], rec["end_offset"], rec["messages"]) == (lost_start, 6000, messages)
            if attempt == 0:
                b.restart()
    finally:
        b.stop()


def test_a_corrupt_range_answer_names_the_range_and_an_older_brokers_short_body_still_reads():
    new = p.FetchResponse.decode(p.FetchResponse.corrupt_range(1300, 1200, 1).encode()[4:])
    assert (new.error, new.damaged_range(), new.next_valid_offset) == (ErrorCode.CORRUPT_RANGE, (1300, 1200, 1), 1300)
    old = p.FetchResponse(ErrorCode.CORRUPT_RANGE, (1300).to_bytes(8, "big"))  # next_offset alone
    assert old.damaged_range() == (1300, -1, -1)
