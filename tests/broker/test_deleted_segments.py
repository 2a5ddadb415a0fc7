"""DELETED_SEGMENTS (request 16) and the deleted-segments file: exact message counts of segments
deleted by real retention (size and time, plain and gzip sets), records surviving restarts, the
crash between record and unlink (a real SIGKILL at the fault seam), and the pure gap arithmetic."""
from __future__ import annotations

import json
import os
import re
import time

import pytest

from ingest.broker.deletion_log import CRASH_ENV, CRASH_POINT, FILE_NAME, count_messages, read_deletions
from ingest.wire.protocol import DeletionRecord
from ingest.broker.segment import parse_segment_name
from ingest.client.deleted_segments import DeletedSegment, SegmentTally, gap_message_count, split_gap
from ingest.client.simple_consumer import SimpleConsumer
from ingest.records.message import CODEC_GZIP
from ingest.records.message_set import encode_message_set
from ingest.wire import protocol as p
from tests.harness.brokers import BrokerStartError, RawClient, broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.wait import wait_until

DAY_S = 86_400

# --- the pure arithmetic ----------------------------------------------------------------------

A = DeletedSegment(0, 1000, 30, 1000, 1)
B = DeletedSegment(1000, 1800, 20, 800, 2)
C = DeletedSegment(1800, 3000, 40, 1200, 3)


def test_gap_of_whole_segments_is_the_sum_of_their_counts():
    assert gap_message_count([A, B, C], 0, 3000, None) == (90, True)
    assert gap_message_count([C, A, B], 1000, 1800, None) == (20, True)
    assert gap_message_count([A, B, C], 1000, 3000, SegmentTally(None, 0)) == (60, True)


def test_a_gap_starting_inside_a_segment_subtracts_the_readers_tally_of_that_segment():
    assert gap_message_count([A, B, C], 400, 3000, SegmentTally(0, 12)) == (18 + 20 + 40, True)
    assert gap_message_count([A, B, C], 1300, 1800, SegmentTally(1000, 20)) == (0, True)
    # no tally, a tally of another segment, or a tally above the segment's count: not exact
    assert gap_message_count([A, B, C], 400, 3000, None) == (None, False)
    assert gap_message_count([A, B, C], 400, 3000, SegmentTally(1000, 12)) == (None, False)
    assert gap_message_count([A, B, C], 400, 3000, SegmentTally(None, 12)) == (None, False)
    assert gap_message_count([A, B, C], 400, 3000, SegmentTally(0, 31)) == (None, False)


def test_gaps_the_records_do_not_cover_exactly_are_not_counted():
    assert gap_message_count([A, C], 0, 3000, None) == (None, False)          # B not recorded: a hole
    assert gap_message_count([A, B, C], 0, 2500, None) == (None, False)       # ends inside C
    assert gap_message_count([A, B, C], 0, 3500, None) == (None, False)       # beyond the records
    assert gap_message_count([B, C], 0, 3000, None) == (None, False)          # start not recorded
    assert gap_message_count([], 0, 10, None) == (None, False)
    unknown = DeletedSegment(1000, 1800, -1, 800, 2)                          # a damaged segment
    assert gap_message_count([A, unknown, C], 0, 3000, None) == (None, False)
    assert gap_message_count([A, B, C], 3000, 3000, None) == (0, True)       # an empty gap


def test_duplicate_records_of_one_start_are_collapsed():
    again = DeletedSegment(1000, 1800, 20, 800, 99)
    assert gap_message_count([A, B, again, C, A], 0, 3000, None) == (90, True)


def test_a_gap_is_retention_only_where_the_records_cover_it():
    R, M = "retention", "missing_segments"
    parts = lambda deleted, start, end, tally=None: [  # noqa: E731
        (p.start, p.end, p.cause, p.messages) for p in split_gap(deleted, start, end, tally)]
    assert parts([A, B, C], 400, 3000, SegmentTally(0, 12)) == [(400, 3000, R, 78)]
    assert parts([A, C], 400, 3000, SegmentTally(0, 12)) == [(400, 1000, R, 18), (1000, 1800, M, None),
                                                             (1800, 3000, R, 40)]
    assert parts([B], 0, 3000) == [(0, 1000, M, None), (1000, 1800, R, 20), (1800, 3000, M, None)]
    assert parts([], 0, 3000) == parts(None, 0, 3000) == [(0, 3000, M, None)]  # none, or the broker could not say
    assert parts([A, B, C], 0, 2500) == [(0, 2500, R, None)]     # covered, but the count stops inside C
    overlapping = DeletedSegment(500, 1300, 25, 800, 4)          # e.g. records of another replica's segments
    assert parts([A, overlapping], 0, 1300) == [(0, 1300, R, None)]
    assert parts([A], 3000, 3000) == []


def test_deleted_segment_json_round_trip_and_broker_lines():
    assert DeletedSegment.from_json(json.dumps(B.to_json())) == B
    line = '{"start":5,"end":9,"messages":-1,"bytes":4,"deleted_at_ms":7,"counted_before_damage":1}'
    assert DeletedSegment.from_json(line) == DeletedSegment(5, 9, -1, 4, 7)


