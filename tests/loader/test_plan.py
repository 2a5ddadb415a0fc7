"""Plan logic without any I/O: splitting, caps, new partitions, retention gaps, topic filters."""
from __future__ import annotations

import pytest

from ingest.errors import DataLossError, IngestError
from ingest.loader.plan import PartitionSnapshot, Probe, build_plan, select_topics, split_range
from ingest.loader.records import OffsetRecord
from ingest.loader.reset import parse_reset_spec, snap_to_files
from ingest.loader.records import FileRecord


def snap(topic="t", broker=0, partition=0, earliest=0, latest=1000):
    return PartitionSnapshot(topic, broker, partition, "127.0.0.1", 9, earliest=earliest, latest=latest)


def test_split_range_cuts_only_at_segment_starts():
    segs = list(range(0, 1000, 100))
    assert split_range(0, 1000, segs, 250) == [(0, 200), (200, 400), (400, 600), (600, 800), (800, 1000)]
    assert split_range(150, 1000, segs, 10_000) == [(150, 1000)]
    assert split_range(0, 1000, [0, 900], 100) == [(0, 900), (900, 1000)]  # one big segment stays whole
    assert split_range(5, 5, segs, 10) == []


def test_skewed_topic_splits_big_partition_into_many_tasks():
    big = snap(partition=0, latest=10_000)
    small = snap(partition=1, latest=300)
    plan = build_plan(run_id="r", base_seq=0, snapshots=[big, small], committed={},
                      segment_starts=lambda s: list(range(0, s.latest, 500)), max_bytes_per_task=2000)
    sizes = {p.key[2]: [(t.start, t.end) for t in p.tasks] for p in plan.partitions}
    assert sizes[1] == [(0, 300)]
    assert len(sizes[0]) == 5 and all(e - s <= 2000 for s, e in sizes[0])
    assert sizes[0][0][0] == 0 and sizes[0][-1][1] == 10_000
    assert all(a[1] == b[0] for a, b in zip(sizes[0], sizes[0][1:]))  # contiguous, no gap, no overlap
    assert len({t.task_id for t in plan.tasks}) == 6


def test_max_bytes_per_run_takes_pieces_round_robin_and_defers_the_rest():
    a, b = snap(partition=0, latest=4000), snap(partition=1, latest=4000)
    plan = build_plan(run_id="r", base_seq=0, snapshots=[a, b], committed={},
                      segment_starts=lambda s: list(range(0, 4000, 1000)), max_bytes_per_task=10_000,
                      max_bytes_per_run=3000)
    ends = {p.key[2]: p.end for p in plan.partitions}
    assert ends == {0: 2000, 1: 1000}  # both progress; total within the cap
    assert plan.total_bytes == 3000
    assert sum(p.deferred_bytes for p in plan.partitions) == 5000


def test_committed_offsets_resume_and_new_partitions_follow_new_partition_start():
    s_old, s_new = snap(partition=0, latest=900), snap(partition=1, latest=700)
    committed = {s_old.key: OffsetRecord("t", 0, 0, 400)}
    plan = build_plan(run_id="r", base_seq=3, snapshots=[s_old, s_new], committed=committed,
                      new_partition_start="latest")
    got = {p.key[2]: (p.start, p.end, len(p.tasks)) for p in plan.partitions}
    assert got == {0: (400, 900, 1), 1: (700, 700, 0)}
    plan = build_plan(run_id="r", base_seq=3, snapshots=[s_new], committed={}, new_partition_start="earliest")
    assert (plan.partitions[0].start, plan.partitions[0].end) == (0, 700)


