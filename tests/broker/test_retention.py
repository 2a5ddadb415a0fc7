"""Retention by age and size with a fake clock; the active segment is rolled, never deleted."""
from __future__ import annotations

import os

import pytest

from ingest.broker.log_config import LOG_CONFIG
from ingest.broker.log_manager import LogManager
from ingest.errors import OffsetOutOfRangeError
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set

HOUR = 3_600_000
MSG = encode_message_set([b"x" * 90])  # 100 bytes


def manager(tmp_path, clock, **over) -> LogManager:
    raw = {"log.dir": str(tmp_path / "logs"), "log.flush.interval": 1, "log.file.size": 1000, **over}
    return LogManager(LOG_CONFIG.parse(raw), clock)


def test_segments_older_than_retention_hours_are_deleted(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock, **{"log.retention.hours": 24})
    lg = m.get_or_create_log("t", 0)
    for _ in range(20):  # segments 0 and 1000, both full
        lg.append(MSG)
    fake_clock.advance(20 * HOUR)
    for _ in range(5):
        lg.append(MSG)  # segment 2000, newer
    fake_clock.advance(4 * HOUR + 1)
    assert m.cleanup() == (2, 2000)
    assert lg.segment_bases() == [2000] and lg.start_offset == 2000
    # the deleted segments' record (docs/log-format.md) is the only other file
    assert sorted(os.listdir(tmp_path / "logs" / "t-0")) == ["00000000000000002000.kafka", "deleted-segments"]
    with pytest.raises(OffsetOutOfRangeError, match="valid offsets are 2000"):
        lg.read(0, 100)
    assert len(list(iter_messages(lg.read_bytes(2000, 10_000)))) == 5
    m.shutdown()


def test_expired_active_segment_is_rolled_first_and_appends_continue(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock, **{"log.retention.hours": 1})
    lg = m.get_or_create_log("t", 0)
    for _ in range(3):
        lg.append(MSG)
    fake_clock.advance(HOUR + 1)
    assert m.cleanup() == (1, 300)
    assert lg.segment_bases() == [300] and lg.start_offset == lg.end_offset == 300
    assert lg.append(MSG) == 300
    fake_clock.advance(HOUR + 1)
    m.cleanup()
    fake_clock.advance(HOUR + 1)
    assert m.cleanup() == (0, 0)  # the empty active segment is kept, never deleted
    assert lg.segment_bases() == [400]
    m.shutdown()


def test_per_topic_retention_hours(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock, **{"log.retention.hours": 100, "topic.log.retention.hours": "short:1"})
    short, long_ = m.get_or_create_log("short", 0), m.get_or_create_log("long", 0)
    short.append(MSG)
    long_.append(MSG)
    fake_clock.advance(2 * HOUR)
    m.cleanup()
    assert short.start_offset == 100 and long_.start_offset == 0
    m.shutdown()


def test_retention_by_size_keeps_at_most_the_limit(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock, **{"log.retention.size": 2500})
    lg = m.get_or_create_log("t", 0)
    for _ in range(45):
        lg.append(MSG)  # segments 0, 1000, 2000, 3000, 4000 (half full)
    assert m.cleanup() == (2, 2000)
    assert lg.segment_bases() == [2000, 3000, 4000] and lg.size == 2500
    assert m.cleanup() == (0, 0)
    m.shutdown()


def test_retention_uses_last_modification_not_creation(tmp_path, fake_clock):
    m = manager(tmp_path, fake_clock, **{"log.retention.hours": 2, "log.file.size": 10_000})
    lg = m.get_or_create_log("t", 0)
    lg.append(MSG)
    for _ in range(3):
        fake_clock.advance(HOUR)
        lg.append(MSG)
    fake_clock.advance(HOUR)
    assert m.cleanup() == (0, 0)  # created 4 h ago but modified 1 h ago
    m.shutdown()
