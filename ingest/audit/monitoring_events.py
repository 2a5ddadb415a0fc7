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
and per-session sequences are collected for the reconciliation.
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
    return [
        Snapshot(
            session=r.producer_session_id, server=r.producer_server or "", topic=r.topic,
            window_start_ms=int(r.window_start_ms), window_end_ms=int(r.window_end_ms),
            revision=int(r.revision or 0), attempted=int(r.count_attempted or 0), acked=int(r.count_acked or 0),
            failed=int(r.count_failed or 0), bytes_acked=int(r.bytes_acked or 0),
            seq_min=None if r.seq_min is None else int(r.seq_min),
            seq_max=None if r.seq_max is None else int(r.seq_max),
            is_final=bool(r.is_final), heartbeat=bool(r.heartbeat), emitted_at_ms=int(r.emitted_at_ms or 0),
            report_seq=int(r.report_seq or 0),
            origin=(r.asDict().get("origin") or ORIGIN_PRODUCERS),
        )
        for r in rows
    ]


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
        prev_seq, prev_emitted = first_report_seq - 1, None
        for item in r.seen:
            seq, emitted = int(item.report_seq), int(item.emitted_at_ms)
            if seq == prev_seq:
                continue  # the same report_seq re-sent (superseded in the buffer before publishing)
            if seq > prev_seq + 1:
                out.append(ReportGap(
                    session=r.producer_session_id, server=r.server or "", first_missing=prev_seq + 1,
                    last_missing=seq - 1, after_emitted_ms=prev_emitted, before_emitted_ms=emitted,
                ))
            prev_seq, prev_emitted = seq, emitted
    out.sort(key=lambda g: (g.session, g.first_missing))
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
