"""The missing-id samples of a whole audit, against the ids computed here in Python from what was loaded.

Three windows: two with losses (more missing ids than ``sample.size`` in one; in the other a seq missing
from the topic but loaded in another topic, which is not missing), one with duplicates and nothing
missing (a problem window without a sample). The audit leaves no
DataFrame persisted behind it.
"""
from __future__ import annotations

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.audit.reconcile import EXIT_DATA_LOSS
from ingest.clock import FakeClock
from tests.audit.synth import AUDIT_TOPIC, T0, W, Destination, events, mon

SAMPLE = 4
RANGES = {  # window start -> {session: (seq_min, seq_max)} as the producers report them
    T0: {"s1": (0, 99), "s2": (0, 49)},
    T0 + W: {"s1": (100, 149), "s2": (50, 79)},
    T0 + 2 * W: {"s1": (150, 199), "s2": (80, 99)},
}
LOST = {("s1", s) for s in (3, 17, 18, 60, 99)} | {("s2", s) for s in (0, 1, 49)} \
    | {("s1", 170), ("s1", 171), ("s2", 99)}  # windows T0 and T0 + 2W lose ids; T0 + W none
ELSEWHERE = {("s1", 171)}  # lost from pv, loaded in clicks: not missing


def _expected(loaded: set[tuple[str, int]]) -> dict[int, list[str]]:
    """Per window: the first SAMPLE ids (by session, then seq) of its ranges that no topic holds."""
    out = {}
    for ws, ranges in RANGES.items():
        missing = sorted((s, q) for s, (lo, hi) in ranges.items() for q in range(lo, hi + 1) if (s, q) not in loaded)
        out[ws] = [f"{s}:{q}" for s, q in missing[:SAMPLE]]
    return out


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_samples_are_the_first_missing_ids_of_each_problem_window_and_none_elsewhere(spark, tmp_path, fmt):
    dest = Destination(tmp_path / "dest", fmt)
    pv, mons, report_seq = [], [], {"s1": 0, "s2": 0}
    for ws, ranges in RANGES.items():
        for session, (lo, hi) in sorted(ranges.items()):
            pv += events(session, [q for q in range(lo, hi + 1) if (session, q) not in LOST], ws + 10)
            report_seq[session] += 1
            mons.append(mon(session, "pv", ws, report_seq=report_seq[session], acked=hi - lo + 1, seq_min=lo,
                            seq_max=hi))
    pv += events("s1", [120, 121], T0 + W + 500)  # duplicates: no effect on the samples
    clicks = events("s1", [q for _, q in ELSEWHERE], T0 + 2 * W + 20)
    dest.load({"pv": pv, "clicks": clicks, AUDIT_TOPIC: mons})
    loaded = {(e["header"]["session"], e["header"]["seq"]) for e in pv + clicks + mons}

    persisted = spark.sparkContext._jsc.getPersistentRDDs().size()
    cfg = AUDIT_CONFIG.parse({"destination": dest.root, "grace.ms": 0, "window.lookback": 6, "sample.size": SAMPLE,
                              "topics": "pv"})
    run = run_audit(spark, cfg, clock=FakeClock(T0 + 4 * W), from_ms=T0, to_ms=T0 + 3 * W, run_id=f"s{fmt}")

    rows = {r["window_start_ms"]: r for r in run.rows if r["row_type"] == "window" and r["topic"] == "pv"}
    expected = _expected(loaded)
    assert expected[T0] == ["s1:3", "s1:17", "s1:18", "s1:60"]  # 8 missing, the first 4 by session and seq
    assert expected[T0 + W] == [] and expected[T0 + 2 * W] == ["s1:170", "s2:99"]
    assert {ws: r["missing_id_sample"] for ws, r in rows.items()} == expected
    assert {ws: r["missing"] for ws, r in rows.items()} == {T0: 8, T0 + W: 0, T0 + 2 * W: 3}
    assert rows[T0]["status"] == rows[T0 + 2 * W]["status"] == "DATA_LOSS" and rows[T0 + W]["status"] == "DUPLICATES"
    assert run.exit_code == EXIT_DATA_LOSS
    assert spark.sparkContext._jsc.getPersistentRDDs().size() == persisted
