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
from tests.audit.synth import AUDIT_TOPIC, MIRROR_LOST_TOPIC, MIRROR_TOPIC, T0, W, Destination, events, mirror_lost, mon

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
    assert a["tiers"] == {"producers": 40, "source": 30, "target": 30, "warehouse": 30}
    assert a["missing_id_sample"] == [f"s1:{s}" for s in range(20, 30)]
    assert (b["status"], b["missing"], b["loss_tier"], b["causes"], b["retention_lost"]) == \
        ("RETENTION_LOSS", 20, "source", {"source_retention": 20}, 20)
    assert b["tiers"] == {"producers": 40, "source": 20, "target": 20, "warehouse": 20}
    c = rows[C]  # every tier has all 10, but a lost mirror report may have described it: never COMPLETE
    assert (c["status"], c["missing_report_seqs"], c["loss_tier"]) == ("MONITORING_GAP", [f"{UNIT}:3"], None)
    assert c["tiers"] == {"producers": 10, "source": 10, "target": 10, "warehouse": 10}
    assert b["missing_report_seqs"] == [f"{UNIT}:3"] and a["missing_report_seqs"] == []
    assert run.exit_code == EXIT_DATA_LOSS
    assert (run.inputs["mirror_lost_ranges"], run.inputs["tiered_topics"]) == (1, ["pv"])
