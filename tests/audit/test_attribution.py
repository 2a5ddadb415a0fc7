"""Tiers and exact attribution with exact numbers: pure Python (build_rows, attribution), no Spark.

The scenario the issue requires: an acknowledged tail lost in a broker crash,
followed by a retention gap, in adjacent windows. Session s1 writes seqs 0..39
in window A and 40..79 in window B to one partition. The broker crash loses
the acknowledged seqs 20..29; the producer carries on (30..39, still window A,
land after the crash point and are loaded); then retention deletes the
segments holding 40..59 before they are loaded. The gap's session bounds are
(39, 60): the highest seq loaded before it and the lowest after it. The crash
lost seqs lie below 39, so the gap cannot hold them: A is exactly 10 DATA_LOSS,
B exactly 20 RETENTION_LOSS. Time overlap alone (the gap's time span starts in
A) would blame retention for A.
"""
from __future__ import annotations

from ingest.audit.attribution import Candidates, allocate, atoms_of
from ingest.audit.counts import LoadedCount
from ingest.audit.monitoring_events import Snapshot, aggregate
from ingest.audit.reconcile import AuditParams, build_rows
from ingest.lost_ranges import TIER_SOURCE, TIER_TARGET, LostRange, parse_bounds

W = 600_000
T0 = 1_763_798_400_000
A, B = T0, T0 + W
LOADED_A = list(range(0, 20)) + list(range(30, 40))   # 20..29 lost in the crash
LOADED_B = list(range(60, 80))                        # 40..59 deleted by retention


def params(**kw):
    return AuditParams(window_ms=W, grace_ms=0, threshold=0.999, now_ms=T0 + 10 * W, lo_ms=T0, hi_ms=T0 + 6 * W,
                       plausible_hi_ms=T0 + 100 * W, **kw)


def snap(session, ws, acked, seq_min, seq_max, *, attempted=None, failed=0, topic="pv", server="h"):
    return Snapshot(session, server, topic, ws, ws + W, 1, attempted if attempted is not None else acked + failed,
                    acked, failed, acked * 10, seq_min, seq_max, True, False, ws + W + 1, 1)


def gap(ident, tier, n, after_t, before_t, bounds=(), exact=True, cause="retention", order=0):
    return LostRange("pv", 0, 0, order, order, 0, n, after_t, before_t, cause=cause, messages_exact=exact,
                     session_bounds=tuple(bounds), tier=tier, ident=ident)


def from_loader(obj):
    return LostRange.from_record(obj, tier=TIER_TARGET)


def from_mirror(rec):
    return LostRange.from_record(rec, tier=TIER_SOURCE)


def candidates(loaded: dict[int, list[int]], ranges: dict[int, range], gaps, session="s1") -> Candidates:
    """Candidate seqs = the window's seq range minus every loaded seq (what Spark computes)."""
    every = {s for seqs in loaded.values() for s in seqs}
    missing = {(ws, session): [s for s in r if s not in every] for ws, r in ranges.items()}
    return Candidates(atoms=atoms_of(missing, gaps),
                      session_missing={(ws, session): len(r) - len(loaded[ws]) for ws, r in ranges.items()})


def by_window(rows):
    return {r["window_start_ms"]: r for r in rows if r["row_type"] == "window"}


def crash_then_gap_rows(tier: str, *, bounded: bool = True, tiered: bool = False):
    g = gap("g1", tier, 20, A + 39, B + 60, [("s1", 39, 60)] if bounded else [], exact=bounded)
    mon = aggregate([snap("s1", A, 40, 0, 39), snap("s1", B, 40, 40, 79)])
    loaded = [LoadedCount("pv", A, "h", 30, 30), LoadedCount("pv", B, "h", 20, 20)]
    cand = {"pv": candidates({A: LOADED_A, B: LOADED_B}, {A: range(0, 40), B: range(40, 80)}, [g])}
    mirror = None
    if tiered:  # the mirror read what the source held: 30 in A (crash), 20 in B (retention before mirroring)
        mirror = aggregate([snap("m1", A, 30, None, None), snap("m1", B, 20, None, None)])
    kw = {"lost_ranges": [g]} if tier == TIER_TARGET else {"source_lost": [g]}
    return by_window(build_rows(params(), mon, loaded, mirror=mirror, candidates=cand, **kw))


