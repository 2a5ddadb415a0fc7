"""Monitoring events as the audit reads them: dedup, latest revision, report_seq gaps, aggregation over sessions.

A monitoring event is one producer session's cumulative snapshot for one topic
and event-time window (fields in docs/events.md). The rules:

* copies of one event (same ``event_id``, e.g. redelivered at least once) count once;
* per (session, topic, window) the highest ``revision`` wins (ties: latest
  ``emitted_at_ms``, then highest ``report_seq``);
* a window of a topic aggregates the winning snapshots of every session; a
  producer restart is simply another session;
* ``report_seq`` goes +1 per event in a session: a hole means a monitoring event
  was lost, and the windows it may have described cannot be called complete.

Deduplication and the latest-revision choice run in Spark (one aggregation);
so does collecting each session's report_seqs; the (small) winning snapshots
and per-session sequences are collected for the reconciliation. Events that are
already on the driver (a small audit topic, ``ingest.audit.inputs.monitoring_events``)
go through the same rules in plain Python (``latest_snapshots_of``, ``report_gaps_of``):
a Spark job's fixed cost is seconds, the events of a small hour are kilobytes.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable

from ingest.errors import ConfigError

log = logging.getLogger(__name__)

ORIGIN_PRODUCERS = "producers"
ORIGIN_MIRROR = "mirror"
ORIGIN_BROKER = "broker"
"""Values of the optional ``origin`` column: the producers' monitoring (``audit.topic``), the
mirror's tier counts (``mirror.monitoring.topic``) or the brokers' (``broker.monitoring.topic``),
read in one pass and told apart by it."""

FIRST_REPORT_SEQ = 1
"""report_seq of a session's first monitoring event (docs/events.md); a session
whose lowest seen report_seq is higher has lost its first events."""


@dataclass(frozen=True)
class Snapshot:
    """The winning (latest) monitoring event of one (session, topic, window)."""

    session: str
    server: str
    topic: str
    window_start_ms: int
    window_end_ms: int
    revision: int
    attempted: int
    acked: int
    failed: int
    bytes_acked: int
    seq_min: int | None
    seq_max: int | None
    is_final: bool
    heartbeat: bool
    emitted_at_ms: int
    report_seq: int
    origin: str = ORIGIN_PRODUCERS  # who counted: the producers, or the mirror (tier counts)


@dataclass(frozen=True)
class ReportGap:
    """Missing report_seqs ``first..last`` of one session, between two seen events."""

    session: str
    server: str
    first_missing: int
    last_missing: int
    after_emitted_ms: int | None   # emitted_at of the event before the gap (None: gap at the start)
    before_emitted_ms: int | None  # emitted_at of the event after the gap

    def labels(self, limit: int = 20) -> list[str]:
        stop = min(self.last_missing, self.first_missing + limit - 1)
        return [f"{self.session}:{r}" for r in range(self.first_missing, stop + 1)]


@dataclass
class WindowMonitoring:
    """Monitoring of one topic window (optionally one producer server), summed over sessions."""

    topic: str
    window_start_ms: int
    window_end_ms: int
    server: str | None = None
    attempted: int = 0
    acked: int = 0
    failed: int = 0
    bytes_acked: int = 0
    sessions: set[str] = field(default_factory=set)
    heartbeat: bool = False
    all_final: bool = True
    seq_ranges: list[tuple[str, int, int]] = field(default_factory=list)

    def add(self, s: Snapshot) -> None:
        self.attempted += s.attempted
        self.acked += s.acked
        self.failed += s.failed
        self.bytes_acked += s.bytes_acked
        self.sessions.add(s.session)
        self.heartbeat = self.heartbeat or s.heartbeat
        self.all_final = self.all_final and s.is_final
        if s.seq_min is not None and s.seq_max is not None:
            self.seq_ranges.append((s.session, s.seq_min, s.seq_max))


def deduplicated(mon_df):
    """Monitoring events with redelivered copies (same event_id) removed."""
    return mon_df.dropDuplicates(["event_id"])


def latest_snapshots(mon_df) -> list[Snapshot]:
    """The latest revision per (session, topic, window) of deduplicated events.

    One hash aggregation: ``max_by`` of the event ordered by (revision,
    emitted_at_ms, report_seq) per key (cheaper than a sorting window).
    """
    from pyspark.sql import functions as F

    fields = [c for c in mon_df.columns]
    order = F.struct(F.col("revision"), F.col("emitted_at_ms"), F.col("report_seq"))
    rows = (
        deduplicated(mon_df)
        .groupBy("producer_session_id", "topic", "window_start_ms")
        .agg(F.max_by(F.struct(*[F.col(c) for c in fields]), order).alias("e"))
        .select("e.*")
        .collect()
    )
    return [_snapshot(r.asDict()) for r in rows]


def report_gaps(mon_df, first_report_seq: int = FIRST_REPORT_SEQ) -> list[ReportGap]:
    """Holes in each session's report_seq sequence (including missing first events).

    Spark collects, per session, the sorted distinct (report_seq, emitted_at_ms)
    pairs (a few per window and topic); the holes are found on the driver.
    """
    from pyspark.sql import functions as F

    per_session = (
        deduplicated(mon_df)
        .groupBy("producer_session_id")
        .agg(F.max("producer_server").alias("server"),
             F.array_sort(F.collect_set(F.struct(F.col("report_seq"), F.col("emitted_at_ms")))).alias("seen"))
        .collect()
    )
    out = []
    for r in per_session:
        out += _session_gaps(r.producer_session_id, r.server, [(i.report_seq, i.emitted_at_ms) for i in r.seen],
                             first_report_seq)
    out.sort(key=lambda g: (g.session, g.first_missing))
    return out


def _ascending(value) -> tuple:
    """Sort key of a nullable value as Spark orders it ascending: null first."""
    return (value is not None, value if value is not None else 0)


def _first_per_event_id(events: Iterable[dict]) -> list[dict]:
    """:func:`deduplicated` for events on the driver: one copy per ``event_id`` (the first seen)."""
    seen: dict = {}
    for e in events:
        seen.setdefault(e.get("event_id"), e)
    return list(seen.values())


def latest_snapshots_of(events: Iterable[dict]) -> list[Snapshot]:
    """:func:`latest_snapshots` of events already on the driver (dicts with the monitoring fields).

    The same rule as the Spark aggregation: per (session, topic, window) the
    event with the highest (revision, emitted_at_ms, report_seq), null lowest.
    """
    best: dict[tuple, dict] = {}
    order = (lambda e: (_ascending(e.get("revision")), _ascending(e.get("emitted_at_ms")),
                        _ascending(e.get("report_seq"))))
    for e in _first_per_event_id(events):
        key = (e.get("producer_session_id"), e.get("topic"), e.get("window_start_ms"))
        held = best.get(key)
        if held is None or order(e) > order(held):
            best[key] = e
    return [_snapshot(e) for _, e in sorted(best.items(), key=lambda kv: tuple(_ascending(k) for k in kv[0]))]


def report_gaps_of(events: Iterable[dict], first_report_seq: int = FIRST_REPORT_SEQ) -> list[ReportGap]:
    """:func:`report_gaps` of events already on the driver (dicts with the monitoring fields)."""
    servers: dict = {}
    seen: dict = {}
    for e in _first_per_event_id(events):
        session = e.get("producer_session_id")
        server = e.get("producer_server")
        if server is not None and (servers.get(session) is None or server > servers[session]):
            servers[session] = server  # Spark's max: nulls ignored
        else:
            servers.setdefault(session, None)
        seen.setdefault(session, set()).add((e.get("report_seq"), e.get("emitted_at_ms")))
    out = []
    for session, pairs in seen.items():
        ordered = sorted(pairs, key=lambda p: (_ascending(p[0]), _ascending(p[1])))
        out += _session_gaps(session, servers[session], ordered, first_report_seq)
    out.sort(key=lambda g: (g.session, g.first_missing))
    return out


def _snapshot(e: dict) -> Snapshot:
    """The winning event of one (session, topic, window) as a :class:`Snapshot`."""
    return Snapshot(
        session=e["producer_session_id"], server=e["producer_server"] or "", topic=e["topic"],
        window_start_ms=int(e["window_start_ms"]), window_end_ms=int(e["window_end_ms"]),
        revision=int(e["revision"] or 0), attempted=int(e["count_attempted"] or 0), acked=int(e["count_acked"] or 0),
        failed=int(e["count_failed"] or 0), bytes_acked=int(e["bytes_acked"] or 0),
        seq_min=None if e["seq_min"] is None else int(e["seq_min"]),
        seq_max=None if e["seq_max"] is None else int(e["seq_max"]),
        is_final=bool(e["is_final"]), heartbeat=bool(e["heartbeat"]), emitted_at_ms=int(e["emitted_at_ms"] or 0),
        report_seq=int(e["report_seq"] or 0),
        origin=(e.get("origin") or ORIGIN_PRODUCERS),
    )


def _session_gaps(session: str, server: str | None, seen: list[tuple], first_report_seq: int) -> list[ReportGap]:
    """The holes in one session's sorted distinct (report_seq, emitted_at_ms) pairs."""
    out = []
    prev_seq, prev_emitted = first_report_seq - 1, None
    for report_seq, emitted_at_ms in seen:
        seq, emitted = int(report_seq), int(emitted_at_ms)
        if seq == prev_seq:
            continue  # the same report_seq re-sent (superseded in the buffer before publishing)
        if seq > prev_seq + 1:
            out.append(ReportGap(
                session=session, server=server or "", first_missing=prev_seq + 1,
                last_missing=seq - 1, after_emitted_ms=prev_emitted, before_emitted_ms=emitted,
            ))
        prev_seq, prev_emitted = seq, emitted
    return out


