"""The tiered audit over real committed files (Parquet and Avro), audited with run_audit on the shared Spark session.

The mirror's tier counts (topic audit-mirror, the producers' monitoring schema)
and its lost ranges (topic audit-mirror-lost, MirrorLostRange records) are
loaded like any topic; the audit reads them from the loader's committed state.
Scenario: see tests/audit/test_attribution.py (a crash-lost tail of 10 in window
A, then 20 deleted by the source's retention before the mirror read them).
"""
from __future__ import annotations

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.audit.reconcile import EXIT_DATA_LOSS
from ingest.clock import FakeClock
from tests.audit.synth import (AUDIT_TOPIC, MIRROR_LOST_TOPIC, MIRROR_TOPIC, T0, W, Destination, events, lost_range,
                               mirror_lost, mon)

GRACE = 60_000
LATE = T0 + 6 * W + GRACE
A, B, C = T0, T0 + W, T0 + 2 * W
UNIT = "mirror:mirror:dc1:pv:0-0"


def audit(dest: Destination, spark, **overrides):
    cfg = AUDIT_CONFIG.parse({"destination": dest.root, "grace.ms": GRACE, "window.lookback": 6, **overrides})
    return run_audit(spark, cfg, clock=FakeClock(LATE), from_ms=T0, to_ms=T0 + 6 * W, run_id="tiers")


@pytest.fixture(params=["parquet", "avro"])
def dest(request, tmp_path):
    return Destination(tmp_path / "dest", request.param)


def test_crash_lost_tail_and_source_retention_in_adjacent_windows_and_a_lost_mirror_report(spark, dest):
    loaded_a = events("s1", range(0, 20), A) + events("s1", range(30, 40), A + 20)  # 20..29 lost in the crash
    gap = mirror_lost("pv", 20, A + 29, B, [("s1", 39, 60), ("s9", None, 3)], event_id="gap-1")
    dest.load({
        "pv": loaded_a + events("s1", range(60, 80), B) + events("s1", range(80, 90), C),
        AUDIT_TOPIC: [mon("s1", "pv", A, report_seq=1, acked=40, seq_min=0, seq_max=39),
                      mon("s1", "pv", B, report_seq=2, acked=40, seq_min=40, seq_max=79),
                      mon("s1", "pv", C, report_seq=3, acked=10, seq_min=80, seq_max=89)],
        MIRROR_TOPIC: [mon(UNIT, "pv", A, report_seq=1, acked=30, server="mirror-host"),
                       mon(UNIT, "pv", B, report_seq=2, acked=20, server="mirror-host"),
                       # report_seq 3 of the mirror's session never arrived
                       mon(UNIT, "pv", C, report_seq=4, acked=10, server="mirror-host")],
        MIRROR_LOST_TOPIC: [gap, dict(gap)],  # re-published copy: counted once
    })
    run = audit(dest, spark)
    rows = {r["window_start_ms"]: r for r in run.rows if r["row_type"] == "window"}
    assert {r["topic"] for r in run.rows} == {"pv"}  # the audit's own input topics are not audited
    a, b = rows[A], rows[B]
    assert (a["status"], a["missing"], a["loss_tier"], a["causes"]) == ("DATA_LOSS", 10, "source", {"lost_before_source": 10})
    assert a["tiers"] == {"producers": 40, "broker": None, "source": 30, "target": 30, "warehouse": 30}
    assert a["missing_id_sample"] == [f"s1:{s}" for s in range(20, 30)]
    assert (b["status"], b["missing"], b["loss_tier"], b["causes"], b["retention_lost"]) == \
        ("RETENTION_LOSS", 20, "source", {"source_retention": 20}, 20)
    assert b["tiers"] == {"producers": 40, "broker": None, "source": 20, "target": 20, "warehouse": 20}
    c = rows[C]  # every tier has all 10, but a lost mirror report may have described it: never COMPLETE
    assert (c["status"], c["missing_report_seqs"], c["loss_tier"]) == ("MONITORING_GAP", [f"{UNIT}:3"], None)
    assert c["tiers"] == {"producers": 10, "broker": None, "source": 10, "target": 10, "warehouse": 10}
    assert b["missing_report_seqs"] == [f"{UNIT}:3"] and a["missing_report_seqs"] == []
    assert run.exit_code == EXIT_DATA_LOSS
    assert (run.inputs["mirror_lost_ranges"], run.inputs["tiered_topics"]) == (1, ["pv"])


