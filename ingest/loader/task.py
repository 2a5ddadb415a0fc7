"""One Spark task's work: fetch a range, check CRCs, decode, bucket by hour, write staged files.

Runs on an executor (called by :mod:`ingest.loader.source`) or directly in tests.
Output goes only under ``_ingest/staging/<run_id>/`` with attempt-unique names, so
a failed or speculative attempt can never clobber or add to what the driver
commits: the driver commits exactly the files this function *returns* for the
attempt Spark reports as successful.

Phases, each a function tests call directly: :func:`open_consumer` and
:func:`read_range` (read), :func:`stage_messages` (decode, bucket and write rows:
the per-message loop), :func:`close_data_files` and :func:`stage_quarantine`
(finish the staged files), :func:`damaged_ranges` (the damaged ranges of the
broker's log the task skipped). :func:`run_task` chains them, calls the
:class:`~ingest.loader.faults.Faults` hook once the files are staged, and returns a
:class:`~ingest.loader.results.TaskOutcome`.
"""
from __future__ import annotations

import logging
import math
import posixpath
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

from ingest.client.fetch_settings import FetchSettings
from ingest.client.partition_reader import open_consumer, open_kafka_fetcher
from ingest.loader import layout
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.faults import Faults
from ingest.loader.fetch import Damaged, iter_range
from ingest.loader.kafka_fetch import KafkaBatch, iter_kafka_range
from ingest.loader.quarantine import QUARANTINE_FORMAT, quarantine_file_bytes
from ingest.loader.results import DATA, QUARANTINE, StagedFile, TaskOutcome, TaskSummary
from ingest.loader.staging import Staged, stage_messages  # noqa: F401 - stage_messages: a phase tests call
from ingest.loader.tally import task_tally
from ingest.records.message_batch import MessageBatch
from ingest.registry_client_config import NO_AUTH, RegistryAuth
from ingest.storage import open_storage

if TYPE_CHECKING:
    from ingest.loader.plan import TaskRange
    from ingest.storage import Storage

# Decoding and writing (fastavro, pyarrow) are imported inside the phase functions: Spark
# unpickles the data source (ingest.loader.source, which imports this module for TaskSettings)
# in separate planner Python processes, which need neither (~1 s of the data source's first
# use; see docs/performance.md).

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """Everything a task needs besides its range; small and picklable."""

    destination: str
    run_id: str
    format: str
    registry_url: str
    avro_codec: str = "snappy"
    parquet_compression: str = "snappy"
    row_group_rows: int = 131_072
    fetch: FetchSettings = FetchSettings.defaults_of(LOADER_CONFIG)   # the loader's keys' defaults
    faults: str = ""   # the driver's INGEST_FAULTS (ingest.loader.faults); empty in production
    registry_auth: RegistryAuth = NO_AUTH   # credentials and TLS files of the registry (repr hides secrets)
    decoder: str = "compiled"   # the loader's `decoder` key: compiled (C extension) or python

    @classmethod
    def from_json(cls, d: dict) -> "TaskSettings":
        """From ``dataclasses.asdict(settings)`` as JSON (what the ``ingest_load`` data source's options carry)."""
        d = dict(d)
        if isinstance(d.get("fetch"), dict):
            d["fetch"] = FetchSettings(**d["fetch"])
        if isinstance(d.get("registry_auth"), dict):
            d["registry_auth"] = RegistryAuth(**d["registry_auth"])
        return cls(**d)


