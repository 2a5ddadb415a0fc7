"""Reports, time parsing, ranges, exit codes and the CLI: pure Python, no Spark."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from ingest.audit import history
from ingest.audit.cli import register  # noqa: F401  (registered through ingest.cli)
from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import AuditRun, audited_range, parse_time
from ingest.audit.reconcile import (EXIT_DATA_LOSS, EXIT_OK, EXIT_PROBLEMS, ROW_FIELDS, AuditParams, build_rows,
                                    exit_code, sample_requests)
from ingest.audit.counts import LoadedCount
from ingest.audit.monitoring_events import ReportGap, Snapshot, aggregate, rebucket
from ingest.audit.report_html import render
from ingest.audit.report_json import summary, write_json_lines
from ingest.audit.report_reader import read_report
from ingest.audit.status import COMPACTABLE_STATUSES, LOSS_STATUSES, NO_PROBLEM_STATUSES, Status
from ingest.cli import main
from ingest.errors import ConfigError

W = 600_000
T0 = 1_763_798_400_000


def snap(session, ws, acked, *, report_seq=1, failed=0, heartbeat=False, server="h", topic="pv", size=W):
    return Snapshot(session, server, topic, ws, ws + size, 1, acked + failed, acked, failed, acked * 10, 0,
                    max(acked - 1, 0), True, heartbeat, ws + size + 1, report_seq)


def params(now=T0 + 10 * W, **kw):
    return AuditParams(window_ms=W, grace_ms=0, threshold=0.999, now_ms=now, lo_ms=T0, hi_ms=T0 + 6 * W,
                       plausible_hi_ms=now + 86_400_000, **kw)


def make_run(rows, code=None):
    return AuditRun("r1", T0 + 10 * W, T0, T0 + 6 * W, rows, exit_code(rows) if code is None else code,
                    inputs={"destination": "/d", "topics": ["pv"]})


def test_rows_carry_every_documented_field_and_exit_codes_follow_statuses():
    rows = (build_rows(params(), aggregate([snap("s", T0, 10)]), [LoadedCount("pv", T0, "h", 10, 10)]))
    assert list(rows[0]) == list(ROW_FIELDS) and rows[0]["status"] == "COMPLETE"  # no private keys
    assert rows[0]["status"] is Status.COMPLETE and json.dumps(rows[0]["status"]) == '"COMPLETE"'
    assert exit_code(rows) == EXIT_OK
    assert exit_code([{**rows[0], "status": "DUPLICATES"}]) == EXIT_PROBLEMS
    assert exit_code([{**rows[0], "status": "RETENTION_LOSS"}, {**rows[0], "status": "DUPLICATES"}]) == EXIT_DATA_LOSS


def test_threshold_tolerates_a_tiny_shortfall_but_reports_it():
    rows = build_rows(params(), aggregate([snap("s", T0, 10_000)]), [LoadedCount("pv", T0, "h", 9_995, 9_995)])
    assert (rows[0]["status"], rows[0]["missing"], rows[0]["completeness"]) == ("COMPLETE", 5, 0.9995)
    strict = build_rows(AuditParams(**{**params().__dict__, "threshold": 1.0}), aggregate([snap("s", T0, 10_000)]),
                        [LoadedCount("pv", T0, "h", 9_995, 9_995)])
    assert strict[0]["status"] == "DATA_LOSS" and strict[0]["causes"] == {"unexplained_loss": 5}


def test_producer_failures_are_loss_only_when_configured():
    mon = aggregate([snap("s", T0, 8, failed=4)])
    loaded = [LoadedCount("pv", T0, "h", 8, 8)]
    assert build_rows(params(), mon, loaded)[0]["status"] == "DATA_LOSS"
    relaxed = build_rows(params(producer_failures_are_loss=False), mon, loaded)[0]
    assert (relaxed["status"], relaxed["causes"]) == ("COMPLETE", {"producer_failed": 4})


def test_gap_at_the_start_of_a_session_taints_its_early_windows_only():
    gap = ReportGap("s", "h", 1, 1, None, T0 + 2 * W)  # report_seq 1 lost, report 2 emitted at T0+2W
    mon = aggregate([snap("s", T0, 5, report_seq=2), snap("s", T0 + 4 * W, 5, report_seq=3)])
    rows = build_rows(params(), mon, [LoadedCount("pv", T0, "h", 5, 5), LoadedCount("pv", T0 + 4 * W, "h", 5, 5)],
                      gaps=[gap], session_topics={("s", "pv")})
    by = {r["window_start_ms"]: r for r in rows}
    assert by[T0]["status"] == "MONITORING_GAP" and by[T0]["missing_report_seqs"] == ["s:1"]
    assert by[T0 + 4 * W]["status"] == "COMPLETE"


def test_smaller_producer_windows_are_rebucketed_and_odd_ones_refused():
    minute = [snap("s", T0 + i * 60_000, 2, size=60_000) for i in range(10)]
    agg = aggregate(rebucket(minute, W))
    assert agg[("pv", T0)].acked == 20
    with pytest.raises(ConfigError, match="window.ms=600000"):
        rebucket([snap("s", T0, 1, size=7 * 60_000)], W)


def test_parse_time_and_audited_range():
    assert parse_time("1763798400000") == T0
    assert parse_time("2025-11-22T08:00:00Z") == T0 == parse_time("2025-11-22T08:00:00")
    with pytest.raises(ConfigError, match="invalid time 'yesterday'"):
        parse_time("yesterday")
    assert audited_range(T0 + 5, W, 3) == (T0 - 2 * W, T0 + W)
    assert audited_range(T0 + 99 * W, W, 2, T0 + 1, T0 + 6 * W) == (T0, T0 + 6 * W)
    with pytest.raises(ConfigError, match="before --to"):
        audited_range(T0, W, 1, T0 + W, T0)


def test_a_mistyped_destination_is_an_error_not_an_empty_audit(tmp_path):
    from ingest.audit.inputs import load_state

    with pytest.raises(ConfigError, match="does not exist"):
        load_state(str(tmp_path / "no-such-dest"))
    assert load_state(str(tmp_path)).files == ()


def test_config_defaults_and_bad_values():
    cfg = AUDIT_CONFIG.parse({"destination": "/d"})
    assert (cfg["audit.topic"], cfg["threshold"], cfg["window.ms"]) == ("audit-monitoring", 0.999, 600_000)
    with pytest.raises(ConfigError, match="'threshold'.*allowed is a number in \\[0.0, 1.0\\]"):
        AUDIT_CONFIG.parse({"destination": "/d", "threshold": "1.5"})
    with pytest.raises(ConfigError, match="missing required audit config key 'destination'"):
        AUDIT_CONFIG.parse({})


def _loss_row():
    rows = (build_rows(params(), aggregate([snap("s<b>", T0, 10)]), [LoadedCount("pv", T0, "h", 12, 8)]))
    rows[0]["missing_id_sample"] = ["s<b>:3", "s<b>:4"]
    return rows


def test_json_lines_report_and_summary(tmp_path):
    run = make_run(_loss_row())
    path = write_json_lines(run, tmp_path / "out" / "audit.jsonl")
    back = read_report(path)
    assert back[0]["status"] == "DATA_LOSS" and back[0]["audit_run_id"] == "r1" and back[0]["missing"] == 2
    assert json.loads(path.read_text().splitlines()[0])["causes"] == {"unexplained_loss": 2, "duplicates": 4}
    text = summary(run)
    assert "DATA LOSS: 2 acknowledged messages missing (exit 3)" in text
    assert "unexplained_loss=2" in text


def test_html_report_is_self_contained_and_escaped():
    page = render(make_run(_loss_row()))
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page and "src=" not in page
    assert "s&lt;b&gt;:3" in page and "s<b>" not in page
    assert "DATA_LOSS" in page and "Completeness by topic and window" in page and "Inputs of this run" in page


def test_history_revisions_and_cli_show(tmp_path, capsys):
    rows = _loss_row()
    history.write_revision(str(tmp_path), rows, run_id="a", audited_at_ms=1, range_start_ms=T0, range_end_ms=T0 + W)
    fixed = [{**rows[0], "status": "COMPLETE"}]
    history.write_revision(str(tmp_path), fixed, run_id="b", audited_at_ms=2, range_start_ms=T0, range_end_ms=T0 + W)
    assert [r["status"] for r in history.read_history(str(tmp_path)).to_pylist()] == ["DATA_LOSS", "COMPLETE"]
    latest = history.latest_rows(str(tmp_path))
    assert len(latest) == 1 and latest[0]["status"] == "COMPLETE" and latest[0]["causes"] == {"unexplained_loss": 2, "duplicates": 4}
    assert main(["audit", "show", "--destination", str(tmp_path)]) == 0
    assert "COMPLETE" in capsys.readouterr().out
    report = write_json_lines(make_run(rows), tmp_path / "r.jsonl")
    assert main(["audit", "show", "--report", str(report), "--problems"]) == 1
    assert "DATA_LOSS" in capsys.readouterr().out


def test_out_of_range_rows_are_per_topic_even_with_producer_rows():
    mon = [snap("s", T0, 2), snap("s", 0, 1)]
    loaded = [LoadedCount("pv", T0, "h", 2, 2), LoadedCount("pv", None, "h", 1, 1)]
    rows = build_rows(params(), aggregate(mon), loaded, by_producer_monitoring=aggregate(mon, by_server=True))
    kinds = sorted((r["row_type"], r["producer"]) for r in rows)
    assert kinds == [("out_of_range", None), ("producer", "h"), ("window", None)]
    oor = next(r for r in rows if r["row_type"] == "out_of_range")
    assert (oor["status"], oor["produced_acked"], oor["loaded_distinct"], oor["window_start_ms"]) == ("COMPLETE", 1, 1, None)


def test_window_labels_stay_distinct_for_sub_minute_windows():
    from ingest.audit.report_json import iso

    base = 1_795_319_340_000  # a whole minute
    labels = [iso(base + i * 10_000) for i in range(6)]
    assert len(set(labels)) == 6
    assert iso(base) == "2026-11-22 03:49" and iso(base + 10_000) == "2026-11-22 03:49:10"


def test_status_sets_name_their_meaning_and_match_plain_strings_read_back():
    assert {str(s) for s in Status} == {"COMPLETE", "PENDING", "DATA_LOSS", "RETENTION_LOSS", "CORRUPTION_LOSS",
                                        "OVER_DELIVERY", "DUPLICATES", "NO_MONITORING", "MONITORING_GAP"}
    assert "CORRUPTION_LOSS" in LOSS_STATUSES
    assert "PENDING" in NO_PROBLEM_STATUSES and "PENDING" not in COMPACTABLE_STATUSES  # not judged: not compactable
    assert COMPACTABLE_STATUSES < NO_PROBLEM_STATUSES and not LOSS_STATUSES & NO_PROBLEM_STATUSES
    assert f"{Status.DATA_LOSS}" == "DATA_LOSS"  # formatting gives the report text, not "Status.DATA_LOSS"


def test_missing_id_sample_requests_come_from_the_monitoring_not_the_rows():
    mon = aggregate([snap("s1", T0, 10), snap("s2", T0, 5), snap("s1", T0 + W, 3)])
    rows = build_rows(params(), mon, [LoadedCount("pv", T0, "h", 12, 12), LoadedCount("pv", T0 + W, "h", 3, 3)])
    assert [r["missing"] for r in rows] == [3, 0]
    assert sorted(sample_requests(rows, mon)) == [("pv", T0, "s1", 0, 9), ("pv", T0, "s2", 0, 4)]


def test_report_reader_accepts_every_report_form_and_names_a_bad_line(tmp_path):
    row = {"topic": "pv", "row_type": "window", "window_start_ms": T0, "status": "COMPLETE"}
    lines = tmp_path / "a.jsonl"
    lines.write_text(json.dumps(row) + "\n\n" + json.dumps({**row, "status": "PENDING"}) + "\n")
    assert [r["status"] for r in read_report(lines)] == ["COMPLETE", "PENDING"]
    doc = tmp_path / "d"
    doc.mkdir()
    (doc / "report.json").write_text(json.dumps({"windows": [{"topic": "pv", "start_ms": T0, "status": "COMPLETE"},
                                                             {"topic": "pv", "window_start": "2025-11-22T08:10:00Z",
                                                              "status": "COMPLETE"}]}))
    assert [r["window_start_ms"] for r in read_report(doc)] == [T0, T0 + W]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row) + "\nnot json\n")
    with pytest.raises(ConfigError, match=r"bad.jsonl line 2 is not an audit report row"):
        read_report(bad)
    with pytest.raises(ConfigError, match="cannot read audit report"):
        read_report(tmp_path / "absent.jsonl")


def test_a_run_revision_is_found_by_its_run_id_and_read_back(tmp_path):
    dest = str(tmp_path / "dest")
    rows = build_rows(params(), aggregate([snap("s", T0, 10)]), [LoadedCount("pv", T0, "h", 10, 10)])
    for at, run_id in [(1, "dag-run.1"), (2, "run.1"), (3, "dag-run.1")]:
        history.write_revision(dest, rows, run_id=run_id, audited_at_ms=at, range_start_ms=T0, range_end_ms=T0 + W)
    path = history.run_revision(dest, "dag-run.1")
    assert path.endswith("000000000000003-dag-run.1.revision")  # the latest try of exactly that run
    back = history.read_revision(path)
    assert back[0]["status"] == "COMPLETE" and back[0]["audit_run_id"] == "dag-run.1"
    with pytest.raises(ConfigError, match="no audit revision of run 'other'"):
        history.run_revision(dest, "other")
    with pytest.raises(ConfigError, match="invalid audit run id 'a/b'"):
        history.run_revision(dest, "a/b")


def test_compaction_gate_reads_the_verdict_of_a_run_revision(tmp_path):
    from ingest.compaction.audit_gate import complete_hours, report_range

    dest = str(tmp_path / "dest")
    hour = T0 - T0 % 3_600_000 + 3_600_000
    p = AuditParams(window_ms=W, grace_ms=0, threshold=0.999, now_ms=hour + 20 * W, lo_ms=hour, hi_ms=hour + 12 * W,
                    plausible_hi_ms=hour + 100 * W)
    mon = aggregate([snap("s", hour + i * W, 10) for i in range(12)])
    loaded = [LoadedCount("pv", hour + i * W, "h", 10 if i != 7 else 9, 10 if i != 7 else 9) for i in range(12)]
    rows = build_rows(p, mon, loaded)
    assert [r["status"] for r in rows].count("DATA_LOSS") == 1  # a window of the second hour
    history.write_revision(dest, rows, run_id="r", audited_at_ms=1, range_start_ms=hour, range_end_ms=hour + 12 * W)
    revision = history.run_revision(dest, "r")
    dt = datetime.fromtimestamp(hour / 1000, tz=timezone.utc)
    assert complete_hours([revision]) == {("pv", dt.strftime("%Y-%m-%d"), dt.hour)}
    assert report_range([revision]) == (hour, hour + 12 * W)


def _pending_rows():
    return build_rows(params(now=T0 + 2 * W), aggregate([snap("s", T0 + 2 * W, 4)]),
                      [LoadedCount("pv", T0 + 2 * W, "h", 4, 4)])


def test_nothing_judged_names_its_cause_and_exits_5_below_loss_and_problems():
    from ingest.audit.verdict import exit_code as verdict_exit, nothing_judged_reason

    rng = dict(range_start_ms=T0, range_end_ms=T0 + 6 * W, window_ms=W, grace_ms=W)
    pending = _pending_rows()
    assert [(r["status"], r["judged"]) for r in pending] == [("PENDING", False)]
    why = nothing_judged_reason(pending, now_ms=T0 + 2 * W, **rng)
    assert why == ("every window is still pending until 2025-11-22 08:40 UTC (1 topic window in "
                   "2025-11-22 08:00 .. 2025-11-22 09:00 UTC; a window is judged grace.ms=600000 (10 min) after it ends)")
    assert nothing_judged_reason([], now_ms=T0 + W, **rng) == (
        "no closed window in 2025-11-22 08:00 .. 2025-11-22 09:00 UTC: the first window is judged from "
        "2025-11-22 08:20 UTC (its end + grace.ms=600000)")
    assert nothing_judged_reason([], now_ms=T0 + 9 * W, **rng) == (
        "no monitoring events and no loaded data in 2025-11-22 08:00 .. 2025-11-22 09:00 UTC")
    assert nothing_judged_reason([], now_ms=T0 + 9 * W, producer_window_ms={60_000, 30_000}, **rng).endswith(
        "; the audit's window.ms is 600000 ms (10 min) but the producers' monitoring windows are 30000 ms (30 s), "
        "60000 ms (1 min): set window.ms to 30000 to judge each producer window once it closes")
    assert nothing_judged_reason([], now_ms=T0 + 9 * W, producer_window_ms={W}, **rng).endswith("UTC")
    judged = build_rows(params(), aggregate([snap("s", T0, 10)]), [LoadedCount("pv", T0, "h", 10, 10)])
    assert nothing_judged_reason(judged + pending, now_ms=T0 + 10 * W, **rng) is None  # one judged window is enough
    # precedence 3 > 4 > 5 > 0: an out-of-range problem row (always judged) outranks "nothing judged"
    assert verdict_exit(pending, why) == 5 and verdict_exit(judged, None) == EXIT_OK
    oor = {**pending[0], "row_type": "out_of_range", "judged": True}
    assert verdict_exit(pending + [{**oor, "status": "NO_MONITORING"}], why) == EXIT_PROBLEMS
    assert verdict_exit(pending + [{**oor, "status": "DATA_LOSS"}], why) == EXIT_DATA_LOSS


def test_a_nothing_judged_report_ends_with_its_verdict_and_show_ignores_that_line(tmp_path, capsys):
    run = AuditRun("r5", T0 + 2 * W, T0, T0 + 6 * W, _pending_rows(), 5, inputs={"window_ms": W},
                   nothing_judged="every window is still pending until X")
    path = write_json_lines(run, tmp_path / "a.jsonl")
    last = json.loads(path.read_text().splitlines()[-1])
    assert (last["row_type"], last["status"], last["exit_code"], last["windows"], last["windows_judged"]) == (
        "verdict", "NOTHING_JUDGED", 5, 1, 0)
    assert last["verdict"] == "NOTHING JUDGED: every window is still pending until X (exit 5)"
    assert summary(run).splitlines()[0] == "audit r5: NOTHING JUDGED: every window is still pending until X (exit 5)"
    assert main(["audit", "show", "--report", str(path)]) == 0  # show's codes: 1 when a listed window is a problem
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "run verdict: NOTHING JUDGED: every window is still pending until X (exit 5)"
    assert len(out) == 4 and "PENDING" in out[2]  # header, rule, the one window row, the verdict
    complete = build_rows(params(), aggregate([snap("s", T0, 3)]), [LoadedCount("pv", T0, "h", 3, 3)])
    ok = json.loads(write_json_lines(make_run(complete), tmp_path / "b.jsonl").read_text().splitlines()[-1])
    assert (ok["status"], ok["verdict"], ok["nothing_judged"]) == ("OK", "OK: every judged window is complete (1 judged)", None)


def test_grid_columns_are_continuous_and_long_empty_runs_collapse_into_one_gap_column():
    from ingest.audit.report_html import MAX_EMPTY_COLUMNS, columns, plain

    rows = build_rows(AuditParams(**{**params().__dict__, "hi_ms": T0 + 40 * W}),
                      aggregate([snap("s", T0, 1), snap("s", T0 + 3 * W, 1), snap("s", T0 + 39 * W, 1)]), [])
    run = AuditRun("g", T0, T0, T0 + 40 * W, rows, 0, inputs={"window_ms": W})
    cols = columns(run)
    assert [(c.label, c.windows, c.empty) for c in cols[:5]] == [
        ("2025-11-22 08:00", 1, False), ("2025-11-22 08:10", 1, True), ("2025-11-22 08:20", 1, True),
        ("2025-11-22 08:30", 1, False), ("2025-11-22 08:40 … 2025-11-22 14:20", 35, True)]
    assert 35 > MAX_EMPTY_COLUMNS and len(cols) == 6 and cols[-1].label == "2025-11-22 14:30"
    sub = AuditRun("s", T0, T0, T0 + 60_000, [], 0, inputs={"window_ms": 30_000})
    assert [c.label for c in columns(sub)] == ["2025-11-22 08:00:00", "2025-11-22 08:00:30"]  # one format for all
    assert plain({"a": [1, 2], "b": None, "c": True}) == "a 1, 2, b -, c yes" and plain([]) == "-"


def test_the_demo_summary_says_nothing_judged_with_the_reports_reason(tmp_path):
    from ingest.demo.summary import audit_verdict

    run = AuditRun("d", T0, T0, T0 + W, _pending_rows(), 5, nothing_judged="every window is still pending until Y")
    report = write_json_lines(run, tmp_path / "audit.jsonl")
    assert audit_verdict(5, report) == "NOTHING JUDGED: every window is still pending until Y (exit 5)"
    assert audit_verdict(5, tmp_path / "absent.jsonl") == "NOTHING JUDGED: no window of the range was judged (exit 5)"
    assert (audit_verdict(0, report), audit_verdict(3, report)) == ("every judged window COMPLETE", "DATA LOSS found")
