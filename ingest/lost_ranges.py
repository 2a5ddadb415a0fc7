"""Lost ranges: offsets of a partition that a tier never delivered, why, and what bounds the messages they held.

One record type, :class:`LostRange`, for every tier that loses data by gaps:

* the loader (tier ``target``: the cluster it loads from, in a tiered deployment the
  mirror's target) keeps its lost ranges in its committed state, in the manifests'
  JSON (:meth:`LostRange.to_json` / :meth:`LostRange.from_json`): ranges that
  retention deleted before they were loaded, that left the broker's log without a
  retention record, or that were damaged on a broker's disk;
* the mirror (tier ``source``) records the source ranges gone before it copied them,
  in ZooKeeper and as ``MirrorLostRange`` events on the target cluster
  (conf/schemas/mirror_lost_range.avsc, written from a LostRange by
  :func:`ingest.mirror.tier_events.lost_range_record`);
* the audit reads both back (:meth:`LostRange.from_record`) and attributes missing
  messages to them (:mod:`ingest.audit.attribution`).

Cause (:data:`CAUSES`): :data:`RETENTION`, the broker's deletion records cover the
range; :data:`MISSING_SEGMENTS`, it is below the broker's log start but no deletion
record covers it (segments deleted by hand, lost to a disk fault, or a broker that
could not say): a loss retention does not explain, DATA_LOSS for the audit;
:data:`CORRUPTION`, damaged on a broker's disk and skipped (the loader's tasks find
these). Only retention and corruption make a loss expected.

Count: ``estimated_messages`` is exact when ``messages_exact`` (the broker recorded
how many messages each deleted segment held, and the reader kept a tally of the
segment it was in), else bytes / average message size. A range explains at most
that many missing messages, never more (:attr:`LostRange.capacity`).

Session bounds: ``(session, after_seq, before_seq)`` per producer session seen next
to the range in that partition: the highest seq of the session delivered just
before it and the lowest just after it (None: none on that side). Within a
partition a session's seqs only increase, so the range can hold a session's seq
only strictly between its bounds; a session not listed is unbounded, and a range
with no bounds at all is attributed by time overlap and count only.

Records written before a field existed read as its default: cause retention, an
estimate, no bounds. Standard library only.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

RETENTION = "retention"
"""Cause of a range the broker's deletion records cover: its retention deleted it."""
MISSING_SEGMENTS = "missing_segments"
"""Cause of a range no deletion record covers: the segments are gone, but not by retention."""
CORRUPTION = "corruption"
"""Cause of a range damaged on a broker's disk and skipped (CORRUPT_RANGE)."""
CAUSES = (RETENTION, MISSING_SEGMENTS, CORRUPTION)
"""Every cause a range can have; only retention and corruption make a loss expected (not DATA_LOSS)."""

TIER_SOURCE = "source"
"""The mirror's ranges: bytes of a source cluster gone before the mirror copied them."""
TIER_TARGET = "target"
"""The loader's ranges: bytes of the cluster it loads from gone before it loaded them."""

Bound = tuple[str, "int | None", "int | None"]
"""(session, after_seq, before_seq); None = open on that side."""

_LOADER_FIELDS = ("topic", "broker_id", "partition", "start_offset", "end_offset", "bytes", "estimated_messages",
                  "after_time_ms", "before_time_ms", "run_id", "detected_at_ms", "cause", "messages_exact",
                  "session_bounds")
"""The fields of the loader's manifest form, in order."""