def test_crash_lost_tail_then_retention_gap_is_exactly_n_data_loss_plus_m_retention_loss():
    rows = crash_then_gap_rows(TIER_TARGET)
    a, b = rows[A], rows[B]
    assert (a["status"], a["missing"], a["causes"], a["retention_lost"]) == ("DATA_LOSS", 10, {"unexplained_loss": 10}, 0)
    assert (b["status"], b["missing"], b["causes"], b["retention_lost"]) == ("RETENTION_LOSS", 20, {"retention": 20}, 20)
    assert a["tiers"] == {"producers": 40, "broker": None, "source": None, "target": None, "warehouse": 30}
    assert (a["loss_tier"], b["loss_tier"]) == ("warehouse", "warehouse")


def test_without_bounds_the_same_gap_falls_back_to_time_overlap_and_blames_retention_for_the_crash():
    """The rule before bounds (and for records without them): the estimate of 20, never more, earliest window
    first (an estimate once explained 10 % more: 22)."""
    rows = crash_then_gap_rows(TIER_TARGET, bounded=False)
    assert (rows[A]["status"], rows[A]["causes"]) == ("RETENTION_LOSS", {"retention": 10})
    assert (rows[B]["status"], rows[B]["causes"]) == ("DATA_LOSS", {"retention": 10, "unexplained_loss": 10})


def test_the_same_at_the_source_tier_lost_before_source_and_source_retention():
    rows = crash_then_gap_rows(TIER_SOURCE, tiered=True)
    a, b = rows[A], rows[B]
    assert (a["status"], a["loss_tier"], a["causes"]) == ("DATA_LOSS", "source", {"lost_before_source": 10})
    assert (b["status"], b["loss_tier"], b["causes"]) == ("RETENTION_LOSS", "source", {"source_retention": 20})
    assert a["tiers"] == {"producers": 40, "broker": None, "source": 30, "target": 30, "warehouse": 30}
    assert b["tiers"] == {"producers": 40, "broker": None, "source": 20, "target": 20, "warehouse": 20}
    assert b["retention_lost"] == 20


def test_target_retention_and_lost_at_loader_in_adjacent_windows():
    """Every tier up to the target has all 40 + 40; the loader's gap holds B's 20; A's 10 no gap holds
    (a stopped loader: acknowledged by the target, not loaded after grace)."""
    g = gap("g1", TIER_TARGET, 20, A + 39, B + 60, [("s1", 39, 60)])
    mon = aggregate([snap("s1", A, 40, 0, 39), snap("s1", B, 40, 40, 79)])
    mirror = aggregate([snap("m1", A, 40, None, None), snap("m1", B, 40, None, None)])
    loaded = [LoadedCount("pv", A, "h", 30, 30), LoadedCount("pv", B, "h", 20, 20)]
    cand = {"pv": candidates({A: LOADED_A, B: LOADED_B}, {A: range(0, 40), B: range(40, 80)}, [g])}
    rows = by_window(build_rows(params(), mon, loaded, mirror=mirror, lost_ranges=[g], candidates=cand))
    assert (rows[A]["status"], rows[A]["loss_tier"], rows[A]["causes"]) == ("DATA_LOSS", "warehouse", {"lost_at_loader": 10})
    assert (rows[B]["status"], rows[B]["loss_tier"], rows[B]["causes"]) == \
        ("RETENTION_LOSS", "warehouse", {"target_retention": 20})
    assert rows[A]["tiers"] == {"producers": 40, "broker": None, "source": 40, "target": 40, "warehouse": 30}