def test_the_file_reader_collapses_duplicate_starts_and_skips_a_torn_line(tmp_path):
    lines = [{"start": 0, "end": 100, "messages": 2, "bytes": 100, "deleted_at_ms": 10},
             {"start": 100, "end": 250, "messages": 3, "bytes": 150, "deleted_at_ms": 11},
             {"start": 0, "end": 100, "messages": 2, "bytes": 100, "deleted_at_ms": 12}]
    text = "".join(json.dumps(d) + "\n" for d in lines) + '{"start": 250, "end'   # torn by a crash
    (tmp_path / FILE_NAME).write_text(text)
    assert read_deletions(tmp_path) == [DeletionRecord(0, 100, 2, 100, 10), DeletionRecord(100, 250, 3, 150, 11)]
    assert read_deletions(tmp_path / "absent") == []


def test_counting_a_segment_file_opens_wrappers_and_notices_damage(tmp_path):
    data = b"".join(d for d, _ in _sets())
    seg = tmp_path / "seg"
    seg.write_bytes(data)
    assert count_messages(seg, len(data)) == (15 * PLAIN_N + 15 * GZIP_N, False)   # 120, gzip inner ones each
    assert count_messages(seg, 0) == (0, False)
    seg.write_bytes(data + data[:25])                                 # a cut-off last message
    assert count_messages(seg, len(data) + 25) == (120, True)
    bad = bytearray(data)
    first = len(_sets()[0][0])
    bad[first:first + 4] = (2).to_bytes(4, "big")                     # an impossible length in message 2
    seg.write_bytes(bad)
    assert count_messages(seg, len(bad)) == (PLAIN_N, True)


# --- a real broker's retention ------------------------------------------------------------------

PLAIN_N, GZIP_N = 3, 5


def _sets() -> list[tuple[bytes, int]]:
    """30 message sets of known message counts, alternating plain (3) and gzip (5)."""
    out = []
    for i in range(30):
        if i % 2 == 0:
            out.append((encode_message_set([b"p%02d-%d-" % (i, k) + b"." * 30 for k in range(PLAIN_N)]), PLAIN_N))
        else:
            out.append((encode_message_set([b"g%02d-%d-" % (i, k) + b"#" * 60 for k in range(GZIP_N)],
                                           codec=CODEC_GZIP), GZIP_N))
    return out


def _produce(b, topic: str) -> list[tuple[int, int, int]]:
    """(offset, size, messages) of each set, acknowledged one by one."""
    placed = []
    with RawClient(b.host, b.port) as c:
        for data, n in _sets():
            resp = p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest(topic, 0, data)))
            assert resp.error == 0
            placed.append((resp.offset, len(data), n))
    return placed


def _segments(b, topic: str) -> list[tuple[int, int]]:
    """(base, size) of every segment file of the partition, oldest first."""
    d = b.log_dir / f"{topic}-0"
    found = sorted((parse_segment_name(n), n) for n in os.listdir(d) if parse_segment_name(n) is not None)
    return [(base, (d / n).stat().st_size) for base, n in found]


def _expected(placed, start: int, end: int) -> int:
    return sum(n for off, _, n in placed if start <= off < end)


def _records(b, topic: str, start: int = 0, end: int = 1 << 62) -> list[DeletedSegment]:
    with SimpleConsumer(b.host, b.port, timeout_s=10) as c:
        return c.deleted_segments(topic, 0, start, end)


