"""The audit job: pure steps plus one orchestration function, called by jobs/audit.py and tests.

Steps of :func:`run_audit`:

1. :func:`audited_range`: windows ``[lo, hi)`` to (re-)audit.
2. ``inputs.load_state``: the loader's committed files and lost ranges.
3. Monitoring events from the audit topic's files: dedup, latest revision,
   report_seq gaps (``monitoring_events``); the same for the mirror's tier
   counts (``mirror.monitoring.topic``) and the brokers' (``broker.monitoring.topic``),
   and the mirror's lost ranges (``mirror.lost.topic``).
4. Loaded ids of the audited topics' files of the hours overlapping the range (plus
   out-of-range hours): distinct counts per topic window (``counts``: one Spark aggregation into
   64-seq blocks, collected to the driver when small, where they also give step 6's samples).
5. Candidate missing seqs inside bounded lost ranges (``counts.gap_atoms``) and
   per-session distinct counts, for exact attribution (``attribution``).
6. ``reconcile.build_rows``: tiers, statuses, causes, completeness; missing-id samples.
7. A revision of the rows under ``<destination>/_audit/`` (``history``).

The run's figures (:attr:`AuditRun.figures`, :func:`figures_text`, logged at the end):
data files read, loaded rows counted (every window's ``loaded_rows``), monitoring files, windows and judged windows, seconds
per step and in total, rows read per second.

Rerunning the audit over the same committed state and time gives the same rows.
"""
from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ingest.audit import counts, history, id_blocks, inputs, monitoring_events, reconcile, small_input, verdict
from ingest.audit.attribution import Candidates
from ingest.audit.status import NO_PROBLEM_STATUSES
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config, non_ascii_note
from ingest.errors import ConfigError
from ingest.lost_ranges import LostRange

log = logging.getLogger(__name__)


@dataclass
class AuditRun:
    """The outcome of one audit run."""

    run_id: str
    audited_at_ms: int
    range_start_ms: int
    range_end_ms: int
    rows: list[dict]
    exit_code: int
    inputs: dict[str, Any] = field(default_factory=dict)
    history_path: str | None = None
    nothing_judged: str | None = None  # why no window was judged (exit 5), see ingest.audit.verdict
    figures: dict[str, Any] = field(default_factory=dict)

    def problems(self) -> list[dict]:
        return [r for r in self.rows if r["status"] not in NO_PROBLEM_STATUSES]

    def status_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r["status"]] = out.get(r["status"], 0) + 1
        return out


@contextlib.contextmanager
def _step(name: str, timings: dict[str, float]):
    """Log each step as it starts and how long it took (the audit's progress)."""
    log.info("audit step: %s ...", name)
    began = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - began, 3)
    log.info("audit step: %s done in %.2f s", name, timings[name])


def run_figures(data_files, monitoring_files: int, rows: list[dict], step_seconds: dict[str, float],
                elapsed_s: float) -> dict[str, Any]:
    """What an audit run read and how long it took (``AuditRun.figures``)."""
    windows = [r for r in rows if r.get("row_type") != "producer"]
    read_rows = sum(r.get("loaded_rows") or 0 for r in windows)
    return {
        "data_files": len(data_files), "rows_read": read_rows, "monitoring_files": monitoring_files, "windows": len(windows),
        "judged_windows": sum(1 for r in windows if r.get("judged")),
        "step_seconds": dict(step_seconds), "elapsed_s": round(elapsed_s, 3),
        "rows_per_s": round(read_rows / elapsed_s, 1) if elapsed_s > 0 else None,
    }


def figures_text(run: "AuditRun") -> str:
    """One line for the terminal and the log: what the run read, per-step seconds, rows/s."""
    f = run.figures
    steps = ", ".join(f"{k} {v:.2f} s" for k, v in f.get("step_seconds", {}).items()) or "none"
    return (f"audit {run.run_id} read {f.get('data_files', 0)} data files ({f.get('rows_read', 0)} rows counted) "
            f"and {f.get('monitoring_files', 0)} monitoring files; "
            f"{f.get('windows', 0)} windows, {f.get('judged_windows', 0)} judged; {f.get('elapsed_s', 0)} s "
            f"({steps}); {f.get('rows_per_s')} rows/s")