def test_retention_gap_fails_or_is_recorded():
    s = snap(earliest=600, latest=900)
    committed = {s.key: OffsetRecord("t", 0, 0, 200, last_time_ms=111)}
    with pytest.raises(DataLossError, match=r"offsets \[200, 600\) = 400 bytes, ~4 messages(.|\n)*fail.on.data.loss=false") as err:
        build_plan(run_id="r", base_seq=1, snapshots=[s], committed=committed, probe=lambda s, o: Probe(100.0, 222))
    assert [(r.start_offset, r.end_offset) for r in err.value.lost_ranges] == [(200, 600)]  # a constructor field
    plan = build_plan(run_id="r", base_seq=1, snapshots=[s], committed=committed, fail_on_data_loss=False,
                      probe=lambda s, o: Probe(100.0, 222), now_ms=5)
    (lost,) = plan.lost_ranges
    assert (lost.start_offset, lost.end_offset, lost.estimated_messages, lost.after_time_ms, lost.before_time_ms,
            lost.detected_at_ms, lost.run_id) == (200, 600, 4, 111, 222, 5, "r")
    assert lost.cause == "missing_segments"  # no deletion records were asked for: not known to be retention
    assert plan.partitions[0].start == 600


def test_committed_offset_beyond_broker_end_is_refused_with_the_way_out():
    s = snap(latest=100)
    with pytest.raises(IngestError, match="--reset-offsets earliest --topic t"):
        build_plan(run_id="r", base_seq=1, snapshots=[s], committed={s.key: OffsetRecord("t", 0, 0, 500)})


def test_topic_whitelist_and_blacklist_match_whole_names():
    chosen, skipped = select_topics(["pageviews", "clicks", "pageviews-test", "audit-monitoring"],
                                    "pageviews.*|clicks|audit-.*", ".*-test")
    assert chosen == ["audit-monitoring", "clicks", "pageviews"] and skipped == ["pageviews-test"]


def test_reset_spec_and_snapping_to_whole_files():
    assert parse_reset_spec("earliest") == "earliest"
    assert parse_reset_spec("1700000000000") == 1_700_000_000_000
    assert parse_reset_spec("2023-11-14T22:13:20Z") == 1_700_000_000_000
    with pytest.raises(Exception, match="allowed are earliest, latest"):
        parse_reset_spec("yesterday")
    f = FileRecord("p", "t", 0, 0, 100, 200, 5, "avro")
    assert snap_to_files(150, 0, [f]) == 100       # reload the whole file
    assert snap_to_files(150, 120, [f]) == 200     # its start is gone: keep it whole
    assert snap_to_files(250, 0, [f]) == 250


def test_plan_phases_share_a_run_budget_round_robin_and_merge_pieces_into_tasks():
    from ingest.loader.plan import StartDecision, assign_tasks, share_run_budget, split_pieces

    a, b = (PartitionSnapshot(t, 0, 0, "h", 1, earliest=0, latest=300) for t in ("a", "b"))
    decisions = [StartDecision(a, None, 0), StartDecision(b, 100, 100)]
    pieces = split_pieces(decisions, lambda s: (100, 200), 1000, every_segment=True)
    assert pieces == {a.key: [(0, 100), (100, 200), (200, 300)], b.key: [(100, 200), (200, 300)]}
    taken = share_run_budget(pieces, 250)
    assert taken == {a.key: [(0, 100)], b.key: [(100, 200)]}  # one piece each before a second for anyone
    plans = assign_tasks(decisions, taken, 1000)
    assert [(p.start, p.end, [(t.task_id, t.start, t.end) for t in p.tasks]) for p in plans] == [
        (0, 100, [(0, 0, 100)]), (100, 200, [(1, 100, 200)])]
    merged = assign_tasks(decisions, pieces, 200)
    assert [[(t.start, t.end) for t in p.tasks] for p in merged] == [[(0, 200), (200, 300)], [(100, 300)]]