@dataclass(frozen=True, slots=True)
class LostRange:
    """Offsets ``[start_offset, end_offset)`` of one partition that a tier never delivered (module docstring).

    ``run_id``: the load run that found it (the loader's; empty for the mirror's).
    ``tier``: :data:`TIER_TARGET` (the loader's) or :data:`TIER_SOURCE` (the mirror's,
    of ``source_cluster``). ``ident`` names the range in one audit run's allocation
    (:meth:`from_record` sets it); empty elsewhere.
    """

    topic: str
    broker_id: int
    partition: int
    start_offset: int
    end_offset: int
    bytes: int
    estimated_messages: int
    after_time_ms: int | None
    before_time_ms: int | None
    run_id: str = ""
    detected_at_ms: int = 0
    cause: str = RETENTION
    messages_exact: bool = False
    session_bounds: tuple[Bound, ...] = ()
    tier: str = TIER_TARGET
    source_cluster: str = ""
    ident: str = ""

    # --- the loader's manifest form ------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The loader's manifest form (``tier``, ``source_cluster`` and ``ident`` are not part of it)."""
        d = {name: getattr(self, name) for name in _LOADER_FIELDS}
        d["session_bounds"] = [list(b) for b in self.session_bounds]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "LostRange":
        """A range of the loader's manifest form (unknown keys ignored, missing ones their defaults)."""
        rec = cls(**{k: v for k, v in d.items() if k in _LOADER_FIELDS})
        if rec.session_bounds:
            object.__setattr__(rec, "session_bounds", tuple(tuple(b) for b in rec.session_bounds))
        return rec

    def describe(self) -> str:
        count = f"{self.estimated_messages} messages" if self.messages_exact else f"~{self.estimated_messages} messages"
        return (
            f"{self.topic} broker {self.broker_id} partition {self.partition}: offsets "
            f"[{self.start_offset}, {self.end_offset}) = {self.bytes} bytes, {count} ({self.cause})"
        )

    # --- as the audit reads and attributes it ---------------------------------------------

    @classmethod
    def from_record(cls, obj, *, tier: str = TIER_TARGET, index: int = 0) -> "LostRange":
        """A stored range as the audit attributes it, named by ``tier`` and ``index`` (its place in the input).

        ``obj``: a LostRange, or a dict / row of the loader's manifest form (``tier``
        :data:`TIER_TARGET`) or of the mirror's ``MirrorLostRange`` record (:data:`TIER_SOURCE`:
        ``messages``, ``source_cluster``). Records without a cause read as retention, without
        ``messages_exact`` or bounds as an estimate without bounds.
        """
        if isinstance(obj, LostRange):
            obj = {**obj.to_json(), "source_cluster": obj.source_cluster, "messages": obj.estimated_messages}
        cluster = str(_field(obj, "source_cluster", "") or "") if tier == TIER_SOURCE else ""
        broker, partition = int(_field(obj, "broker_id", 0) or 0), int(_field(obj, "partition", 0) or 0)
        start, end = int(_field(obj, "start_offset", 0) or 0), int(_field(obj, "end_offset", 0) or 0)
        cause = str(_field(obj, "cause", RETENTION) or RETENTION)
        count = _field(obj, "messages" if tier == TIER_SOURCE else "estimated_messages", 0)
        place = f"{cluster}:" if tier == TIER_SOURCE else ""
        return cls(
            topic=str(_field(obj, "topic")), broker_id=broker, partition=partition, start_offset=start,
            end_offset=end, bytes=int(_field(obj, "bytes", end - start) or 0), estimated_messages=int(count or 0),
            after_time_ms=_opt_int(_field(obj, "after_time_ms")), before_time_ms=_opt_int(_field(obj, "before_time_ms")),
            run_id=str(_field(obj, "run_id", "") or ""), detected_at_ms=int(_field(obj, "detected_at_ms", 0) or 0),
            cause=cause, messages_exact=bool(_field(obj, "messages_exact", False)),
            session_bounds=parse_bounds(_field(obj, "session_bounds")), tier=tier, source_cluster=cluster,
            ident=f"{tier}#{index}:{place}b{broker}p{partition}:{start}-{end}:{cause}",
        )

    @property
    def order(self) -> tuple:
        """(cluster, broker_id, partition, start_offset): the deterministic order of an allocation."""
        return (self.source_cluster, self.broker_id, self.partition, self.start_offset)

    @property
    def bounded(self) -> bool:
        """Whether any session is bounded (otherwise: time overlap and count only)."""
        return bool(self.session_bounds)

    @property
    def capacity(self) -> int:
        """The most missing messages this range can explain: its count, exact or estimated (never more)."""
        return max(0, self.estimated_messages)

    def closes(self, session: str) -> bool:
        """Whether the range is bounded on both sides for ``session`` (seen before and after it): then the
        session's missing seqs strictly between the bounds are exactly its messages in the range, or lost
        elsewhere; a session open on a side (ended, or not yet started) may have lost others there."""
        bound = next((b for b in self.session_bounds if b[0] == session), None)
        return bound is not None and bound[1] is not None and bound[2] is not None

    def overlaps(self, window_start_ms: int, window_end_ms: int) -> bool:
        """The window [start, end) overlaps the range's event-time span (open ends when unknown)."""
        if self.after_time_ms is not None and window_end_ms <= self.after_time_ms:
            return False
        if self.before_time_ms is not None and window_start_ms > self.before_time_ms:
            return False
        return True

    def named(self, ident: str) -> "LostRange":
        """The same range under another ``ident``."""
        return replace(self, ident=ident)


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


def _field(obj, name, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _opt_int(v) -> int | None:
    return None if v is None else int(v)
