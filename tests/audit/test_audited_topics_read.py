"""The distinct counts read only the audited topics' files, while a seq lost from an audited topic but
loaded in another topic stays "not missing" for the exact attribution (as for the missing-id sample).

Window T0 of ``pv`` (the only audited topic): session s1 acked seqs 0..39, 20..29 never loaded in ``pv``;
seq 25 is loaded in ``clicks``. A lost range of ``pv`` (10 messages, exact) lies between s1's seqs 19 and 30.
The range can hold only the 9 seqs nothing loaded: 9 retention, 1 unexplained.
"""
from __future__ import annotations

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.clock import FakeClock
from tests.audit.synth import AUDIT_TOPIC, T0, W, Destination, events, lost_range, mon


def test_a_seq_loaded_only_in_a_non_audited_topic_is_no_candidate_of_a_lost_range(spark, tmp_path):
    dest = Destination(tmp_path / "dest")
    pv = events("s1", [q for q in range(40) if not 20 <= q <= 29], T0 + 10)
    clicks = events("s1", [25], T0 + 20)
    mons = [mon("s1", "pv", T0, report_seq=1, acked=40, seq_min=0, seq_max=39)]
    gap = lost_range("pv", 10, T0 + 5, T0 + 30, exact=True, bounds=[("s1", 19, 30)])
    dest.load({"pv": pv, "clicks": clicks, AUDIT_TOPIC: mons}, lost=[gap])
    cfg = AUDIT_CONFIG.parse({"destination": dest.root, "grace.ms": 0, "window.lookback": 3, "topics": "pv"})
    run = run_audit(spark, cfg, clock=FakeClock(T0 + 3 * W), from_ms=T0, to_ms=T0 + W, run_id="audited")
    row = next(r for r in run.rows if r["row_type"] == "window" and r["topic"] == "pv" and r["window_start_ms"] == T0)
    assert {r["topic"] for r in run.rows} == {"pv"}
    assert (row["loaded_distinct"], row["missing"]) == (30, 10)
    assert row["retention_lost"] == 9, row
    assert row["causes"].get("unexplained_loss") == 1, row
    assert "s1:25" not in row["missing_id_sample"] and row["missing_id_sample"][:2] == ["s1:20", "s1:21"]
