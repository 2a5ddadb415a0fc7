"""Plan one load run: which offset ranges of which partitions go to which Spark task.

Pure logic over a snapshot of the brokers (:class:`PartitionSnapshot`) and the
committed state; the network parts (discovery, segment starts, probing the first
message after a gap) are passed in as callables so tests drive it directly.

Rules, per broker/topic/partition ``p`` with committed offset ``c`` (None if never
loaded) and broker offsets ``[earliest, latest)`` fixed when the run starts:

- ``c is None``: start at ``earliest`` (``new.partition.start=earliest``; if
  ``earliest > 0`` the range ``[0, earliest)`` is recorded as lost) or at ``latest``.
- ``c < earliest``: ``[c, earliest)`` was deleted before it was loaded: one
  :class:`~ingest.lost_ranges.LostRange` per part, cause ``retention`` where the
  broker's deletion records cover it, ``missing_segments`` where none does
  (:mod:`ingest.loader.gaps`); with ``fail.on.data.loss`` the run fails.
- A Kafka-format partition (offsets number records) has its gap counted exactly, ``e - c``
  records, cause ``retention`` (:func:`~ingest.loader.gaps.kafka_gap`), and its range is never cut
  at segment starts: ``max.bytes.per.task``/``max.bytes.per.run`` do not split it.
- ``c > latest``: the broker's log is behind what was committed: the run fails
  (the broker lost data or was replaced); ``--reset-offsets`` resolves it. For a
  replicated partition (``latest`` = its leader's high watermark, which lags for a
  moment after a failover) nothing is loaded from it this run and ``c`` stays.
- A replay (``--reset-offsets``) overrides ``c``; files of ``p`` at or after the new
  start are withdrawn by the same commit that adds their reloaded replacement.
- Ranges larger than ``max.bytes.per.task`` are split at segment starts (the
  broker's offsets-before answer), so no task is much larger than the limit unless a
  single segment is; ``max.bytes.per.run`` takes whole pieces round-robin across
  partitions, so every partition progresses and the remainder waits for the next run.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from ingest.client.deleted_segments import DeletedSegment
from ingest.client.partition_reader import BrokerPartition
from ingest.errors import DataLossError, IngestError
from ingest.home_broker import furthest_former
from ingest.loader.gaps import Probe, gap_losses, kafka_gap
from ingest.loader.records import FileRecord, OffsetRecord, PartitionKey
from ingest.lost_ranges import LostRange

log = logging.getLogger(__name__)

DeletedSegmentsOf = Callable[["PartitionSnapshot", int, int], "Sequence[DeletedSegment] | None"]
"""The broker's records of the segments it deleted overlapping ``[start, end)`` of a partition (None: unknown)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionSnapshot(BrokerPartition):
    """One partition on a broker (:class:`~ingest.client.partition_reader.BrokerPartition`) as the
    broker reported it when the run started: offsets ``[earliest, latest)``, ``latest`` a replicated
    partition's high watermark."""

    earliest: int
    latest: int


@dataclass(frozen=True, slots=True)
class LeftOut:
    """What a run could not plan, and why. Its committed offsets stay, and a later run loads it.

    Either a broker that did not answer (``broker``: its ``host:port``; all its Kafka 0.7
    partitions are left out: ``partitions`` lists those that have a committed offset), or one
    replicated partition without a reachable leader (``topic``, ``partition``, named by its home
    broker ``broker_id``).
    """

    reason: str
    broker_id: int | None = None       # None: a broker from a static ``brokers`` list, id unknown
    broker: str = ""
    topic: str | None = None
    partition: int | None = None
    partitions: tuple[PartitionKey, ...] = ()

    def describe(self) -> str:
        if self.topic is not None:
            what = f"{self.topic} b{self.broker_id} p{self.partition}"
        else:
            what = f"broker {self.broker_id} ({self.broker})" if self.broker_id is not None else f"broker {self.broker}"
        waiting = "; committed partitions waiting: " + ", ".join(f"{t} b{b} p{p}" for t, b, p in self.partitions) \
            if self.partitions else ""
        return f"{what}: {self.reason}{waiting}"

    def to_json(self) -> dict:
        return {"reason": self.reason, "broker_id": self.broker_id, "broker": self.broker, "topic": self.topic,
                "partition": self.partition, "partitions": [list(k) for k in self.partitions]}

    @classmethod
    def from_json(cls, d: Mapping) -> "LeftOut":
        return cls(d["reason"], d.get("broker_id"), d.get("broker", ""), d.get("topic"), d.get("partition"),
                   tuple(tuple(k) for k in d.get("partitions", ())))


