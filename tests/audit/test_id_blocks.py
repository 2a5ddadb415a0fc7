"""Ids counted as 64-seq blocks give exactly the counts and missing seqs of one group per id.

Checked against sets computed in Python on random ids with what breaks block arithmetic: duplicates,
seqs on both sides of block edges, negative and very large seqs, null seqs (one id of their session, as
a group by (session, seq) counts it), null sessions, two servers and out-of-range (null) windows.
"""
from __future__ import annotations

import random

import pytest

from ingest.audit import counts, id_blocks
from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.clock import FakeClock
from tests.audit.synth import AUDIT_TOPIC, T0, W, Destination, events, lost_range, mon

WINDOWED = (("topic", "string"), ("window_start_ms", "long"), ("server", "string"), ("session", "string"),
            ("seq", "long"))
EDGES = [-2**63, -2**63 + 1, -65, -64, -63, -1, 0, 1, 63, 64, 65, 127, 128, 2**62, 2**63 - 64, 2**63 - 1]


def _ids(seed: int) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    for _ in range(3_000):
        seq = rnd.choice([rnd.randrange(0, 700), rnd.randrange(-300, 300), rnd.choice(EDGES), None])
        out.append((rnd.choice(["pv", "clicks"]), rnd.choice([T0, T0 + W, None]), rnd.choice(["h1", "h2", None]),
                    rnd.choice(["s1", "s2", None]), seq))
    return out + rnd.sample(out, 300)  # duplicates


def _expected_counts(ids, topics, lo, hi):
    rows: dict[tuple, int] = {}
    distinct: dict[tuple, set] = {}
    for topic, ws, server, session, seq in ids:
        if topic in topics and (ws is None or lo <= ws < hi):
            rows[(topic, ws, server)] = rows.get((topic, ws, server), 0) + 1
            distinct.setdefault((topic, ws, server), set()).add((session, seq))
    return {k: (rows[k], len(distinct[k])) for k in rows}


@pytest.mark.parametrize("seed", [1, 2])
def test_block_counts_equal_the_distinct_ids_counted_one_by_one_in_spark_and_on_the_driver(spark, seed):
    ids = _ids(seed)
    blocks = counts.loaded_blocks(counts.local_frame(spark, WINDOWED, ids))
    table = counts.collect_blocks(blocks, 100_000)
    assert table is not None and table.num_rows < len(ids)
    for topics, lo, hi in ((["pv", "clicks"], T0, T0 + 2 * W), (["pv"], T0 + W, T0 + 2 * W), (None, T0, T0 + W)):
        want = _expected_counts(ids, topics or ["pv", "clicks"], lo, hi)
        for got in (counts.loaded_counts(blocks, lo_ms=lo, hi_ms=hi, topics=topics),
                    counts.loaded_counts_of(table, lo_ms=lo, hi_ms=hi, topics=topics)):
            assert {(c.topic, c.window_start_ms, c.server): (c.rows, c.distinct) for c in got} == want
    want = {(s, t) for t, _, _, s, _ in ids if s == "s2"}
    assert counts.session_topics(blocks, ["s2"]) == counts.session_topics_of(table, ["s2"]) == want
    assert counts.session_topics_of(table, []) == set()


def test_more_blocks_than_the_bound_stay_in_spark(spark):
    blocks = counts.loaded_blocks(counts.local_frame(spark, WINDOWED, [("pv", T0, "h", "s", q * 64) for q in range(5)]))
    assert counts.collect_blocks(blocks, 4) is None
    assert counts.collect_blocks(blocks, 0) is None
    assert counts.collect_blocks(blocks, 5).num_rows == 5


def test_block_masks_hold_exactly_the_loaded_seqs_of_every_topic_window_and_server(spark):
    ids = _ids(3)
    bounds = {"s1": (-70, 200), "s2": (60, 2**63 - 1)}
    table = counts.collect_blocks(counts.loaded_blocks(counts.local_frame(spark, WINDOWED, ids)), 100_000)
    masks = counts.block_masks_of(table, bounds)
    for session, (lo, hi) in bounds.items():
        loaded = {q for _, _, _, s, q in ids if s == session and q is not None}
        want = sorted(q for q in loaded if lo <= q <= hi)
        have = masks.get(session, {})
        got = sorted(b * 64 + i for b, m in have.items() for i in range(64) if m >> i & 1 and lo <= b * 64 + i <= hi)
        assert got == want, session
        # Seqs outside the bounds may come along in a bound's edge blocks, never a seq that was not loaded.
        assert all(b * 64 + i in loaded for b, m in have.items() for i in range(64) if m >> i & 1)
    assert set(masks) == {"s1", "s2"}  # nothing of sessions not asked about
    assert counts.block_masks_of(table, {"nobody": (0, 10)}) == {}


