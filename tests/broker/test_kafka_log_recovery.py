"""Recovery and damage of the Kafka-format log, with real bytes on disk: a torn tail is truncated, damage in the
newest or in a sealed segment never strands the valid batches after it, a SIGKILLed writer loses nothing it
acknowledged, a full disk appends nothing."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ingest.clock import FakeClock
from ingest.errors import CorruptRangeError, DiskFullError
from ingest.records.batch import iter_batches
from tests.broker.kafka_log_support import T, batch_of, fill, open_log, read_all, records_of
from tests.harness.failing_disk import failing_disk  # noqa: F401  (fixture: the 0.7 log's failing disk)
from tests.harness.limits import tmpfs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clock():
    return FakeClock(T + 10_000_000)


def _segment_file(d: Path, index: int) -> Path:
    return sorted(d.glob("*.log"))[index]


def _batches_in(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of each batch of a segment file."""
    data = path.read_bytes()
    return [(p, h.base_offset, h.size) for p, h in iter_batches(data)]


def read_skipping_damage(log) -> tuple[list[int], list[tuple[int, int]]]:
    """Every readable offset, skipping damaged ranges as a consumer told CORRUPT_RANGE would."""
    off, offsets, skipped = log.start_offset, [], []
    while off < log.end_offset:
        try:
            with log.read(off, 4000) as sl:
                assert sl.length > 0 and sl.next_offset > off, (off, sl.next_offset)
                offsets += [o for o, _, _ in records_of(sl.read_bytes(), off)]
                off = sl.next_offset
        except CorruptRangeError as exc:
            assert exc.start_offset <= off < exc.next_offset
            skipped.append((exc.start_offset, exc.next_offset))
            off = exc.next_offset
    return offsets, skipped


