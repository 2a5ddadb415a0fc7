"""The human-readable report: one self-contained HTML page (inline CSS, no scripts, no external assets).

Sections: the verdict (the summary's first line, "NOTHING JUDGED: <why>"
included); a topic x window grid on a continuous time axis (one column per
window of the audited range, windows without any row shown as labelled empty
columns, runs longer than :data:`MAX_EMPTY_COLUMNS` as one gap column; cell
colour = status, cell text = ``distinct loaded/acknowledged``, tooltip = every
count); the tiers side by side per window; the problem windows with their
counts, causes and missing-id samples; the run's inputs; what each status
means, and a link to the documentation.

The header's range names the first and last column of the grid, in the same
label format as the columns (``times.grid_format``). Every value from the data
is HTML-escaped and rendered as plain text (lists joined, mappings as
``key value``), never as a Python repr.
"""
from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from pathlib import Path

from ingest.audit.report_json import TIER_ORDER, summary, tiers_text
from ingest.audit.status import LOSS_STATUSES, NO_PROBLEM_STATUSES, Status
from ingest.audit.tiers import baseline, drops
from ingest.audit.times import grid_format, iso, label
from ingest.audit.verdict import duration, verdict_line
from ingest.jobs_support import EXIT_NOTHING_JUDGED

log = logging.getLogger(__name__)

COLOURS = {
    Status.COMPLETE: "#2e7d32", Status.PENDING: "#9e9e9e", Status.DATA_LOSS: "#c62828",
    Status.RETENTION_LOSS: "#ad1457", Status.CORRUPTION_LOSS: "#880e4f", Status.OVER_DELIVERY: "#ef6c00", Status.DUPLICATES: "#f9a825",
    Status.NO_MONITORING: "#5d4037", Status.MONITORING_GAP: "#6a1b9a",
}
NOTHING_JUDGED_COLOUR = "#455a64"

MEANINGS = {
    Status.COMPLETE: "every acknowledged message is loaded exactly once (or within threshold)",
    Status.PENDING: "not yet grace.ms past its end: counts shown, no verdict yet",
    Status.DATA_LOSS: "acknowledged messages are missing and no recorded lost range explains them",
    Status.RETENTION_LOSS: "the missing messages were deleted by retention before they were loaded",
    Status.CORRUPTION_LOSS: "the missing messages were damaged on a broker's disk (or deleted by retention)",
    Status.OVER_DELIVERY: "more distinct messages loaded than acknowledged",
    Status.DUPLICATES: "complete, but some messages are loaded more than once",
    Status.NO_MONITORING: "data loaded, but no producer reported the window",
    Status.MONITORING_GAP: "a monitoring event that may have described the window is missing",
}
EMPTY_MEANING = "empty: no monitoring event and nothing loaded for the topic in this window"

MAX_EMPTY_COLUMNS = 24
"""A run of up to this many windows with no row at all is shown window by window; longer runs as one gap column."""

DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "audit.md"

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#212121}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f5f5f5}td.l,th.l{text-align:left}
.scroll{overflow-x:auto}
th.col{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;white-space:nowrap;padding:6px 2px}
th.gap{color:#757575;font-style:italic}
.cell{color:#fff;text-align:center;white-space:nowrap}
.empty{background:repeating-linear-gradient(45deg,#fff,#fff 3px,#eeeeee 3px,#eeeeee 6px)}
.verdict{padding:10px;border-radius:4px;color:#fff;display:inline-block}
.legend span{display:inline-block;color:#fff;padding:2px 6px;margin-right:4px;font-size:11px}
.legend span.empty{color:#424242;border:1px solid #bdbdbd}
code{font-size:11px}pre{background:#f5f5f5;padding:8px;font-size:12px;white-space:pre-wrap}
"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def plain(value) -> str:
    """A value as a person reads it: lists joined by commas, mappings as ``key value``, no Python repr."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k} {plain(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return ", ".join(plain(v) for v in items) or "-"
    return str(value)


def cell_text(row: dict) -> str:
    """What a grid cell shows: distinct messages loaded / messages the producers acknowledged."""
    return f"{row['loaded_distinct']}/{row['produced_acked']}"


def _tooltip(r: dict) -> str:
    comp = "-" if r["completeness"] is None else f"{100 * r['completeness']:.1f}%"
    return (f"{r['status']}: acked {r['produced_acked']}, attempted {r['produced_attempted']}, failed "
            f"{r['produced_failed']}, loaded {r['loaded_distinct']} distinct / {r['loaded_rows']} rows, "
            f"missing {r['missing']}, duplicates {r['duplicates']}, completeness {comp}, "
            f"producers {r['producers_reported']}; tiers {tiers_text(r)}")


@dataclass(frozen=True)
class Column:
    """One column of the grid: a window, or a run of windows none of which has a row (``windows`` > 1)."""

    start_ms: int
    last_start_ms: int
    windows: int
    label: str
    empty: bool


def window_size(run) -> int:
    """The audit's window.ms: from the run's inputs, else from its rows (reports of older runs)."""
    size = run.inputs.get("window_ms")
    if size:
        return int(size)
    sizes = {r["window_end_ms"] - r["window_start_ms"] for r in run.rows if r.get("window_end_ms") is not None}
    return min(sizes) if sizes else run.range_end_ms - run.range_start_ms


def columns(run) -> list[Column]:
    """Every window of ``[range_start, range_end)`` in time order; long runs of empty windows as one column."""
    size = window_size(run)
    fmt = grid_format(run.range_start_ms, size)
    used = {r["window_start_ms"] for r in run.rows if r["row_type"] == "window"}
    starts = list(range(run.range_start_ms, run.range_end_ms, size)) if size > 0 else []
    out: list[Column] = []
    i = 0
    while i < len(starts):
        if starts[i] in used:
            out.append(Column(starts[i], starts[i], 1, label(starts[i], fmt), False))
            i += 1
            continue
        j = i
        while j < len(starts) and starts[j] not in used:
            j += 1
        if j - i <= MAX_EMPTY_COLUMNS:
            out += [Column(s, s, 1, label(s, fmt), True) for s in starts[i:j]]
        else:
            out.append(Column(starts[i], starts[j - 1], j - i,
                              f"{label(starts[i], fmt)} … {label(starts[j - 1], fmt)}", True))
        i = j
    return out


def heatmap(run) -> str:
    cols = columns(run)
    if not cols:
        return "<p>No windows in the range.</p>"
    topics = sorted({r["topic"] for r in run.rows if r["row_type"] == "window"})
    cells = {(r["topic"], r["window_start_ms"]): r for r in run.rows if r["row_type"] == "window"}
    out = ["<div class='scroll'><table class='grid'><tr><th class='l'>topic \\ window start (UTC)</th>"]
    for c in cols:
        cls = "col gap" if c.empty else "col"
        title = (f"{c.windows} windows with no monitoring event and no data" if c.windows > 1
                 else "no monitoring event and no data in this window" if c.empty else f"window {c.label} UTC")
        out.append(f"<th class='{cls}' title='{_e(title)}'>{_e(c.label)}</th>")
    out.append("</tr>")
    for t in topics:
        out.append(f"<tr><td class='l'>{_e(t)}</td>")
        for c in cols:
            r = None if c.windows > 1 else cells.get((t, c.start_ms))
            if r is None:
                out.append(f"<td class='empty' title='{_e(EMPTY_MEANING)}'></td>")
                continue
            out.append(f"<td class='cell' style='background:{COLOURS[r['status']]}' "
                       f"title='{_e(_tooltip(r))}'>{_e(cell_text(r))}</td>")
        out.append("</tr>")
    out.append("</table></div>")
    return "".join(out)


def out_of_range_table(rows: list[dict]) -> str:
    oor = [r for r in rows if r["row_type"] == "out_of_range"]
    if not oor:
        return ""
    out = ["<h2>Events with out-of-range timestamps</h2><p>Event times at or before 1970 or later than now + "
           "future.skew.ms, counted per topic outside the grid.</p><table><tr>"
           + "".join(f"<th class='l'>{h}</th>" for h in ("topic", "status", "loaded / acknowledged", "missing"))
           + "</tr>"]
    for r in oor:
        out.append(f"<tr><td class='l'>{_e(r['topic'])}</td><td class='l'>{_e(r['status'])}</td>"
                   f"<td>{_e(cell_text(r))}</td><td>{r['missing']}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _window_text(r: dict, fmt: str) -> str:
    if r["row_type"] == "out_of_range":
        return "out of range"
    return f"{label(r['window_start_ms'], fmt)} to {label(r['window_end_ms'], fmt)}"


def tiers_table(rows: list[dict], fmt: str) -> str:
    """Per topic window the count at every tier, side by side; the cell where the count first drops is
    coloured with the window's status and says how many were lost there."""
    windows = [r for r in rows if r["row_type"] != "producer"]
    if not windows:
        return "<p>No windows.</p>"
    head = ("topic", "window (UTC)", "status") + TIER_ORDER + ("loss tier", "causes")
    out = ["<table><tr>" + "".join(f"<th class='l'>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in windows:
        tiers = r.get("tiers") or {}
        lost = drops(tiers) if baseline(tiers) is not None and tiers.get("warehouse") is not None else {}
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
        out.append(
            f"<tr><td class='l'>{_e(r['topic'])}</td><td class='l'>{_e(_window_text(r, fmt))}</td>"
            f"<td class='l' style='color:{COLOURS[r['status']]};font-weight:bold'>{_e(r['status'])}</td>"
            + "".join(cells) + f"<td class='l'>{_e(r.get('loss_tier') or '-')}</td>"
            f"<td class='l'>{_e(plain(r['causes']))}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def problems_table(rows: list[dict], fmt: str) -> str:
    problems = [r for r in rows if r["status"] not in NO_PROBLEM_STATUSES]
    if not problems:
        return "<p>No problem windows.</p>"
    problems.sort(key=lambda r: (r["status"] not in LOSS_STATUSES, r["topic"], r["window_start_ms"] or 0))
    head = ("topic", "producer", "window (UTC)", "status", "attempted", "acked", "failed", "loaded rows",
            "distinct", "duplicates", "missing", "completeness", "retention lost", "causes",
            "missing report_seqs", "missing id sample")
    out = ["<table><tr>" + "".join(f"<th class='l'>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in problems:
        comp = "-" if r["completeness"] is None else f"{r['completeness']:.4f}"
        causes = "<br>".join(f"{_e(k)} {_e(v)}" for k, v in r["causes"].items()) or "-"
        out.append(
            "<tr>"
            f"<td class='l'>{_e(r['topic'])}</td><td class='l'>{_e(r['producer'] or 'all')}</td>"
            f"<td class='l'>{_e(_window_text(r, fmt))}</td>"
            f"<td class='l' style='color:{COLOURS[r['status']]};font-weight:bold'>{_e(r['status'])}</td>"
            f"<td>{r['produced_attempted']}</td><td>{r['produced_acked']}</td><td>{r['produced_failed']}</td>"
            f"<td>{r['loaded_rows']}</td><td>{r['loaded_distinct']}</td><td>{r['duplicates']}</td>"
            f"<td>{r['missing']}</td><td>{_e(comp)}</td><td>{r['retention_lost']}</td>"
            f"<td class='l'>{causes}</td>"
            f"<td class='l'><code>{_e(plain(r['missing_report_seqs'][:10]))}</code></td>"
            f"<td class='l'><code>{_e(plain(r['missing_id_sample'][:10]))}</code></td>"
            "</tr>"
        )
    out.append("</table>")
    return "".join(out)


def docs_href(docs_url: str | None = None) -> str:
    """Where the docs pointer links: ``report.docs.url`` when set, else docs/audit.md of the source
    checkout this code runs from (a ``file:`` URI), else this page's own status table."""
    if docs_url:
        return docs_url
    return DOCS_PAGE.as_uri() if DOCS_PAGE.is_file() else "#statuses"


def _verdict_colour(run) -> str:
    if run.exit_code == 0:
        return COLOURS[Status.COMPLETE]
    if run.exit_code == EXIT_NOTHING_JUDGED:
        return NOTHING_JUDGED_COLOUR
    lossy = any(r["status"] in LOSS_STATUSES for r in run.rows)
    return COLOURS[Status.DATA_LOSS] if lossy else COLOURS[Status.OVER_DELIVERY]


def render(run, *, docs_url: str | None = None) -> str:
    """The whole page as a string."""
    cols = columns(run)
    size = window_size(run)
    fmt = grid_format(run.range_start_ms, size)
    legend = "".join(f"<span style='background:{c}' title='{_e(MEANINGS[s])}'>{_e(s)}</span>"
                     for s, c in COLOURS.items())
    legend += f"<span class='empty' title='{_e(EMPTY_MEANING)}'>empty</span>"
    inputs = "".join(f"<tr><td class='l'>{_e(k)}</td><td class='l'>{_e(plain(v))}</td></tr>"
                     for k, v in run.inputs.items())
    meanings = "".join(f"<tr><td class='l'>{_e(s)}</td><td class='l'>{_e(m)}</td></tr>" for s, m in MEANINGS.items())
    if cols:
        span = (f"<span class='range-first'>{_e(cols[0].label.split(' … ')[0])}</span> to "
                f"<span class='range-last'>{_e(cols[-1].label.split(' … ')[-1])}</span>")
        grid_note = (f" ({len(range(run.range_start_ms, run.range_end_ms, size))} windows of {duration(size)}, "
                     f"the last ending {label(run.range_end_ms, fmt)})")
    else:
        span, grid_note = f"{_e(iso(run.range_start_ms))} to {_e(iso(run.range_end_ms))}", ""
    href = docs_href(docs_url)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>Audit {_e(run.run_id)}</title><style>{CSS}</style></head><body>"
        f"<h1>Ingest audit {_e(run.run_id)}</h1>"
        f"<div class='verdict' style='background:{_verdict_colour(run)}'>{_e(verdict_line(run))}</div>"
        f"<p class='range'>Windows starting {span} UTC{_e(grid_note)}; audited at "
        f"{_e(iso(run.audited_at_ms))} UTC; exit code {run.exit_code}.</p>"
        f"<h2>Completeness by topic and window</h2>"
        f"<p>Cell text: distinct messages loaded / messages the producers acknowledged; colour: the window's "
        f"status; hover a cell for every count. One column per window, in time order.</p>"
        f"<p class='legend'>{legend}</p>{heatmap(run)}{out_of_range_table(run.rows)}"
        f"<h2>Counts per tier</h2><p>Producers acknowledged, read from the source cluster by the mirror, "
        f"acknowledged by the target cluster, distinct in the warehouse; a coloured cell is the first tier where "
        f"the count drops (a dash: the topic is not mirrored).</p>{tiers_table(run.rows, fmt)}"
        f"<h2>Problem windows</h2>{problems_table(run.rows, fmt)}"
        f"<h2>Summary</h2><pre>{_e(summary(run, max_problems=50))}</pre>"
        f"<h2>Inputs of this run</h2><table class='inputs'>{inputs}</table>"
        f"<h2 id='statuses'>What the statuses mean</h2><table>{meanings}"
        f"<tr><td class='l'>empty</td><td class='l'>{_e(EMPTY_MEANING)}</td></tr></table>"
        f"<p class='docs'>How to read this report, and what to do about each status: "
        f"<a href='{_e(href)}'>docs/audit.md</a>.</p></body></html>"
    )


def write_html(run, path: str | Path, *, docs_url: str | None = None) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(render(run, docs_url=docs_url), encoding="utf-8")
    tmp.replace(p)
    return p