def parse_time(text: str) -> int:
    """Epoch ms from ``--from/--to``: integer ms, or ISO 8601 (UTC when no zone is given).

    Raises:
        ConfigError: naming the value and the accepted forms.
    """
    value = str(text).strip()
    if re.fullmatch(r"-?[0-9]+", value):   # ASCII digits only (\d also takes other scripts')
        return int(value)
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(
            f"invalid time {value!r}: give epoch milliseconds or ISO 8601 such as 2026-11-22T10:00:00Z"
            f"{non_ascii_note(value)}") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def audited_range(
    now_ms: int, window_ms: int, lookback: int, from_ms: int | None = None, to_ms: int | None = None,
) -> tuple[int, int]:
    """Window starts ``[lo, hi)`` to audit.

    ``hi``: ``to`` rounded up to a window edge (default: the end of the window
    holding ``now``). ``lo``: ``from`` rounded down, extended back so that at
    least ``lookback`` windows before ``hi`` are re-audited (late data changes them).

    Raises:
        ConfigError: ``from`` is not before ``to``.
    """
    if to_ms is None:
        hi = (now_ms // window_ms + 1) * window_ms
    else:
        hi = -(-to_ms // window_ms) * window_ms
    lo = hi - lookback * window_ms
    if from_ms is not None:
        if to_ms is not None and from_ms >= to_ms:
            raise ConfigError(f"--from {from_ms} must be before --to {to_ms}")
        lo = min(lo, (from_ms // window_ms) * window_ms)
    if lo >= hi:
        lo = hi - window_ms
    return lo, hi


def audited_topics(config: Config, names: set[str]) -> list[str]:
    """Topics matching ``topics`` and not ``topics.blacklist``, never the audit's own input topics."""
    include = re.compile(config["topics"])
    exclude = re.compile(config["topics.blacklist"]) if config["topics.blacklist"] else None
    own = {config["audit.topic"], config["mirror.monitoring.topic"], config["mirror.lost.topic"],
           config["broker.monitoring.topic"]}
    return sorted(
        t for t in names
        if t not in own and include.fullmatch(t) and not (exclude and exclude.fullmatch(t))
    )


def _monitoring(spark, mon_files, mirror_files, window_ms, broker_files=(), driver_max_bytes: int = 0):
    """Latest snapshots (rebucketed) and report_seq gaps of the producers', the mirror's and the brokers'
    monitoring events.

    Up to ``driver_max_bytes`` of files are read and judged on the driver, without a Spark
    job (``monitoring.driver.read.max.bytes``); more are read into one DataFrame (an
    ``origin`` column tells them apart; their sessions never coincide), so the mirror and
    the brokers cost no extra Spark job.
    """
    groups = [(monitoring_events.ORIGIN_PRODUCERS, mon_files), (monitoring_events.ORIGIN_MIRROR, mirror_files),
              (monitoring_events.ORIGIN_BROKER, broker_files)]
    events = inputs.monitoring_on_driver(groups, driver_max_bytes)
    if events is not None:
        latest = monitoring_events.latest_snapshots_of(events)
        gaps = monitoring_events.report_gaps_of(events)
    else:
        latest, gaps = _monitoring_in_spark(spark, groups)
    snapshots = monitoring_events.rebucket(latest, window_ms)
    by_origin: dict[str, list] = {}
    for s in snapshots:
        by_origin.setdefault(s.origin, []).append(s)
    sizes = {s.window_end_ms - s.window_start_ms for s in latest if s.origin == monitoring_events.ORIGIN_PRODUCERS}
    return (by_origin.get(monitoring_events.ORIGIN_PRODUCERS, []), by_origin.get(monitoring_events.ORIGIN_MIRROR, []),
            gaps, sizes, by_origin.get(monitoring_events.ORIGIN_BROKER, []))


def _monitoring_in_spark(spark, groups):
    """Latest snapshots and report_seq gaps of the ``(origin, files)`` groups, read and aggregated in Spark."""
    from pyspark.sql import functions as F

    (producers, mon_files), *others = groups
    mon_df = inputs.read_monitoring(spark, mon_files).withColumn("origin", F.lit(producers))
    for origin, files in others:
        if files:
            mon_df = mon_df.unionByName(inputs.read_monitoring(spark, files).withColumn("origin", F.lit(origin)))
    mon_df = mon_df.cache()  # small; read once for both passes
    try:
        return monitoring_events.latest_snapshots(mon_df), monitoring_events.report_gaps(mon_df)
    finally:
        mon_df.unpersist()


def _candidates(spark, ids, every_topics_ids, snapshots, per_window, loaded, lost: list[LostRange], lo: int,
                hi: int) -> dict[str, Candidates]:
    """Per topic: missing seqs inside bounded lost ranges, and per-session acked - loaded (exact attribution).

    Only windows that miss messages, of topics with a bounded lost range, are looked at. ``ids``: the
    audited topics' loaded ids; ``every_topics_ids()``: those of every topic read (a seq loaded in any
    topic is not missing).
    """
    bounded = [g for g in lost if g.bounded]
    topics = {g.topic for g in bounded}
    if not topics:
        return {}
    distinct: dict[tuple, int] = {}
    for c in loaded:
        if c.window_start_ms is not None:
            distinct[(c.topic, c.window_start_ms)] = distinct.get((c.topic, c.window_start_ms), 0) + c.distinct
    need = {k for k, wm in per_window.items()
            if k[0] in topics and lo <= k[1] < hi and wm.acked > distinct.get(k, 0)}
    if not need:
        return {}
    ranges = [(t, ws, s, lo, hi) for (t, ws) in sorted(need) for s, lo, hi in per_window[(t, ws)].seq_ranges]
    atoms = counts.gap_atoms(spark, every_topics_ids(), ranges,
                             [(g.ident, g.topic, g.session_bounds) for g in bounded])
    if not atoms:
        return {}  # no missing seq lies in a bounded gap: nothing for the per-session bound to refine
    per_session = counts.session_distinct(ids, sorted({(t, ws) for t, ws, _ in atoms}))
    acked: dict[tuple, int] = {}
    for s in snapshots:
        if (s.topic, s.window_start_ms) in need:
            key = (s.topic, s.window_start_ms, s.session)
            acked[key] = acked.get(key, 0) + s.acked
    out: dict[str, Candidates] = {}
    for (t, ws, session), items in atoms.items():
        out.setdefault(t, Candidates()).atoms[(ws, session)] = list(items)
    for (t, ws, session), n in acked.items():
        if (t, ws, session) not in atoms:
            continue
        out.setdefault(t, Candidates()).session_missing[(ws, session)] = max(0, n - per_session.get((t, ws, session), 0))
    return out


def _samples(spark, config: Config, requests, table, other_files, data_files) -> dict[tuple[str, int], list[str]]:
    """Missing-id samples of the requested ranges (``reconcile.sample_requests``).

    A missing id is one loaded in no topic. When the audited topics' blocks are on the driver
    (``table``, ``counts.collect_blocks``) and the ranges hold at most ``sample.driver.max.ids`` ids,
    the missing ones are taken from the blocks, with the seqs of the other files read (``other_files``:
    e.g. the audit topic's own events; the asked sessions and bounds only): no second read of the
    audited topics' files. Otherwise from a read of every file's seqs (``data_files``), as
    ``counts.missing_samples`` decides.
    """
    size = config["sample.size"]
    if not requests or size <= 0:
        return {}
    bounds = counts.sample_bounds(requests)
    driver_max_ids = config["sample.driver.max.ids"]
    if table is None or counts.expected_ids(requests) > driver_max_ids:
        return counts.missing_samples(spark, inputs.read_session_seqs(spark, data_files, bounds), requests, size,
                                      driver_max_ids=driver_max_ids)
    masks = counts.block_masks_of(table, bounds)
    if other_files:
        seqs = inputs.read_session_seqs(spark, other_files, bounds).toArrow()
        id_blocks.add_seqs(masks, seqs.column("session").to_pylist(), seqs.column("seq").to_pylist())
    return counts.samples_from_masks(masks, requests, size)


def run_audit(
    spark,
    config: Config,
    *,
    from_ms: int | None = None,
    to_ms: int | None = None,
    clock: Clock = SYSTEM_CLOCK,
    by_producer: bool | None = None,
    write_history: bool | None = None,
    run_id: str | None = None,
) -> AuditRun:
    """Audit the windows of the range against the destination's committed state."""
    now = clock.time_ms()
    began = time.perf_counter()
    run_id = history.check_run_id(run_id) if run_id is not None else uuid.uuid4().hex[:12]
    window_ms = config["window.ms"]
    lo, hi = audited_range(now, window_ms, config["window.lookback"], from_ms, to_ms)
    plausible_hi = now + config["future.skew.ms"]
    by_producer = config["report.by.producer"] if by_producer is None else by_producer
    destination = config["destination"]
    log.info("audit %s of %s: windows [%d, %d), now %d", run_id, destination, lo, hi, now)
    if config.is_set("retention.estimate.slack"):
        log.warning("retention.estimate.slack is deprecated and ignored: a lost range whose count is an estimate "
                    "now explains at most that estimate; remove the key from the audit's configuration")

    timings: dict[str, float] = {}
    with _step("loader state", timings):
        state = inputs.load_state(destination)
    audit_topic = config["audit.topic"]
    mon_files = [f for f in state.files if f.topic == audit_topic]
    mirror_files = [f for f in state.files if f.topic == config["mirror.monitoring.topic"]]
    mirror_lost_files = [f for f in state.files if f.topic == config["mirror.lost.topic"]]
    broker_files = [f for f in state.files if f.topic == config["broker.monitoring.topic"]]
    with _step("monitoring", timings):
        snapshots, mirror_snapshots, gaps, producer_sizes, broker_snapshots = _monitoring(
            spark, mon_files, mirror_files, window_ms, broker_files, config["monitoring.driver.read.max.bytes"])
        source_lost = inputs.read_mirror_lost(spark, mirror_lost_files)

    topics = audited_topics(config, {f.topic for f in state.files} | {s.topic for s in snapshots}
                            | {s.topic for s in broker_snapshots})
    snapshots = [s for s in snapshots if s.topic in set(topics)]
    mirror_snapshots = [s for s in mirror_snapshots if s.topic in set(topics)]
    broker_snapshots = [s for s in broker_snapshots if s.topic in set(topics)]
    tiered_topics = {s.topic for s in mirror_snapshots}
    data_files = inputs.select_files(
        state.files, topics=None, lo_ms=lo, hi_ms=hi, plausible_lo_ms=inputs.HOUR_MS, plausible_hi_ms=plausible_hi,
    )
    with small_input.small_input_sql(spark, data_files):
        # The counts read the audited topics' files only (one topic: no per-file topic join); ids loaded in
        # any topic, which the attribution's missing seqs need, are read from every file when asked for.
        audited = set(topics)
        ids = counts.with_windows(inputs.read_ids(spark, [f for f in data_files if f.topic in audited]),
                                  window_ms=window_ms, plausible_hi_ms=plausible_hi)

        def every_topics_ids():
            return inputs.read_ids(spark, data_files)
        # One aggregation of the ids into 64-seq blocks; when few enough, on the driver it answers the counts,
        # the sessions' topics and the missing-id sample (no second read of the files).
        blocks = counts.loaded_blocks(ids)
        with _step("distinct counts", timings):
            table = counts.collect_blocks(blocks, config["counts.driver.max.blocks"])
            if table is None:
                loaded = counts.loaded_counts(blocks, lo_ms=lo, hi_ms=hi, topics=topics)
            else:
                loaded = counts.loaded_counts_of(table, lo_ms=lo, hi_ms=hi, topics=topics)
        gap_sessions = sorted({g.session for g in gaps})
        touched = ({(s.session, s.topic) for s in snapshots} | {(s.session, s.topic) for s in mirror_snapshots}
                   | {(s.session, s.topic) for s in broker_snapshots}
                   | (counts.session_topics(ids, gap_sessions) if table is None
                      else counts.session_topics_of(table, gap_sessions)))
        params = reconcile.AuditParams(
            window_ms=window_ms, grace_ms=config["grace.ms"], threshold=config["threshold"], now_ms=now,
            lo_ms=lo, hi_ms=hi, plausible_hi_ms=plausible_hi,
            producer_failures_are_loss=config["producer.failures.are.loss"],
        )
        per_window = monitoring_events.aggregate(snapshots)
        lost = ([r for r in state.lost_ranges if r.topic in audited]
                + [r for r in source_lost if r.topic in audited])
        with _step("attribution candidates", timings):
            candidates = _candidates(spark, ids, every_topics_ids, snapshots, per_window, loaded, lost, lo, hi)
        rows = reconcile.build_rows(
            params, per_window, loaded,
            lost_ranges=[g for g in lost if g.tier == "target"], gaps=gaps,
            session_topics=touched,
            by_producer_monitoring=monitoring_events.aggregate(snapshots, by_server=True) if by_producer else None,
            mirror=monitoring_events.aggregate(mirror_snapshots),
            source_lost=[g for g in lost if g.tier == "source"],
            candidates=candidates, tiered_topics=tiered_topics, broker=monitoring_events.aggregate(broker_snapshots),
        )
        with _step("missing-id samples", timings):
            samples = _samples(spark, config, reconcile.sample_requests(rows, per_window), table,
                               [f for f in data_files if f.topic not in audited], data_files)
    reconcile.attach_samples(rows, samples)
    nothing_judged = verdict.nothing_judged_reason(
        rows, range_start_ms=lo, range_end_ms=hi, window_ms=window_ms, grace_ms=config["grace.ms"], now_ms=now,
        producer_window_ms=producer_sizes,
    )
    run = AuditRun(
        run_id=run_id, audited_at_ms=now, range_start_ms=lo, range_end_ms=hi, rows=rows,
        exit_code=verdict.exit_code(rows, nothing_judged), nothing_judged=nothing_judged,
        inputs={
            "destination": destination, "audit_topic": audit_topic, "loader_commit": state.commit_seq,
            "topics": topics, "data_files_read": len(data_files), "data_files_committed": len(state.files),
            "monitoring_files": len(mon_files), "mirror_monitoring_files": len(mirror_files),
            "mirror_snapshots": len(mirror_snapshots), "mirror_lost_ranges": len(source_lost),
            "broker_monitoring_files": len(broker_files), "broker_snapshots": len(broker_snapshots),
            "tiered_topics": sorted(tiered_topics),
            "monitoring_snapshots": len(snapshots), "report_seq_gaps": len(gaps),
            "lost_ranges": len(state.lost_ranges), "window_ms": window_ms, "grace_ms": config["grace.ms"],
            "threshold": config["threshold"], "future_skew_ms": config["future.skew.ms"],
            "window_lookback": config["window.lookback"], "now_ms": now, "step_seconds": timings,
            "producer_window_ms": sorted(producer_sizes),
        },
    )
    if config["history.enabled"] if write_history is None else write_history:
        run.history_path = history.write_revision(
            destination, rows, run_id=run_id, audited_at_ms=now, range_start_ms=lo, range_end_ms=hi,
        )
    run.figures = run_figures(data_files, len(mon_files), rows, timings, time.perf_counter() - began)
    log.info("audit %s: %s, exit code %d", run_id, run.status_counts(), run.exit_code)
    log.info("%s", figures_text(run))
    return run