def test_first_missing_takes_the_clear_bits_in_order_up_to_the_limit():
    rnd = random.Random(7)
    for _ in range(400):
        base = rnd.choice([0, -1000, 2**62, -2**63 + 200])
        loaded = {base + rnd.randrange(0, 400) for _ in range(rnd.randrange(0, 500))}
        masks = id_blocks.add_seqs({}, ["s"] * len(loaded), sorted(loaded)).get("s", {})
        lo = base + rnd.randrange(-10, 400)
        hi = lo + rnd.randrange(-2, 300)
        limit = rnd.choice([0, 1, 3, 64, 10_000])
        want = [q for q in range(lo, hi + 1) if q not in loaded][:limit]
        assert id_blocks.first_missing(masks, lo, hi, limit) == want, (lo, hi, limit)


def test_add_blocks_takes_spark_signed_masks_as_unsigned_and_ors_repeated_blocks():
    masks = id_blocks.add_blocks({}, ["s", "s", "t"], [0, 0, -1], [-2**63, 1, -1])
    assert masks == {"s": {0: 2**63 | 1}, "t": {-1: 2**64 - 1}}
    assert id_blocks.first_missing(masks["s"], 0, 63, 100) == list(range(1, 63))
    assert id_blocks.first_missing(masks["t"], -64, -1, 100) == []


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_the_whole_report_is_the_same_whether_the_blocks_are_counted_on_the_driver_or_in_spark(spark, tmp_path, fmt):
    """Losses with samples and an exact lost range, duplicates, two servers, an out-of-range event, a
    report_seq gap and a seq loaded only in a topic that is not audited, audited three ways: blocks on the
    driver (default), blocks over the bound (1: the limit is hit, summed in Spark), never collected (0)."""
    dest = Destination(tmp_path / "dest", fmt)
    lost_s1 = set(range(20, 30)) | {50, 51, 52}
    pv = (events("s1", [q for q in range(100) if q not in lost_s1], T0 + 10)
          + events("s1", range(60, 65), T0 + 500)  # duplicates
          + events("s2", range(100, 164), T0 + W + 1) + events("s2", range(164, 228), T0 + W + 99, server="host-b")
          + events("s4", [500], T0 + 2 * W + 7)  # s4 has no monitoring for pv: only its data ties its gap to pv
          + events("s5", [7], 0))  # out of range
    clicks = events("s3", range(40), T0 + 20) + events("s4", range(10), T0 + W + 5)
    misc = events("s1", [25], T0 + 30)
    mons = [mon("s1", "pv", T0, report_seq=1, acked=100, seq_min=0, seq_max=99),
            mon("s2", "pv", T0 + W, report_seq=1, acked=128, seq_min=100, seq_max=227),
            mon("s3", "clicks", T0, report_seq=1, acked=50, seq_min=0, seq_max=49),
            mon("s4", "clicks", T0 + W, report_seq=1, acked=10, seq_min=0, seq_max=9),
            mon("s4", "clicks", T0 + 2 * W, report_seq=3, acked=0, heartbeat=True)]
    gap = lost_range("pv", 10, T0 + 5, T0 + 30, exact=True, bounds=[("s1", 19, 30)])
    dest.load({"pv": pv, "clicks": clicks, "misc": misc, AUDIT_TOPIC: mons}, lost=[gap])

    def audit(max_blocks):
        cfg = AUDIT_CONFIG.parse({"destination": dest.root, "grace.ms": 0, "window.lookback": 3,
                                  "topics": "pv|clicks", "counts.driver.max.blocks": max_blocks})
        run = run_audit(spark, cfg, clock=FakeClock(T0 + 4 * W), from_ms=T0, to_ms=T0 + 3 * W, run_id="same",
                        write_history=False)
        return run.rows, run.exit_code, run.nothing_judged

    rows, exit_code, _ = on_driver = audit(1_000_000)
    assert on_driver == audit(1) == audit(0)
    by = {(r["topic"], r["window_start_ms"], r["row_type"]): r for r in rows}
    s1 = by[("pv", T0, "window")]
    assert (s1["loaded_rows"], s1["loaded_distinct"], s1["missing"], s1["retention_lost"]) == (92, 87, 13, 9)
    assert s1["missing_id_sample"][:4] == ["s1:20", "s1:21", "s1:22", "s1:23"] and "s1:25" not in s1["missing_id_sample"]
    assert s1["missing_id_sample"][-3:] == ["s1:50", "s1:51", "s1:52"]
    assert by[("pv", T0 + W, "window")]["loaded_distinct"] == 128
    assert by[("clicks", T0, "window")]["missing_id_sample"] == [f"s3:{q}" for q in range(40, 50)]
    assert any(r["window_start_ms"] is None for r in rows if r["topic"] == "pv")  # the out-of-range bucket
    assert by[("pv", T0 + 2 * W, "window")]["missing_report_seqs"] and by[("clicks", T0 + W, "window")]["missing_report_seqs"]
    assert exit_code != 0
