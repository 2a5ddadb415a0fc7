"""``ingest loader status``: committed offsets, lag and retention risk per partition.

Lag is ``latest - committed`` in bytes (offsets are byte positions) and, divided by
the partition's average message size in committed files, approximate messages. A
Kafka-format partition's offsets number records: its lag is an exact count of messages,
its bytes and its retention estimate unknown (None), unless the log start already passed
the committed offset (``deleted_in_s`` 0).
Retention risk: the segment holding the committed offset is deleted by the broker
``log.retention.hours`` after its last modification; its modification time is
found by bisecting the broker's offsets-before answer over time (each answer is
the newest segment start modified at or before that time). ``deleted_in_s`` is
how long until the oldest unloaded data goes, negative when it already went
(the next load reports a lost range).

What cannot be reached is listed too, as a load's run record lists it: a committed
partition whose broker does not answer (or a replicated partition without a
reachable leader) is a row with its committed offset and ``left_out`` (the reason;
offsets and lag unknown, None), and a silent broker with no such partition is a row
of its own (``topic`` and ``partition`` None). A committed partition that no
answering broker serves and no such entry names is a row as well: with a static
``brokers`` list a silent broker's id is unknown, and a broker whose ZooKeeper
session ended is no longer registered at all.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.loader.discover import _consumer, discover_all
from ingest.loader.plan import (LeftOut, PartitionSnapshot, avg_message_bytes, committed_of, select_topics,
                                superseded_homes, topic_filter, waiting_partitions)
from ingest.loader.records import PartitionKey
from ingest.loader.state import LoaderState
from ingest.storage import open_storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionStatus:
    """One partition's row; a left-out one (``left_out``: why) has no offsets from a broker (None)."""

    topic: str | None
    broker_id: int | None
    partition: int | None
    committed: int | None
    earliest: int | None
    latest: int | None
    lag_bytes: int | None
    lag_messages: int | None
    oldest_unloaded_mtime_ms: int | None
    deleted_in_s: float | None
    at_risk: bool
    left_out: str | None = None     # why it cannot be reached now (None: it was)
    broker: str = ""                # the silent broker's host:port, for a left-out row


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
    prev = committed_of(state.offsets, snap)   # a reassigned partition: its offset under the former home
    c = None if prev is None else prev.offset
    start = c if c is not None else (snap.earliest if config["new.partition.start"] == "earliest" else snap.latest)
    lag = max(0, snap.latest - start)
    avg = avg_message_bytes(state.files_of_partition(snap.key)) or avg_message_bytes(state.files(snap.topic))
    retention_ms = config["log.retention.hours"] * 3600 * 1000
    mtime = deleted_in = None
    if snap.kafka:   # offsets number records: the lag is a count; segment times are not asked
        return PartitionStatus(snap.topic, snap.broker_id, snap.partition, c, snap.earliest, snap.latest, None, lag,
                               None, 0.0 if lag and start < snap.earliest else None,
                               bool(lag) and start < snap.earliest)
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
    """A row per partition of the chosen topics, then the left-out rows (module docstring)."""
    state = LoaderState.load(open_storage(config["destination"]))
    found = discover_all(config)
    snaps = found.snapshots
    chosen, _ = select_topics([s.topic for s in snaps], config["topics"], config["topics.blacklist"])
    now = clock.time_ms()
    rows = [partition_status(config, state, s, now) for s in sorted(snaps, key=lambda s: s.key) if s.topic in chosen]
    keep = topic_filter(config["topics"], config["topics.blacklist"])
    return rows + left_out_rows(waiting_partitions(found.left_out, state.offsets, snaps, keep),
                                state, {s.key for s in snaps} | superseded_homes(state.offsets, snaps), keep)


def left_out_rows(left_out: tuple[LeftOut, ...], state: LoaderState, reached: set[PartitionKey],
                  keep) -> list[PartitionStatus]:
    """Rows for what discovery could not reach: each committed partition it keeps out (see the module
    docstring), then each silent broker that has no such row."""
    rows: list[PartitionStatus] = []
    named: set[PartitionKey] = set()
    unknown = [lo for lo in left_out if lo.topic is None and lo.broker_id is None]   # static list: id unknown

    def row(key: PartitionKey, why: str, broker: str = "") -> None:
        named.add(key)
        rows.append(PartitionStatus(key[0], key[1], key[2], state.offset(*key), None, None, None, None, None, None,
                                    False, why, broker))

    for lo in left_out:
        if lo.topic is not None:
            row((lo.topic, lo.broker_id, lo.partition), lo.reason, lo.broker)
        for key in lo.partitions:
            row(key, lo.reason, lo.broker)
    orphans = sorted(k for k in state.offsets if k not in reached and k not in named and keep(k[0]))
    why = "; ".join(f"{lo.broker}: {lo.reason}" for lo in unknown)
    for key in orphans:
        row(key, "no broker that answered serves it" + (f" (not answering: {why})" if why else ""),
            ",".join(lo.broker for lo in unknown))
    for lo in left_out:
        silent_broker = lo.topic is None and not lo.partitions
        if silent_broker and not (orphans and lo.broker_id is None):
            rows.append(PartitionStatus(None, lo.broker_id, None, None, None, None, None, None, None, None, False,
                                        lo.reason, lo.broker))
    return rows


def render(rows: list[PartitionStatus], state_seq: int | None = None) -> str:
    head = f"{'topic':<24} {'b':>3} {'p':>3} {'committed':>12} {'latest':>12} {'lag bytes':>12} {'~lag msgs':>10}  retention"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.left_out is not None:
            lines.append(f"{r.topic or '-':<24} {_dash(r.broker_id):>3} {_dash(r.partition):>3} "
                         f"{_dash(r.committed):>12} {'-':>12} {'-':>12} {'-':>10}  LEFT OUT: {r.left_out} "
                         f"(committed offset kept: a later load takes it)")
            continue
        if r.deleted_in_s is None:
            risk = "-"
        elif r.deleted_in_s <= 0:
            risk = "LOST: unloaded data already deleted"
        else:
            risk = f"oldest unloaded data deleted in {r.deleted_in_s / 3600:.1f} h" + (" AT RISK" if r.at_risk else "")
        lines.append(f"{r.topic:<24} {r.broker_id:>3} {r.partition:>3} {str(r.committed):>12} {r.latest:>12} "
                     f"{r.lag_bytes:>12} {str(r.lag_messages):>10}  {risk}")
    return "\n".join(lines)


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def as_json(rows: list[PartitionStatus]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
