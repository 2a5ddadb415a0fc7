"""Which hours to compact: read from the loader's committed state, never from a listing.

An hour of a topic qualifies when it is closed (its end plus
``compaction.grace.ms`` has passed), it holds at least ``compaction.min.files``
committed data files, it is not already the output of one compaction (so a
re-run is a no-op), and, with ``compaction.require.audit``, the audit judged
every window of it complete.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

from ingest.compaction.formats import DEFAULT_BATCH_BYTES
from ingest.loader.layout import hour_dir

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class HourRef:
    """One hour of one topic: ``<destination>/<topic>/dt=<dt>/hour=<H>`` (``ingest.loader.layout.hour_dir``)."""

    topic: str
    dt: str      # YYYY-MM-DD (UTC)
    hour: int

    @property
    def start_ms(self) -> int:
        t = datetime.strptime(self.dt, "%Y-%m-%d").replace(tzinfo=timezone.utc)
        return int(t.timestamp() * 1000) + self.hour * HOUR_MS

    def __str__(self) -> str:
        return hour_dir(self.topic, self.dt, self.hour)


def hour_of_ms(topic: str, ms: int) -> HourRef:
    t = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return HourRef(topic, t.strftime("%Y-%m-%d"), t.hour)


@dataclass(frozen=True)
class Settings:
    """The compaction keys a task needs (picklable; built from the Config)."""

    destination: str
    target_bytes: int
    min_files: int
    grace_ms: int
    parquet_compression: str = "snappy"
    include_open_hours: bool = False
    batch_bytes: int = DEFAULT_BATCH_BYTES

    @classmethod
    def from_config(cls, cfg: Any) -> "Settings":
        return cls(cfg["destination"], cfg["compaction.target.bytes"], cfg["compaction.min.files"],
                   cfg["compaction.grace.ms"], cfg["compaction.parquet.compression"],
                   cfg["compaction.include.open.hours"], cfg["compaction.batch.bytes"])


@dataclass(frozen=True)
class HourPlan:
    """An hour to compact and its committed files (``ingest.loader.records.FileRecord``)."""

    hour: HourRef
    files: tuple[Any, ...]


@dataclass(frozen=True)
class Outcome:
    """What happened to one hour."""

    hour: str
    action: str            # compacted | noop | skipped
    reason: str = ""
    files_in: int = 0
    files_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    duplicates: int = 0
    bytes_in: int = 0
    bytes_out: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def committed_hours(state: Any, topics: Sequence[str] = ()) -> dict[HourRef, list[Any]]:
    """Committed data files grouped by hour (quarantine files are never compacted)."""
    wanted = set(topics)
    out: dict[HourRef, list[Any]] = {}
    for rec in state.files(kind="data"):
        if rec.dt is None or rec.hour is None or (wanted and rec.topic not in wanted):
            continue
        out.setdefault(HourRef(rec.topic, rec.dt, int(rec.hour)), []).append(rec)
    return out


def is_compacted_set(files: Sequence[Any]) -> bool:
    """True when every file is the output of one and the same compaction run."""
    runs = {f.run_id for f in files if f.broker_id == -1}
    return len(runs) == 1 and all(f.broker_id == -1 for f in files)


def plan_hours(state: Any, settings: Settings, now_ms: int, *, topics: Sequence[str] = (),
               start_ms: int | None = None, end_ms: int | None = None,
               complete: set[tuple[str, str, int]] | None = None) -> tuple[list[HourPlan], list[Outcome]]:
    """Hours to compact now, and an outcome for every other hour in range (why not)."""
    plans: list[HourPlan] = []
    other: list[Outcome] = []
    for hour, files in sorted(committed_hours(state, topics).items(), key=lambda kv: (kv[0].topic, kv[0].start_ms)):
        if start_ms is not None and hour.start_ms + HOUR_MS <= start_ms or end_ms is not None and hour.start_ms >= end_ms:
            continue
        n = len(files)
        if hour.start_ms + HOUR_MS + settings.grace_ms > now_ms and not settings.include_open_hours:
            other.append(Outcome(str(hour), "skipped", "hour not closed yet (end + compaction.grace.ms in the future)", n))
        elif complete is not None and (hour.topic, hour.dt, hour.hour) not in complete:
            other.append(Outcome(str(hour), "skipped", "the audit did not judge every window of this hour COMPLETE", n))
        elif is_compacted_set(files) and n >= 1:
            other.append(Outcome(str(hour), "noop", "already compacted; no new files since", n))
        elif n < settings.min_files:
            other.append(Outcome(str(hour), "noop", f"{n} file(s) < compaction.min.files={settings.min_files}", n))
        else:
            plans.append(HourPlan(hour, tuple(sorted(files, key=lambda f: f.path))))
    return plans, other
