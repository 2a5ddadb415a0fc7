"""Lost ranges as the audit attributes them: one record type for both tiers that lose data by gaps.

Two producers of lost ranges exist:

* the loader (``ingest.loader.records.LostRange``, in the committed state):
  ranges of the cluster it loads from that retention deleted before loading
  (cause ``retention``), that left the broker's log without a retention record
  (cause ``missing_segments``: deleted by hand, lost on disk), or that were
  damaged on a broker's disk (cause ``corruption``). In a tiered deployment that
  cluster is the mirror's target: tier ``target``;
* the mirror (``MirrorLostRange`` records, conf/schemas/mirror_lost_range.avsc,
  loaded from the ``mirror.lost.topic`` topic): source partition ranges gone
  before the mirror copied them (cause ``retention`` or ``missing_segments``, as
  for the loader): tier ``source``.

A gap explains at most its message count: the exact count, or the estimate
(bytes / average message size) itself, never more.

Both may carry an exact message count (``messages_exact``: the broker recorded
how many messages each deleted segment held) and ``session_bounds``: per
producer session seen next to the gap, the highest seq before it and the lowest
seq after it in that partition. Within a partition a session's seqs only
increase, so the gap can hold a session's seq only strictly between its bounds;
a session not listed is unbounded. A range with no bounds at all is attributed
by time overlap and count only (the rule before bounds existed).

Records written before these fields existed read as estimates without bounds.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from ingest.loader.records import CORRUPTION, MISSING_SEGMENTS, RETENTION

log = logging.getLogger(__name__)

TIER_SOURCE = "source"
TIER_TARGET = "target"
CAUSES = (RETENTION, MISSING_SEGMENTS, CORRUPTION)
"""Every cause a gap can have; only retention and corruption make a loss expected (not DATA_LOSS)."""

Bound = tuple[str, "int | None", "int | None"]
"""(session, after_seq, before_seq); None = open on that side."""


@dataclass(frozen=True)
class LostGap:
    """One lost range of one topic partition, with what bounds the messages it held."""

    ident: str             # unique per audit run; names the range in the allocation
    topic: str
    tier: str              # TIER_SOURCE (mirror) or TIER_TARGET (loader)
    cause: str             # RETENTION, MISSING_SEGMENTS or CORRUPTION
    order: tuple           # (cluster, broker_id, partition, start_offset): deterministic allocation order
    messages: int          # exact count when ``exact``, else an estimate (bytes / average message size)
    exact: bool
    after_time_ms: int | None
    before_time_ms: int | None
    bounds: tuple[Bound, ...] = ()

    @property
    def bounded(self) -> bool:
        """Whether any session is bounded (otherwise: time overlap and count only)."""
        return bool(self.bounds)

    @property
    def capacity(self) -> int:
        """The most missing messages this range can explain: its count, exact or estimated (never more)."""
        return max(0, self.messages)

    def closes(self, session: str) -> bool:
        """Whether the range is bounded on both sides for ``session`` (seen before and after it): then the
        session's missing seqs strictly between the bounds are exactly its messages in the range, or lost
        elsewhere; a session open on a side (ended, or not yet started) may have lost others there."""
        bound = next((b for b in self.bounds if b[0] == session), None)
        return bound is not None and bound[1] is not None and bound[2] is not None

    def overlaps(self, window_start_ms: int, window_end_ms: int) -> bool:
        """The window [start, end) overlaps the range's event-time span (open ends when unknown)."""
        if self.after_time_ms is not None and window_end_ms <= self.after_time_ms:
            return False
        if self.before_time_ms is not None and window_start_ms > self.before_time_ms:
            return False
        return True


def _field(obj, name, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _opt_int(v) -> int | None:
    return None if v is None else int(v)


def parse_bounds(raw) -> tuple[Bound, ...]:
    """Session bounds from any of their stored forms, tolerant of absent ones.

    Accepts None/empty, a JSON string, a list of ``[session, after, before]``
    or of ``{"session", "after_seq", "before_seq"}`` (Avro/Parquet rows too).
    """
    if raw is None or raw == "":
        return ()
    if isinstance(raw, str):
        raw = json.loads(raw)
    out = []
    for item in raw or ():
        if isinstance(item, (list, tuple)):
            session, after, before = (list(item) + [None, None, None])[:3]
        else:
            session, after, before = (_field(item, "session"), _field(item, "after_seq"),
                                      _field(item, "before_seq"))
        if session is None:
            continue
        out.append((str(session), _opt_int(after), _opt_int(before)))
    return tuple(sorted(out, key=lambda b: b[0]))


def from_loader(obj, *, tier: str = TIER_TARGET, index: int = 0) -> LostGap:
    """A loader LostRange (object or its JSON dict) as a LostGap; old records = estimate, no bounds."""
    cause = str(_field(obj, "cause", RETENTION) or RETENTION)
    broker, partition = int(_field(obj, "broker_id", 0) or 0), int(_field(obj, "partition", 0) or 0)
    start, end = int(_field(obj, "start_offset", 0) or 0), int(_field(obj, "end_offset", 0) or 0)
    return LostGap(
        ident=f"{tier}#{index}:b{broker}p{partition}:{start}-{end}:{cause}", topic=str(_field(obj, "topic")),
        tier=tier, cause=cause, order=("", broker, partition, start),
        messages=int(_field(obj, "estimated_messages", 0) or 0), exact=bool(_field(obj, "messages_exact", False)),
        after_time_ms=_opt_int(_field(obj, "after_time_ms")), before_time_ms=_opt_int(_field(obj, "before_time_ms")),
        bounds=parse_bounds(_field(obj, "session_bounds")),
    )


def from_mirror(rec, *, index: int = 0) -> LostGap:
    """A MirrorLostRange record (dict or row) as a source-tier LostGap (records without a cause: retention)."""
    cluster = str(_field(rec, "source_cluster", "") or "")
    broker, partition = int(_field(rec, "broker_id", 0) or 0), int(_field(rec, "partition", 0) or 0)
    start, end = int(_field(rec, "start_offset", 0) or 0), int(_field(rec, "end_offset", 0) or 0)
    cause = str(_field(rec, "cause", RETENTION) or RETENTION)
    return LostGap(
        ident=f"{TIER_SOURCE}#{index}:{cluster}:b{broker}p{partition}:{start}-{end}:{cause}",
        topic=str(_field(rec, "topic")), tier=TIER_SOURCE, cause=cause, order=(cluster, broker, partition, start),
        messages=int(_field(rec, "messages", 0) or 0), exact=bool(_field(rec, "messages_exact", False)),
        after_time_ms=_opt_int(_field(rec, "after_time_ms")), before_time_ms=_opt_int(_field(rec, "before_time_ms")),
        bounds=parse_bounds(_field(rec, "session_bounds")),
    )