def waiting_partitions(left_out: Sequence[LeftOut], committed: Mapping[PartitionKey, OffsetRecord],
                       snapshots: Sequence[PartitionSnapshot], chosen: Callable[[str], bool]) -> tuple[LeftOut, ...]:
    """``left_out`` without the partitions of topics the filters do not choose, and with each silent
    broker's committed partitions (of chosen topics) that no snapshot covers: what its absence keeps
    from this run."""
    planned = {s.key for s in snapshots} | {(lo.topic, lo.broker_id, lo.partition) for lo in left_out
                                             if lo.topic is not None}   # those have an entry of their own
    planned |= superseded_homes(committed, snapshots)   # planned under the partition's new home broker
    out = []
    for lo in left_out:
        if lo.topic is not None and not chosen(lo.topic):
            continue
        if lo.topic is None and lo.broker_id is not None:
            keys = tuple(sorted(k for k in committed if k[1] == lo.broker_id and k not in planned and chosen(k[0])))
            lo = LeftOut(lo.reason, lo.broker_id, lo.broker, partitions=keys)
        out.append(lo)
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRange(BrokerPartition):
    """One Spark task: fetch ``[start, end)`` of one partition on a broker (a replicated partition: from
    its current leader, found through ``metadata_brokers``)."""

    task_id: int
    start: int
    end: int
    segment_start: int | None = None  # the last broker segment start in [start, end), for the tally

    @property
    def bytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class PartitionPlan:
    """The decision for one partition."""

    snapshot: PartitionSnapshot
    committed: int | None          # committed offset before this run (None: never loaded)
    start: int                     # where this run starts
    end: int                       # where this run stops (<= latest; < latest when capped)
    lost: tuple[LostRange, ...] = ()  # the gap before ``start``, one range per part (offset order)
    replay: bool = False           # start < committed: replaced files are withdrawn
    tasks: tuple[TaskRange, ...] = ()

    @property
    def key(self) -> PartitionKey:
        return self.snapshot.key

    @property
    def deferred_bytes(self) -> int:
        return max(0, self.snapshot.latest - self.end)


@dataclass(frozen=True)
class LoadPlan:
    run_id: str
    base_seq: int                   # the commit this plan was built on (conflict check)
    partitions: tuple[PartitionPlan, ...]
    skipped_topics: tuple[str, ...] = ()
    left_out: tuple[LeftOut, ...] = ()   # what discovery could not reach (offsets kept)

    @property
    def tasks(self) -> list[TaskRange]:
        return [t for p in self.partitions for t in p.tasks]

    @property
    def lost_ranges(self) -> list[LostRange]:
        return [r for p in self.partitions for r in p.lost]

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.tasks)


def topic_filter(whitelist: str, blacklist: str) -> Callable[[str], bool]:
    """Whether a topic is loaded: whole-name regex match of the whitelist and not the blacklist."""
    wl = re.compile(whitelist)
    bl = re.compile(blacklist) if blacklist else None
    return lambda t: bool(wl.fullmatch(t)) and not (bl and bl.fullmatch(t))


def select_topics(topics: Sequence[str], whitelist: str, blacklist: str) -> tuple[list[str], list[str]]:
    """(selected, skipped) by :func:`topic_filter`."""
    keep = topic_filter(whitelist, blacklist)
    chosen, skipped = [], []
    for t in sorted(set(topics)):
        (chosen if keep(t) else skipped).append(t)
    return chosen, skipped


def split_range(start: int, end: int, boundaries: Sequence[int], max_bytes: int) -> list[tuple[int, int]]:
    """Split ``[start, end)`` at segment starts into pieces of at most ``max_bytes`` where possible.

    Only offsets in ``boundaries`` strictly inside the range are cut points (they are
    message boundaries); a segment larger than ``max_bytes`` stays one piece.
    """
    if end <= start:
        return []
    cuts = sorted({b for b in boundaries if start < b < end})
    pieces: list[tuple[int, int]] = []
    piece_start = start
    prev = start
    for cut in cuts + [end]:
        if cut - piece_start > max_bytes and prev > piece_start:
            pieces.append((piece_start, prev))
            piece_start = prev
        prev = cut
    pieces.append((piece_start, end))
    return pieces


def avg_message_bytes(files: Sequence[FileRecord]) -> float | None:
    """Average on-log bytes per message over committed files (None without rows)."""
    seen: dict[tuple[int, int], int] = {}
    rows = 0
    for f in files:
        rows += f.rows
        seen[(f.start_offset, f.end_offset)] = f.end_offset - f.start_offset
    return sum(seen.values()) / rows if rows else None


