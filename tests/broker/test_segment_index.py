"""Saved segment indexes: used after restart when they match, ignored when not, removed with the segment."""
from __future__ import annotations

import logging
import os

import pytest

from ingest.broker.log import Log, LogSettings
from ingest.broker.segment import segment_name
from ingest.broker.segment_index import index_path, load_index
from ingest.errors import OffsetOutOfRangeError
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set


def open_log(d, clock, **kw) -> Log:
    # close() flushes; a large flush interval keeps the fixture from fsyncing every append
    return Log(d, LogSettings(flush_interval_messages=10_000, file_size=2000, index_interval=64, **kw), clock)


@pytest.fixture
def sealed(tmp_path, fake_clock):
    """A closed log of 4 segments (3 sealed, with saved indexes) and its message offsets."""
    d = tmp_path / "t-0"
    lg = open_log(d, fake_clock)
    offsets = [lg.append(encode_message_set([os.urandom(5 + i % 70)])) for i in range(130)]
    assert len(lg.segment_bases()) == 4, lg.segment_bases()
    lg.close()
    return d, offsets


def exact_boundaries(lg: Log, offsets: list[int]) -> None:
    valid = set(offsets) | {lg.end_offset}
    for off in range(0, lg.end_offset + 1):
        if off in valid:
            with lg.read(off, 200) as sl:
                if off < lg.end_offset:
                    assert list(iter_messages(sl.read_bytes(), off))[0].offset == off
        else:
            with pytest.raises(OffsetOutOfRangeError):
                lg.read(off, 200)


def test_saved_index_is_used_after_restart_and_exact(sealed, fake_clock):
    d, offsets = sealed
    lg = open_log(d, fake_clock)
    segs = lg.segments()
    assert [s.indexed for s in segs] == [True] * 4
    assert [s.verified for s in segs] == [False, False, False, True]  # the newest was recovered by a full scan
    exact_boundaries(lg, offsets)
    assert segs[0].verify(save=True) and segs[0].verified


@pytest.mark.parametrize("damage", ["flip", "truncate", "stale"])
def test_bad_or_stale_index_is_ignored_and_the_segment_scanned(sealed, fake_clock, caplog, damage):
    d, offsets = sealed
    seg0 = d / segment_name(0)
    idx = index_path(seg0)
    data = bytearray(idx.read_bytes())
    if damage == "flip":
        data[30] ^= 1
        idx.write_bytes(bytes(data))
    elif damage == "truncate":
        idx.write_bytes(bytes(data[:10]))
    else:  # the segment changed after the index was saved
        with open(seg0, "ab") as f:
            f.write(b"")
        os.truncate(seg0, os.path.getsize(seg0) - 1)
    with caplog.at_level(logging.INFO):
        lg = open_log(d, fake_clock)
    assert "ignoring index" in caplog.text
    assert not lg.segments()[0].indexed
    if damage != "stale":
        exact_boundaries(lg, offsets)


def test_verification_saves_an_index_for_segments_without_one(sealed, fake_clock):
    d, offsets = sealed
    for f in d.glob("*.index"):
        f.unlink()
    lg = open_log(d, fake_clock)
    seg = lg.segments()[1]
    assert not seg.indexed
    assert seg.verify(save=True)
    assert load_index(seg.path, seg.size, 64) is not None


def test_retention_and_recovery_remove_index_files(sealed, fake_clock):
    d, offsets = sealed
    bases = sorted(int(p.name[:20]) for p in d.glob("*.kafka"))
    stray = index_path(d / segment_name(bases[-1]))
    stray.write_bytes(b"junk")  # a stale index next to the newest segment
    lg = open_log(d, fake_clock)
    assert not stray.exists()
    lg.delete_segments(lambda s: s.base_offset == 0)
    assert not index_path(d / segment_name(0)).exists()


def test_leftover_index_files_are_removed_at_start_up(sealed, fake_clock):
    d, _ = sealed
    (d / "00000000000000999999.index").write_bytes(b"orphan")
    (d / "00000000000000000000.index.tmp").write_bytes(b"half written")
    open_log(d, fake_clock)
    assert not (d / "00000000000000999999.index").exists()
    assert not (d / "00000000000000000000.index.tmp").exists()
    assert (d / "00000000000000000000.index").exists()