def test_retention_records_every_deleted_segment_with_its_exact_message_count(broker_factory, monkeypatch):
    (b,) = broker_factory(n=1, log_file_size=400)
    placed = _produce(b, "d")
    segs = _segments(b, "d")
    assert len(segs) == 10
    total = sum(size for _, size in segs)
    assert total == sum(size for _, size, _ in placed)
    assert _records(b, "d") == []

    # size retention (restart with a limit that leaves exactly the first three segments over it)
    first3 = sum(size for _, size in segs[:3])
    b.overrides.update({"log.retention.size": total - first3, "log.retention.check.interval.ms": 100})
    b.restart()
    recs = wait_until(lambda: (r := _records(b, "d")) and len(r) == 3 and r, 30, "3 deletion records")
    bounds = [(base, base + size) for base, size in segs]
    assert [(r.start, r.end, r.bytes) for r in recs] == [(s, e, e - s) for s, e in bounds[:3]]
    assert [r.messages for r in recs] == [_expected(placed, s, e) for s, e in bounds[:3]]
    assert [r.messages for r in recs] == [3 + 5 + 3, 5 + 3 + 5, 3 + 5 + 3]   # every gzip inner message counts
    assert sum(r.messages for r in recs) == _expected(placed, 0, bounds[2][1]) > 0
    assert all(abs(r.deleted_at_ms - time.time() * 1000) < 120_000 for r in recs)

    # time retention: age the oldest remaining segment by ten days (default retention: 7 days)
    b.stop()
    d = b.log_dir / "d-0"
    old = time.time() - 10 * DAY_S
    os.utime(d / f"{bounds[3][0]:020d}.kafka", (old, old))
    b.start()
    recs = wait_until(lambda: (r := _records(b, "d")) and len(r) == 4 and r, 30, "4 deletion records")
    assert (recs[3].start, recs[3].end, recs[3].messages) == (*bounds[3], _expected(placed, *bounds[3]))
    # records survived both restarts; ranges select by overlap
    assert [r.start for r in _records(b, "d", bounds[1][0] + 1, bounds[2][0] + 1)] == [bounds[1][0], bounds[2][0]]
    assert _records(b, "d", bounds[4][0], 1 << 40) == []
    # the gap of a reader that stopped inside the first segment, after one set
    count, exact = gap_message_count(_records(b, "d"), placed[1][0], bounds[3][1], SegmentTally(0, PLAIN_N))
    assert (count, exact) == (_expected(placed, placed[1][0], bounds[3][1]), True)

    # a crash between the record and the unlink: the segment is deleted again, the record collapses
    b.stop()
    os.utime(d / f"{bounds[4][0]:020d}.kafka", (old, old))
    monkeypatch.setenv(CRASH_ENV, CRASH_POINT)
    b.overrides["log.retention.check.interval.ms"] = 1500    # serve first, then crash at the first deletion
    try:
        b.start()
    except BrokerStartError:
        pass                                                   # it died before answering: the same crash
    assert b.proc.wait(60) == -9
    monkeypatch.delenv(CRASH_ENV)
    lines = (d / FILE_NAME).read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[4])["start"] == bounds[4][0]
    assert (d / f"{bounds[4][0]:020d}.kafka").exists()          # recorded, not yet unlinked
    b.overrides["log.retention.check.interval.ms"] = 100
    b.start()
    wait_until(lambda: not (d / f"{bounds[4][0]:020d}.kafka").exists(), 30, "segment deleted after restart")
    assert len((d / FILE_NAME).read_text().splitlines()) == 6  # recorded twice
    recs = _records(b, "d")
    assert [r.start for r in recs] == [s for s, _ in bounds[:5]]
    assert recs[4].messages == _expected(placed, *bounds[4])
    with SimpleConsumer(b.host, b.port, timeout_s=10) as c:
        assert c.earliest_offset("d", 0) == bounds[5][0]


def test_a_follower_restarted_at_the_leaders_log_start_keeps_the_leaders_deletion_records(broker_factory, zk_connect,
                                                                                        zk):
    """A follower is stopped; the leader's retention deletes past the follower's log end; the follower comes back,
    its fetch falls below the leader's log start and it restarts its log there. Its log start moved by the
    leader's retention, not its own: it copies the leader's records first, so a reader that asks it (after a
    failover) learns that retention deleted everything below, with the exact count. (Before: the follower
    answered no record, and a loader reading from it after a failover reported missing segments.)"""
    from tests.harness import replicated as r

    overrides = {**r.replication_overrides(min_isr=1), "log.file.size": 1024, "log.retention.size": 4096,
                 "log.retention.check.interval.ms": 100}
    brokers = broker_factory(n=2, zk_connect=zk_connect, overrides=overrides)
    r.create_topic(zk, "rd", {0: [0, 1]})
    leader = r.by_id(brokers, r.wait_for_leader_state(zk, "rd", 0).leader)
    follower = next(b for b in brokers if b is not leader)
    client = r.AcksClient(brokers)
    ids = iter(range(1_000_000))

    def send(batches: int) -> None:
        for _ in range(batches):
            assert client.send("rd", 0, [r.payload(next(ids)) for _ in range(4)], acks=1).status == r.ACKED

    def earliest(b) -> int:
        return r.request(b.host, b.port, p.OffsetsRequest("rd", 0, p.EARLIEST_TIME, 1), p.OffsetsResponse).offsets[0]

    send(4)
    wait_until(lambda: r.log_end(follower, "rd", 0) == r.log_end(leader, "rd", 0), 30, "the follower to catch up")
    follower_end = r.log_end(follower, "rd", 0)
    follower.stop()
    while earliest(leader) <= follower_end:   # the leader's retention deletes what the follower holds, and more
        send(4)
    follower.start()
    def restarted() -> int | None:   # the follower's own line (its retention may go on from there)
        found = re.search(r"log rd-0: reset to start empty at offset (\d+)", follower.output())
        return int(found.group(1)) if found else None

    start = wait_until(restarted, 60, "the follower to restart its log at the leader's log start")
    assert start > follower_end
    with SimpleConsumer(follower.host, follower.port) as c:
        kept = c.deleted_segments("rd", 0, 0, start)
    with SimpleConsumer(leader.host, leader.port) as c:
        truth = c.deleted_segments("rd", 0, 0, start)
    assert [(x.start, x.end, x.cause, x.messages) for x in split_gap(kept, 0, start, None)] == \
        [(0, start, "retention", gap_message_count(truth, 0, start, None)[0])]
    assert gap_message_count(truth, 0, start, None)[1]
    lines = [json.loads(x) for x in (follower.log_dir / "rd-0" / FILE_NAME).read_text().splitlines()]
    assert {x.get("copied_from") for x in lines if x["start"] < start} == {leader.broker_id}
