"""The partition log: append/read round trips, boundaries, roll, flush visibility, offsets."""
from __future__ import annotations

import os

import pytest

from ingest.broker.log import EARLIEST_TIME, LATEST_TIME, Log, LogSettings
from ingest.broker.segment import segment_name
from ingest.errors import InvalidMessageError, MessageTooLargeError, OffsetOutOfRangeError
from ingest.records.message import CODEC_GZIP
from ingest.records.message_batch import MessageBatch, iter_messages
from ingest.records.message_set import encode_message_set


def make_log(tmp_path, clock, **kw) -> Log:
    kw.setdefault("flush_interval_messages", 1)
    return Log(tmp_path / "t-0", LogSettings(**kw), clock)


def read_all(lg: Log, max_bytes: int = 4096) -> list:
    out = []
    off = lg.start_offset
    while off < lg.end_offset:
        msgs = list(iter_messages(lg.read_bytes(off, max_bytes), off))
        assert msgs, f"no whole message at {off}; max_bytes too small"
        out.extend(msgs)
        off = msgs[-1].next_offset
    return out


def test_append_returns_byte_offsets_and_reads_round_trip(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock)
    sets = [encode_message_set([b"m%d" % i, b"n%d" % i]) for i in range(20)]
    offsets = [lg.append(s) for s in sets]
    assert offsets[0] == 0
    assert offsets == [sum(len(s) for s in sets[:i]) for i in range(20)]
    assert lg.end_offset == sum(len(s) for s in sets)
    assert [m.payload for m in read_all(lg)] == [p for i in range(20) for p in (b"m%d" % i, b"n%d" % i)]
    assert (tmp_path / "t-0" / segment_name(0)).exists()


def test_read_at_non_boundary_offsets_is_out_of_range(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock, index_interval=64, flush_interval_messages=10_000)
    msgs = [encode_message_set([os.urandom(i % 37)]) for i in range(300)]
    boundaries = {lg.append(m) for m in msgs}
    lg.flush()
    boundaries.add(lg.end_offset)
    for off in range(lg.end_offset + 3):
        if off in boundaries:
            with lg.read(off, 100):
                pass
        else:
            with pytest.raises(OffsetOutOfRangeError):
                lg.read(off, 100)
    with pytest.raises(OffsetOutOfRangeError, match="out of range"):
        lg.read(-1, 100)


def test_read_returns_whole_messages_cut_by_max_bytes_and_big_messages_need_bigger_reads(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock)
    big = os.urandom(50_000)
    lg.append(encode_message_set([b"small"]))
    off = lg.append(encode_message_set([big]))
    with lg.read(off, 1000) as sl:
        assert sl.length == 1000
        assert list(iter_messages(sl.read_bytes(), off)) == []  # cut off: client retries larger
    with lg.read(off, 100_000) as sl:
        assert [m.payload for m in iter_messages(sl.read_bytes(), off)] == [big]
    with lg.read(lg.end_offset, 100) as sl:
        assert sl.length == 0 and sl.read_bytes() == b""


def test_invalid_set_is_rejected_and_nothing_written(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock, max_message_size=100)
    lg.append(encode_message_set([b"ok"]))
    end = lg.end_offset
    bad = bytearray(encode_message_set([b"abc", b"def"]))
    bad[-1] ^= 1
    with pytest.raises(InvalidMessageError, match="CRC"):
        lg.append(bytes(bad))
    with pytest.raises(InvalidMessageError, match="runs past the end"):
        lg.append(encode_message_set([b"abc"])[:-1])
    with pytest.raises(MessageTooLargeError):
        lg.append(encode_message_set([b"x" * 101]))
    assert lg.end_offset == end and lg.size == end


def test_roll_at_file_size(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock, file_size=1000)
    one = encode_message_set([b"x" * 90])  # 100 bytes
    for _ in range(35):
        lg.append(one)
    assert lg.segment_bases() == [0, 1000, 2000, 3000]
    files = sorted(os.listdir(tmp_path / "t-0"))
    assert [f for f in files if f.endswith(".kafka")] == [segment_name(b) for b in (0, 1000, 2000, 3000)]
    # sealed segments save their index; the active one never does
    assert [f for f in files if f.endswith(".index")] == [segment_name(b)[:-6] + ".index" for b in (0, 1000, 2000)]
    assert len(read_all(lg)) == 35


def test_roll_after_roll_hours(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock, roll_ms=3_600_000)
    lg.append(encode_message_set([b"a"]))
    fake_clock.advance(3_600_000)
    off = lg.append(encode_message_set([b"b"]))
    assert lg.segment_bases() == [0, off]


def test_only_flushed_messages_are_visible(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock, flush_interval_messages=3, flush_interval_ms=1000)
    lg.append(encode_message_set([b"a"]))
    lg.append(encode_message_set([b"b"]))
    assert lg.end_offset == 0
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(len(encode_message_set([b"a"])), 100)
    lg.append(encode_message_set([b"c"]))  # third message: flush by count
    assert [m.payload for m in read_all(lg)] == [b"a", b"b", b"c"]
    lg.append(encode_message_set([b"d"]))
    assert not lg.maybe_flush(fake_clock.time_ms() + 999)
    assert lg.maybe_flush(fake_clock.time_ms() + 1000)  # flush by time
    assert [m.payload for m in read_all(lg)][-1] == b"d"