def rebucket(snapshots: Iterable[Snapshot], window_ms: int) -> list[Snapshot]:
    """Map snapshots of smaller producer windows onto the audit's windows.

    Raises:
        ConfigError: a producer's window does not divide ``window.ms`` (the
            counts could not be assigned to one audit window).
    """
    out = []
    for s in snapshots:
        size = s.window_end_ms - s.window_start_ms
        if size == window_ms and s.window_start_ms % window_ms == 0:
            out.append(s)
            continue
        start = (s.window_start_ms // window_ms) * window_ms
        if size <= 0 or window_ms % size or s.window_end_ms > start + window_ms:
            raise ConfigError(
                f"monitoring window [{s.window_start_ms}, {s.window_end_ms}) of session {s.session} "
                f"(topic {s.topic}) does not fit the audit's window.ms={window_ms}; set window.ms to the "
                f"producers' --window-ms ({size}) or a multiple of it"
            )
        out.append(Snapshot(**{**s.__dict__, "window_start_ms": start, "window_end_ms": start + window_ms}))
    return out


def aggregate(snapshots: Iterable[Snapshot], *, by_server: bool = False) -> dict[tuple, WindowMonitoring]:
    """Sum snapshots per (topic, window_start) — or per (topic, window_start, server)."""
    out: dict[tuple, WindowMonitoring] = {}
    for s in snapshots:
        key = (s.topic, s.window_start_ms, s.server) if by_server else (s.topic, s.window_start_ms)
        wm = out.get(key)
        if wm is None:
            wm = out[key] = WindowMonitoring(s.topic, s.window_start_ms, s.window_end_ms,
                                             s.server if by_server else None)
        wm.add(s)
    return out


def gap_touches(gap: ReportGap, window_start_ms: int, window_end_ms: int) -> bool:
    """Whether the lost events of ``gap`` may have described the window [start, end).

    A monitoring event emitted at time e describes a window that has started by
    e; it is emitted when the window closes (plus grace) or when late data
    revises it. So the lost events (emitted between the neighbours' emission
    times) may describe any window starting before the later neighbour and
    ending after one window before the earlier neighbour. Wide on purpose: a
    lost event must never let a window pass as complete.
    """
    size = window_end_ms - window_start_ms
    if gap.before_emitted_ms is not None and window_start_ms > gap.before_emitted_ms:
        return False
    if gap.after_emitted_ms is not None and window_end_ms < gap.after_emitted_ms - size:
        return False
    return True
