"""``ingest loader status``: committed offsets, lag and retention risk per partition.

Lag is ``latest - committed`` in bytes (offsets are byte positions) and, divided by
the partition's average message size in committed files, approximate messages.
Retention risk: the segment holding the committed offset is deleted by the broker
``log.retention.hours`` after its last modification; its modification time is
found by bisecting the broker's offsets-before answer over time (each answer is
the newest segment start modified at or before that time). ``deleted_in_s`` is
how long until the oldest unloaded data goes, negative when it already went
(the next load reports a lost range).
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.loader.discover import _consumer, discover
from ingest.loader.plan import PartitionSnapshot, avg_message_bytes, select_topics
from ingest.loader.state import LoaderState
from ingest.storage import open_storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    broker_id: int
    partition: int
    committed: int | None
    earliest: int
    latest: int
    lag_bytes: int
    lag_messages: int | None
    oldest_unloaded_mtime_ms: int | None
    deleted_in_s: float | None
    at_risk: bool


def segment_mtime(consumer, topic: str, partition: int, offset: int, now_ms: int, horizon_ms: int) -> int | None:
    """Last-modified time (ms, to the second) of the segment holding ``offset``, by bisection."""
    starts = sorted(consumer.offsets_before(topic, partition, -1, 1 << 30))
    seg = max((s for s in starts if s <= offset), default=None)
    if seg is None:
        return None

    def covered(t: int) -> bool:
        got = consumer.offsets_before(topic, partition, t, 1)
        return bool(got) and got[0] >= seg

    lo, hi = now_ms - horizon_ms, now_ms
    if covered(lo):
        return lo
    if not covered(hi):
        return None
    while hi - lo > 1000:
        mid = (lo + hi) // 2
        if covered(mid):
            hi = mid
        else:
            lo = mid
    return hi


def partition_status(config, state: LoaderState, snap: PartitionSnapshot, now_ms: int) -> PartitionStatus:
    c = state.offset(*snap.key)
    start = c if c is not None else (snap.earliest if config["new.partition.start"] == "earliest" else snap.latest)
    lag = max(0, snap.latest - start)
    avg = avg_message_bytes(state.files_of_partition(snap.key)) or avg_message_bytes(state.files(snap.topic))
    retention_ms = config["log.retention.hours"] * 3600 * 1000
    mtime = deleted_in = None
    if lag:
        if start < snap.earliest:
            deleted_in = 0.0
        else:
            with _consumer(snap.host, snap.port, config) as cons:
                mtime = segment_mtime(cons, snap.topic, snap.partition, start, now_ms, 2 * retention_ms)
            if mtime is not None:
                deleted_in = (mtime + retention_ms - now_ms) / 1000.0
    at_risk = deleted_in is not None and deleted_in < 0.25 * retention_ms / 1000.0
    return PartitionStatus(snap.topic, snap.broker_id, snap.partition, c, snap.earliest, snap.latest, lag,
                           int(round(lag / avg)) if avg and lag else (0 if not lag else None), mtime, deleted_in,
                           at_risk)


def status(config, clock: Clock = SYSTEM_CLOCK) -> list[PartitionStatus]:
    state = LoaderState.load(open_storage(config["destination"]))
    snaps = discover(config)
    chosen, _ = select_topics([s.topic for s in snaps], config["topics"], config["topics.blacklist"])
    now = clock.time_ms()
    return [partition_status(config, state, s, now) for s in sorted(snaps, key=lambda s: s.key) if s.topic in chosen]


def render(rows: list[PartitionStatus], state_seq: int | None = None) -> str:
    head = f"{'topic':<24} {'b':>3} {'p':>3} {'committed':>12} {'latest':>12} {'lag bytes':>12} {'~lag msgs':>10}  retention"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.deleted_in_s is None:
            risk = "-"
        elif r.deleted_in_s <= 0:
            risk = "LOST: unloaded data already deleted"
        else:
            risk = f"oldest unloaded data deleted in {r.deleted_in_s / 3600:.1f} h" + (" AT RISK" if r.at_risk else "")
        lines.append(f"{r.topic:<24} {r.broker_id:>3} {r.partition:>3} {str(r.committed):>12} {r.latest:>12} "
                     f"{r.lag_bytes:>12} {str(r.lag_messages):>10}  {risk}")
    return "\n".join(lines)


def as_json(rows: list[PartitionStatus]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
