"""LogManager: one log per topic-partition, partition counts, start-up, shutdown."""
from __future__ import annotations

import contextlib
import os
import threading
import time

import pytest

from ingest.broker.log_config import LOG_CONFIG
from ingest.broker.log_manager import LogManager, open_file_limit
from ingest.errors import ConfigError, InvalidTopicError, OffsetOutOfRangeError, WrongPartitionError
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set
from tests.harness.limits import nofile


def manager(tmp_path, clock, **over) -> LogManager:
    raw = {"log.dir": str(tmp_path / "logs"), "log.flush.interval": 1, **over}
    return LogManager(LOG_CONFIG.parse(raw), clock)


def test_logs_created_on_first_use_with_partition_counts(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock, **{"num.partitions": 2, "topic.partition.count.map": "wide:5"})
    m.startup()
    try:
        assert m.get_log("a", 0) is None
        lg = m.get_or_create_log("a", 1)
        assert m.get_or_create_log("a", 1) is lg and m.get_log("a", 1) is lg
        assert (tmp_path / "logs" / "a-1").is_dir()
        with pytest.raises(WrongPartitionError, match="partition 2 of topic 'a'.*2 partition"):
            m.get_or_create_log("a", 2)
        m.get_or_create_log("wide", 4)
        with pytest.raises(WrongPartitionError):
            m.get_or_create_log("wide", -1)
        with pytest.raises(InvalidTopicError):
            m.get_or_create_log("../etc", 0)
        assert m.topics() == {"a": 2, "wide": 5}
    finally:
        m.shutdown()


def test_partition_count_is_the_configured_count_raised_by_logs_on_disk(tmp_path, fake_clock):
    # One rule (LogManager.partition_count) answers validation, METADATA and registration alike.
    first = manager(tmp_path, fake_clock, **{"num.partitions": 6})
    first.startup()
    first.get_or_create_log("t", 5).append(encode_message_set([b"x"]))
    first.shutdown()
    m = manager(tmp_path, fake_clock, **{"num.partitions": 2})  # the configured count was lowered since
    m.startup()
    try:
        assert m.configured_partition_count("t") == 2
        assert m.partition_count("t") == 6 and m.partition_count("new") == 2
        assert m.get_or_create_log("t", 3) is not None  # inside the raised count
        with pytest.raises(WrongPartitionError):
            m.get_or_create_log("t", 6)
        assert m.topics() == {"t": 6}
    finally:
        m.shutdown()


def test_startup_recovers_existing_logs_and_ignores_foreign_dirs(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock)
    m.startup()
    m.get_or_create_log("events.page-views", 0).append(encode_message_set([b"one", b"two"]))
    m.shutdown()
    (tmp_path / "logs" / "not a partition").mkdir()
    (tmp_path / "logs" / "..-0").mkdir()
    m2 = manager(tmp_path, fake_clock)
    m2.startup()
    try:
        assert m2.topics() == {"events.page-views": 1}
        lg = m2.get_log("events.page-views", 0)
        assert [x.payload for x in iter_messages(lg.read_bytes(0, 1000))] == [b"one", b"two"]
    finally:
        m2.shutdown()


def test_flush_due_uses_per_topic_intervals(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock, **{"log.flush.interval": 1000, "log.default.flush.interval.ms": 5000,
                                         "topic.flush.intervals.ms": "fast:100"})
    fast = m.get_or_create_log("fast", 0)
    slow = m.get_or_create_log("slow", 0)
    fast.append(encode_message_set([b"x"]))
    slow.append(encode_message_set([b"x"]))
    fake_clock.advance(100)
    assert m.flush_due() == 1
    assert fast.end_offset > 0 and slow.end_offset == 0
    fake_clock.advance(4900)
    assert m.flush_due() == 1 and slow.end_offset > 0
    m.shutdown()


def test_shutdown_flushes(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock, **{"log.flush.interval": 1000})
    m.get_or_create_log("t", 0).append(encode_message_set([b"x"]))
    m.shutdown()
    m2 = manager(tmp_path, fake_clock)
    m2.startup()
    assert m2.get_log("t", 0).end_offset == 11
    m2.shutdown()