def build_plan(
    *,
    run_id: str,
    base_seq: int,
    snapshots: Sequence[PartitionSnapshot],
    committed: Mapping[PartitionKey, OffsetRecord],
    committed_files: Callable[[PartitionKey], Sequence[FileRecord]] = lambda key: (),
    resets: Mapping[PartitionKey, int] | None = None,
    segment_starts: Callable[[PartitionSnapshot], Sequence[int]] = lambda snap: (),
    probe: Callable[[PartitionSnapshot, int], Probe] = lambda snap, offset: Probe(None, None),
    deleted_segments: DeletedSegmentsOf = lambda snap, start, end: None,
    new_partition_start: str = "earliest",
    max_bytes_per_task: int = 128 * 1024 * 1024,
    max_bytes_per_run: int = 0,
    fail_on_data_loss: bool = True,
    now_ms: int = 0,
) -> LoadPlan:
    """Build the plan; see the module docstring for the rules.

    Phases: :func:`decide_starts` -> :func:`check_data_loss` -> :func:`split_pieces`
    -> :func:`share_run_budget` -> :func:`assign_tasks`.

    Raises:
        DataLossError: retention deleted unloaded data and ``fail_on_data_loss``; the
            message lists every lost range and how to continue.
        IngestError: a committed offset is beyond the broker's latest offset.
    """
    decisions = decide_starts(snapshots, committed, committed_files=committed_files, resets=resets or {},
                              probe=probe, deleted_segments=deleted_segments, new_partition_start=new_partition_start,
                              run_id=run_id, now_ms=now_ms)
    if fail_on_data_loss:
        check_data_loss(decisions)
    capped = bool(max_bytes_per_run) and sum(max(0, d.snapshot.latest - d.start) for d in decisions) > max_bytes_per_run
    starts_of = _asked_once(segment_starts)
    pieces = split_pieces(decisions, starts_of, max_bytes_per_task, every_segment=capped)
    taken = share_run_budget(pieces, max_bytes_per_run) if capped else pieces
    return LoadPlan(run_id, base_seq, assign_tasks(decisions, taken, max_bytes_per_task, segment_starts=starts_of))


def _asked_once(segment_starts: Callable[[PartitionSnapshot], Sequence[int]]):
    """``segment_starts`` asking the broker at most once per partition in this plan."""
    seen: dict[PartitionKey, tuple[int, ...]] = {}

    def ask(snap: PartitionSnapshot) -> tuple[int, ...]:
        if snap.key not in seen:
            seen[snap.key] = tuple(segment_starts(snap))
        return seen[snap.key]

    return ask


@dataclass(frozen=True, slots=True)
class StartDecision:
    """Where one partition's run starts, before any size limit applies."""

    snapshot: PartitionSnapshot
    committed: int | None          # committed offset before this run (None: never loaded)
    start: int
    lost: tuple[LostRange, ...] = ()
    replay: bool = False


def committed_of(committed: Mapping[PartitionKey, OffsetRecord], snap: PartitionSnapshot, *,
                 quiet: bool = False) -> OffsetRecord | None:
    """The committed offset of ``snap``'s partition. A replicated partition is named by its home broker (its
    first replica), which a reassignment changes when it moves that replica: with nothing committed under
    the new home, the furthest offset committed under an earlier home of the same topic and partition
    carries over (its replicas hold the same log, offset for offset; logged unless ``quiet``). Named by its
    current home once committed again."""
    prev = committed.get(snap.key)
    if prev is not None or not snap.replicated:
        return prev
    former = furthest_former(((k[1], k[2], r) for k, r in committed.items() if k[0] == snap.topic),
                             snap.broker_id, snap.partition, offset=lambda r: r.offset)
    if former is None:
        return None
    home, prev = former
    if not quiet:
        log.info("%s partition %d: home broker now %d (reassigned); resuming from offset %d committed under "
                 "home broker %d", snap.topic, snap.partition, snap.broker_id, prev.offset, home)
    return prev