def test_lost_in_mirroring_duplicated_and_two_tiers_in_one_window():
    mon = aggregate([snap("s1", A, 50, 0, 49), snap("s1", B, 10, 50, 59), snap("s1", T0 + 2 * W, 30, 60, 89)])
    mirror = aggregate([snap("m1", A, 45, None, None, attempted=50, failed=5), snap("m1", B, 10, None, None),
                        snap("m1", T0 + 2 * W, 25, None, None)])
    loaded = [LoadedCount("pv", A, "h", 45, 45), LoadedCount("pv", B, "h", 13, 10),
              LoadedCount("pv", T0 + 2 * W, "h", 22, 22)]
    src = gap("src", TIER_SOURCE, 5, T0 + 2 * W, T0 + 2 * W + 9, exact=True)  # unbounded: time + count only
    rows = by_window(build_rows(params(), mon, loaded, mirror=mirror, source_lost=[src]))
    a, b, c = rows[A], rows[B], rows[T0 + 2 * W]
    assert (a["status"], a["loss_tier"], a["causes"]) == ("DATA_LOSS", "target", {"lost_in_mirroring": 5})
    assert a["tiers"] == {"producers": 50, "broker": None, "source": 50, "target": 45, "warehouse": 45}
    assert (b["status"], b["loss_tier"], b["causes"]) == ("DUPLICATES", None, {"duplicated": 3})
    # 5 lost to source retention, then 3 acknowledged by the target never loaded: data loss is never masked
    assert (c["status"], c["loss_tier"], c["missing"]) == ("DATA_LOSS", "source", 8)
    assert c["causes"] == {"source_retention": 5, "lost_at_loader": 3}


def test_a_mirror_that_reported_nothing_for_a_window_invents_no_loss():
    """Intermediate tiers are clamped to the warehouse count: what was loaded passed every tier."""
    mon = aggregate([snap("s1", A, 10, 0, 9)])
    mirror = aggregate([snap("m1", B, 5, None, None)])  # the topic is mirrored, but window A has no mirror report
    rows = by_window(build_rows(params(), mon, [LoadedCount("pv", A, "h", 10, 10)], mirror=mirror))
    assert (rows[A]["status"], rows[A]["tiers"]["source"], rows[A]["loss_tier"]) == ("COMPLETE", 0, None)


def test_gap_capacity_limits_the_explanation_exact_count_without_slack():
    g = gap("g1", TIER_TARGET, 15, A + 39, B + 60, [("s1", 39, 60)])  # only 15 messages were in the gap
    mon = aggregate([snap("s1", A, 40, 0, 39), snap("s1", B, 40, 40, 79)])
    loaded = [LoadedCount("pv", A, "h", 30, 30), LoadedCount("pv", B, "h", 20, 20)]
    cand = {"pv": candidates({A: LOADED_A, B: LOADED_B}, {A: range(0, 40), B: range(40, 80)}, [g])}
    rows = by_window(build_rows(params(), mon, loaded, lost_ranges=[g], candidates=cand))
    assert (rows[B]["status"], rows[B]["causes"]) == ("DATA_LOSS", {"retention": 15, "unexplained_loss": 5})


def test_a_session_the_gap_does_not_list_is_unbounded():
    g = gap("g1", TIER_TARGET, 4, None, None, [("other", 10, 20)])
    missing = {(A, "s1"): [100, 101, 102, 103], (A, "other"): [5, 15]}  # other:5 lies outside (10, 20)
    atoms = atoms_of(missing, [g])
    assert atoms == {(A, "other"): [(frozenset({"g1"}), 1)], (A, "s1"): [(frozenset({"g1"}), 4)]}
    assert allocate({A: 6}, [g], W, candidates=Candidates(atoms)) == {A: {"g1": 4}}


def ended_session_rows(cause: str = "retention", *, exact: bool = True, tier: str = TIER_TARGET, tiered=False):
    """A crash loses the acknowledged tail (seqs 10..12) of session s2 in window A, and s2 ends; later the
    segments holding s1's seqs 20..39 (window B) are deleted before they are loaded. The gap's time span
    overlaps both windows; s1 is closed by its bounds (19, 40), s2 is open above (9, None): s2's tail is
    a candidate of the gap as well, and the earliest window comes first."""
    g = gap("g1", tier, 20, A + 300_000, B + 400_000, [("s1", 19, 40), ("s2", 9, None)], exact=exact, cause=cause)
    mon = aggregate([snap("s1", A, 20, 0, 19), snap("s2", A, 13, 0, 12), snap("s1", B, 30, 20, 49)])
    loaded = [LoadedCount("pv", A, "h", 30, 30), LoadedCount("pv", B, "h", 10, 10)]
    atoms = atoms_of({(A, "s2"): [10, 11, 12], (B, "s1"): list(range(20, 40))}, [g])
    cand = {"pv": Candidates(atoms, {(A, "s1"): 0, (A, "s2"): 3, (B, "s1"): 20})}
    mirror = aggregate([snap("m1", A, 30, None, None), snap("m1", B, 10, None, None)]) if tiered else None
    kw = {"lost_ranges": [g]} if tier == TIER_TARGET else {"source_lost": [g]}
    return by_window(build_rows(params(), mon, loaded, mirror=mirror, candidates=cand, **kw))


