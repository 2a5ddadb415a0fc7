"""Reports, time parsing, ranges, exit codes and the CLI: pure Python, no Spark."""
from __future__ import annotations

import json

import pytest

from ingest.audit import history
from ingest.audit.cli import register  # noqa: F401  (registered through ingest.cli)
from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import AuditRun, audited_range, parse_time
from ingest.audit.reconcile import (EXIT_DATA_LOSS, EXIT_OK, EXIT_PROBLEMS, ROW_FIELDS, AuditParams, build_rows,
                                    exit_code, strip_private)
from ingest.audit.counts import LoadedCount
from ingest.audit.monitoring import ReportGap, Snapshot, aggregate, rebucket
from ingest.audit.report_html import render
from ingest.audit.report_json import read_json_lines, summary, write_json_lines
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
    rows = strip_private(build_rows(params(), aggregate([snap("s", T0, 10)]), [LoadedCount("pv", T0, "h", 10, 10)]))
    assert list(rows[0]) == list(ROW_FIELDS) and rows[0]["status"] == "COMPLETE"
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
    rows = strip_private(build_rows(params(), aggregate([snap("s<b>", T0, 10)]), [LoadedCount("pv", T0, "h", 12, 8)]))
    rows[0]["missing_id_sample"] = ["s<b>:3", "s<b>:4"]
    return rows


def test_json_lines_report_and_summary(tmp_path):
    run = make_run(_loss_row())
    path = write_json_lines(run, tmp_path / "out" / "audit.jsonl")
    back = read_json_lines(path)
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
