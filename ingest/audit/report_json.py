"""The machine-readable report (JSON lines) and the short terminal summary.

``--report PATH`` gets one JSON object per line, one per topic window (plus
``row_type`` ``producer`` rows when asked and one ``out_of_range`` row per
topic with out-of-range timestamps). Fields: ``reconcile.ROW_FIELDS`` plus
``audit_run_id`` and ``audited_at_ms``; docs/audit.md describes each. Among them
``tiers`` (``{"producers", "broker", "source", "target", "warehouse"}``, source and target
null for a single-cluster topic, broker null without broker-tier counts, producers null when only the
brokers counted) and ``loss_tier`` (the first tier whose count drops).

The last line is the run's verdict (:func:`verdict_row`, ``row_type`` ``verdict``):
the same line and exit code the job prints and returns, so a report with no
window rows still says what the audit concluded.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable

from ingest.audit.status import LOSS_STATUSES, NO_PROBLEM_STATUSES
from ingest.audit.times import iso
from ingest.audit.verdict import VERDICT_OF_EXIT, verdict_line

log = logging.getLogger(__name__)


ROW_VERDICT = "verdict"


def verdict_row(run) -> dict:
    """The report's last line: ``status`` OK, DATA_LOSS, PROBLEMS or NOTHING_JUDGED, and why."""
    windows = [r for r in run.rows if r["row_type"] == "window"]
    return {
        "row_type": ROW_VERDICT, "status": VERDICT_OF_EXIT.get(run.exit_code, str(run.exit_code)),
        "exit_code": run.exit_code, "verdict": verdict_line(run), "nothing_judged": run.nothing_judged,
        "range_start_ms": run.range_start_ms, "range_end_ms": run.range_end_ms,
        "windows": len(windows), "windows_judged": sum(1 for r in windows if r["judged"]),
        "figures": dict(getattr(run, "figures", None) or {}),  # the run's figures (ingest.audit.job.run_figures)
    }


def json_lines(run) -> str:
    out = []
    for row in [*run.rows, verdict_row(run)]:
        out.append(json.dumps({**row, "audit_run_id": run.run_id, "audited_at_ms": run.audited_at_ms},
                              sort_keys=False, separators=(",", ":")))
    return "\n".join(out) + "\n"


def write_json_lines(run, path: str | Path) -> Path:
    """Write the report atomically (temp file + rename) and return its path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json_lines(run), encoding="utf-8")
    tmp.replace(p)
    return p


TIER_ORDER = ("producers", "broker", "source", "target", "warehouse")


def tiers_text(row: dict) -> str:
    """``producers 40 > source 30 > target 30 > warehouse 30 (drop at source)``; tiers not counted are left out."""
    tiers = row.get("tiers") or {}
    parts = [f"{t} {tiers[t]}" for t in TIER_ORDER if tiers.get(t) is not None]
    if not parts:
        return "-"
    drop = f" (drop at {row['loss_tier']})" if row.get("loss_tier") else ""
    return " > ".join(parts) + drop


def _window_label(row: dict) -> str:
    if row["row_type"] == "out_of_range":
        return "out-of-range timestamps"
    return f"{iso(row['window_start_ms'])}-{iso(row['window_end_ms'])[11:]}"


def summary(run, *, max_problems: int = 15) -> str:
    """A few lines for the terminal and the Airflow log: verdict, counts per status, worst windows."""
    counts = run.status_counts()
    windows = [r for r in run.rows if r["row_type"] != "producer"]
    judged = sum(1 for r in windows if r["row_type"] == "window" and r["judged"])
    lines = [
        f"audit {run.run_id}: {verdict_line(run)}",
        f"  windows {iso(run.range_start_ms)} .. {iso(run.range_end_ms)} UTC, {len(windows)} rows, {judged} judged; "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
    ]
    problems = [r for r in windows if r["status"] not in NO_PROBLEM_STATUSES]
    problems.sort(key=lambda r: (r["status"] not in LOSS_STATUSES, -(r["missing"] or 0), r["topic"]))
    for r in problems[:max_problems]:
        comp = "-" if r["completeness"] is None else f"{r['completeness']:.4f}"
        causes = ", ".join(f"{k}={v}" for k, v in r["causes"].items()) or "-"
        lines.append(
            f"  {r['status']:<15} {r['topic']} {_window_label(r)}: acked {r['produced_acked']}, "
            f"loaded {r['loaded_distinct']} distinct / {r['loaded_rows']} rows, missing {r['missing']}, "
            f"completeness {comp}; causes {causes}; tiers {tiers_text(r)}"
        )
    if len(problems) > max_problems:
        lines.append(f"  ... {len(problems) - max_problems} more problem windows in the report")
    return "\n".join(lines)


def status_table(rows: Iterable[dict]) -> str:
    """Plain-text table of rows (used by ``ingest audit show``)."""
    head = (f"{'topic':<24} {'window (UTC)':<24} {'status':<15} {'acked':>8} {'distinct':>8} {'dups':>6} "
            f"{'missing':>7} {'complete':>9}  loss tier")
    lines = [head, "-" * len(head)]
    for r in rows:
        comp = "-" if r["completeness"] is None else f"{r['completeness']:.4f}"
        lines.append(
            f"{r['topic'][:24]:<24} {_window_label(r)[:24]:<24} {r['status']:<15} {r['produced_acked']:>8} "
            f"{r['loaded_distinct']:>8} {r['duplicates']:>6} {r['missing']:>7} {comp:>9}  {r.get('loss_tier') or '-'}"
        )
    return "\n".join(lines)
