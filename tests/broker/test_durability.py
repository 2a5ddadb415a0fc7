"""Durability on a really failing disk: a failed fsync takes its log offline, is never acknowledged or served.

The disk is an ext4 file system on a loop device whose capacity the test cuts
right after the blocks a log already holds: the next data blocks the kernel
writes lie past the end of the device, their writeback fails and
``fdatasync`` returns EIO, as a disk failing under a flush would. Growing the
device back "heals" the disk; a later ``fdatasync`` then succeeds although
the pages of the failed flush never reached it (the kernel reports a
writeback error once), which is why the log must never retry. A write that
fails (ENOSPC) uses a size-limited tmpfs. The failing disk is
``tests/harness/failing_disk.py``. Both need root (mount, losetup);
without it the tests are skipped with the reason.
"""
from __future__ import annotations

import errno
import logging
import os
import time

import pytest

from ingest.broker.log import Log, LogSettings
from ingest.broker.log_config import LOG_CONFIG
from ingest.broker.log_manager import LogManager
from ingest.clock import SYSTEM_CLOCK
from ingest.errors import DiskFullError, IngestError, LogOfflineError
from ingest.wire.errors import ErrorCode
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set
from ingest.wire import protocol as p
from tests.harness.brokers import BrokerProcess
from tests.harness.failing_disk import failing_disk, need_root_and_tools  # noqa: F401  (fixture)
from tests.harness.limits import tmpfs
from tests.harness.wire import ask, fetch_all, produce_ack

pytestmark = pytest.mark.processes  # broker processes, tmpfs and loop-device mounts


@pytest.fixture
def small_tmpfs(tmp_path):
    need_root_and_tools()
    with tmpfs(tmp_path / "tmpfs", "1m") as mnt:
        yield mnt


# --- a real broker --------------------------------------------------------------------



def test_failed_fsync_takes_the_log_offline_not_acknowledged_never_served_recovered_at_restart(
        failing_disk, tmp_path):
    b = BrokerProcess(0, tmp_path / "broker", overrides={
        "log.dir": str(failing_disk.mountpoint / "logs"), "num.partitions": 1, "log.flush.interval": 1})
    b.start()
    try:
        assert produce_ack(b, "other", [b"o-%d" % i for i in range(3)]).error == ErrorCode.NONE
        # > 64 KB: ext4 treats the segment as a stream and places its next blocks right after it
        kept = [b"k-%03d-" % i + b"x" * 4000 for i in range(40)]
        for i in range(0, 40, 4):
            assert produce_ack(b, "victim", kept[i:i + 4]).error == ErrorCode.NONE
        assert fetch_all(b, "victim") == kept
        failing_disk.fail_after(failing_disk.mountpoint / "logs" / "victim-0" / f"{0:020d}.kafka")

        lost = [b"f-%03d-" % i + b"y" * 4000 for i in range(8)]
        failed = produce_ack(b, "victim", lost)
        assert failed.error != ErrorCode.NONE and failed.offset == -1  # the failed flush is not acknowledged

        failing_disk.heal()
        time.sleep(1.0)  # ten flusher periods: a broker that retried the fsync would have "succeeded" by now
        end = sum(len(encode_message_set(kept[i:i + 4])) for i in range(0, 40, 4))
        for offset in (0, end):
            resp = ask(b, p.FetchRequest("victim", 0, offset, 1 << 20), p.FetchResponse)
            assert b"f-0" not in resp.message_set  # the data of the failed flush is never served
            assert resp.error == ErrorCode.LOG_OFFLINE
        assert produce_ack(b, "victim", [b"after"]).error == ErrorCode.LOG_OFFLINE  # it stays offline
        assert failed.error == ErrorCode.LOG_OFFLINE

        assert produce_ack(b, "other", [b"o-3"]).error == ErrorCode.NONE  # the other logs keep serving
        assert fetch_all(b, "other") == [b"o-%d" % i for i in range(4)]

        offline_lines = [line for line in b.output().splitlines() if "victim-0 is OFFLINE" in line]
        assert len(offline_lines) == 1 and " ERROR " in offline_lines[0], offline_lines
        assert "Input/output error" in offline_lines[0]
        assert b.stop() == 0

        failing_disk.remount()  # what the disk holds, not what the page cache remembers
        b.start()
        recovered = fetch_all(b, "victim")
        assert recovered[:len(kept)] == kept  # every flushed message survives
        assert recovered[len(kept):] == lost[:len(recovered) - len(kept)]  # then at most a prefix of the lost set
        assert produce_ack(b, "victim", [b"again"]).error == ErrorCode.NONE
        assert fetch_all(b, "victim") == recovered + [b"again"]
        assert fetch_all(b, "other") == [b"o-%d" % i for i in range(4)]
    finally:
        b.kill()


# --- the Log in process -------------------------------------------------------------


