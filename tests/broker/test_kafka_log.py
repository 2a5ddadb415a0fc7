"""The Kafka-format partition log: logical offsets assigned by the log, whole batches served (at least one),
index and time look-ups across many segments, replica appends, rolls, reopen, retention, truncation."""
from __future__ import annotations

import json
import os
import socket

import pytest

from ingest.broker.kafka_log_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from ingest.clock import FakeClock
from ingest.errors import (InvalidRecordError, OffsetMismatchError, OffsetOutOfRangeError, RecordListTooLargeError,
                           RecordTooLargeError)
from ingest.records.batch import LOG_APPEND_TIME, iter_batches
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from tests.broker.kafka_log_support import T, batch_of, fill, open_log, read_all, records_of


@pytest.fixture
def clock():
    return FakeClock(T + 10_000_000)


def test_appends_get_consecutive_offsets_and_the_file_names_are_kafkas(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    infos = [log.append(batch_of(f"b{i}", 5)[0]) for i in range(3)]
    assert [(i.first_offset, i.last_offset, i.records) for i in infos] == [(0, 4, 5), (5, 9, 5), (10, 14, 5)]
    assert log.end_offset == log.log_end == 15
    assert sorted(os.listdir(tmp_path / "t-0")) == ["00000000000000000000.log"]
    with open(tmp_path / "t-0" / "00000000000000000000.log", "rb") as f:
        data = f.read()
    assert [(h.base_offset, h.records_count) for _, h in iter_batches(data)] == [(0, 5), (5, 5), (10, 5)]
    log.close()


def test_every_offset_reads_back_across_many_segments_and_codecs(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    values = fill(log, 120, 10, codecs=(NONE, GZIP, SNAPPY, LZ4, ZSTD))
    assert len(log.segment_bases()) > 5
    got = read_all(log)
    assert [o for o, _, _ in got] == list(range(1200)) and [v for _, _, v in got] == values
    for offset in range(0, 1200, 37):                         # a fetch from any offset starts at its batch
        assert read_all(log, offset, max_bytes=1)[0][0] == offset
    for seg in log.segments():                                 # the index finds every batch
        for offset in range(seg.base_offset, seg.next_offset):
            loc = seg.locate(offset)
            assert loc.base_offset <= offset <= loc.last_offset
    log.close()


def test_a_read_returns_whole_batches_and_at_least_one_however_large(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=1 << 20)
    big, _ = batch_of("big", 50, size=300)
    log.append(big)
    fill(log, 10)
    with log.read(0, 10) as sl:                               # KIP-74: the first batch whole, max_bytes 10
        assert sl.length == len(big) and (sl.first_offset, sl.next_offset) == (0, 50)
    with log.read(0, 10, min_one=False) as sl:                # a later partition of a fetch: nothing
        assert sl.length == 0 and sl.next_offset == 0
    with log.read(50, 2500) as sl:
        data = sl.read_bytes()
        sizes = [h.size for _, h in iter_batches(data)]
        assert sum(sizes) == len(data) <= 2500 and len(sizes) >= 2   # whole batches, none cut
        assert sl.next_offset == 50 + 10 * len(sizes)
    with log.read(log.end_offset, 100) as sl:
        assert sl.length == 0 and sl.next_offset == log.end_offset
    with pytest.raises(OffsetOutOfRangeError, match=r"valid offsets are 0\.\.150"):
        log.read(151, 100)
    log.close()


def test_a_slice_is_served_with_sendfile(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    values = fill(log, 5)
    a, b = socket.socketpair()
    with a, b, log.read(0, 1 << 20) as sl:
        sent = os.sendfile(a.fileno(), sl.fileno(), sl.position, sl.length)
        data = b.recv(sent, socket.MSG_WAITALL)
    assert [v for _, _, v in records_of(data)] == values
    log.close()


def test_a_limit_such_as_the_high_watermark_bounds_what_is_served(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=1 << 20)
    fill(log, 6, 10)
    with log.read(0, 1 << 20, limit=30) as sl:
        assert sl.next_offset == 30 and [o for o, _, _ in records_of(sl.read_bytes())] == list(range(30))
    with log.read(30, 1 << 20, limit=30) as sl:
        assert sl.length == 0
    log.close()


def test_offsets_by_timestamp_through_the_time_index(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    fill(log, 60, 10, codecs=(NONE, GZIP), ts_step=1000)        # batch i: timestamps T + 1000 i + (0..9)
    assert log.offset_for_timestamp(T + 17_005) == (175, T + 17_005)
    assert log.offset_for_timestamp(T + 17_010) == (180, T + 18_000)   # between batches: the next record
    assert log.offset_for_timestamp(T - 1) == (0, T)
    assert log.offset_for_timestamp(T + 59_009) == (599, T + 59_009)
    assert log.offset_for_timestamp(T + 60_000) is None
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (0, -1)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (600, -1)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (599, T + 59_009)
    for seg in log.segments()[:-1]:                            # sealed: the last time index entry is its max
        assert seg.time_index.last_entry()[0] == seg.max_timestamp
    log.close()


def test_the_largest_timestamp_need_not_be_the_last_record(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append(build_batch([SimpleRecord(b"a", timestamp=T + 50), SimpleRecord(b"b", timestamp=T + 90),
                            SimpleRecord(b"c", timestamp=T + 10)]))
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (1, T + 90)
    assert log.offset_for_timestamp(T + 60) == (1, T + 90)
    log.close()


def test_reopen_uses_the_saved_indexes_and_rebuilds_missing_or_corrupt_ones(tmp_path, clock):
    d = tmp_path / "t-0"
    log = open_log(d, clock)
    values = fill(log, 80, 10)
    log.close()
    names = sorted(os.listdir(d))
    assert any(n.endswith(".index") for n in names) and any(n.endswith(".timeindex") for n in names)
    log = open_log(d, clock)
    assert [v for _, _, v in read_all(log)] == values and log.end_offset == 800
    assert log.offset_for_timestamp(T + 33_003) == (333, T + 33_003)
    log.close()
    idx = sorted(n for n in names if n.endswith(".index"))
    os.unlink(d / idx[0])
    with open(d / idx[1], "r+b") as f:
        f.write(b"\xff" * 8)                                   # a negative relative offset: insane
    with open(d / idx[2], "ab") as f:
        f.write(b"\x00" * 3)                                   # not a multiple of 8
    log = open_log(d, clock)
    assert [v for _, _, v in read_all(log)] == values
    assert log.offset_for_timestamp(T + 1_005) == (15, T + 1_005)
    log.close()


def test_replica_appends_keep_their_offsets_and_must_continue_the_log(tmp_path, clock):
    leader = open_log(tmp_path / "leader-0", clock)
    fill(leader, 30, 10)
    follower = open_log(tmp_path / "follower-0", clock)
    off = 0
    while off < leader.end_offset:
        data = leader.read_bytes(off, 3000)
        info = follower.append(data, assign_offsets=False)
        assert info.first_offset == off
        off = info.last_offset + 1
    assert read_all(follower) == read_all(leader)
    with pytest.raises(OffsetMismatchError, match="log end is 300") as e:
        follower.append(leader.read_bytes(100, 3000), assign_offsets=False)
    assert e.value.log_end == 300
    with pytest.raises(OffsetMismatchError):
        follower.append(batch_of("x", 1)[0], expected=299)
    leader.close()
    follower.close()


def test_the_leader_epoch_is_written_into_each_batch(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append(batch_of("a", 3)[0], leader_epoch=7)
    log.append(batch_of("b", 3)[0], leader_epoch=8)
    data = log.read_bytes(0, 1 << 20)
    assert [(h.base_offset, h.partition_leader_epoch) for _, h in iter_batches(data)] == [(0, 7), (3, 8)]
    log.close()


def test_log_append_time_topics_stamp_batches_with_the_brokers_clock(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, timestamp_type=LOG_APPEND_TIME)
    info = log.append(batch_of("a", 3, ts=5)[0])
    assert info.log_append_time == clock.time_ms() == info.max_timestamp
    assert {ts for _, ts, _ in read_all(log)} == {clock.time_ms()}
    log.close()


def test_invalid_batches_are_refused_and_nothing_is_appended(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, max_message_bytes=2000)
    fill(log, 2, 5)
    bad = batch_of("x", 5)[0]
    bad[-1] ^= 1
    with pytest.raises(InvalidRecordError.__mro__[1]):  # CorruptRecordError or InvalidRecordError
        log.append(bad)
    with pytest.raises(RecordTooLargeError):
        log.append(batch_of("big", 50, size=100)[0])
    with pytest.raises(RecordListTooLargeError):
        open_log(tmp_path / "u-0", clock, segment_bytes=1000).append(batch_of("big", 50, size=100)[0])
    assert log.end_offset == 10 and len(read_all(log)) == 10
    log.close()


def test_segments_roll_by_time_on_the_brokers_clock(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=1 << 30, segment_ms=60_000)
    fill(log, 3)
    clock.advance(60_000)
    fill(log, 1)
    assert log.segment_bases() == [0, 30]
    log.close()


def test_retention_by_time_uses_the_largest_record_timestamp_and_records_each_deletion(tmp_path, clock):
    d = tmp_path / "t-0"
    log = open_log(d, clock, retention_ms=100_000)
    fill(log, 60, 10, ts_step=5_000)        # batch i's records at T + 5000 i
    bases = log.segment_bases()
    old = [seg for seg in log.segments()[:-1] if seg.max_timestamp < T + 150_000]
    n, _ = log.cleanup(T + 250_000)        # deletes segments whose newest record is older than T + 150000
    assert n == len(old) > 0 and log.start_offset == bases[n]
    lines = [json.loads(x) for x in (d / "deleted-segments").read_text().splitlines()]
    assert [(x["start"], x["end"], x["messages"]) for x in lines] == \
        [(a, b, b - a) for a, b in zip(bases[:n], bases[1:n + 1])]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert read_all(log)[0][0] == bases[n]
    log.close()


def test_retention_by_size_keeps_the_newest_bytes(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_bytes=40_000, retention_ms=-1)
    fill(log, 100, 10)
    log.cleanup(clock.time_ms())
    assert 40_000 <= log.size < 40_000 + 16 * 1024   # Kafka's rule: delete while what stays is >= retention.bytes
    assert read_all(log)[-1][0] == 999
    log.close()


def test_retention_deleting_everything_leaves_an_empty_segment_at_the_log_end(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, retention_ms=1)
    fill(log, 5)
    log.cleanup(T + 10 ** 9)
    assert log.start_offset == log.end_offset == 50 and log.segment_bases() == [50]
    assert log.append(batch_of("next", 2)[0]).first_offset == 50
    log.close()


def test_truncate_to_a_batch_boundary_and_append_again(tmp_path, clock):
    d = tmp_path / "t-0"
    log = open_log(d, clock)
    fill(log, 80, 10)
    bases = log.segment_bases()
    cut = bases[2] + 30
    log.truncate_to(cut)
    assert log.end_offset == cut and log.segment_bases() == bases[:3]
    with pytest.raises(OffsetOutOfRangeError, match="does not start a batch"):
        log.truncate_to(cut - 5)
    values = fill(log, 3, 10)
    assert [v for _, _, v in read_all(log, cut)] == values
    log.truncate_to(bases[2])                                   # a segment's base: it is emptied, kept
    assert log.segment_bases() == bases[:3] and log.end_offset == bases[2]
    log.close()
    log = open_log(d, clock)
    assert log.end_offset == bases[2]
    log.close()


def test_reset_to_starts_empty_at_an_offset(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    fill(log, 10)
    log.reset_to(5000)
    assert (log.start_offset, log.end_offset, log.segment_bases()) == (5000, 5000, [5000])
    follower_batch = build_batch([b"x"] * 4, base_offset=5000)
    assert log.append(follower_batch, assign_offsets=False).last_offset == 5003
    log.close()


def test_offsets_before_answers_like_the_07_log(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    fill(log, 40, 10)
    bases = log.segment_bases()
    assert log.offsets_before(-1, 3) == [400, bases[-1], bases[-2]]
    assert log.offsets_before(-2, 5) == [0]
    log.close()


def test_readers_never_see_a_torn_batch_while_appends_and_retention_run(tmp_path, clock):
    import threading
    log = open_log(tmp_path / "t-0", clock, retention_bytes=60_000, retention_ms=-1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader():
        while not stop.is_set():
            off = log.start_offset
            try:
                while off < log.end_offset:
                    with log.read(off, 3000) as sl:
                        recs = records_of(sl.read_bytes(), off)
                        assert recs and recs[0][0] == off and sl.next_offset == recs[-1][0] + 1
                        off = sl.next_offset
            except OffsetOutOfRangeError:
                continue                     # retention moved the start past us: start again
            except BaseException as exc:      # noqa: BLE001 - reported by the test thread
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(300):
            log.append(batch_of(f"b{i}", 10)[0])
            if i % 20 == 0:
                log.cleanup(clock.time_ms())
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[0]
    assert log.end_offset == 3000 and log.start_offset > 0
    log.close()


def test_segment_descriptors_come_from_the_brokers_bounded_pool(tmp_path, clock):
    from ingest.broker.kafka_log import KafkaLog, KafkaLogSettings
    from ingest.broker.open_files import OpenFiles
    files = OpenFiles(limit=2)
    log = KafkaLog(tmp_path / "t-0", KafkaLogSettings(segment_bytes=8 * 1024, index_interval_bytes=1024), clock,
                   files=files)
    values = fill(log, 60, 10)
    assert len(log.segment_bases()) > 5
    assert [v for _, _, v in read_all(log)] == values
    assert files.evicted > 0 and files.open_count <= 3
    log.close()


def test_a_time_lookup_finds_the_first_record_of_a_timestamp_repeated_across_batches(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, index_interval_bytes=100)
    for i in range(40):                                        # every batch holds records at T + 7
        log.append(build_batch([SimpleRecord(b"x" * 50, timestamp=T + 7)] * 3))
    assert log.offset_for_timestamp(T + 7) == (0, T + 7)
    log.close()


def test_a_batch_validated_by_the_log_is_appended_without_validating_again(tmp_path, clock, monkeypatch):
    import ingest.broker.kafka_log as kafka_log_module
    log = open_log(tmp_path / "t-0", clock)
    produced = log.validate(batch_of("a", 4)[0])
    calls = []
    real = kafka_log_module.validate_produced
    monkeypatch.setattr(kafka_log_module, "validate_produced", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert log.append(produced).first_offset == 0 and calls == []
    log.settings = type(log.settings)(**{**log.settings.__dict__, "max_message_bytes": 100})
    with pytest.raises(RecordTooLargeError):                 # validated under other settings: checked again
        log.append(produced)
    log.close()
