"""The machine-readable report (JSON lines) and the short terminal summary.

``--report PATH`` gets one JSON object per line, one per topic window (plus
``row_type`` ``producer`` rows when asked and one ``out_of_range`` row per
topic with out-of-range timestamps). Fields: ``reconcile.ROW_FIELDS`` plus
``audit_run_id`` and ``audited_at_ms``; docs/audit.md describes each. Among them
``tiers`` (``{"producers", "source", "target", "warehouse"}``, source and target
null for a single-cluster topic) and ``loss_tier`` (the first tier whose count drops).
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from ingest.audit.status import LOSS_STATUSES, NO_PROBLEM_STATUSES

log = logging.getLogger(__name__)


def iso(ms: int | None) -> str:
    """``2026-11-22 10:20`` (UTC) for a window edge, with seconds when the edge is not on a
    whole minute (sub-minute windows must not print identical labels); ``-`` for None."""
    if ms is None:
        return "-"
    fmt = "%Y-%m-%d %H:%M" if ms % 60_000 == 0 else "%Y-%m-%d %H:%M:%S"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime(fmt)


def json_lines(run) -> str:
    out = []
    for row in run.rows:
        out.append(json.dumps({**row, "audit_run_id": run.run_id, "audited_at_ms": run.audited_at_ms},
                              sort_keys=False, separators=(",", ":")))
    return "\n".join(out) + ("\n" if out else "")


def write_json_lines(run, path: str | Path) -> Path:
    """Write the report atomically (temp file + rename) and return its path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json_lines(run), encoding="utf-8")
    tmp.replace(p)
    return p


TIER_ORDER = ("producers", "source", "target", "warehouse")


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
    judged = sum(1 for r in windows if r["judged"])
    lossy = [r for r in windows if r["status"] in LOSS_STATUSES]
    loss = sum(r["missing"] for r in lossy)
    failed = sum(r["causes"].get("producer_failed", 0) for r in lossy)
    if run.exit_code == 0:
        verdict = "OK: every judged window is complete"
    elif lossy or any(r["status"] in LOSS_STATUSES for r in run.rows):
        extra = f", {failed} failed sends never delivered" if failed else ""
        verdict = f"DATA LOSS: {loss} acknowledged messages missing{extra} (exit {run.exit_code})"
    else:
        verdict = f"PROBLEMS without loss (exit {run.exit_code})"
    lines = [
        f"audit {run.run_id}: {verdict}",
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
    head = f"{'topic':<24} {'window (UTC)':<24} {'status':<15} {'acked':>8} {'distinct':>8} {'dups':>6} {'missing':>7} {'complete':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        comp = "-" if r["completeness"] is None else f"{r['completeness']:.4f}"
        lines.append(
            f"{r['topic'][:24]:<24} {_window_label(r)[:24]:<24} {r['status']:<15} {r['produced_acked']:>8} "
            f"{r['loaded_distinct']:>8} {r['duplicates']:>6} {r['missing']:>7} {comp:>9}"
        )
    return "\n".join(lines)
