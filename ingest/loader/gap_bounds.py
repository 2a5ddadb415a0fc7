"""Session bounds of a gap found at planning: which producer seqs the gap can have held.

Within one partition each producer session's ``header.seq`` only increases. So for
a gap ``[start, end)`` of partition ``p``:

- ``after_seq`` of session ``s`` = the highest seq of ``s`` in the committed data
  files of ``p`` whose offset range ends at ``start`` (the range loaded just
  before the gap);
- ``before_seq`` = the lowest seq of ``s`` in this run's staged data files of
  ``p`` whose range starts at ``end`` (the range loaded just after it).

The gap can only hold seqs of ``s`` strictly between them (a missing side:
unbounded there); a session seen on neither side is unbounded. The bounds are
read only when a gap is found (rare), on the driver, from the files through the
storage abstraction: the files on either side are read whole.

No bounds: for a replay (the committed files next to the gap are being
withdrawn), for a neighbour merged by compaction (``broker_id`` -1: its file
mixes partitions, so its seqs say nothing about this one), or when a file cannot
be read (logged; the range is still committed, unbounded on that side). A
message quarantined next to the gap is in no data file, so the bounds can be
looser than the truth by it, never tighter.
"""
from __future__ import annotations

import dataclasses
import io
import logging
from typing import TYPE_CHECKING, Iterable, Sequence

from ingest.loader.records import LostRange

if TYPE_CHECKING:
    from ingest.loader.plan import LoadPlan
    from ingest.loader.results import TaskOutcome
    from ingest.loader.state import LoaderState
    from ingest.storage import Storage

log = logging.getLogger(__name__)

SessionSeqs = dict[str, tuple[int, int]]
"""session -> (lowest seq, highest seq)"""


def file_session_seqs(data: bytes, fmt: str) -> SessionSeqs:
    """Per session the lowest and highest ``header.seq`` in one data file (Avro or Parquet bytes)."""
    out: SessionSeqs = {}
    for session, seq in _header_pairs(data, fmt):
        lo_hi = out.get(session)
        out[session] = (seq, seq) if lo_hi is None else (min(lo_hi[0], seq), max(lo_hi[1], seq))
    return out


def _header_pairs(data: bytes, fmt: str) -> Iterable[tuple[str, int]]:
    # pyarrow / fastavro imported here: only the driver reads bounds, only when a gap is found
    if fmt == "parquet":
        import pyarrow.parquet as pq

        header = pq.read_table(io.BytesIO(data), columns=["header"]).column("header").combine_chunks()
        return zip(header.field("session").to_pylist(), header.field("seq").to_pylist())
    import fastavro

    return ((r["header"]["session"], r["header"]["seq"]) for r in fastavro.reader(io.BytesIO(data)))


def merged_seqs(storage: Storage, paths_and_formats: Sequence[tuple[str, str]]) -> SessionSeqs | None:
    """:func:`file_session_seqs` over several files (full storage paths); None when one cannot be read."""
    out: SessionSeqs = {}
    for path, fmt in paths_and_formats:
        try:
            seqs = file_session_seqs(storage.read_bytes(path), fmt)
        except Exception as exc:  # bounds only narrow an attribution: never fail the commit for them
            log.warning("cannot read the sessions of %s for a gap's bounds (left unbounded): %r", path, exc)
            return None
        for s, (lo, hi) in seqs.items():
            cur = out.get(s)
            out[s] = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))
    return out


def session_bounds(after: SessionSeqs | None, before: SessionSeqs | None) -> tuple[tuple[str, int | None, int | None], ...]:
    """``(session, after_seq, before_seq)`` sorted by session: highest seq before, lowest seq after."""
    after, before = after or {}, before or {}
    return tuple((s, after[s][1] if s in after else None, before[s][0] if s in before else None)
                 for s in sorted(set(after) | set(before)))


def bound_lost_ranges(storage: Storage, plan: LoadPlan, state: LoaderState, outcomes: Sequence[TaskOutcome]) -> LoadPlan:
    """``plan`` with the session bounds set on its lost ranges (see the module docstring).

    A gap cut into parts (retention and missing segments) is bounded as a whole: the
    files next to the gap bound every part, since each part lies inside it.
    """
    staged = [f for o in outcomes for f in o.staged_files if f.kind == "data"]
    partitions = []
    for p in plan.partitions:
        if p.lost and not p.replay:
            first, last = p.lost[0], p.lost[-1]
            after_files = [(state.full_path(f), f.format) for f in state.files_of_partition(p.key)
                           if (f.broker_id, f.partition) == (first.broker_id, first.partition)
                           and f.end_offset == first.start_offset]
            before_files = [(storage.join(f.staging), f.format) for f in staged
                            if f.key == p.key and f.start_offset == last.end_offset]
            bounds = _bounds(storage, first, last, after_files, before_files)
            p = dataclasses.replace(p, lost=tuple(dataclasses.replace(r, session_bounds=bounds) for r in p.lost))
        partitions.append(p)
    return dataclasses.replace(plan, partitions=tuple(partitions))


def _bounds(storage: Storage, first: LostRange, last: LostRange, after_files: list[tuple[str, str]],
            before_files: list[tuple[str, str]]) -> tuple[tuple[str, int | None, int | None], ...]:
    after = merged_seqs(storage, after_files) if after_files else None
    before = merged_seqs(storage, before_files) if before_files else None
    bounds = session_bounds(after, before)
    log.info("%s b%d p%d gap [%d, %d): session bounds from %d file(s) before and %d after: %s", first.topic,
             first.broker_id, first.partition, first.start_offset, last.end_offset, len(after_files),
             len(before_files), bounds)
    return bounds
