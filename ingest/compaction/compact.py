"""Plan and run the compaction of completed hours.

An hour qualifies when it is closed (its end plus ``compaction.grace.ms`` has
passed), it has at least ``compaction.min.files`` visible files, its file set
differs from what the last compaction produced (so re-running is a no-op), and,
with ``compaction.require.audit``, the audit judged every window of it
complete. :func:`compact_hour` is self-contained and picklable-argument only,
so ``jobs/compact.py`` can run one Spark task per hour.
"""
from __future__ import annotations

import logging
import re
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.compaction.formats import format_of, merge, schema_key
from ingest.compaction.replace import COMPACTION_DIR, HourRef, Replacer, basename

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
_DT = re.compile(r"dt=(\d{4}-\d{2}-\d{2})$")
_HOUR = re.compile(r"hour=(\d{2})$")


def hour_start_ms(hour: HourRef) -> int:
    t = datetime.strptime(f"{hour.dt} {hour.hour}", "%Y-%m-%d %H").replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def hour_of_ms(topic: str, ms: int) -> HourRef:
    t = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return HourRef(topic, t.strftime("%Y-%m-%d"), t.strftime("%H"))


@dataclass(frozen=True)
class Settings:
    """The compaction keys a task needs (picklable; built from the Config)."""

    destination: str
    target_bytes: int
    min_files: int
    grace_ms: int
    parquet_compression: str = "snappy"

    @classmethod
    def from_config(cls, cfg: Any) -> "Settings":
        return cls(cfg["destination"], cfg["compaction.target.bytes"], cfg["compaction.min.files"],
                   cfg["compaction.grace.ms"], cfg["compaction.parquet.compression"])


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
    compaction_id: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def discover_hours(storage: Any, topics: Sequence[str] = (),
                   start_ms: int | None = None, end_ms: int | None = None) -> list[HourRef]:
    """Every ``topic/dt=/hour=`` directory under the destination, optionally within [start, end)."""
    if not storage.exists(storage.root):
        return []
    wanted = set(topics)
    hours: list[HourRef] = []
    for tinfo in storage.list(storage.root):
        topic = basename(tinfo.path)
        if not tinfo.is_dir or topic.startswith(("_", ".")) or (wanted and topic not in wanted):
            continue
        for dinfo in storage.list(tinfo.path):
            dm = _DT.search(basename(dinfo.path))
            if not dinfo.is_dir or not dm:
                continue
            for hinfo in storage.list(dinfo.path):
                hm = _HOUR.search(basename(hinfo.path))
                if not hinfo.is_dir or not hm:
                    continue
                ref = HourRef(topic, dm.group(1), hm.group(1))
                start = hour_start_ms(ref)
                if (start_ms is None or start + HOUR_MS > start_ms) and (end_ms is None or start < end_ms):
                    hours.append(ref)
    return sorted(hours, key=lambda h: (h.topic, h.dt, h.hour))


def compact_hour(storage: Any, settings: Settings, hour: HourRef, clock: Clock = SYSTEM_CLOCK) -> Outcome:
    """Compact one hour if it needs it; idempotent and crash-safe (see ``replace``)."""
    replacer = Replacer(storage, clock)
    now = clock.time_ms()
    if hour_start_ms(hour) + HOUR_MS + settings.grace_ms > now:
        return Outcome(str(hour), "skipped", "hour not closed yet (end + compaction.grace.ms in the future)")
    for record in replacer.records(hour):
        if record["state"] == "committed":  # a crashed run of ours: finish it first
            replacer.roll_forward(record)
    paths = replacer.visible_files(hour)
    names = sorted(basename(p) for p in paths)
    done = [r for r in replacer.records(hour) if r["state"] == "done"]
    if done and sorted(done[-1]["new"]) == names:
        return Outcome(str(hour), "noop", "already compacted; no new files since", files_in=len(names))
    if len(names) < settings.min_files:
        return Outcome(str(hour), "noop", f"{len(names)} file(s) < compaction.min.files={settings.min_files}",
                       files_in=len(names))

    cid = f"{now}-{uuid.uuid4().hex[:8]}"
    by_path = {basename(p): p for p in paths}
    groups: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
    for name in names:
        fmt = format_of(name)
        data = storage.read_bytes(by_path[name])
        groups.setdefault((fmt, schema_key(fmt, data)), []).append((name, data))
    new_files: dict[str, bytes] = {}
    rows_in = rows_out = dups = 0
    for gi, ((fmt, _), members) in enumerate(sorted(groups.items())):
        result = merge(fmt, [d for _, d in members], settings.target_bytes, settings.parquet_compression)
        rows_in += result.rows_in
        dups += result.duplicates
        for fi, (data, rows) in enumerate(zip(result.files, result.rows)):
            new_files[f"{hour.topic}.compacted.{cid}.{gi}-{fi}.{fmt}"] = data
            rows_out += rows
    bytes_in = sum(len(d) for m in groups.values() for _, d in m)
    bytes_out = sum(len(d) for d in new_files.values())
    replacer.stage(cid, new_files)
    record = {
        "id": cid, "topic": hour.topic, "dt": hour.dt, "hour": hour.hour,
        "formats": sorted({f for f, _ in groups}), "old": names, "new": sorted(new_files),
        "rows_in": rows_in, "rows_out": rows_out, "duplicates": dups,
        "bytes_in": bytes_in, "bytes_out": bytes_out,
        "target_bytes": settings.target_bytes, "started_ms": now, "committed_ms": clock.time_ms(),
    }
    replacer.commit(record)
    log.info("compacted %s: %d files (%d bytes) -> %d files (%d bytes), %d rows, %d duplicates dropped",
             hour, len(names), bytes_in, len(new_files), bytes_out, rows_out, dups)
    return Outcome(str(hour), "compacted", "", len(names), len(new_files), rows_in, rows_out, dups,
                   bytes_in, bytes_out, cid)


def select_hours(hours: Iterable[HourRef], complete: set[tuple[str, str, str]] | None) -> tuple[list[HourRef], list[Outcome]]:
    """Split hours into those the audit allows and skip outcomes for the rest (``None``: all allowed)."""
    keep, skipped = [], []
    for h in hours:
        if complete is None or (h.topic, h.dt, h.hour) in complete:
            keep.append(h)
        else:
            skipped.append(Outcome(str(h), "skipped", "the audit did not judge every window of this hour COMPLETE"))
    return keep, skipped


__all__ = ["COMPACTION_DIR", "HourRef", "Outcome", "Settings", "compact_hour", "discover_hours",
           "hour_of_ms", "hour_start_ms", "select_hours"]
