"""One load run, as separate functions: prepare -> plan -> execute -> commit -> record.

:func:`run_load` is what ``jobs/load.py`` calls; tests call it (or its parts)
directly with the session's SparkSession. Every step that changes the
destination goes through :mod:`ingest.loader.commit`.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ingest.client.fetch_settings import FetchSettings
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import CommitError, IngestError
from ingest.loader import commit, discover, layout, manifests, rdd_tasks
from ingest.loader.faults import NO_FAULTS, Faults
from ingest.loader.gaps import bounds_of_gap
from ingest.loader.plan import (LeftOut, LoadPlan, PartitionSnapshot, build_plan, gap_questions, select_topics,
                                topic_filter, waiting_partitions)
from ingest.loader.quarantine import check_ratio, first_quarantined, over_limit
from ingest.loader.records import FileRecord, OffsetRecord, PartitionKey
from ingest.lost_ranges import LostRange
from ingest.loader.replay import rewrite_compacted
from ingest.loader.reset import check_reset_args, removed_by_replay, resolve_resets
from ingest.loader.results import QUARANTINE, TaskOutcome
from ingest.loader.runrecord import StageTimes, new_run_id, partition_entries, summary, totals, write_run_record
from ingest.loader.state import LoaderState, read_run_record
from ingest.loader.tally import partition_tally
from ingest.loader.task import TaskSettings
from ingest.registry_client_config import RegistryAuth
from ingest.storage import Storage, open_storage

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    run_id: str
    status: str
    record: dict[str, Any]
    plan: LoadPlan | None = None
    commit_seq: int | None = None
    files: list[FileRecord] = field(default_factory=list)


def task_settings(config, run_id: str, faults: Faults = NO_FAULTS) -> TaskSettings:
    """What every task of run ``run_id`` needs (``faults``: the run's test seam, shipped to executors)."""
    return TaskSettings(
        destination=config["destination"], run_id=run_id, format=config["format"],
        registry_url=config["registry.url"], avro_codec=config["avro.codec"],
        parquet_compression=config["parquet.compression"], row_group_rows=config["parquet.row.group.rows"],
        fetch=FetchSettings.from_config(config), faults=faults.spec, registry_auth=RegistryAuth.from_config(config),
        decoder=config["decoder"],
    )


def prepare(storage: Storage, config, clock: Clock) -> LoaderState:
    """Roll forward a crashed commit, remove stale staging, and read the committed state."""
    commit.roll_forward(storage)
    gc_stale_staging(storage, config["staging.retention.hours"], clock)
    return LoaderState.load(storage)


def gc_stale_staging(storage: Storage, hours: int, clock: Clock) -> None:
    """Delete staging directories of runs that finished, or started more than ``hours`` ago."""
    now = clock.time_ms()
    for info in storage.list(storage.join(layout.STAGING_DIR)):
        rec = read_run_record(storage, info.name)
        started = rec.get("started_at_ms", 0) if rec else info.mtime_ms
        finished = rec is not None and rec.get("status") != "running"
        if finished or now - started > hours * 3600 * 1000:
            log.info("removing staging of run %s (%s)", info.name, "finished" if finished else "stale")
            storage.delete(info.path, recursive=True)


def make_plan(config, state: LoaderState, snapshots: list[PartitionSnapshot], run_id: str, clock: Clock, *,
              resets: Mapping[PartitionKey, int] | None = None, segment_starts=None, probe=None,
              deleted_segments=None, left_out: Sequence[LeftOut] = ()) -> LoadPlan:
    """Filter topics and build the plan (network callables default to the real brokers); ``left_out``:
    what discovery could not reach, completed with the committed partitions it keeps from this run."""
    chosen, skipped = select_topics([s.topic for s in snapshots], config["topics"], config["topics.blacklist"])
    chosen_set = set(chosen)
    planned = [s for s in snapshots if s.topic in chosen_set]
    plan = build_plan(
        run_id=run_id, base_seq=state.seq, snapshots=planned,
        committed=state.offsets, committed_files=lambda key: state.files_of_partition(key),
        resets=resets, segment_starts=segment_starts or discover.segment_starts(config, planned),
        probe=probe or discover.prober(config),
        deleted_segments=deleted_segments or discover.deleted_segments_asker(
            config, gap_questions(planned, state.offsets, resets or {}, config["new.partition.start"])),
        new_partition_start=config["new.partition.start"],
        max_bytes_per_task=config["max.bytes.per.task"], max_bytes_per_run=config["max.bytes.per.run"],
        fail_on_data_loss=config["fail.on.data.loss"], now_ms=clock.time_ms(),
    )
    waiting = waiting_partitions(left_out, state.offsets, snapshots,
                                 topic_filter(config["topics"], config["topics.blacklist"]))
    return LoadPlan(plan.run_id, plan.base_seq, plan.partitions, tuple(skipped), waiting)


def _progress_thread(spark, total: int, stop: threading.Event, interval_s: float = 5.0) -> threading.Thread:
    def loop() -> None:
        tracker = getattr(spark, "sparkContext", spark).statusTracker()  # a SparkSession or a SparkContext
        began = time.monotonic()
        while not stop.wait(interval_s):
            done = running = 0
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info:
                    done += info.numCompletedTasks
                    running += info.numActiveTasks
            log.info("progress: %d/%d tasks done, %d running, %.0f s", done, total, running, time.monotonic() - began)

    t = threading.Thread(target=loop, name="load-progress", daemon=True)
    t.start()
    return t


def execute(spark, plan: LoadPlan, settings: TaskSettings, runner: str = "rdd") -> list[TaskOutcome]:
    """Run the plan's tasks on Spark (``runner``: the ``task.runner`` key); check every task reported exactly once."""
    execute_tasks = rdd_tasks.execute_tasks
    if runner == "datasource":
        from ingest.loader.source import execute_tasks  # deferred: imports pyspark.sql.datasource

    tasks = plan.tasks
    log.info("running %d task(s) on Spark (task.runner=%s)", len(tasks), runner)
    stop = threading.Event()
    if tasks:
        _progress_thread(spark, len(tasks), stop)
    try:
        outcomes = execute_tasks(spark, tasks, settings)
    finally:
        stop.set()
    check_reports(plan, outcomes)
    return outcomes


def check_reports(plan: LoadPlan, outcomes: list[TaskOutcome]) -> None:
    """Raise :class:`CommitError` unless every planned task reported exactly once."""
    reported = sorted(o.task_id for o in outcomes)
    if reported != sorted(t.task_id for t in plan.tasks):
        raise CommitError(f"run {plan.run_id}: task results incomplete or repeated ({len(reported)} reports "
                          f"for {len(plan.tasks)} tasks); nothing committed")


def new_offsets(plan: LoadPlan, state: LoaderState, outcomes: list[TaskOutcome]) -> list[OffsetRecord]:
    """The full offset snapshot after this run: every known partition, planned ones moved to their end."""
    last_time: dict[PartitionKey, tuple[int, int]] = {}
    for o in outcomes:
        s = o.summary
        if s.last_time_ms is not None:
            if s.key not in last_time or s.end_offset > last_time[s.key][0]:
                last_time[s.key] = (s.end_offset, s.last_time_ms)
    out = dict(state.offsets)
    summaries = [o.summary for o in outcomes]
    for p in plan.partitions:
        prev = state.offsets.get(p.key)
        lt = last_time[p.key][1] if p.key in last_time else (prev.last_time_ms if prev and not p.replay else None)
        out[p.key] = OffsetRecord(p.key[0], p.key[1], p.key[2], p.end, lt, partition_tally(p, prev, summaries))
    return list(out.values())


def rebase_target(storage: Storage, base_seq: int, removed: list[str]) -> int:
    """The seq to commit after when only compactions committed since ``base_seq``; else re-raise.

    A compaction changes no offsets and touches only already-committed files, so a
    load planned before it is still right unless it withdraws a file the
    compaction replaced (a replay racing a compaction): then the load fails.
    """
    latest = manifests.manifest_seqs(storage)[-1]
    for seq in range(base_seq + 1, latest + 1):
        m = manifests.read_manifest(storage, seq)
        if m.kind != "compaction" or set(m.removed) & set(removed):
            raise commit.CommitConflictError(
                f"commit {seq} ({m.kind}, run {m.run_id}) happened while this run was loading; nothing of this "
                f"run is visible: rerun it (is another loader running on {storage.uri}?)")
    log.info("rebasing the commit from %d onto %d (only compactions happened meanwhile)", base_seq, latest)
    return latest


def unique_names(added: list[FileRecord], state: LoaderState, n: int) -> list[FileRecord]:
    """Rename files of a replay whose plain name is still committed: ``<name>.<n>.<ext>``.

    So publishing never has to delete a file and put another under the same name
    (a window in which a concurrent roll-forward could delete the new file); the old
    file is withdrawn by the same manifest under its own name.
    """
    import dataclasses
    import posixpath

    taken = {f.path for f in state.files(kind=None)}
    out = []
    for rec in added:
        path = rec.path
        k = n
        while path in taken:
            stem, ext = posixpath.splitext(rec.path)
            path = f"{stem}.{k}{ext}"
            k += 1
        out.append(rec if path == rec.path else dataclasses.replace(rec, path=path))
        taken.add(path)
    return out


def file_records(outcomes: list[TaskOutcome], run_id: str) -> list[FileRecord]:
    """The manifest entries of every staged file, by path."""
    return sorted((f.to_file_record(run_id) for o in outcomes for f in o.staged_files), key=lambda f: f.path)


def corruption_losses(outcomes: list[TaskOutcome], run_id: str, clock: Clock) -> list[LostRange]:
    """The damaged ranges the tasks skipped, as lost ranges with cause ``corruption`` (by offset)."""
    now = clock.time_ms()
    ranges = [f.to_lost_range(run_id, now) for o in outcomes for f in o.damaged]
    return sorted(ranges, key=lambda r: (r.topic, r.broker_id, r.partition, r.start_offset))


def run_load(config, spark, *, clock: Clock = SYSTEM_CLOCK, reset_spec: str | None = None,
             reset_topics: list[str] | None = None, run_id: str | None = None,
             snapshots: list[PartitionSnapshot] | None = None) -> RunResult:
    """Plan, execute and commit one load run; returns its result (the run record is written too).

    ``spark`` is a SparkSession (or, for ``task.runner=rdd``, a SparkContext) or a
    zero-argument callable returning one; the callable
    is called only when the plan has tasks, so recovery, planning and runs with
    nothing new never start Spark.

    Raises:
        DataLossError: retention deleted unloaded data and ``fail.on.data.loss`` (run record written).
        QuarantineLimitError, CommitError, IngestError: the run failed; nothing was committed.
    """
    check_reset_args(reset_spec, reset_topics, clock)  # a refused reset reads, starts and commits nothing
    storage = open_storage(config["destination"])
    faults = Faults.from_env()
    run_id = run_id or new_run_id(clock)
    record = new_run_record(run_id, storage, config, clock, reset_spec, reset_topics)
    began = time.monotonic()
    stages = StageTimes(record)
    plan = None
    try:
        state = prepare(storage, config, clock)
        write_run_record(storage, record)
        stages.end("prepare")
        found = discover.discover_all(config) if snapshots is None else discover.Discovery(snapshots, [])
        # a replay must rewind every partition of its topics: none may be left out
        snapshots = found.complete("--reset-offsets") if reset_spec else found.snapshots
        resets = plan_resets(reset_spec, reset_topics, snapshots, state, config)
        plan = make_plan(config, state, snapshots, run_id, clock, resets=resets, left_out=found.left_out)
        record_plan(record, plan)
        if resets:
            log.info("replay: starts %s; withdraws %d committed file(s) (compacted ones are rewritten at commit)",
                     {f"{k[0]} b{k[1]}p{k[2]}": v for k, v in sorted(resets.items())},
                     len(removed_by_replay(plan, state)))
        stages.end("plan")
        outcomes = execute(spark_session(spark), plan, task_settings(config, run_id, faults),
                           config["task.runner"]) if plan.tasks else []
        stages.end("execute")
        if plan.lost_ranges:
            plan = bound_lost_ranges(storage, plan, state, outcomes)
            record["lost_ranges"] = [r.to_json() for r in plan.lost_ranges]
        record["partitions"] = partition_entries(plan, [o.without_damage() for o in outcomes])
        record["lost_ranges"] += [r.to_json() for r in corruption_losses(outcomes, run_id, clock)]
        check_quarantine(outcomes, config["max.quarantine.ratio"], storage)
        note = f"reset {reset_spec} {reset_topics}" if reset_spec else ""
        added, seq = commit_outcomes(storage, plan, state, outcomes, note=note, clock=clock,
                                     checkpoint_interval=config["state.checkpoint.interval"])
        stages.end("commit")
        faults.crash_point("before-gc")
        commit.gc_staging(storage, [run_id])
        record.update(status="committed" if seq else "nothing-to-do", commit_seq=seq)
        return RunResult(run_id, record["status"], record, plan, seq, added)
    except BaseException as exc:
        record_failure(record, exc, plan)
        raise
    finally:
        finish_run(storage, record, clock, time.monotonic() - began)


def new_run_record(run_id: str, storage: Storage, config, clock: Clock, reset_spec: str | None,
                   reset_topics: list[str] | None) -> dict[str, Any]:
    """The run record as the run starts (``status: running``; see :mod:`ingest.loader.runrecord`)."""
    return {
        "run_id": run_id, "status": "running", "started_at_ms": clock.time_ms(), "destination": storage.uri,
        "format": config["format"], "topics": config["topics"], "topics_blacklist": config["topics.blacklist"],
        "reset": {"spec": reset_spec, "topics": reset_topics} if reset_spec else None,
        "commit_seq": None, "error": None, "partitions": [], "lost_ranges": [], "left_out": [],
    }


def plan_resets(reset_spec: str | None, reset_topics: list[str] | None, snapshots: list[PartitionSnapshot],
                state: LoaderState, config) -> dict[PartitionKey, int] | None:
    """The start offsets ``--reset-offsets`` asks for (None without a reset); checks the topics exist."""
    if not reset_spec:
        return None
    if not reset_topics:
        raise IngestError("--reset-offsets needs --topic T (one or more topics to rewind)")
    known = {s.topic for s in snapshots}
    unknown = [t for t in reset_topics if t not in known]
    if unknown:
        raise IngestError(f"--reset-offsets: unknown topic(s) {', '.join(unknown)}; allowed are the brokers' topics: "
                          f"{', '.join(sorted(known)) or 'none'}")
    return resolve_resets(reset_spec, reset_topics, snapshots, state, config)


def record_plan(record: dict[str, Any], plan: LoadPlan) -> None:
    record["partitions"] = partition_entries(plan)
    record["lost_ranges"] = [r.to_json() for r in plan.lost_ranges]
    record["left_out"] = [lo.to_json() for lo in plan.left_out]
    log.info("run %s: %d partitions, %d tasks, %d bytes to load (%d topics skipped by the filters)",
             plan.run_id, len(plan.partitions), len(plan.tasks), plan.total_bytes, len(plan.skipped_topics))


def spark_session(spark):
    """``spark`` itself, or the session a zero-argument factory returns (started only when needed)."""
    return spark() if callable(spark) and not hasattr(spark, "sparkContext") else spark


def check_quarantine(outcomes: list[TaskOutcome], max_ratio: float, storage: Storage | None = None) -> None:
    """Raise :class:`~ingest.loader.quarantine.QuarantineLimitError` when too many messages were quarantined,
    naming the first of them (topic, broker, partition, offset, reason) from the staged quarantine files
    in ``storage`` (in partition and offset order)."""
    messages = sum(o.summary.messages for o in outcomes)
    quarantined = sum(o.summary.quarantined for o in outcomes)
    if storage is None or not over_limit(quarantined, messages, max_ratio):
        check_ratio(quarantined, messages, max_ratio)
        return
    files = sorted((f for o in outcomes for f in o.staged_files if f.kind == QUARANTINE),
                   key=lambda f: (f.topic, f.broker_id, f.partition, f.start_offset))
    try:
        first = [q.describe() for q in first_quarantined(storage, [f.staging for f in files])]
    except (IngestError, OSError, ValueError) as exc:   # the samples are a help; the limit is what fails the run
        log.warning("cannot read the staged quarantine files for the first reasons: %s", exc)
        first = []
    check_ratio(quarantined, messages, max_ratio, first)


def commit_outcomes(storage: Storage, plan: LoadPlan, state: LoaderState, outcomes: list[TaskOutcome], *,
                    note: str, clock: Clock, checkpoint_interval: int = 100) -> tuple[list[FileRecord], int | None]:
    """Commit what the tasks staged, the new offsets, the lost ranges and a replay's withdrawals.

    Lost ranges: the plan's (retention) and the damaged ranges the tasks
    skipped (corruption), committed with the data they interrupt. A compacted
    file holding offsets this run reloaded is withdrawn and replaced by a rewrite
    without the reloaded rows (:mod:`ingest.loader.replay`), in the same commit.

    Returns (the files added, the commit's seq); the seq is None when nothing changed
    (no commit). A commit that conflicts only with compactions is rebased and retried.
    """
    added = unique_names(file_records(outcomes, plan.run_id), state, plan.base_seq + 1)
    rewritten, rewrites = rewrite_compacted(storage, plan, state, added)
    removed = removed_by_replay(plan, state) + rewritten
    added = added + rewrites
    offsets = new_offsets(plan, state, outcomes)
    lost = list(plan.lost_ranges) + corruption_losses(outcomes, plan.run_id, clock)
    changed = added or removed or lost or {o.key: o.offset for o in offsets} != {
        k: o.offset for k, o in state.offsets.items()}
    if not changed:
        return added, None
    expected = plan.base_seq
    while True:
        try:
            manifest = commit.commit_files(
                storage, kind="load", run_id=plan.run_id, offsets=offsets, added=added, removed=removed,
                lost_ranges=lost, expected_seq=expected, clock=clock, note=note,
                checkpoint_interval=checkpoint_interval)
            return added, manifest.seq
        except commit.CommitConflictError:
            expected = rebase_target(storage, expected, removed)


def record_failure(record: dict[str, Any], exc: BaseException, plan: LoadPlan | None) -> None:
    """Mark the run failed; the exception carries the record (for the caller's summary)."""
    record.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    if plan is None and hasattr(exc, "lost_ranges"):
        record["lost_ranges"] = [r.to_json() for r in exc.lost_ranges]
    try:
        exc.run_record = record  # type: ignore[attr-defined]  # completed by finish_run (same dict)
    except AttributeError:
        pass


def finish_run(storage: Storage, record: dict[str, Any], clock: Clock, elapsed_s: float) -> None:
    """Complete and write the run record; remove the run's staging unless it failed."""
    finished = clock.time_ms()
    record["finished_at_ms"] = finished
    record["duration_ms"] = finished - record["started_at_ms"]
    record["totals"] = totals(record, elapsed_s)
    record["summary"] = summary(record)
    try:
        write_run_record(storage, record)
    except Exception as exc:  # never mask the run's own outcome
        log.error("cannot write run record of %s: %s", record["run_id"], exc)
    if record["status"] != "failed":
        commit.gc_staging(storage, [record["run_id"]])


def bound_lost_ranges(storage: Storage, plan: LoadPlan, state: LoaderState, outcomes: Sequence[TaskOutcome]) -> LoadPlan:
    """``plan`` with the session bounds set on its lost ranges (:mod:`ingest.loader.gaps`): from the
    committed files that end where a gap starts and this run's staged files that start where it ends."""
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
            bounds = bounds_of_gap(storage, first, last, after_files, before_files)
            p = dataclasses.replace(p, lost=tuple(dataclasses.replace(r, session_bounds=bounds) for r in p.lost))
        partitions.append(p)
    return dataclasses.replace(plan, partitions=tuple(partitions))