def test_left_out_names_a_silent_brokers_committed_partitions_of_chosen_topics_only():
    from ingest.loader.plan import LeftOut, topic_filter, waiting_partitions
    from ingest.loader.records import OffsetRecord

    committed = {k: OffsetRecord(*k, 10, None) for k in [("views", 2, 0), ("views", 2, 1), ("views", 1, 0),
                                                           ("test-x", 2, 0), ("rt", 2, 0)]}
    snaps = [PartitionSnapshot("rt", 2, 0, "h", 1, "h:1", earliest=0, latest=20)]   # replicated, home 2: planned (leader alive)
    left = [LeftOut("did not answer METADATA (refused)", 2, "h:9"),
            LeftOut("no leader now (in-sync [])", 2, topic="rt", partition=1),
            LeftOut("no leader now (in-sync [])", 3, topic="test-x", partition=4)]
    out = waiting_partitions(left, committed, snaps, topic_filter(".*", "test-.*"))
    assert [lo.partitions for lo in out] == [(("views", 2, 0), ("views", 2, 1)), ()]   # test-x filtered out
    assert out[0].describe() == ("broker 2 (h:9): did not answer METADATA (refused); committed partitions "
                                 "waiting: views b2 p0, views b2 p1")
    assert out[1].describe() == "rt b2 p1: no leader now (in-sync [])"
    assert [LeftOut.from_json(lo.to_json()) for lo in out] == list(out)


def test_a_reassigned_partition_resumes_from_the_offset_committed_under_its_former_home_broker():
    # a reassignment moved the first replica of t-0 from broker 0 to broker 1: the partition is now named b1
    moved = PartitionSnapshot("t", 1, 0, "127.0.0.1", 9, "127.0.0.1:9", "kafka", earliest=0, latest=900)
    committed = {("t", 0, 0): OffsetRecord("t", 0, 0, 400), ("t", 2, 0): OffsetRecord("t", 2, 0, 100),
                 ("t", 0, 1): OffsetRecord("t", 0, 1, 800)}
    plan = build_plan(run_id="r", base_seq=0, snapshots=[moved], committed=committed, new_partition_start="earliest")
    (p,) = plan.partitions
    assert (p.key, p.committed, p.start, p.end) == (("t", 1, 0), 400, 400, 900)
    # once committed under its new home, that offset counts
    committed[("t", 1, 0)] = OffsetRecord("t", 1, 0, 600)
    (p,) = build_plan(run_id="r", base_seq=0, snapshots=[moved], committed=committed).partitions
    assert p.start == 600
    # a Kafka 0.7 partition (one broker's own) never takes another broker's offset
    local = snap(broker=1, latest=900)
    (p,) = build_plan(run_id="r", base_seq=0, snapshots=[local], committed={("t", 0, 0): OffsetRecord("t", 0, 0, 400)},
                      new_partition_start="earliest").partitions
    assert p.start == 0


def test_status_shows_a_reassigned_partition_with_its_former_homes_offset_and_not_that_home_as_missing(tmp_path):
    from ingest.loader import commit
    from ingest.loader.plan import superseded_homes
    from ingest.loader.state import LoaderState
    from ingest.loader.status import partition_status
    from ingest.storage import open_storage
    from tests.loader.helpers import loader_config

    storage = open_storage(str(tmp_path))
    commit.commit_files(storage, kind="load", run_id="r1", offsets=[OffsetRecord("t", 0, 0, 400),
                                                                    OffsetRecord("t", 0, 1, 800)])
    state = LoaderState.load(storage)
    moved = PartitionSnapshot("t", 1, 0, "127.0.0.1", 9, "127.0.0.1:9", "kafka", earliest=0, latest=900)
    stayed = PartitionSnapshot("t", 0, 1, "127.0.0.1", 9, "127.0.0.1:9", "kafka", earliest=0, latest=900)
    row = partition_status(loader_config(tmp_path, [], "http://x"), state, moved, 0)
    assert (row.committed, row.lag_messages) == (400, 500)
    assert superseded_homes(state.offsets, [moved, stayed]) == {("t", 0, 0)}
    assert superseded_homes(state.offsets, [snap(broker=1)]) == set(), "0.7 partitions are each broker's own"
    # a silent former home broker does not hold the moved partition up
    from ingest.loader.plan import LeftOut, waiting_partitions
    (lo,) = waiting_partitions([LeftOut("not answering", 0, "127.0.0.1:9")], state.offsets, [moved, stayed],
                               lambda t: True)
    assert lo.partitions == ()