def run_task(task: TaskRange, settings: TaskSettings, attempt: int = 0, *, storage: Storage | None = None,
             deserializer=None, consumer=None) -> TaskOutcome:
    """Load ``task``'s range into staged files; returns what was staged (see module docstring)."""
    began = time.monotonic()
    cpu_began = time.process_time()
    faults = Faults.parse(settings.faults)
    storage = storage or open_storage(settings.destination)
    decoder = new_decoder(settings, deserializer)
    staged = Staged(stage_dir(settings.run_id, task, attempt))
    own_consumer = consumer is None
    if own_consumer:
        consumer = open_kafka_fetcher(task, settings.fetch) if task.kafka else open_consumer(task, settings.fetch)
    before = [0]  # messages consumed before task.segment_start (the tally counts the rest)
    try:
        items = read_range(consumer, task, settings, chunks=True)
        if task.segment_start is not None and task.segment_start > task.start:
            items = counted_before_chunks(items, task.segment_start, before)
        stage_messages(items, task, settings, storage, decoder, staged)
    finally:
        if own_consumer:
            consumer.close()
    files = close_data_files(staged, task, attempt, settings.format, storage)
    quarantine_file = stage_quarantine(staged, task, attempt, storage)
    if quarantine_file is not None:
        files.append(quarantine_file)
    damaged = damaged_ranges(staged, task, attempt)
    faults.task_staged(task.task_id, attempt, len(files))
    summary = TaskSummary(
        task_id=task.task_id, attempt=attempt, topic=task.topic, broker_id=task.broker_id, partition=task.partition,
        start_offset=task.start, end_offset=task.end, messages=staged.messages, quarantined=len(staged.quarantine),
        duration_ms=int((time.monotonic() - began) * 1000), cpu_ms=int((time.process_time() - cpu_began) * 1000),
        last_time_ms=staged.last_time_ms, tally_start=task.segment_start,
        tally_messages=task_tally(task.segment_start, task.start, staged.messages + len(staged.quarantine), before[0],
                                  staged.corrupt_offsets, staged.damaged),
        decoder=decoder.decoder if settings.format == "parquet" else None)
    log.info("task %d %s b%d p%d [%d, %d): %d messages, %d quarantined, %d files, %d damaged ranges skipped, "
             "%s decoder", task.task_id, task.topic, task.broker_id, task.partition, task.start, task.end,
             summary.messages, summary.quarantined, len(files), len(damaged), summary.decoder or "row")
    return TaskOutcome(summary, tuple(files + damaged))


def stage_dir(run_id: str, task: TaskRange, attempt: int) -> str:
    """This attempt's own staging directory (attempt-unique: retries and speculative copies never share one)."""
    return posixpath.join(layout.staging_dir(run_id), f"t{task.task_id}-a{attempt}-{uuid.uuid4().hex[:8]}")


def new_decoder(settings: TaskSettings, deserializer=None):
    """The task's :class:`~ingest.loader.decode.PayloadDecoder` (over the registry unless ``deserializer``)."""
    # deferred: fastavro, which the driver (it imports TaskSettings from here) does not need
    from ingest.events.registry_client import RegistryClient
    from ingest.events.serde import EventDeserializer
    from ingest.loader.decode import PayloadDecoder

    return PayloadDecoder(deserializer or EventDeserializer(RegistryClient(settings.registry_url, auth=settings.registry_auth)),
                          settings.decoder)


def read_range(consumer, task: TaskRange, settings: TaskSettings, *, chunks: bool = False) -> Iterator:
    """Every message of the task's range in order; corrupt ones as :class:`~ingest.loader.fetch.Corrupt`;
    with ``chunks`` the valid messages of each fetch as one :class:`~ingest.records.message_batch.MessageBatch`.

    A replicated partition's range end may lie above a new leader's high watermark for a
    moment after a failover: the fetch loop waits up to ``settings.fetch.leader_wait_s`` for it,
    then the task fails (the run commits nothing; the next run plans again). Nothing above the
    high watermark is ever read.

    A Kafka-format partition (``task.kafka``; ``consumer`` a KafkaFetcher) is read by
    :func:`~ingest.loader.kafka_fetch.iter_kafka_range`; with ``chunks`` a batch the compiled record reader
    reads comes as one :class:`~ingest.loader.kafka_fetch.KafkaBatch`.
    """
    fetch = settings.fetch
    if task.kafka:
        return iter_kafka_range(consumer, task.topic, task.partition, task.start, task.end,
                                wait_s=fetch.leader_wait_s, batches=chunks)
    return iter_range(consumer, task.topic, task.partition, task.start, task.end,
                      fetch_size=fetch.fetch_size, max_fetch_size=fetch.max_fetch_size,
                      wait_s=fetch.leader_wait_s if task.replicated else 0.0, chunks=chunks)