def test_single_cluster_loader_gap_with_session_bounds_is_exact(spark, tmp_path):
    """The same scenario without a mirror: the loader's lost range (exact count, bounds (39, 60) for s1) read
    from the committed state; two tiers and the single-cluster cause names."""
    dest = Destination(tmp_path / "d")
    gap = lost_range("pv", 20, A + 29, B, exact=True, bounds=[("s1", 39, 60)])
    dest.load({"pv": events("s1", range(0, 20), A) + events("s1", range(30, 40), A + 20),
               AUDIT_TOPIC: [mon("s1", "pv", A, report_seq=1, acked=40, seq_min=0, seq_max=39),
                             mon("s1", "pv", B, report_seq=2, acked=40, seq_min=40, seq_max=79)]})
    dest.load({"pv": events("s1", range(60, 80), B)}, lost=[gap])
    run = audit(dest, spark)
    rows = {r["window_start_ms"]: r for r in run.rows if r["row_type"] == "window"}
    a, b = rows[A], rows[B]
    assert (a["status"], a["causes"], a["loss_tier"]) == ("DATA_LOSS", {"unexplained_loss": 10}, "warehouse")
    assert (b["status"], b["causes"], b["retention_lost"]) == ("RETENTION_LOSS", {"retention": 20}, 20)
    assert a["tiers"] == {"producers": 40, "broker": None, "source": None, "target": None, "warehouse": 30}
    assert run.inputs["tiered_topics"] == []


def test_spark_gap_atoms_equal_the_pure_rule(spark):
    """counts.gap_atoms (Spark join) groups missing seqs exactly as attribution.atoms_of does, unlisted
    sessions and open bounds included."""
    from ingest.audit.attribution import atoms_of
    from ingest.audit.counts import gap_atoms
    from ingest.lost_ranges import LostRange

    loaded = [("pv", "s1", s, A, "h") for s in (0, 1, 5, 9)] + [("other", "s2", 3, A, "h")]
    ids = spark.createDataFrame(loaded, "topic string, session string, seq long, time long, server string")
    ranges = [("pv", A, "s1", 0, 9), ("pv", A, "s2", 0, 5), ("pv", B, "s1", 10, 12)]
    gaps = [LostRange("pv", 0, 0, 1, 1, 0, 5, None, None, messages_exact=True, session_bounds=(("s1", 1, 5),),
                      ident="g1"),
            LostRange("pv", 0, 0, 2, 2, 0, 5, None, None, messages_exact=True,
                      session_bounds=(("s1", 6, None), ("s3", None, 2)), ident="g2")]
    got = gap_atoms(spark, ids, ranges, [(g.ident, g.topic, g.session_bounds) for g in gaps])
    every = {(s, q) for _, s, q, _, _ in loaded}
    missing = {(t_ws, s): [q for q in range(lo, hi + 1) if (s, q) not in every] for _, t_ws, s, lo, hi in ranges}
    expected = {("pv",) + k: v for k, v in atoms_of(missing, gaps).items()}
    assert got == expected
    # s1 in A: 2,3,4 in g1 only; 7,8 in g2 only (6 is its bound: in none); s2 (listed by neither, its seq 3
    # loaded in another topic): 0,1,2,4,5 in both; s1 in B: 10..12 in g2
    assert got[("pv", A, "s1")] == [(frozenset({"g1"}), 3), (frozenset({"g2"}), 2)]
    assert got[("pv", A, "s2")] == [(frozenset({"g1", "g2"}), 5)]
    assert got[("pv", B, "s1")] == [(frozenset({"g2"}), 3)]