def test_invalid_topic_in_config_map_is_refused(tmp_path, fake_clock):
    with pytest.raises(ConfigError, match="topic.partition.count.map.*'bad/name'"):
        manager(tmp_path, fake_clock, **{"topic.partition.count.map": "bad/name:3"})


def test_startup_verifies_older_segments_in_the_background(tmp_path, fake_clock, caplog):
    import logging

    from ingest.broker.segment import segment_name

    m = manager(tmp_path, fake_clock, **{"log.file.size": 1000})
    lg = m.get_or_create_log("t", 0)
    for _ in range(25):
        lg.append(encode_message_set([b"x" * 90]))
    m.shutdown()
    seg = tmp_path / "logs" / "t-0" / segment_name(1000)
    data = bytearray(seg.read_bytes())
    data[305] ^= 0x10
    seg.write_bytes(bytes(data))
    m2 = manager(tmp_path, fake_clock, **{"log.file.size": 1000})
    with caplog.at_level(logging.INFO):
        m2.startup()
        assert m2.verified.wait(timeout=30)
        assert m2.verify_old_segments() == 0  # nothing left: the background pass did it once
    try:
        assert "is corrupt from offset 1300" in caplog.text
        segs = m2.get_log("t", 0).segments()
        assert all(s.indexed for s in segs) and segs[1].corrupt_at == 300
    finally:
        m2.shutdown()


def test_flusher_thread_makes_messages_visible_within_the_interval(tmp_path):
    import time

    from ingest.clock import SystemClock

    m = LogManager(LOG_CONFIG.parse({"log.dir": str(tmp_path / "logs"), "log.flush.interval": 1000,
                                     "log.default.flush.interval.ms": 20,
                                     "log.default.flush.scheduler.interval.ms": 10}), SystemClock())
    m.startup()
    try:
        lg = m.get_or_create_log("t", 0)
        lg.append(encode_message_set([b"x"]))
        deadline = time.monotonic() + 20
        while lg.end_offset == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lg.end_offset == 11
    finally:
        m.shutdown()


def test_two_managers_cannot_share_a_log_dir(tmp_path, fake_clock):
    from ingest.errors import StorageError

    m = manager(tmp_path, fake_clock)
    m.startup()
    other = manager(tmp_path, fake_clock)
    with pytest.raises(StorageError, match="in use by another broker"):
        other.startup()
    other.shutdown()
    m.shutdown()
    again = manager(tmp_path, fake_clock)
    again.startup()  # the lock is released on shutdown
    again.shutdown()


# --- descriptors: a bounded pool of open segment files --------------------------------------------


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _payloads(lg) -> list[bytes]:
    return [x.payload for x in iter_messages(lg.read_bytes(0, 1 << 20))]


def test_open_segment_files_stay_within_log_max_open_files(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock, **{"log.max.open.files": 4, "log.file.size": 200})
    m.startup()
    try:
        before = _fds()
        for i in range(30):
            lg = m.get_or_create_log(f"t{i}", 0)
            for j in range(3):  # 200-byte segments: each log rolls, older segments are sealed
                lg.append(encode_message_set([b"%d-%d-" % (i, j) + b"x" * 80]))
        assert m.files.open_count <= 4 and _fds() - before <= 4
        for i in range(30):  # every segment is still readable: opened again on demand
            lg = m.get_log(f"t{i}", 0)
            for base in lg.segment_bases()[:-1]:
                assert _payloads_at(lg, base)
        assert [p[:4] for p in _payloads(m.get_log("t7", 0))] == [b"7-0-", b"7-1-"]  # the first segment
        assert m.files.open_count <= 4 and _fds() - before <= 4 and m.files.evicted > 30
    finally:
        m.shutdown()
    assert m.files.open_count == 0


def _payloads_at(lg, offset: int) -> list[bytes]:
    return [x.payload for x in iter_messages(lg.read_bytes(offset, 1 << 20))]