def test_a_gap_fills_with_the_sessions_it_closes_before_an_ended_sessions_crash_tail():
    rows = ended_session_rows()
    assert (rows[A]["status"], rows[A]["missing"], rows[A]["causes"]) == ("DATA_LOSS", 3, {"unexplained_loss": 3})
    assert (rows[B]["status"], rows[B]["missing"], rows[B]["causes"], rows[B]["retention_lost"]) == \
        ("RETENTION_LOSS", 20, {"retention": 20}, 20)


def test_missing_segments_hold_messages_but_are_data_loss_and_an_estimate_is_a_ceiling():
    rows = ended_session_rows("missing_segments", exact=False)
    assert (rows[A]["status"], rows[A]["causes"]) == ("DATA_LOSS", {"unexplained_loss": 3})
    assert (rows[B]["status"], rows[B]["causes"], rows[B]["retention_lost"]) == \
        ("DATA_LOSS", {"missing_segments": 20}, 0)
    src = ended_session_rows("missing_segments", exact=False, tier=TIER_SOURCE, tiered=True)
    assert (src[B]["status"], src[B]["loss_tier"], src[B]["causes"]) == \
        ("DATA_LOSS", "source", {"source_missing_segments": 20})
    g = gap("g1", TIER_TARGET, 5, None, None, cause="missing_segments", exact=False)  # unbounded, estimated 5
    assert allocate({A: 8, B: 8}, [g], W) == {A: {"g1": 5}}
    m = from_mirror({"topic": "pv", "source_cluster": "dc1", "start_offset": 0, "end_offset": 9, "messages": 2,
                     "messages_exact": False, "cause": "missing_segments"})
    assert (m.cause, m.capacity) == ("missing_segments", 2)


def test_allocation_is_a_maximum_flow_not_greedy():
    """Window A's seq fits gaps g1 and g2, window B's only g1 (one message each): greedy in gap order gives A
    g1 and leaves B unexplained; the flow reroutes A to g2."""
    g1 = gap("g1", TIER_TARGET, 1, None, None, [("s1", 0, 10)], order=1)
    g2 = gap("g2", TIER_TARGET, 1, None, None, [("s1", 4, 30)], order=2)
    cand = Candidates(atoms_of({(A, "s1"): [5], (B, "s1"): [3]}, [g1, g2]))
    assert allocate({A: 1, B: 1}, [g1, g2], W, candidates=cand) == {A: {"g2": 1}, B: {"g1": 1}}
    # the candidates were consumed: a later tier cannot take those seqs again
    assert all(n == 0 for items in cand.atoms.values() for _, n in items)


def test_per_session_missing_bounds_the_candidates():
    """Seq ranges can over-report candidates (seqs of other topics share the range); acked - loaded caps them."""
    g = gap("g1", TIER_TARGET, 10, None, None, [("s1", None, None)])
    cand = Candidates(atoms_of({(A, "s1"): range(0, 10)}, [g]), session_missing={(A, "s1"): 3})
    assert allocate({A: 10}, [g], W, candidates=cand) == {A: {"g1": 3}}


def test_old_single_cluster_rules_hold_corruption_and_retention_and_records_read_tolerantly():
    old = LostRange("pv", 0, 0, 0, 300, 300, 3, A + 1, A + 50, "r", 0, "corruption")
    g = from_loader(old)
    assert (g.tier, g.cause, g.messages_exact, g.session_bounds, g.capacity) == (TIER_TARGET, "corruption", False, (), 3)
    new = {**old.to_json(), "cause": "retention", "messages_exact": True, "session_bounds": [["s1", 3, None]]}
    new_gap = from_loader(new)
    assert (new_gap.messages_exact, new_gap.session_bounds, new_gap.capacity) == (True, (("s1", 3, None),), 3)
    m = from_mirror({"topic": "pv", "source_cluster": "dc1", "broker_id": 1, "partition": 0, "start_offset": 5,
                     "end_offset": 9, "messages": 2, "messages_exact": True,
                     "session_bounds": '[{"session": "s", "after_seq": 1, "before_seq": 4}]'})
    assert (m.tier, m.cause, m.session_bounds, m.order) == (TIER_SOURCE, "retention", (("s", 1, 4),), ("dc1", 1, 0, 5))
    assert parse_bounds(None) == () and parse_bounds([{"session": "x"}]) == (("x", None, None),)
    mon = aggregate([snap("s1", A, 10, 0, 9)])
    rows = by_window(build_rows(params(), mon, [LoadedCount("pv", A, "h", 7, 7)], lost_ranges=[old]))
    assert (rows[A]["status"], rows[A]["causes"], rows[A]["loss_tier"]) == ("CORRUPTION_LOSS", {"corruption": 3}, "warehouse")


