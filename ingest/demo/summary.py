"""The demo's closing summary: where things are, and one row per topic."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.audit.report_reader import read_report
from ingest.errors import ConfigError


def audit_rows(report: Path) -> list[dict]:
    """Window rows of an audit report (through the one report reader); [] when missing or unreadable."""
    try:
        rows = read_report(report)
    except ConfigError:
        return []
    return [r for r in rows if r.get("row_type", "window") == "window"]


def loaded_rows(warehouse: Path) -> dict[str, int]:
    from ingest.loader.state import LoaderState
    from ingest.storage import open_storage

    out: dict[str, int] = {}
    for f in LoaderState.load(open_storage(str(warehouse))).files():
        out[f.topic] = out.get(f.topic, 0) + f.rows
    return out


def render(work: Path, warehouse: Path, report: Path, produced: dict[str, dict], files_before: dict[str, int],
           files_after: dict[str, int], compaction_summary: Path, elapsed_s: float, audit_code: int) -> str:
    rows = audit_rows(report)
    statuses: dict[str, dict[str, int]] = {}
    for r in rows:
        per = statuses.setdefault(r.get("topic", "?"), {})
        per[r.get("status", "?")] = per.get(r.get("status", "?"), 0) + 1
    loaded = loaded_rows(warehouse)
    topics = sorted(set(produced) | set(loaded) | set(statuses))
    head = f"{'topic':<18} {'acked':>8} {'loaded rows':>12} {'files':>9}  audit windows"
    lines = [head, "-" * (len(head) + 20)]
    for t in topics:
        p: dict[str, Any] = produced.get(t, {})
        acked = str(p.get("acknowledged", "-"))
        files = f"{files_before.get(t, 0)}->{files_after.get(t, 0)}"
        st = ", ".join(f"{k} {v}" for k, v in sorted(statuses.get(t, {}).items())) or "-"
        lines.append(f"{t:<18} {acked:>8} {loaded.get(t, 0):>12} {files:>9}  {st}")
    html = report.with_suffix(".html")
    verdict = {0: "every judged window COMPLETE", 3: "DATA LOSS found", 4: "problems found"}.get(audit_code, f"exit {audit_code}")
    out = [
        "=" * 72,
        f"demo finished in {elapsed_s:.0f}s; audit: {verdict}",
        f"data (committed files, {'+'.join(sorted({p.suffix[1:] for p in warehouse.rglob('*.*') if p.suffix in ('.avro', '.parquet')})) or 'none'}):",
        f"  {warehouse}",
        f"audit report: {html if html.exists() else report}",
        f"  (machine-readable: {report})" if html.exists() else "",
        f"compaction summary: {compaction_summary}",
        f"logs of every process: {work / 'logs'}",
        "",
        *lines,
        "",
        "files: committed data files before -> after compaction; loaded rows include at-least-once",
        "duplicates, which the audit counts once and compaction removes.",
        "=" * 72,
    ]
    return "\n".join(line for line in out if line is not None)