def test_a_reader_slice_keeps_its_descriptor_while_others_are_evicted(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock, **{"log.max.open.files": 2})
    m.startup()
    try:
        for i in range(6):
            m.get_or_create_log(f"t{i}", 0).append(encode_message_set([b"v%d" % i]))
        held = m.get_log("t0", 0).read(0, 1 << 20)  # pinned: sendfile may still be using it
        fd = held.fileno()
        for i in range(1, 6):
            assert _payloads(m.get_log(f"t{i}", 0)) == [b"v%d" % i]
        assert held.fileno() == fd and os.readlink(f"/proc/self/fd/{fd}").endswith("t0-0/" + "0" * 20 + ".kafka")
        assert [x.payload for x in iter_messages(held.read_bytes())] == [b"v0"]
        held.release()
        for i in range(1, 6):
            _payloads(m.get_log(f"t{i}", 0))
        assert m.files.open_count == 2  # once released, t0's descriptor is idle and can be closed
    finally:
        m.shutdown()


def test_unflushed_segments_stay_open_until_flushed(tmp_path, fake_clock):
    # Closing a dirty file could hide a later write-back error from the fsync of a new descriptor.
    m = manager(tmp_path, fake_clock, **{"log.max.open.files": 2, "log.flush.interval": 1000})
    m.startup()
    try:
        logs = [m.get_or_create_log(f"t{i}", 0) for i in range(5)]
        for i, lg in enumerate(logs):
            lg.append(encode_message_set([b"v%d" % i]))
        assert m.files.open_count == 5  # above the limit rather than a refused or unsafe write
        for lg in logs:
            lg.flush()
        m.get_or_create_log("t9", 0)
        assert m.files.open_count == 2
        assert [_payloads(lg) for lg in logs] == [[b"v%d" % i] for i in range(5)]
    finally:
        m.shutdown()


def test_emfile_closes_idle_segment_files_and_retries(tmp_path, fake_clock):
    """When other descriptors (client sockets) use up the process limit, idle segment files make room."""
    m = manager(tmp_path, fake_clock, **{"log.max.open.files": 1000})
    m.startup()
    try:
        logs = [m.get_or_create_log(f"t{i}", 0) for i in range(20)]
        for i, lg in enumerate(logs):
            lg.append(encode_message_set([b"v%d" % i]))
        assert m.files.open_count == 20
        m.shutdown()
        m = manager(tmp_path, fake_clock, **{"log.max.open.files": 1000})
        m.startup()
        assert m.files.open_count == 20  # recovery of each log left its file open (idle, clean)
        others: list[int] = []  # what sockets would hold: every descriptor but one
        try:
            with nofile(max(map(int, os.listdir("/proc/self/fd"))) + 8):
                with contextlib.suppress(OSError):
                    while True:
                        others.append(os.open(os.devnull, os.O_RDONLY))
                os.close(others.pop())
                for i in range(20, 30):  # each new log needs its segment file and, briefly, its directory
                    m.get_or_create_log(f"t{i}", 0).append(encode_message_set([b"v%d" % i]))
                got = [_payloads(m.get_log(f"t{i}", 0)) for i in range(30)]
        finally:
            for fd in others:
                os.close(fd)
        assert got == [[b"v%d" % i] for i in range(30)]
        assert m.files.evicted > 0
    finally:
        m.shutdown()


def test_log_max_open_files_defaults_to_a_quarter_of_the_descriptor_limit():
    with nofile(128):
        assert open_file_limit(-1) == 32
    with nofile(40):
        assert open_file_limit(-1) == 16
    assert open_file_limit(7) == 7


