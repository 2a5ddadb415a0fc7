"""The loader's side of exact loss counts, without brokers: records, the tally, exact vs estimated gaps, retention
vs missing segments, bounds."""
from __future__ import annotations

import dataclasses
import io

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.client.deleted_segments import DeletedSegment
from ingest.errors import DataLossError
from ingest.loader.fetch import Corrupt, Damaged
from ingest.loader.gaps import file_session_seqs, session_bounds
from ingest.loader.plan import PartitionSnapshot, Probe, build_plan, last_segment_start
from ingest.loader.records import Manifest, OffsetRecord
from ingest.lost_ranges import LostRange
from ingest.loader.results import TaskSummary
from ingest.loader.tally import counted_before, partition_tally, task_tally
from ingest.records.message_batch import MessageAndOffset


def _snap(earliest=0, latest=1000):
    return PartitionSnapshot("t", 0, 0, "h", 1, earliest=earliest, latest=latest)


def test_new_fields_round_trip_and_old_manifests_still_read():
    o = OffsetRecord("t", 0, 0, 500, 7, (400, 3))
    r = LostRange("t", 0, 0, 100, 400, 300, 12, 1, 2, "run", 3, messages_exact=True,
                  session_bounds=(("s1", 4, 9), ("s2", None, 0)))
    m = Manifest(1, "load", "run", 1, offsets=(o,), lost_ranges=(r,))
    back = Manifest.from_bytes(m.to_bytes())
    assert back.offsets == (o,) and back.lost_ranges == (r,)
    old = Manifest.from_bytes(b'{"seq": 1, "kind": "load", "run_id": "x", "committed_at_ms": 1, '
                              b'"offsets": [{"topic": "t", "broker_id": 0, "partition": 0, "offset": 5}], '
                              b'"lost_ranges": [{"topic": "t", "broker_id": 0, "partition": 0, "start_offset": 0, '
                              b'"end_offset": 5, "bytes": 5, "estimated_messages": 1, "after_time_ms": null, '
                              b'"before_time_ms": null, "run_id": "x", "detected_at_ms": 1}]}')
    assert old.offsets[0].tally is None
    assert (old.lost_ranges[0].messages_exact, old.lost_ranges[0].session_bounds) == (False, ())
    assert "12 messages" in r.describe() and "~12" not in r.describe()


def test_each_task_learns_the_last_segment_start_inside_its_range():
    assert last_segment_start((0, 100, 200, 300), 150, 300) == 200
    assert last_segment_start((0, 100, 200), 100, 150) == 100     # its own start counts
    assert last_segment_start((0, 100), 120, 180) is None         # inside one segment begun before it
    plan = build_plan(run_id="r", base_seq=0, snapshots=[_snap(0, 1000)], committed={},
                      segment_starts=lambda s: (0, 250, 500, 750, 1000), max_bytes_per_task=400)
    assert [(t.start, t.end, t.segment_start) for t in plan.tasks] == [(0, 250, 0), (250, 500, 250),
                                                                        (500, 750, 500), (750, 1000, 750)]


def _m(offset):
    return MessageAndOffset(offset, offset + 10, b"x")


def test_a_task_counts_what_it_consumed_from_the_last_segment_start_and_distrusts_damage_there():
    before = [0]
    items = [_m(0), _m(10), Corrupt(20, 30, b"", "crc"), Damaged(30, 40, "d"), _m(40), _m(50), _m(60)]
    assert list(counted_before(iter(items), 50, before)) == items
    assert before == [4]  # 0, 10, the corrupt one, 40 (damage is no message)
    assert task_tally(50, 0, 6, before[0], [20], [[30, 40, None, None]]) == 2
    assert task_tally(None, 0, 6, 0, [], []) == 6                     # no segment start inside: all of it
    assert task_tally(50, 0, 6, 4, [55], []) is None                  # a CRC failure in the counted part
    assert task_tally(50, 0, 6, 4, [], [[45, 52, None, None]]) is None  # damage reaching into it


def _summary(start, end, tally_start, tally_messages):
    return TaskSummary(0, 0, "t", 0, 0, start, end, 5, 0, 1, 1, None, tally_start, tally_messages)


def test_the_commit_folds_the_last_task_into_the_partition_tally():
    s = _snap(0, 1000)
    prev = OffsetRecord("t", 0, 0, 300, None, (250, 4))

    def plan_of(start, ranges, starts, committed=None):
        p = build_plan(run_id="r", base_seq=0, snapshots=[PartitionSnapshot("t", 0, 0, "h", 1, earliest=0, latest=ranges[-1][1])],
                       committed=committed or {}, segment_starts=lambda _s: starts, max_bytes_per_task=10**9)
        return p.partitions[0]

    one = plan_of(300, [(300, 420)], (0, 250, 500), {s.key: prev})    # still inside segment 250
    assert partition_tally(one, prev, [_summary(300, 420, None, 6)]) == (250, 10)
    assert partition_tally(one, None, [_summary(300, 420, None, 6)]) is None       # the earlier part unknown
    crossed = plan_of(300, [(300, 620)], (0, 250, 500), {s.key: prev})  # a new segment began at 500
    assert partition_tally(crossed, prev, [_summary(300, 620, 500, 7)]) == (500, 7)
    assert partition_tally(crossed, prev, [_summary(300, 620, 500, None)]) is None  # the task could not count
    replay = dataclasses.replace(one, replay=True)   # a replay starts over: the old tally does not continue
    assert partition_tally(replay, prev, [_summary(300, 420, None, 6)]) is None
    idle = dataclasses.replace(one, end=300, tasks=())  # nothing new: the tally stays
    assert partition_tally(idle, prev, []) == (250, 4)


