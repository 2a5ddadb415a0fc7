"""The leader-epoch history of a Kafka topic replica: Kafka's file, Kafka's answers (KIP-101, KIP-279)."""
from __future__ import annotations

from ingest.broker.leader_epochs import FILE_NAME, UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache


def test_end_offsets_are_answered_as_kafkas_leader_epoch_cache(tmp_path):
    c = LeaderEpochCache(tmp_path, log_end=0)
    assert c.end_offset_for(0, 0) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)   # no history
    c.assign(1, 0)
    c.assign(3, 100)
    c.assign(3, 150)          # not newer: ignored
    c.assign(2, 120)          # older: ignored
    c.assign(6, 250)
    assert c.entries() == [(1, 0), (3, 100), (6, 250)]
    assert c.end_offset_for(6, 300) == (6, 300)       # the newest epoch ends at the log end
    assert c.end_offset_for(3, 300) == (3, 250)
    assert c.end_offset_for(4, 300) == (3, 250)       # never had 4: the largest below it, and its end
    assert c.end_offset_for(0, 300) == (0, 0)         # before every entry: the first start
    assert c.end_offset_for(7, 300) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert c.end_offset_for(UNDEFINED_EPOCH, 300) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_the_checkpoint_is_kafkas_file_and_survives_a_restart_cut_to_the_log(tmp_path):
    c = LeaderEpochCache(tmp_path, log_end=0)
    c.assign(0, 0)
    c.assign(2, 40)
    c.assign(5, 90)
    assert (tmp_path / FILE_NAME).read_text() == "0\n3\n0 0\n2 40\n5 90\n"
    assert LeaderEpochCache(tmp_path, log_end=500).entries() == [(0, 0), (2, 40), (5, 90)]
    # recovery left the log shorter than the history: entries past its end go, on disk too
    assert LeaderEpochCache(tmp_path, log_end=60).entries() == [(0, 0), (2, 40)]
    assert (tmp_path / FILE_NAME).read_text() == "0\n2\n0 0\n2 40\n"


def test_truncation_drops_the_epochs_that_start_at_or_after_the_cut(tmp_path):
    c = LeaderEpochCache(tmp_path, log_end=0)
    for e, o in ((0, 0), (2, 40), (5, 90)):
        c.assign(e, o)
    c.truncate_from_end(40)
    assert c.entries() == [(0, 0)] and c.latest_epoch() == 0
    c.assign(7, 40)
    assert c.entries() == [(0, 0), (7, 40)]
    c.clear()
    assert c.entries() == [] and c.latest_epoch() == UNDEFINED_EPOCH


def test_an_epoch_without_records_gives_way_to_the_next(tmp_path):
    """Two elections without an append in between: the first epoch holds no record, Kafka keeps the last."""
    c = LeaderEpochCache(tmp_path, log_end=0)
    c.assign(1, 10)
    c.assign(2, 10)
    assert c.entries() == [(2, 10)]


def test_a_damaged_checkpoint_is_no_history(tmp_path):
    (tmp_path / FILE_NAME).write_text("0\n5\n1 0\n")
    assert LeaderEpochCache(tmp_path, log_end=100).entries() == []
