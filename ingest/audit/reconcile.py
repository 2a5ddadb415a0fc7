"""Reconciliation: monitoring vs distinct loaded ids -> one report row per topic window.

Pure functions over the collected aggregates (no Spark here), so every status
rule is tested with exact numbers. Definitions (docs/audit.md explains them for
readers of the report):

* ``missing = max(0, acked - distinct)``; ``duplicates = rows - distinct``;
  ``completeness = distinct / acked`` (1.0 for an empty window with nothing
  loaded; null when nothing was acknowledged but something was loaded).
* A window is judged once ``now >= window_end + grace.ms``; before that it is
  PENDING (counts shown, no verdict).
* Status of a judged window, first match wins:
  NO_MONITORING (data loaded, no producer reported the window; MONITORING_GAP
  instead when a lost monitoring event may have been that report);
  RETENTION_LOSS (completeness below threshold and lost ranges recorded by the
  loader explain every missing message); CORRUPTION_LOSS (the same, and some of
  those ranges were damaged on the broker's disk: cause ``corruption``); DATA_LOSS (below threshold otherwise,
  including messages held by ranges of cause ``missing_segments``, which left the
  broker without a retention record, or producer failures never delivered when
  ``producer.failures.are.loss``);
  MONITORING_GAP (a lost monitoring event may have described the window);
  OVER_DELIVERY (more distinct ids than acknowledged); DUPLICATES (an id loaded
  more than once); COMPLETE.
* Tiers (``tiers``): a topic the mirror reports on is counted at every tier,
  producers -> source -> target -> warehouse; the loss is split per tier and
  cause, and lost ranges are matched to missing messages by
  :mod:`ingest.audit.attribution` (exact when the ranges carry session bounds).
  A loss status is DATA_LOSS whenever some lost messages lie in no recorded
  gap, else the status of the first tier where the count drops
  (``loss_tier``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ingest.audit import tiers as tiers_mod
from ingest.audit.attribution import Candidates, allocate, explained_by_cause
from ingest.audit.counts import LoadedCount
from ingest.audit.monitoring_events import ReportGap, WindowMonitoring, gap_touches
from ingest.audit.status import LOSS_STATUSES, NO_PROBLEM_STATUSES, Status
from ingest.lost_ranges import TIER_SOURCE, TIER_TARGET, LostRange

EXIT_OK = 0
EXIT_DATA_LOSS = 3
EXIT_PROBLEMS = 4

ROW_WINDOW = "window"
ROW_PRODUCER = "producer"
ROW_OUT_OF_RANGE = "out_of_range"

ROW_FIELDS = (
    "topic", "row_type", "producer", "window_start_ms", "window_end_ms", "status", "judged",
    "produced_attempted", "produced_acked", "produced_failed", "loaded_rows", "loaded_distinct",
    "duplicates", "missing", "completeness", "threshold", "producers_reported", "sessions", "heartbeat",
    "missing_report_seqs", "retention_lost", "missing_id_sample", "causes", "tiers", "loss_tier",
)


@dataclass(frozen=True)
class AuditParams:
    """Everything the rules depend on besides the data."""

    window_ms: int
    grace_ms: int
    threshold: float
    now_ms: int
    lo_ms: int
    hi_ms: int
    plausible_hi_ms: int
    producer_failures_are_loss: bool = True


@dataclass
class _Acc:
    topic: str
    window_start_ms: int | None
    producer: str | None
    row_type: str
    mon: WindowMonitoring | None = None
    rows: int = 0
    distinct: int = 0
    gap_labels: list[str] = field(default_factory=list)
    tiered: bool = False
    mirror: WindowMonitoring | None = None
    broker: WindowMonitoring | None = None   # the brokers' counts of what they appended (broker tier)
    explained: dict[str, dict[str, int]] = field(default_factory=dict)  # tier -> cause -> messages

    def tiers(self) -> dict:
        acked = self.mon.acked if self.mon else (None if self.broker else 0)
        broker = self.broker.acked if self.broker else None
        if not self.tiered:
            return tiers_mod.tier_counts(acked, self.distinct, broker=broker)
        source = self.mirror.attempted if self.mirror else 0
        target = self.mirror.acked if self.mirror else 0
        return tiers_mod.tier_counts(acked, self.distinct, source, target, broker=broker)

    def expected(self) -> int:
        """What the warehouse should hold: acknowledged to producers, else appended by the brokers."""
        return self.mon.acked if self.mon else (self.broker.acked if self.broker else 0)


def is_out_of_range(window_start_ms: int, params: AuditParams) -> bool:
    return window_start_ms <= 0 or window_start_ms > params.plausible_hi_ms


def build_rows(
    params: AuditParams,
    monitoring: dict[tuple, WindowMonitoring],
    loaded: Iterable[LoadedCount],
    *,
    lost_ranges: Sequence = (),
    gaps: Sequence[ReportGap] = (),
    session_topics: set[tuple[str, str]] = frozenset(),
    by_producer_monitoring: dict[tuple, WindowMonitoring] | None = None,
    mirror: dict[tuple, WindowMonitoring] | None = None,
    source_lost: Sequence = (),
    candidates: dict[str, Candidates] | None = None,
    tiered_topics: set[str] | None = None,
    broker: dict[tuple, WindowMonitoring] | None = None,
) -> list[dict]:
    """Report rows for every topic window in [lo_ms, hi_ms) with monitoring or data.

    Args:
        monitoring: per ``(topic, window_start)`` (from monitoring.aggregate).
        loaded: per (topic, window, server) counts; window None = out of range.
        lost_ranges: the loader's lost ranges (``LostRange`` records, or as the audit read them).
        by_producer_monitoring: per ``(topic, window_start, server)``; when given,
            producer rows are added after each topic's rows.
        mirror: the mirror's monitoring per ``(topic, window_start)``, summed over
            mirror sessions (``attempted`` = read from the source, ``acked`` = acked by the target).
        source_lost: the mirror's lost ranges (``MirrorLostRange`` records, or as the audit read them).
        candidates: per topic, the session bounds of missing messages (see attribution).
        tiered_topics: topics with any mirror monitoring event (default: the topics of ``mirror``).
        broker: the brokers' counts per ``(topic, window_start)`` (``acked`` = records appended from
            producers), summed over broker sessions: the broker tier, and the baseline of a window
            without producer monitoring.
    """
    loaded = list(loaded)
    mirror = mirror or {}
    tiered = set(tiered_topics) if tiered_topics is not None else {k[0] for k in mirror}
    accs = _accumulate(params, monitoring, loaded, None, mirror, broker or {})
    for a in accs.values():
        a.tiered = a.topic in tiered
    lost = as_gaps(lost_ranges, TIER_TARGET) + as_gaps(source_lost, TIER_SOURCE)
    _attribute(accs, lost, params, candidates or {})
    rows = [_finish(a, params, gaps, session_topics) for a in accs.values()]
    if by_producer_monitoring is not None:
        paccs = _accumulate(params, by_producer_monitoring, loaded, "server")
        rows += [_finish(a, params, gaps, session_topics) for a in paccs.values()]
    order = {ROW_WINDOW: 0, ROW_OUT_OF_RANGE: 1, ROW_PRODUCER: 2}
    rows.sort(key=lambda r: (r["topic"], order[r["row_type"]], r["window_start_ms"] or 0, r["producer"] or ""))
    return rows


def as_gaps(ranges: Sequence, tier: str) -> list[LostRange]:
    """Lost ranges of one tier as the audit attributes them (records of the loader or the mirror,
    or ranges the audit already named)."""
    return [r if isinstance(r, LostRange) and r.ident else LostRange.from_record(r, tier=tier, index=i)
            for i, r in enumerate(ranges)]


def _accumulate(params, monitoring, loaded, by, mirror=None, broker=None) -> dict[tuple, _Acc]:
    accs: dict[tuple, _Acc] = {}
    producer_rows = by == "server"

    def acc_for(topic, ws, server, create=True) -> _Acc | None:
        if ws is None or is_out_of_range(ws, params):
            if producer_rows:
                return None  # out-of-range events are reported per topic only
            key, row_type, ws = (topic, None, server), ROW_OUT_OF_RANGE, None
        elif params.lo_ms <= ws < params.hi_ms:
            key, row_type = (topic, ws, server), ROW_PRODUCER if producer_rows else ROW_WINDOW
        else:
            return None
        if key not in accs:
            if not create:
                return None
            accs[key] = _Acc(topic, ws, server, row_type)
        return accs[key]

    for key, wm in monitoring.items():
        a = acc_for(wm.topic, wm.window_start_ms, wm.server if producer_rows else None)
        if a is None:
            continue
        if a.mon is None:
            a.mon = WindowMonitoring(wm.topic, wm.window_start_ms, wm.window_end_ms, wm.server)
        for attr in ("attempted", "acked", "failed", "bytes_acked"):
            setattr(a.mon, attr, getattr(a.mon, attr) + getattr(wm, attr))
        a.mon.sessions |= wm.sessions
        a.mon.heartbeat = a.mon.heartbeat or wm.heartbeat
        a.mon.all_final = a.mon.all_final and wm.all_final
        a.mon.seq_ranges.extend(wm.seq_ranges)
    for c in loaded:
        a = acc_for(c.topic, c.window_start_ms, c.server if producer_rows else None)
        if a is None:
            continue
        a.rows += c.rows
        a.distinct += c.distinct
    for wm in (mirror or {}).values():
        # a mirror heartbeat (nothing read) alone makes no row; a window the mirror read messages of does
        a = acc_for(wm.topic, wm.window_start_ms, None, create=bool(wm.attempted or wm.acked))
        if a is None:
            continue
        if a.mirror is None:
            a.mirror = WindowMonitoring(wm.topic, wm.window_start_ms, wm.window_end_ms, None)
        for attr in ("attempted", "acked", "failed", "bytes_acked"):
            setattr(a.mirror, attr, getattr(a.mirror, attr) + getattr(wm, attr))
        a.mirror.sessions |= wm.sessions
    for wm in (broker or {}).values():
        a = acc_for(wm.topic, wm.window_start_ms, None, create=bool(wm.acked))
        if a is None:
            continue
        if a.broker is None:
            a.broker = WindowMonitoring(wm.topic, wm.window_start_ms, wm.window_end_ms, None)
        a.broker.acked += wm.acked
        a.broker.attempted += wm.attempted
        a.broker.sessions |= wm.sessions
    return accs


def _missing(a: _Acc) -> int:
    return max(0, a.expected() - a.distinct) if (a.mon or a.broker) else 0


def _attribute(accs: dict[tuple, _Acc], lost: Sequence[LostRange], params: AuditParams,
               candidates: dict[str, Candidates]) -> None:
    """Match each window's loss at each tier to the lost ranges of that tier (attribution.allocate).

    Source (mirror) ranges first, then the loader's: candidate seqs a source
    range took are not offered to the loader's ranges.
    """
    by_topic: dict[str, list[_Acc]] = {}
    for a in accs.values():
        if a.row_type == ROW_WINDOW:
            by_topic.setdefault(a.topic, []).append(a)
    for topic, lst in sorted(by_topic.items()):
        topic_gaps = [g for g in lost if g.topic == topic]
        if not topic_gaps:
            continue
        cand = candidates.get(topic)
        by_ws = {a.window_start_ms: a for a in lst}
        d = {ws: tiers_mod.drops(a.tiers()) for ws, a in by_ws.items()}
        for gap_tier in (TIER_SOURCE, TIER_TARGET):
            tier = tiers_mod.GAP_TIER[gap_tier]
            tier_gaps = [g for g in topic_gaps if g.tier == gap_tier]
            if not tier_gaps:
                continue
            demand = {ws: x[tier] for ws, x in d.items()}
            assigned = allocate(demand, tier_gaps, params.window_ms, candidates=cand)
            for ws, per_gap in assigned.items():
                by_ws[ws].explained[tier] = explained_by_cause(per_gap, tier_gaps)



def _finish(a: _Acc, params: AuditParams, gaps: Sequence[ReportGap], session_topics) -> dict:
    mon = a.mon
    attempted = mon.attempted if mon else 0
    acked = mon.acked if mon else 0
    failed = mon.failed if mon else 0
    duplicates = a.rows - a.distinct
    missing = _missing(a)
    counted = mon is not None or a.broker is not None   # a tier that says what the warehouse should hold
    expected = a.expected()
    if not counted:
        completeness = None
    elif expected > 0:
        completeness = round(a.distinct / expected, 6)
    else:
        completeness = 1.0 if a.distinct == 0 else None
    if a.row_type == ROW_OUT_OF_RANGE:
        ws, we = None, None
        judged = True  # out-of-range windows never "close"; judge what is there
    else:
        ws, we = a.window_start_ms, a.window_start_ms + params.window_ms
        judged = params.now_ms >= we + params.grace_ms
    gap_labels: list[str] = []
    if ws is not None:
        for g in gaps:
            if a.producer is not None and g.server != a.producer:
                continue
            if (g.session, a.topic) in session_topics and gap_touches(g, ws, we):
                gap_labels.extend(g.labels())
    producer_lost = min(failed, max(0, attempted - a.distinct - missing)) if mon else 0
    extra = max(0, a.distinct - expected) if counted else 0
    tiers = a.tiers()
    drops = tiers_mod.drops(tiers) if counted else {}
    causes: dict[str, int] = tiers_mod.loss_causes(drops, a.explained, tiered=a.tiered)
    retention_lost = sum(n for k, n in causes.items() if k in ("retention", "source_retention", "target_retention"))
    if producer_lost:
        causes["producer_failed"] = producer_lost
    if extra:
        delivered_failed = min(extra, failed)
        if delivered_failed:
            causes["failed_but_delivered"] = delivered_failed
        if extra - delivered_failed:
            causes["unexplained_extra"] = extra - delivered_failed
    if duplicates:
        causes[tiers_mod.DUPLICATES_CAUSE[a.tiered]] = duplicates

    below = missing > 0 and completeness is not None and completeness < params.threshold
    producer_loss = params.producer_failures_are_loss and producer_lost > 0
    if not judged:
        status = Status.PENDING
    elif not counted:
        status = Status.MONITORING_GAP if gap_labels else Status.NO_MONITORING
    elif below or producer_loss:
        status = Status.DATA_LOSS if producer_loss else (tiers_mod.loss_status(drops, a.explained) or Status.DATA_LOSS)
    elif gap_labels:
        status = Status.MONITORING_GAP
    elif completeness is None or extra > 0:
        status = Status.OVER_DELIVERY
    elif duplicates:
        status = Status.DUPLICATES
    else:
        status = Status.COMPLETE
    return {
        "topic": a.topic, "row_type": a.row_type, "producer": a.producer,
        "window_start_ms": ws, "window_end_ms": we, "status": status, "judged": judged,
        "produced_attempted": attempted, "produced_acked": acked, "produced_failed": failed,
        "loaded_rows": a.rows, "loaded_distinct": a.distinct, "duplicates": duplicates, "missing": missing,
        "completeness": completeness, "threshold": params.threshold,
        "producers_reported": len(mon.sessions) if mon else 0,
        "sessions": sorted(mon.sessions) if mon else [],
        "heartbeat": bool(mon and mon.heartbeat),
        "missing_report_seqs": sorted(set(gap_labels)), "retention_lost": retention_lost,
        "missing_id_sample": [], "causes": causes, "tiers": tiers, "loss_tier": tiers_mod.loss_tier(drops),
    }


def sample_requests(
    rows: Sequence[dict], monitoring: dict[tuple, WindowMonitoring],
) -> list[tuple[str, int, str, int, int]]:
    """(topic, window_start, session, seq_min, seq_max) of topic windows with missing messages.

    The seq ranges come from ``monitoring`` (per ``(topic, window_start)``, the
    same mapping :func:`build_rows` was given), so report rows carry only
    public fields.
    """
    out = []
    for r in rows:
        if r["row_type"] == ROW_WINDOW and r["missing"] > 0:
            wm = monitoring.get((r["topic"], r["window_start_ms"]))
            ranges = wm.seq_ranges if wm is not None else ()
            out.extend((r["topic"], r["window_start_ms"], s, lo, hi) for s, lo, hi in ranges)
    return out


def attach_samples(rows: list[dict], samples: dict[tuple[str, int], list[str]]) -> None:
    for r in rows:
        if r["row_type"] == ROW_WINDOW:
            r["missing_id_sample"] = samples.get((r["topic"], r["window_start_ms"]), [])


def exit_code(rows: Iterable[dict]) -> int:
    """0 when every judged row is COMPLETE (or PENDING); 3 on any loss; 4 on other problems."""
    statuses = {r["status"] for r in rows}
    if statuses & LOSS_STATUSES:
        return EXIT_DATA_LOSS
    if statuses - NO_PROBLEM_STATUSES:
        return EXIT_PROBLEMS
    return EXIT_OK
