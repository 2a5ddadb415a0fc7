"""The loader's committed-state records and their JSON form (lost ranges: :mod:`ingest.lost_ranges`).

A commit manifest (``_ingest/commits/<seq>.json``) is one JSON object::

    {"version": 1, "seq": 7, "kind": "load" | "reset" | "compaction", "run_id": "...",
     "committed_at_ms": 1700000000000,
     "offsets": [OffsetRecord...],      # FULL snapshot after this commit
     "added":   [FileRecord...],        # files this commit publishes (with their staging path)
     "removed": ["<relative path>"...], # files this commit withdraws (replay, compaction)
     "lost_ranges": [LostRange...],     # ranges lost in this run: deleted by retention, segments gone
                                        # without a retention record, or damaged on the broker
     "note": "free text"}

The current state is the fold of every manifest in ``seq`` order: offsets from the
latest, files = union of ``added`` minus ``removed``, lost ranges = union.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from ingest.client.partition_reader import PartitionKey
from ingest.lost_ranges import LostRange

MANIFEST_VERSION = 1



@functools.cache
def _field_names(cls) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def _from_dict(cls, data: dict[str, Any]):
    names = _field_names(cls)
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    """The committed offset of one partition: everything before ``offset`` is loaded (or lost)."""

    topic: str
    broker_id: int
    partition: int
    offset: int
    last_time_ms: int | None = None  # header.time of the last loaded message, for lost-range edges
    # SegmentTally [segment_start, messages]: the loader consumed ``messages`` messages in
    # [segment_start, offset), segment_start being the broker segment holding ``offset``;
    # None when unknown. Makes the count of a retention gap starting at ``offset`` exact.
    tally: tuple[int, int] | None = None

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.broker_id, self.partition)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["tally"] = list(self.tally) if self.tally is not None else None
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OffsetRecord":
        rec = _from_dict(cls, d)
        if rec.tally is not None:
            object.__setattr__(rec, "tally", (int(rec.tally[0]), int(rec.tally[1])))
        return rec


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One committed file. ``path`` is relative to the destination root.

    ``kind`` is ``data`` (rows = decoded events of one hour bucket of one offset range)
    or ``quarantine`` (JSON lines of messages that could not be decoded). A compacted
    file (written by compaction) sets ``broker_id``/``partition`` to -1 and lists the
    ranges it covers in ``sources`` as ``[broker_id, partition, start, end]``.
    """

    path: str
    topic: str
    broker_id: int
    partition: int
    start_offset: int
    end_offset: int
    rows: int
    format: str
    dt: str | None = None
    hour: int | None = None
    bytes: int = 0
    schema_id: int | None = None
    min_time_ms: int | None = None
    max_time_ms: int | None = None
    kind: str = "data"
    staging: str | None = None
    run_id: str | None = None
    sources: tuple[tuple[int, int, int, int], ...] = ()

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.broker_id, self.partition)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["sources"] = [list(s) for s in self.sources]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FileRecord":
        rec = _from_dict(cls, d)
        if rec.sources:
            object.__setattr__(rec, "sources", tuple(tuple(s) for s in rec.sources))
        return rec


@dataclass(frozen=True, slots=True)
class Manifest:
    """One commit; see the module docstring."""

    seq: int
    kind: str
    run_id: str
    committed_at_ms: int
    offsets: tuple[OffsetRecord, ...]
    added: tuple[FileRecord, ...] = ()
    removed: tuple[str, ...] = ()
    lost_ranges: tuple[LostRange, ...] = ()
    note: str = ""
    version: int = MANIFEST_VERSION

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "version": self.version, "seq": self.seq, "kind": self.kind, "run_id": self.run_id,
                "committed_at_ms": self.committed_at_ms,
                "offsets": [o.to_json() for o in self.offsets],
                "added": [f.to_json() for f in self.added],
                "removed": list(self.removed),
                "lost_ranges": [r.to_json() for r in self.lost_ranges],
                "note": self.note,
            },
            indent=1, sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Manifest":
        d = json.loads(data)
        return cls(
            seq=d["seq"], kind=d["kind"], run_id=d["run_id"], committed_at_ms=d["committed_at_ms"],
            offsets=tuple(OffsetRecord.from_json(o) for o in d.get("offsets", [])),
            added=tuple(FileRecord.from_json(f) for f in d.get("added", [])),
            removed=tuple(d.get("removed", [])),
            lost_ranges=tuple(LostRange.from_json(r) for r in d.get("lost_ranges", [])),
            note=d.get("note", ""), version=d.get("version", MANIFEST_VERSION),
        )