def test_readers_writers_and_retention_share_a_tiny_pool_without_reading_a_wrong_file(tmp_path, fake_clock):
    """Two descriptors for four logs under appends, rolls, deletes and reads: descriptors are closed and
    their numbers reused all the time, so a reader whose descriptor was closed under it would fail (EBADF)
    or read another log's bytes (every payload names its log)."""
    m = manager(tmp_path, fake_clock, **{"log.max.open.files": 2, "log.file.size": 3000,
                                         "log.index.interval.bytes": 256})
    m.startup()
    logs = [m.get_or_create_log(f"t{k}", 0) for k in range(4)]
    stop = threading.Event()
    errors: list[BaseException] = []
    seen = [0] * 4

    def payload(k: int, i: int) -> bytes:
        return b"t%d-%06d-" % (k, i) * 6

    def reader(k: int) -> None:
        lg = logs[k]
        try:
            while not stop.is_set():
                off = lg.start_offset
                while off < lg.end_offset and not stop.is_set():
                    try:
                        with lg.read(off, 1500) as sl:
                            time.sleep(0)  # hold the descriptor while others are opened and closed
                            data = sl.read_bytes()
                    except OffsetOutOfRangeError:
                        break  # deleted by retention: start again
                    msgs = list(iter_messages(data, off))
                    assert msgs, (k, off, len(data))
                    for x in msgs:
                        assert x.payload == payload(k, int(x.payload[3:9])), (k, x.payload[:12])
                    seen[k] += len(msgs)
                    off = msgs[-1].next_offset
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(80):
            for k, lg in enumerate(logs):
                lg.append(encode_message_set([payload(k, 5 * i + j) for j in range(5)]))
                if i % 10 == 9:
                    keep_from = lg.end_offset - 5000
                    lg.delete_segments(lambda seg: seg.end_offset <= keep_from)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        m.shutdown()
    assert not errors, errors[0]
    assert min(seen) > 0 and m.files.evicted > 20
    assert m.files.open_count == 0


def test_one_manager_holds_both_kinds_of_log_and_a_topic_is_one_kind(tmp_path, fake_clock):
    from ingest.broker.kafka_log import KafkaLog
    from ingest.broker.log import Log
    from ingest.broker.topic_kind import TopicKind
    from ingest.errors import WrongTopicKindError
    from tests.broker.kafka_log_support import batch_of

    m = manager(tmp_path, fake_clock, **{"num.partitions": 2, "log.segment.bytes": 4096})
    m.startup()
    m.get_or_create_log("old", 0).append(encode_message_set([b"x"]))
    k = m.get_or_create_log("new", 1, TopicKind.KAFKA)
    k.append(batch_of("a", 3)[0])
    assert isinstance(k, KafkaLog) and k.settings.segment_bytes == 4096   # Kafka's key wins for both kinds
    with pytest.raises(WrongTopicKindError, match="Kafka-format topic"):
        m.get_or_create_log("new", 0)            # a 0.7 request naming a Kafka topic
    with pytest.raises(WrongTopicKindError, match="0.7 topic"):
        m.get_or_create_log("old", 1, TopicKind.KAFKA)
    m.shutdown()
    again = manager(tmp_path, fake_clock, **{"num.partitions": 2})
    again.startup()                             # the kind of a local log is its files
    try:
        assert again.topic_kind("old") is TopicKind.V07 and again.topic_kind("new") is TopicKind.KAFKA
        assert isinstance(again.get_log("old", 0), Log) and again.get_log("new", 1).end_offset == 3
        assert again.topics(TopicKind.KAFKA) == {"new": 2} and again.topics(TopicKind.V07) == {"old": 2}
    finally:
        again.shutdown()


def test_a_replica_moved_away_deletes_its_log_alone_and_not_its_topics_other_partitions(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock)
    m.startup()
    try:
        for p in (0, 1):
            m.get_or_create_replica_log("moved", p).append(encode_message_set([b"x" * 10]))
        assert m.delete_partition("moved", 0) == ["moved-0"]
        assert m.get_log("moved", 0) is None and not (tmp_path / "logs" / "moved-0").exists()
        assert m.get_log("moved", 1) is not None and (tmp_path / "logs" / "moved-1").is_dir()
        assert m.delete_partition("moved", 0) == []   # nothing left to delete: no error
        assert m.delete_partition("moved", 1) == ["moved-1"]
        assert m.topic_kind("moved") is None and not any((tmp_path / "logs").iterdir())
    finally:
        m.shutdown()