def test_offsets_before(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock, file_size=200)
    t0 = fake_clock.time_ms()
    for _ in range(5):
        lg.append(encode_message_set([b"x" * 90]))
        fake_clock.advance(1000)
    bases = lg.segment_bases()
    assert bases == [0, 200, 400]
    assert lg.offsets_before(LATEST_TIME, 10) == [lg.end_offset, 400, 200, 0]
    assert lg.offsets_before(LATEST_TIME, 1) == [lg.end_offset]
    assert lg.offsets_before(EARLIEST_TIME, 10) == [0]
    # segment 0 last modified at t0+1000, segment 200 at t0+3000
    assert lg.offsets_before(t0 + 1500, 10) == [0]
    assert lg.offsets_before(t0 + 3000, 10) == [200, 0]
    assert lg.offsets_before(t0 - 1, 10) == []


def test_compressed_sets_append_and_read(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock)
    payloads = [b"p%03d" % i * 20 for i in range(100)]
    off = lg.append(encode_message_set(payloads, CODEC_GZIP))
    lg.append(encode_message_set([b"plain"]))
    msgs = read_all(lg, 100_000)
    assert [m.payload for m in msgs] == payloads + [b"plain"]
    assert msgs[0].offset == off and msgs[100].offset == msgs[99].next_offset


def test_reopen_keeps_everything(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock, file_size=500, index_interval=64)
    for i in range(40):
        lg.append(encode_message_set([b"msg-%d" % i]))
    end, bases = lg.end_offset, lg.segment_bases()
    lg.close()
    lg2 = make_log(tmp_path, fake_clock, file_size=500, index_interval=64)
    assert (lg2.end_offset, lg2.segment_bases()) == (end, bases)
    assert [m.payload for m in read_all(lg2)] == [b"msg-%d" % i for i in range(40)]
    with pytest.raises(OffsetOutOfRangeError):
        lg2.read(bases[0] + 3, 10)  # index of an older segment is built lazily and exactly
    off = lg2.append(encode_message_set([b"after"]))
    assert off == end


def test_boundary_check_is_exact_with_mixed_sizes_after_reopen(tmp_path, fake_clock):
    import random

    rnd = random.Random(7)
    sizes = [rnd.choice([0, 1, 50, 300, 5000, 70_000]) for _ in range(120)]
    lg = make_log(tmp_path, fake_clock, index_interval=128, file_size=2_000_000, flush_interval_messages=10_000)
    boundaries = [lg.append(encode_message_set([os.urandom(n)])) for n in sizes]
    lg.flush()
    end = lg.end_offset
    lg.close()
    lg = make_log(tmp_path, fake_clock, index_interval=128, file_size=2_000_000)
    valid = set(boundaries) | {end}
    probes = set(valid) | {b + d for b in boundaries for d in (-1, 1, 4, 10)} | {rnd.randrange(end) for _ in range(3000)}
    for off in sorted(p for p in probes if 0 <= p <= end):
        if off in valid:
            with lg.read(off, 10):
                pass
        else:
            with pytest.raises(OffsetOutOfRangeError):
                lg.read(off, 10)


def test_append_trusts_a_validated_set_and_checks_raw_bytes_itself(tmp_path, fake_clock):
    """A set is validated once: Log.append does not scan a batch made for append again (the
    handlers validate before the lock), but validates raw bytes and a set checked against a
    larger max.message.size than its own."""
    lg = make_log(tmp_path, fake_clock, max_message_size=100)
    good = encode_message_set([b"a" * 10, b"b" * 10])
    vs = MessageBatch.for_append(good, max_message_size=100)
    corrupt = bytearray(good)
    corrupt[-1] ^= 1
    with pytest.raises(InvalidMessageError):
        lg.append(bytes(corrupt))
    # Only the type's promise keeps a corrupt set out: built by hand, it is appended unchecked.
    unchecked = MessageBatch.for_append(good, max_message_size=100)
    unchecked.raw = bytes(corrupt)
    assert lg.append(unchecked) == 0 and lg.end_offset == len(good)
    big = encode_message_set([b"c" * 200])
    with pytest.raises(MessageTooLargeError):
        lg.append(MessageBatch.for_append(big))  # checked against no limit: the log checks again


def test_index_of_appended_sets_equals_the_index_recovery_builds(tmp_path, fake_clock):
    lg = make_log(tmp_path, fake_clock, index_interval=256)
    for i in range(60):
        lg.append(encode_message_set([b"p" * (i * 13 % 300) for _ in range(i % 5 + 1)]))
    seg = lg.segments()[-1]
    appended = list(seg.index)
    lg.close()
    reopened = make_log(tmp_path, fake_clock, index_interval=256)
    assert list(reopened.segments()[-1].index) == appended and len(appended) > 10
    reopened.close()