def test_a_gap_is_exact_from_the_deleted_segment_records_and_estimated_without_them():
    s = _snap(earliest=600, latest=900)
    committed = {s.key: OffsetRecord("t", 0, 0, 250, 111, (200, 3))}
    records = [DeletedSegment(0, 200, 9, 200, 1), DeletedSegment(200, 400, 8, 200, 1),
               DeletedSegment(400, 600, 6, 200, 1)]

    def lost_with(deleted, committed=committed):
        plan = build_plan(run_id="r", base_seq=1, snapshots=[s], committed=committed, fail_on_data_loss=False,
                          probe=lambda _s, _o: Probe(100.0, 222), deleted_segments=lambda _s, a, b: deleted)
        return [(r.start_offset, r.end_offset, r.cause, r.estimated_messages, r.messages_exact)
                for r in plan.lost_ranges]

    assert lost_with(records) == [(250, 600, "retention", 11, True)]
    no_tally = {s.key: OffsetRecord("t", 0, 0, 250, 111, None)}
    assert lost_with(records, no_tally) == [(250, 600, "retention", 4, False)]   # straddling, tally unknown
    at_boundary = {s.key: OffsetRecord("t", 0, 0, 400, 111, None)}
    assert lost_with(records, at_boundary) == [(400, 600, "retention", 6, True)]


def test_offsets_no_deletion_record_covers_are_missing_segments_not_retention():
    """A log start that moved past offsets the broker's retention never recorded (segment files deleted by hand,
    lost on disk, or a broker that could not say) is a loss of its own: cause missing_segments, estimated."""
    s = _snap(earliest=600, latest=900)
    committed = {s.key: OffsetRecord("t", 0, 0, 250, 111, (200, 3))}

    def lost_with(deleted):
        plan = build_plan(run_id="r", base_seq=1, snapshots=[s], committed=committed, fail_on_data_loss=False,
                          probe=lambda _s, _o: Probe(50.0, 222), deleted_segments=lambda _s, a, b: deleted)
        return [(r.start_offset, r.end_offset, r.cause, r.estimated_messages, r.messages_exact,
                 r.after_time_ms, r.before_time_ms) for r in plan.lost_ranges]

    assert lost_with([]) == [(250, 600, "missing_segments", 7, False, 111, 222)]     # no record at all
    assert lost_with(None) == [(250, 600, "missing_segments", 7, False, 111, 222)]   # the broker could not say
    # retention deleted [200, 400); [400, 600) vanished without a record: two ranges, each its own count
    assert lost_with([DeletedSegment(200, 400, 8, 200, 1)]) == [
        (250, 400, "retention", 5, True, 111, 222), (400, 600, "missing_segments", 4, False, 111, 222)]
    # a hole in the middle: retention parts around a missing one
    assert lost_with([DeletedSegment(200, 300, 4, 100, 1), DeletedSegment(500, 600, 3, 100, 1)]) == [
        (250, 300, "retention", 1, True, 111, 222), (300, 500, "missing_segments", 4, False, 111, 222),
        (500, 600, "retention", 3, True, 111, 222)]
    with pytest.raises(DataLossError, match=r"\(missing_segments\)(.|\n)*as DATA_LOSS"):
        build_plan(run_id="r", base_seq=1, snapshots=[s], committed=committed, probe=lambda _s, _o: Probe(50.0, 222),
                   deleted_segments=lambda _s, a, b: [])


def _avro(rows):
    schema = {"type": "record", "name": "E", "fields": [{"name": "header", "type": {
        "type": "record", "name": "H", "fields": [{"name": "session", "type": "string"}, {"name": "seq", "type": "long"}]}}]}
    buf = io.BytesIO()
    fastavro.writer(buf, schema, [{"header": {"session": s, "seq": q}} for s, q in rows])
    return buf.getvalue()


def _parquet(rows):
    t = pa.table({"header": pa.array([{"session": s, "seq": q} for s, q in rows])})
    buf = io.BytesIO()
    pq.write_table(t, buf)
    return buf.getvalue()


def test_session_bounds_are_the_highest_seq_before_and_the_lowest_after():
    rows = [("a", 3), ("b", 10), ("a", 5), ("b", 12)]
    assert file_session_seqs(_avro(rows), "avro") == {"a": (3, 5), "b": (10, 12)}
    assert file_session_seqs(_parquet(rows), "parquet") == {"a": (3, 5), "b": (10, 12)}
    assert session_bounds({"a": (3, 5), "b": (10, 12)}, {"b": (20, 30), "c": (0, 2)}) == (
        ("a", 5, None), ("b", 12, 20), ("c", None, 0))
    assert session_bounds(None, None) == ()