def gap_questions(snapshots: Sequence[PartitionSnapshot], committed: Mapping[PartitionKey, OffsetRecord],
                  resets: Mapping[PartitionKey, int], new_partition_start: str
                  ) -> list[tuple[PartitionSnapshot, int, int]]:
    """The ``(snapshot, start, end)`` questions :func:`decide_starts` asks ``deleted_segments`` with the same
    arguments: each Kafka 0.7 partition's unloaded range below its log start. Known before planning, so they
    can be asked of each broker at once (:func:`ingest.loader.discover.deleted_segments_asker`)."""
    out = []
    for snap in snapshots:
        prev = committed_of(committed, snap, quiet=True)
        gap = _gap(snap, resets.get(snap.key, prev.offset if prev else None), new_partition_start)
        if gap is not None:
            out.append((snap, *gap))
    return out


def _gap(snap: PartitionSnapshot, start: int | None, new_partition_start: str) -> tuple[int, int] | None:
    """The range ``[start, earliest)`` of a Kafka 0.7 partition deleted before it was loaded (``start`` the
    effective committed offset, None for a new partition: ``[0, earliest)`` unless it starts at latest)."""
    if snap.kafka:
        return None
    if start is None:
        return (0, snap.earliest) if new_partition_start != "latest" and snap.earliest > 0 else None
    return (start, snap.earliest) if start < snap.earliest else None


def superseded_homes(committed: Mapping[PartitionKey, OffsetRecord],
                     snapshots: Sequence[PartitionSnapshot]) -> set[PartitionKey]:
    """The committed keys that name a replicated partition of ``snapshots`` by a former home broker (a
    reassignment moved its first replica): the same partitions as those snapshots, not missing ones."""
    now = {(s.topic, s.partition): s.key for s in snapshots if s.replicated}
    return {k for k in committed if now.get((k[0], k[2]), k) != k}


def decide_starts(
    snapshots: Sequence[PartitionSnapshot], committed: Mapping[PartitionKey, OffsetRecord], *,
    committed_files: Callable[[PartitionKey], Sequence[FileRecord]], resets: Mapping[PartitionKey, int],
    probe: Callable[[PartitionSnapshot, int], Probe], new_partition_start: str, run_id: str, now_ms: int,
    deleted_segments: DeletedSegmentsOf = lambda snap, start, end: None,
) -> list[StartDecision]:
    """The start of every partition (by key) and what was lost before it.

    Raises:
        IngestError: a committed offset is beyond the broker's latest offset.
    """
    decided: list[StartDecision] = []
    for snap in sorted(snapshots, key=lambda s: s.key):
        prev = committed_of(committed, snap)
        c = prev.offset if prev else None
        replay = False
        lost: tuple[LostRange, ...] = ()
        if snap.key in resets:
            start = resets[snap.key]
            replay = c is not None and start < c
            c_eff = start
        else:
            c_eff = c
        gap = _gap(snap, c_eff, new_partition_start)
        if c_eff is None:
            if new_partition_start == "latest":
                start = snap.latest
            else:
                start = snap.earliest
                if snap.earliest > 0 and snap.kafka:
                    lost = kafka_gap(snap.key, 0, snap.earliest, None, probe(snap, snap.earliest), run_id, now_ms)
                elif gap is not None:
                    lost = gap_losses(snap.key, 0, snap.earliest, None, None, probe(snap, snap.earliest),
                                      deleted_segments(snap, *gap), run_id, now_ms)
        elif c_eff < snap.earliest and snap.kafka:
            lost = kafka_gap(snap.key, c_eff, snap.earliest, prev, probe(snap, snap.earliest), run_id, now_ms)
            start = snap.earliest
        elif gap is not None:
            avg = avg_message_bytes(committed_files(snap.key))
            lost = gap_losses(snap.key, c_eff, snap.earliest, prev, avg, probe(snap, snap.earliest),
                              deleted_segments(snap, *gap), run_id, now_ms)
            start = snap.earliest
        elif c_eff > snap.latest and snap.replicated and snap.key not in resets:
            # a new leader's high watermark lags the old one's until its followers fetch again
            # (moments after a failover): nothing to load now, the next run goes on from c
            log.warning("%s home broker %d partition %d: committed offset %d is above the leader's high "
                        "watermark %d (a leader change moments ago, or an unclean election lost data); "
                        "nothing loaded from it this run", snap.topic, snap.broker_id, snap.partition, c_eff,
                        snap.latest)
            start = c_eff
        elif c_eff > snap.latest:
            raise IngestError(
                f"committed offset {c_eff} of {snap.topic} broker {snap.broker_id} partition {snap.partition} is beyond "
                f"the broker's latest offset {snap.latest}: the broker's log was truncated or replaced. To reload what "
                f"the broker has, run with --reset-offsets earliest --topic {snap.topic}"
            )
        else:
            start = c_eff
        decided.append(StartDecision(snap, c, start, lost, replay))
    return decided


