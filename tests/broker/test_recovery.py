"""Recovery at start-up: torn tails truncated; corrupt bytes cost only themselves (tests/broker/test_corruption.py)."""
from __future__ import annotations

import logging
import os

import pytest

from ingest.broker.log import Log, LogSettings
from ingest.broker.segment import segment_name
from ingest.errors import CorruptRangeError, OffsetOutOfRangeError
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set


def open_log(path, clock, **kw) -> Log:
    kw.setdefault("flush_interval_messages", 1)
    kw.setdefault("index_interval", 64)
    return Log(path, LogSettings(**kw), clock)


def payloads(lg: Log) -> list[bytes]:
    out, off = [], lg.start_offset
    while off < lg.end_offset:
        msgs = list(iter_messages(lg.read_bytes(off, 1 << 20), off))
        out += [m.payload for m in msgs]
        off = msgs[-1].next_offset
    return out


@pytest.fixture
def written(tmp_path, fake_clock):
    """A closed log of 5 messages; returns (dir, segment path, offset of the last message, size)."""
    d = tmp_path / "t-0"
    lg = open_log(d, fake_clock)
    last = 0
    for i in range(5):
        last = lg.append(encode_message_set([b"message number %d" % i * 3]))
    size = lg.end_offset
    lg.close()
    return d, d / segment_name(0), last, size


def test_torn_tail_at_every_byte_of_the_last_message_recovers_to_the_previous(written, fake_clock):
    d, path, last, size = written
    original = path.read_bytes()
    for cut in range(last + 1, size):
        path.write_bytes(original[:cut])
        lg = open_log(d, fake_clock)
        assert lg.end_offset == last, cut
        assert os.path.getsize(path) == last
        assert payloads(lg) == [b"message number %d" % i * 3 for i in range(4)]
        assert lg.append(encode_message_set([b"next"])) == last  # appends continue at the cut
        lg.close()


def test_every_corrupt_byte_of_the_last_message_is_truncated(written, fake_clock, caplog):
    d, path, last, size = written
    original = path.read_bytes()
    for i in range(last, size):
        bad = bytearray(original)
        bad[i] ^= 0x5A
        path.write_bytes(bytes(bad))
        with caplog.at_level(logging.WARNING, logger="ingest.broker.segment_recovery"):
            caplog.clear()
            lg = open_log(d, fake_clock)
        assert lg.end_offset == last, i
        assert f"truncating {size - last} bytes" in caplog.text
        lg.close()


def test_recovery_logs_what_was_dropped_and_why(written, fake_clock, caplog):
    d, path, last, size = written
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01")
    with caplog.at_level(logging.WARNING):
        lg = open_log(d, fake_clock)
    assert "torn tail" in caplog.text and "truncating 3 bytes" in caplog.text
    assert lg.end_offset == size


@pytest.mark.parametrize("saved_index", [True, False], ids=["saved-index", "no-index"])
def test_corruption_in_an_older_segment_costs_only_the_damaged_message(tmp_path, fake_clock, caplog, saved_index):
    d = tmp_path / "t-0"
    lg = open_log(d, fake_clock, file_size=1000)
    offsets = [lg.append(encode_message_set([b"x" * 90])) for _ in range(25)]
    assert lg.segment_bases() == [0, 1000, 2000]
    lg.close()
    seg = d / segment_name(1000)
    bad = bytearray(seg.read_bytes())
    bad[550] ^= 0xFF  # inside the message at offset 1500
    seg.write_bytes(bytes(bad))
    if not saved_index:
        for f in d.glob("*.index"):
            f.unlink()
    lg = open_log(d, fake_clock, file_size=1000)
    assert lg.end_offset == offsets[-1] + 100  # only the newest segment is truncated by recovery
    with lg.read(1400, 1000) as sl:  # before the corruption: served, cut at the corrupt message
        assert sl.length == 100
    with caplog.at_level(logging.ERROR):
        with pytest.raises(CorruptRangeError, match="damaged range 1500..1600.*ingest log dump") as info:
            lg.read(1500, 1000)
    assert (info.value.start_offset, info.value.next_offset) == (1500, 1600)
    # with a saved index the read path checks what it serves (and then verifies the segment)
    assert "is corrupt from offset 1500" in caplog.text
    with pytest.raises(CorruptRangeError):  # inside the damaged range: the same answer
        lg.read(1550, 1000)
    assert len(list(iter_messages(lg.read_bytes(1600, 10_000)))) == 4  # after it: served
    assert len(list(iter_messages(lg.read_bytes(2000, 10_000)))) == 5
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(1601, 10)


def test_empty_newest_segment_is_dropped_so_a_torn_previous_one_leaves_no_gap(tmp_path, fake_clock):
    d = tmp_path / "t-0"
    lg = open_log(d, fake_clock, file_size=1000)
    for _ in range(10):
        lg.append(encode_message_set([b"x" * 90]))
    lg.roll()
    assert lg.segment_bases() == [0, 1000]
    lg.close()
    with open(d / segment_name(0), "r+b") as f:
        f.truncate(950)
    lg = open_log(d, fake_clock, file_size=1000)
    assert lg.segment_bases() == [0] and lg.end_offset == 900
    assert lg.append(encode_message_set([b"y"])) == 900


def test_recovery_and_lazy_index_handle_messages_crossing_scan_chunks(tmp_path, fake_clock):
    big = [os.urandom(3 * 1024 * 1024 + i) for i in range(3)]  # 9 MB: crosses the 8 MB scan chunk
    d = tmp_path / "t-0"
    lg = open_log(d, fake_clock, max_message_size=4 << 20, file_size=10 << 20)
    offsets = [lg.append(encode_message_set([b])) for b in big]
    lg.append(encode_message_set([b"small"]))
    lg.roll()
    tail = lg.append(encode_message_set([b"x" * 100]))
    assert len(lg.segment_bases()) == 2
    lg.close()
    with open(d / segment_name(tail), "ab") as f:
        f.write(b"\x00\x00")  # a torn tail in the newest segment
    lg = open_log(d, fake_clock, max_message_size=4 << 20, file_size=10 << 20)
    assert lg.end_offset == tail + 110
    for off, b in zip(offsets, big):  # the older segment's index is built lazily, across chunks
        assert next(iter_messages(lg.read_bytes(off, 4 << 20), off)).payload == b
        with pytest.raises(OffsetOutOfRangeError):
            lg.read(off + 1, 10)
        with pytest.raises(OffsetOutOfRangeError):
            lg.read(off + len(b) // 2, 10)


def test_torn_big_message_after_the_first_scan_chunk_is_truncated(tmp_path, fake_clock):
    d = tmp_path / "t-0"
    lg = open_log(d, fake_clock, max_message_size=4 << 20)
    offsets = [lg.append(encode_message_set([os.urandom(3 << 20)])) for _ in range(3)]
    lg.close()
    path = d / segment_name(0)
    with open(path, "r+b") as f:
        f.truncate(offsets[2] + (1 << 20))  # cut inside the third message, past the 8 MB chunk
    lg = open_log(d, fake_clock, max_message_size=4 << 20)
    assert lg.end_offset == offsets[2] == os.path.getsize(path)