def counted_before_chunks(items: Iterable, boundary: int, counter: list[int]) -> Iterator:
    """:func:`~ingest.loader.tally.counted_before` over items that may also be batches
    (:class:`~ingest.records.message_batch.MessageBatch`): a batch counts its messages before
    ``boundary``."""
    it = iter(items)
    for item in it:
        yield item
        cls = item.__class__
        if cls is MessageBatch or cls is KafkaBatch:
            n = item.count_before(boundary)
            counter[0] += n
            if n < len(item):
                break
            continue
        if item.offset >= boundary:
            break
        if cls is not Damaged:
            counter[0] += 1
    yield from it


def damaged_ranges(staged: Staged, task: TaskRange, attempt: int) -> list[StagedFile]:
    """The damaged ranges the task skipped, as CORRUPTION entries (see :mod:`ingest.loader.results`).

    The messages a range held are the broker's exact count when it sent one
    (docs/log-format.md, "Damaged ranges"), else estimated from the task's
    average message size (its other bytes over its other messages); at least one.
    """
    if not staged.damaged:
        return []
    lost_bytes = sum(d[1] - d[0] for d in staged.damaged)
    seen = staged.messages + len(staged.quarantine)
    avg = (task.end - task.start - lost_bytes) / seen if seen else 0
    out = []
    for start, end, before, after, counted in staged.damaged:
        estimate = max(1, math.ceil((end - start) / avg)) if avg > 0 else 1
        out.append(StagedFile.damaged_range(
            task_id=task.task_id, attempt=attempt, topic=task.topic, broker_id=task.broker_id,
            partition=task.partition, start=start, end=end,
            estimated_messages=counted if counted >= 0 else estimate, after_time_ms=before,
            before_time_ms=after, messages_exact=counted >= 0))
    return out


def close_data_files(staged: Staged, task: TaskRange, attempt: int, fmt: str, storage: Storage) -> list[StagedFile]:
    """Close every open data file; one :class:`StagedFile` each, in (hour, schema id) order.

    A file's final name carries its schema id only when its hour has several schemas.
    """
    per_hour: dict[tuple[str, int], int] = {}
    for b in staged.buckets.values():
        per_hour[(b.dt, b.hour)] = per_hour.get((b.dt, b.hour), 0) + 1
    out = []
    for (_h, sid), b in sorted(staged.buckets.items()):
        n_rows = b.writer.close()
        name = layout.data_file_name(task.topic, task.broker_id, task.partition, task.start, task.end, fmt,
                                     sid if per_hour[(b.dt, b.hour)] > 1 else None)
        st = storage.status(storage.join(b.staging))
        out.append(StagedFile(
            task_id=task.task_id, attempt=attempt, topic=task.topic, broker_id=task.broker_id,
            partition=task.partition, start_offset=task.start, end_offset=task.end, kind=DATA,
            path=layout.data_file_path(task.topic, b.dt, b.hour, name), staging=b.staging, rows=n_rows,
            bytes=st.size if st else 0, format=fmt, dt=b.dt, hour=b.hour, schema_id=sid,
            min_time_ms=b.min_t, max_time_ms=b.max_t))
    return out


def stage_quarantine(staged: Staged, task: TaskRange, attempt: int, storage: Storage) -> StagedFile | None:
    """Write the quarantined messages to this attempt's quarantine file (None when there are none)."""
    if not staged.quarantine:
        return None
    rel = posixpath.join(staged.stage_dir, layout.staged_name(f"quarantine.{QUARANTINE_FORMAT}"))
    data = quarantine_file_bytes(staged.quarantine)
    storage.write_bytes(storage.join(rel), data)
    return StagedFile(
        task_id=task.task_id, attempt=attempt, topic=task.topic, broker_id=task.broker_id, partition=task.partition,
        start_offset=task.start, end_offset=task.end, kind=QUARANTINE,
        path=layout.quarantine_file_path(task.topic, task.broker_id, task.partition, task.start, task.end),
        staging=rel, rows=len(staged.quarantine), bytes=len(data), format=QUARANTINE_FORMAT)