def test_a_torn_last_batch_is_truncated_and_appends_go_on_from_there(tmp_path, clock, caplog):
    d = tmp_path / "t-0"
    log = open_log(d, clock, segment_bytes=1 << 20)
    values = fill(log, 20, 10)
    log.close()
    seg = _segment_file(d, -1)
    last_pos, last_base, last_size = _batches_in(seg)[-1]
    os.truncate(seg, last_pos + last_size // 2)                # a crash in the middle of the last write
    with caplog.at_level(logging.WARNING):
        log = open_log(d, clock, segment_bytes=1 << 20)
    assert log.end_offset == last_base == 190
    assert "torn tail" in caplog.text and os.path.getsize(seg) == last_pos
    more = fill(log, 2, 10)
    assert [v for _, _, v in read_all(log)] == values[:190] + more
    log.close()


def test_zeros_after_the_last_batch_are_truncated_as_a_crash_trace(tmp_path, clock, caplog):
    d = tmp_path / "t-0"
    log = open_log(d, clock, segment_bytes=1 << 20)
    fill(log, 5)
    log.close()
    seg = _segment_file(d, -1)
    size = os.path.getsize(seg)
    with open(seg, "ab") as f:
        f.write(bytes(8192))                                   # pages the crash left allocated, not written
    with caplog.at_level(logging.WARNING):
        log = open_log(d, clock, segment_bytes=1 << 20)
    assert log.end_offset == 50 and os.path.getsize(seg) == size
    assert "zero-filled tail" in caplog.text and not [r for r in caplog.records if r.levelno >= logging.ERROR]
    log.close()


def test_damage_in_the_newest_segment_keeps_the_batches_after_it(tmp_path, clock):
    d = tmp_path / "t-0"
    log = open_log(d, clock, segment_bytes=1 << 20)
    fill(log, 30, 10)
    log.close()
    seg = _segment_file(d, -1)
    pos, base, size = _batches_in(seg)[12]
    with open(seg, "r+b") as f:
        f.seek(pos + size // 2)
        f.write(b"\xde\xad\xbe\xef")
    log = open_log(d, clock, segment_bytes=1 << 20)
    assert log.end_offset == 300                                # nothing truncated: valid batches follow
    offsets, skipped = read_skipping_damage(log)
    assert skipped == [(120, 130)] and offsets == [o for o in range(300) if not 120 <= o < 130]
    sidecar = [json.loads(x) for x in (d / seg.name.replace(".log", ".damaged")).read_text().splitlines()]
    assert [(x["start_offset"], x["next_offset"], x["start_position"]) for x in sidecar] == [(120, 130, pos)]
    assert log.damaged_ranges() == [(120, 130)]
    assert log.append(batch_of("after", 3)[0]).first_offset == 300
    log.close()


def test_a_flipped_byte_in_a_sealed_segment_strands_nothing_after_it(tmp_path, clock):
    d = tmp_path / "t-0"
    log = open_log(d, clock)
    fill(log, 100, 10)
    bases = log.segment_bases()
    log.close()
    middle = _segment_file(d, 2)                                # sealed, with saved indexes
    batches = _batches_in(middle)
    pos, base, size = batches[len(batches) // 2]
    with open(middle, "r+b") as f:
        f.seek(pos + 70)
        f.write(bytes([f.read(1)[0] ^ 0x40]))
    log = open_log(d, clock)
    offsets, skipped = read_skipping_damage(log)
    assert skipped == [(base, base + 10)]
    assert offsets == [o for o in range(1000) if not base <= o < base + 10]
    assert bases[2] < base < bases[3]
    log.close()


def test_a_short_sealed_segment_skips_to_the_next_segment_and_strands_nothing(tmp_path, clock):
    d = tmp_path / "t-0"
    log = open_log(d, clock)
    fill(log, 100, 10)
    bases = log.segment_bases()
    log.close()
    middle = _segment_file(d, 3)
    os.truncate(middle, os.path.getsize(middle) - 100)         # a short old segment, broker stopped
    last_whole = [b for p, b, s in _batches_in(middle)][-1] + 10
    log = open_log(d, clock)
    offsets, skipped = read_skipping_damage(log)
    assert skipped == [(last_whole, bases[4])]
    assert offsets == [o for o in range(1000) if not last_whole <= o < bases[4]]
    log.close()


def test_retention_records_a_damaged_segment_as_not_exactly_counted(tmp_path, clock):
    d = tmp_path / "t-0"
    log = open_log(d, clock, retention_ms=1)
    fill(log, 40, 10)
    log.close()
    first = _segment_file(d, 0)
    pos, base, size = _batches_in(first)[3]
    with open(first, "r+b") as f:
        f.seek(pos + 61)
        f.write(b"\x00" * 8)
    log = open_log(d, clock, retention_ms=1)
    read_skipping_damage(log)                                   # the read finds the damage
    log.cleanup(T + 10 ** 9)
    lines = [json.loads(x) for x in (d / "deleted-segments").read_text().splitlines()]
    assert lines[0]["messages"] == -1 and lines[0]["counted_before_damage"] == lines[0]["end"] - 10
    assert all(x["messages"] == x["end"] - x["start"] for x in lines[1:])
    log.close()


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ingest.broker.kafka_log import KafkaLog, KafkaLogSettings
    from ingest.clock import SYSTEM_CLOCK
    from ingest.records.builder import build_batch
    log = KafkaLog(Path(sys.argv[1]), KafkaLogSettings(segment_bytes=64 * 1024, flush_messages=1), SYSTEM_CLOCK)
    i = 0
    while True:
        info = log.append(build_batch([b"r%d-%d" % (i, j) * 20 for j in range(7)]))
        print(info.last_offset, flush=True)   # acknowledged: written and fsynced
        i += 1
""")


@pytest.mark.processes
def test_a_sigkilled_writer_loses_nothing_it_acknowledged(tmp_path, clock):
    d = tmp_path / "t-0"
    for round_ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(d)], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            acked = -1
            for line in proc.stdout:
                acked = int(line)
                if acked >= (round_ + 1) * 700:
                    break
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        log = open_log(d, clock, segment_bytes=64 * 1024)
        got = read_all(log)
        assert log.end_offset > acked and [o for o, _, _ in got] == list(range(log.end_offset))
        assert all(v.startswith(b"r") for _, _, v in got)
        log.close()


@pytest.mark.processes
def test_a_full_disk_appends_nothing_and_the_log_goes_on_once_space_is_freed(tmp_path, clock):
    with tmpfs(tmp_path / "small", "1m") as mnt:
        d = mnt / "t-0"
        log = open_log(d, clock, segment_bytes=4 << 20)
        filler = mnt / "filler"
        st = os.statvfs(mnt)
        with open(filler, "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - 40_000))
        appended = []
        with pytest.raises(DiskFullError, match="nothing was appended"):
            for i in range(100):
                data, values = batch_of(f"b{i}", 20, size=200)
                log.append(data)
                appended += values
        end = log.end_offset
        assert end == len(appended) and not log.offline
        filler.unlink()
        more = fill(log, 3, 20)
        log.close()
        log = open_log(d, clock, segment_bytes=4 << 20)
        assert [v for _, _, v in read_all(log)] == appended + more
        log.close()


def test_a_failed_fsync_takes_the_log_offline_and_acknowledges_nothing_unwritten(failing_disk, clock, caplog):
    from ingest.errors import LogOfflineError
    d = failing_disk.mountpoint / "v-0"
    log = open_log(d, clock, segment_bytes=16 << 20, flush_messages=1)   # every append is fsynced
    acked = []
    for i in range(20):                                   # > 64 KB: ext4 puts the next blocks right after
        data, values = batch_of(f"k{i}", 4, size=4000)
        log.append(data)
        acked += values
    failing_disk.fail_after(d / f"{0:020d}.log")
    with caplog.at_level(logging.ERROR), pytest.raises(LogOfflineError, match="fsync"):
        log.append(batch_of("lost", 8, size=4000)[0])     # written to the page cache, its fsync fails
    assert log.offline and "is OFFLINE" in caplog.text
    failing_disk.heal()
    with pytest.raises(LogOfflineError):                  # never retried, never served
        log.append(batch_of("after", 1)[0])
    with pytest.raises(LogOfflineError):
        log.read(0, 100)
    log.close()                                           # no flush on close once offline
    failing_disk.remount()
    log = open_log(d, clock, segment_bytes=16 << 20)
    got = [v for _, _, v in read_all(log)]
    assert got[:len(acked)] == acked and len(got) in (len(acked), len(acked) + 8)
    log.close()


def test_a_flipped_high_bit_in_a_length_field_does_not_truncate_the_valid_batches_after_it(tmp_path, clock):
    d = tmp_path / "t-0"
    log = open_log(d, clock, segment_bytes=1 << 20)
    fill(log, 30, 10)
    log.close()
    seg = _segment_file(d, -1)
    pos, base, size = _batches_in(seg)[5]
    with open(seg, "r+b") as f:
        f.seek(pos + 8)
        f.write(b"\x40")                                      # batch_length + 1 GB: "runs past the file"
    log = open_log(d, clock, segment_bytes=1 << 20)
    assert log.end_offset == 300
    offsets, skipped = read_skipping_damage(log)
    assert skipped == [(50, 60)] and len(offsets) == 290
    log.close()
