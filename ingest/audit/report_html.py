"""The human-readable report: one self-contained HTML page (inline CSS, no scripts, no external assets).

Sections: the verdict; a topic x window completeness heatmap (cell colour =
status, text = completeness, tooltip = the counts); the tiers side by side per
window (producers | source | target | warehouse, the first tier whose count
drops highlighted in the window's status colour, with the causes); the problem
windows with their counts, causes and missing-id samples; the run's inputs.
Every value from the data is HTML-escaped.
"""
from __future__ import annotations

import html
from pathlib import Path

from ingest.audit.status import LOSS_STATUSES, NO_PROBLEM_STATUSES, Status
from ingest.audit.tiers import drops
from ingest.audit.report_json import TIER_ORDER, iso, summary, tiers_text

COLOURS = {
    Status.COMPLETE: "#2e7d32", Status.PENDING: "#9e9e9e", Status.DATA_LOSS: "#c62828",
    Status.RETENTION_LOSS: "#ad1457", Status.CORRUPTION_LOSS: "#880e4f", Status.OVER_DELIVERY: "#ef6c00", Status.DUPLICATES: "#f9a825",
    Status.NO_MONITORING: "#5d4037", Status.MONITORING_GAP: "#6a1b9a",
}

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#212121}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f5f5f5}td.l,th.l{text-align:left}
.cell{color:#fff;text-align:center;min-width:44px}
.verdict{padding:10px;border-radius:4px;color:#fff;display:inline-block}
.legend span{display:inline-block;color:#fff;padding:2px 6px;margin-right:4px;font-size:11px}
code{font-size:11px}pre{background:#f5f5f5;padding:8px;font-size:12px}
"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def _tooltip(r: dict) -> str:
    return (f"{r['status']}: acked {r['produced_acked']}, attempted {r['produced_attempted']}, failed "
            f"{r['produced_failed']}, loaded {r['loaded_distinct']} distinct / {r['loaded_rows']} rows, "
            f"missing {r['missing']}, duplicates {r['duplicates']}, producers {r['producers_reported']}; "
            f"tiers {tiers_text(r)}")


def heatmap(rows: list[dict]) -> str:
    windows = sorted({r["window_start_ms"] for r in rows if r["row_type"] == "window"})
    topics = sorted({r["topic"] for r in rows})
    cells = {(r["topic"], r["window_start_ms"]): r for r in rows if r["row_type"] == "window"}
    oor = {r["topic"]: r for r in rows if r["row_type"] == "out_of_range"}
    out = ["<table><tr><th class='l'>topic \\ window (UTC)</th>"]
    out += [f"<th title='{_e(iso(w))}'>{_e(iso(w)[5:])}</th>" for w in windows]
    out.append("<th>out of range</th></tr>")
    for t in topics:
        out.append(f"<tr><td class='l'>{_e(t)}</td>")
        for w in windows + [None]:
            r = cells.get((t, w)) if w is not None else oor.get(t)
            if r is None:
                out.append("<td></td>")
                continue
            text = "-" if r["completeness"] is None else f"{100 * r['completeness']:.1f}%"
            out.append(f"<td class='cell' style='background:{COLOURS[r['status']]}' "
                       f"title='{_e(_tooltip(r))}'>{_e(text)}</td>")
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def tiers_table(rows: list[dict]) -> str:
    """Per topic window the count at every tier, side by side; the cell where the count first drops is
    coloured with the window's status and says how many were lost there."""
    windows = [r for r in rows if r["row_type"] != "producer"]
    if not windows:
        return "<p>No windows.</p>"
    head = ("topic", "window (UTC)", "status") + TIER_ORDER + ("loss tier", "causes")
    out = ["<table><tr>" + "".join(f"<th class='l'>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in windows:
        tiers = r.get("tiers") or {}
        window = "out of range" if r["row_type"] == "out_of_range" else iso(r["window_start_ms"])
        lost = drops(tiers) if tiers.get("producers") is not None and tiers.get("warehouse") is not None else {}
        cells = []
        for t in TIER_ORDER:
            n = tiers.get(t)
            if n is None:
                cells.append("<td style='color:#9e9e9e'>-</td>")
            elif t == r.get("loss_tier") and lost.get(t):
                cells.append(f"<td class='cell' style='background:{COLOURS[r['status']]}' "
                             f"title='{lost[t]} lost at this tier'>{n} <small>(-{lost[t]})</small></td>")
            else:
                cells.append(f"<td>{n}</td>")
        causes = ", ".join(f"{_e(k)}: {_e(v)}" for k, v in r["causes"].items()) or "-"
        out.append(
            f"<tr><td class='l'>{_e(r['topic'])}</td><td class='l'>{_e(window)}</td>"
            f"<td class='l' style='color:{COLOURS[r['status']]};font-weight:bold'>{_e(r['status'])}</td>"
            + "".join(cells) + f"<td class='l'>{_e(r.get('loss_tier') or '-')}</td><td class='l'>{causes}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def problems_table(rows: list[dict]) -> str:
    problems = [r for r in rows if r["status"] not in NO_PROBLEM_STATUSES]
    if not problems:
        return "<p>No problem windows.</p>"
    problems.sort(key=lambda r: (r["status"] not in LOSS_STATUSES, r["topic"], r["window_start_ms"] or 0))
    head = ("topic", "producer", "window (UTC)", "status", "attempted", "acked", "failed", "loaded rows",
            "distinct", "duplicates", "missing", "completeness", "retention lost", "causes",
            "missing report_seqs", "missing id sample")
    out = ["<table><tr>" + "".join(f"<th class='l'>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in problems:
        window = "out of range" if r["row_type"] == "out_of_range" else f"{iso(r['window_start_ms'])} - {iso(r['window_end_ms'])[11:]}"
        comp = "-" if r["completeness"] is None else f"{r['completeness']:.4f}"
        causes = "<br>".join(f"{_e(k)}: {_e(v)}" for k, v in r["causes"].items()) or "-"
        out.append(
            "<tr>"
            f"<td class='l'>{_e(r['topic'])}</td><td class='l'>{_e(r['producer'] or 'all')}</td>"
            f"<td class='l'>{_e(window)}</td>"
            f"<td class='l' style='color:{COLOURS[r['status']]};font-weight:bold'>{_e(r['status'])}</td>"
            f"<td>{r['produced_attempted']}</td><td>{r['produced_acked']}</td><td>{r['produced_failed']}</td>"
            f"<td>{r['loaded_rows']}</td><td>{r['loaded_distinct']}</td><td>{r['duplicates']}</td>"
            f"<td>{r['missing']}</td><td>{_e(comp)}</td><td>{r['retention_lost']}</td>"
            f"<td class='l'>{causes}</td>"
            f"<td class='l'><code>{_e(', '.join(r['missing_report_seqs'][:10]))}</code></td>"
            f"<td class='l'><code>{_e(', '.join(r['missing_id_sample'][:10]))}</code></td>"
            "</tr>"
        )
    out.append("</table>")
    return "".join(out)


def render(run) -> str:
    """The whole page as a string."""
    verdict_colour = COLOURS[Status.COMPLETE] if run.exit_code == 0 else (
        COLOURS[Status.DATA_LOSS] if any(r["status"] in LOSS_STATUSES for r in run.rows) else COLOURS[Status.OVER_DELIVERY])
    legend = "".join(f"<span style='background:{c}'>{_e(s)}</span>" for s, c in COLOURS.items())
    inputs = "".join(f"<tr><td class='l'>{_e(k)}</td><td class='l'>{_e(v)}</td></tr>" for k, v in run.inputs.items())
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>Audit {_e(run.run_id)}</title><style>{CSS}</style></head><body>"
        f"<h1>Ingest audit {_e(run.run_id)}</h1>"
        f"<div class='verdict' style='background:{verdict_colour}'>{_e(summary(run).splitlines()[0])}</div>"
        f"<p>Windows {_e(iso(run.range_start_ms))} to {_e(iso(run.range_end_ms))} UTC, audited at "
        f"{_e(iso(run.audited_at_ms))} UTC; exit code {run.exit_code}.</p>"
        f"<h2>Completeness by topic and window</h2><p class='legend'>{legend}</p>{heatmap(run.rows)}"
        f"<h2>Counts per tier</h2><p>Producers acknowledged, read from the source cluster by the mirror, "
        f"acknowledged by the target cluster, distinct in the warehouse; a coloured cell is the first tier where "
        f"the count drops ('-': the topic is not mirrored).</p>{tiers_table(run.rows)}"
        f"<h2>Problem windows</h2>{problems_table(run.rows)}"
        f"<h2>Summary</h2><pre>{_e(summary(run, max_problems=50))}</pre>"
        f"<h2>Inputs of this run</h2><table>{inputs}</table>"
        "<p>How to read this report: docs/audit.md.</p></body></html>"
    )


def write_html(run, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(render(run), encoding="utf-8")
    tmp.replace(p)
    return p