def test_flusher_never_retries_a_failed_fsync_and_close_does_not_flush(failing_disk, caplog):
    clock = SYSTEM_CLOCK
    lg = Log(failing_disk.mountpoint / "v-0", LogSettings(flush_interval_messages=10_000), clock)
    kept = [b"k" * 4000 for _ in range(40)]
    lg.append(encode_message_set(kept))
    lg.flush()
    end = lg.end_offset
    failing_disk.fail_after(failing_disk.mountpoint / "v-0" / f"{0:020d}.kafka")
    lg.append(encode_message_set([b"f" * 4000] * 8))
    with caplog.at_level(logging.ERROR, logger="ingest.broker.log"):
        with pytest.raises(IngestError) as failed:
            lg.flush()
    failing_disk.heal()
    assert lg.end_offset == end
    with pytest.raises(LogOfflineError):
        lg.flush()  # a retry would succeed now, and prove nothing
    assert lg.end_offset == end
    assert isinstance(failed.value, LogOfflineError) and "Input/output error" in str(failed.value)
    assert lg.offline and not lg.maybe_flush(clock.time_ms() + 10**9)  # the flusher leaves it alone
    with pytest.raises(LogOfflineError):
        lg.read(0, 100)
    with pytest.raises(LogOfflineError):
        lg.append(encode_message_set([b"later"]))
    assert lg.delete_segments(lambda seg: True) == (0, 0)
    lg.close()  # no flush: nothing after the failed one may claim to be on disk
    assert [r.levelname for r in caplog.records if "OFFLINE" in r.getMessage()] == ["ERROR"]


def test_a_failed_write_is_cut_back_and_leaves_no_hole(small_tmpfs):
    """ENOSPC in the middle of a set: nothing of it is appended, and no part of it resurfaces later."""
    settings = LogSettings(flush_interval_messages=1)
    lg = Log(small_tmpfs / "w-0", settings, SYSTEM_CLOCK)
    first = encode_message_set([b"a" * 100])
    lg.append(first)
    seg = small_tmpfs / "w-0" / f"{0:020d}.kafka"
    filler = small_tmpfs / "filler"
    with open(filler, "wb") as f:  # leave about 2 pages free
        free = os.statvfs(small_tmpfs).f_bavail * os.statvfs(small_tmpfs).f_frsize
        f.write(b"\0" * (free - 2 * 4096))
    big = encode_message_set([b"b%03d" % i + b"b" * 996 for i in range(64)])  # 64 KB: runs out of space
    with pytest.raises(DiskFullError) as exc:
        lg.append(big)
    assert os.path.getsize(seg) == len(first)  # the partial bytes are gone
    assert exc.value.__cause__.errno == errno.ENOSPC and "nothing was appended" in str(exc.value)
    assert not lg.offline
    filler.unlink()
    # The next set is exactly as long as the failed set's first message: a log that kept the
    # partial bytes would find the failed set's other messages right after it at recovery.
    nxt = encode_message_set([b"c%03d" % 0 + b"c" * 996])
    assert lg.append(nxt) == len(first) and lg.end_offset == len(first) + len(nxt)
    lg.close()
    reopened = Log(small_tmpfs / "w-0", settings, SYSTEM_CLOCK)
    assert reopened.end_offset == len(first) + len(nxt)
    payloads = [m.payload[:1] for m in iter_messages(reopened.read_bytes(0, 1 << 20))]
    assert payloads == [b"a", b"c"]
    reopened.close()


def test_flusher_pass_takes_only_the_failing_log_offline_and_flushes_the_others(failing_disk, fake_clock, caplog):
    raw = {"log.dir": str(failing_disk.mountpoint / "logs"), "log.flush.interval": 10_000,
           "log.default.flush.interval.ms": 1000}
    m = LogManager(LOG_CONFIG.parse(raw), fake_clock)  # no startup(): the test drives the flusher pass
    try:
        victim = m.get_or_create_log("a-victim", 0)
        other = m.get_or_create_log("b-other", 0)
        other.append(encode_message_set([b"o1"]))
        other.flush()  # its block first: ext4 allocates at writeback, and the victim's must come last
        victim.append(encode_message_set([b"k" * 4000] * 40))
        assert m.flush_due(fake_clock.time_ms() + 1000) == 1
        failing_disk.fail_after(victim.segments()[-1].path)
        victim.append(encode_message_set([b"f" * 4000] * 8))  # new blocks: past the end of the device
        other.append(encode_message_set([b"o2"]))  # within its first block: on the device
        with caplog.at_level(logging.ERROR):
            assert m.flush_due(fake_clock.time_ms() + 2000) == 1  # no exception; the other log is flushed
        assert victim.offline and not other.offline
        assert [msg.payload for msg in iter_messages(other.read_bytes(0, 1000))] == [b"o1", b"o2"]
        failing_disk.heal()
        assert m.flush_due(fake_clock.time_ms() + 3000) == 0  # never retried
        victim_files = sorted(p.name for p in victim.directory.iterdir())
        m.cleanup(fake_clock.time_ms() + 10**12)  # retention leaves the offline log to recovery
        assert sorted(p.name for p in victim.directory.iterdir()) == victim_files
        assert len([r for r in caplog.records if "OFFLINE" in r.getMessage()]) == 1
    finally:
        m.shutdown()  # closes the offline log without a flush and without a second error
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1
