"""The demo's closing summary: where things are, and one row per topic."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.audit.report_reader import read_report
from ingest.errors import ConfigError
from ingest.jobs_support import EXIT_NOTHING_JUDGED
from ingest.loader.state import LoaderState
from ingest.storage import open_storage


def audit_rows(report: Path) -> list[dict]:
    """Window rows of an audit report (through the one report reader); [] when missing or unreadable."""
    try:
        rows = read_report(report)
    except ConfigError:
        return []
    return [r for r in rows if r.get("row_type", "window") == "window"]


def audit_verdict(audit_code: int, report: Path) -> str:
    """The audit's outcome in words; for exit 5 the report's own "NOTHING JUDGED: <why>" line."""
    if audit_code == EXIT_NOTHING_JUDGED:
        try:
            rows = read_report(report)
        except ConfigError:
            rows = []
        line = next((r.get("verdict") for r in rows if r.get("row_type") == "verdict"), None)
        return line or "NOTHING JUDGED: no window of the range was judged (exit 5)"
    return {0: "every judged window COMPLETE", 3: "DATA LOSS found", 4: "problems found"}.get(
        audit_code, f"exit {audit_code}")


def loaded_rows(warehouse: Path) -> dict[str, int]:
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
    verdict = audit_verdict(audit_code, report)
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


TIER_NAMES = ("producers", "source", "target", "warehouse")


def _clock(ms: object) -> str:
    from datetime import datetime, timezone

    if not isinstance(ms, int):
        return "?"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M:%S")


def tier_lines(rows: list[dict]) -> list[str]:
    """One line per topic window: the count at every tier, the status and the tier where it dropped."""
    tiered = [r for r in rows if isinstance(r.get("tiers"), dict)]
    if not tiered:
        return ["tiers per window: NOT REPORTED (the audit's rows carry no `tiers`: it compared producers with "
                "the warehouse only)"]
    head = (f"{'topic':<12} {'window (UTC)':<12} " + " ".join(f"{t:>10}" for t in TIER_NAMES)
            + f"  {'status':<15} loss tier")
    out = ["tiers per window (producers acked -> source read -> target acked -> warehouse distinct):", head,
           "-" * len(head)]
    for r in sorted(tiered, key=lambda r: (str(r.get("topic")), r.get("window_start_ms") or 0)):
        counts = " ".join(f"{'-' if r['tiers'].get(t) is None else r['tiers'][t]:>10}" for t in TIER_NAMES)
        out.append(f"{str(r.get('topic')):<12} {_clock(r.get('window_start_ms')):<12} {counts}  "
                   f"{str(r.get('status')):<15} {r.get('loss_tier') or '-'}")
    return out


def render_datacenters(work: Path, warehouse: Path, report: Path, produced: dict[str, dict], latency: Any,
                       elapsed_s: float, audit_code: int) -> str:
    """The datacenters demo's summary: latency line, per-producer acks, tiers per window."""
    rows = audit_rows(report)
    loaded = loaded_rows(warehouse)
    verdict = audit_verdict(audit_code, report)
    html = report.with_suffix(".html")
    acked = [f"  {name:<22} acked {p.get('acknowledged', '-')}" for name, p in sorted(produced.items())]
    out = [
        "=" * 72,
        f"demo (datacenters) finished in {elapsed_s:.0f}s; audit: {verdict}",
        latency.line() if latency is not None else "end-to-end latency: NOT MEASURED (no event reached the offline cluster)",
        f"data: {warehouse}",
        f"audit report: {html if html.exists() else report}",
        f"logs of every process: {work / 'logs'}",
        "",
        "producers (per datacenter):",
        *acked,
        "loaded rows (warehouse, from the offline cluster): "
        + (", ".join(f"{t} {n}" for t, n in sorted(loaded.items()) if not t.startswith("audit")) or "none"),
        "",
        *tier_lines(rows),
        "=" * 72,
    ]
    return "\n".join(out)