def check_data_loss(decisions: Sequence[StartDecision]) -> None:
    """Raise :class:`DataLossError` listing every lost range, if any (``fail.on.data.loss``)."""
    lost_all = [r for d in decisions for r in d.lost]
    if lost_all:
        raise DataLossError(
            "data was deleted from the brokers before it was loaded:\n  " + "\n  ".join(r.describe() for r in lost_all)
            + "\nThe data cannot be recovered from the brokers. To record the loss and continue from the earliest "
            "retained offsets, rerun with --set fail.on.data.loss=false (the lost ranges go into the run record; "
            "the audit reports ranges deleted by retention as RETENTION_LOSS, and missing_segments ranges, which "
            "the broker's retention did not delete, as DATA_LOSS).",
            lost_ranges=lost_all,
        )


def split_pieces(decisions: Sequence[StartDecision], segment_starts: Callable[[PartitionSnapshot], Sequence[int]],
                 max_bytes_per_task: int, *, every_segment: bool = False) -> dict[PartitionKey, list[tuple[int, int]]]:
    """Each partition's ``[start, latest)`` cut at segment starts into pieces of at most ``max_bytes_per_task``.

    ``every_segment`` (a run over ``max.bytes.per.run``): every segment is its own
    piece, so the run's budget can be shared fairly; tasks are merged back later.
    """
    pieces: dict[PartitionKey, list[tuple[int, int]]] = {}
    for d in decisions:
        snap, start, end = d.snapshot, d.start, max(d.start, d.snapshot.latest)
        if every_segment:
            pieces[snap.key] = split_range(start, end, segment_starts(snap) if end > start else (), 0)
        else:
            boundaries = segment_starts(snap) if end - start > max_bytes_per_task else ()
            pieces[snap.key] = split_range(start, end, boundaries, max_bytes_per_task)
    return pieces


def share_run_budget(pieces: Mapping[PartitionKey, list[tuple[int, int]]],
                     max_bytes_per_run: int) -> dict[PartitionKey, list[tuple[int, int]]]:
    """Whole pieces within ``max_bytes_per_run``, taken round-robin over partitions (each progresses).

    The first piece is always taken, even when larger than the budget, so a run never stalls.
    """
    taken: dict[PartitionKey, list[tuple[int, int]]] = {k: [] for k in pieces}
    budget = max_bytes_per_run
    depth = 0
    progressed = True
    while progressed:
        progressed = False
        for key in sorted(pieces):
            if depth < len(pieces[key]) and len(taken[key]) == depth:
                s, e = pieces[key][depth]
                if e - s <= budget or not any(taken.values()):
                    taken[key].append((s, e))
                    budget -= e - s
                    progressed = True
        depth += 1
    return taken


def assign_tasks(decisions: Sequence[StartDecision], taken: Mapping[PartitionKey, list[tuple[int, int]]],
                 max_bytes_per_task: int, *,
                 segment_starts: Callable[[PartitionSnapshot], Sequence[int]] = lambda snap: ()) -> tuple[PartitionPlan, ...]:
    """Merge consecutive pieces into tasks of at most ``max_bytes_per_task``; task ids count from 0.

    Each task learns the last segment start inside its range (``TaskRange.segment_start``,
    for the partition's tally: :mod:`ingest.loader.tally`).
    """
    out: list[PartitionPlan] = []
    task_id = 0
    for d in decisions:
        snap = d.snapshot
        ranges: list[list[int]] = []
        for s, e in taken[snap.key]:
            if ranges and e - ranges[-1][0] <= max_bytes_per_task:
                ranges[-1][1] = e
            else:
                ranges.append([s, e])
        starts = segment_starts(snap) if ranges else ()
        tasks = tuple(TaskRange(snap.topic, snap.broker_id, snap.partition, snap.host, snap.port, snap.metadata_brokers,
                                snap.kind,
                                task_id=task_id + i, start=s, end=e, segment_start=last_segment_start(starts, s, e))
                      for i, (s, e) in enumerate(ranges))
        task_id += len(tasks)
        end = tasks[-1].end if tasks else d.start
        out.append(PartitionPlan(snap, d.committed, d.start, end, d.lost, d.replay, tasks))
    return tuple(out)


def last_segment_start(starts: Sequence[int], start: int, end: int) -> int | None:
    """The greatest segment start in ``[start, end)`` (None: the range lies inside one segment begun before it)."""
    inside = [b for b in starts if start <= b < end]
    return max(inside) if inside else None