def test_reports_show_the_tiers_side_by_side_and_the_drop():
    from ingest.audit.job import AuditRun
    from ingest.audit.reconcile import exit_code
    from ingest.audit.report_html import render
    from ingest.audit.report_json import json_lines, summary

    rows = sorted(crash_then_gap_rows(TIER_SOURCE, tiered=True).values(), key=lambda r: r["window_start_ms"])
    run = AuditRun("r1", T0 + 10 * W, T0, T0 + 6 * W, rows, exit_code(rows), inputs={})
    text = summary(run)
    assert "causes lost_before_source=10; tiers producers 40 > source 30 > target 30 > warehouse 30 (drop at source)" \
        in text
    assert "causes source_retention=20; tiers producers 40 > source 20 > target 20 > warehouse 20 (drop at source)" \
        in text
    first = __import__("json").loads(json_lines(run).splitlines()[0])
    assert (first["tiers"], first["loss_tier"]) == (
        {"producers": 40, "broker": None, "source": 30, "target": 30, "warehouse": 30}, "source")
    page = render(run)
    assert "Counts per tier" in page
    # the drop is highlighted at the source tier, in the window's status colour, with the number lost there
    assert "title='10 lost at this tier'>30 <small>(-10)</small>" in page
    assert "title='20 lost at this tier'>20 <small>(-20)</small>" in page
    assert page.count("<small>(-") == 2


def test_revisions_keep_tiers_and_read_older_revisions_without_them(tmp_path):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ingest.audit import history

    rows = list(crash_then_gap_rows(TIER_SOURCE, tiered=True).values())
    history.write_revision(str(tmp_path), rows, run_id="new", audited_at_ms=2, range_start_ms=A, range_end_ms=B + W)
    old = history.SCHEMA.empty_table().drop_columns(["tiers", "loss_tier"])
    row = {k: v for k, v in rows[0].items() if k in old.column_names}
    table = pa.Table.from_pylist([{**row, "causes": list(row["causes"].items()), "window_start_ms": T0 + 3 * W,
                                   "audit_run_id": "old", "audited_at_ms": 1, "range_start_ms": A,
                                   "range_end_ms": B}], schema=old.schema)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    (tmp_path / "_audit" / "revisions" / history.revision_name(1, "old")).write_bytes(buf.getvalue())
    latest = {r["window_start_ms"]: r for r in history.latest_rows(str(tmp_path))}
    assert (latest[A]["tiers"], latest[A]["loss_tier"]) == (
        {"producers": 40, "broker": None, "source": 30, "target": 30, "warehouse": 30}, "source")
    assert (latest[T0 + 3 * W]["tiers"], latest[T0 + 3 * W]["loss_tier"]) == (None, None)


def test_mirror_windows_make_rows_only_when_the_mirror_read_something():
    mon = aggregate([snap("s1", A, 10, 0, 9)])
    mirror = aggregate([snap("m1", A, 10, None, None), snap("m1", B, 0, None, None),  # B: mirror heartbeat
                        snap("m1", T0 + 2 * W, 4, None, None)])  # read 4 nobody reported or loaded
    rows = by_window(build_rows(params(), mon, [LoadedCount("pv", A, "h", 10, 10)], mirror=mirror))
    assert sorted(rows) == [A, T0 + 2 * W]
    c = rows[T0 + 2 * W]
    assert (c["status"], c["tiers"]) == ("NO_MONITORING", {"producers": 0, "broker": None, "source": 4, "target": 4, "warehouse": 0})
