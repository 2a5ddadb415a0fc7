"""A real warehouse for the reader tests: real loads, a real compaction, real state beside the data.

:func:`build` loads two topics from real brokers with the loader on the session
SparkSession, once as Parquet and once as Avro, and leaves beside the data every
kind of state a destination holds: commit manifests and run records, a
quarantine file (one message that is not an event), an audit revision, a
compaction run record (the compaction of one hour, gated by that revision), and
the staged files of a run that never committed (a task run by hand, exactly what
a crashed driver leaves). :func:`add_legacy` turns a copy into a destination as
the code before issue 14 left it: an ``hour=05`` directory, a revision named
``.parquet`` and a staged file named ``.parquet``.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq

VIEWS, CLICKS = "page-views", "clicks"
DAY = datetime(2026, 11, 22, tzinfo=timezone.utc)
HOUR_MS = 3_600_000
T05 = int(DAY.timestamp() * 1000) + 5 * HOUR_MS          # 2026-11-22 05:00 UTC
T13 = T05 + 8 * HOUR_MS                                   # 2026-11-22 13:00 UTC
T00_NEXT = T05 + 19 * HOUR_MS                             # 2026-11-23 00:00 UTC
T07_BEFORE = T05 - 22 * HOUR_MS                           # 2026-11-21 07:00 UTC (the legacy hour)
N05, N13, NCLICKS, NLEGACY = 60, 40, 30, 10
EXPECTED = {VIEWS: N05 + N13, CLICKS: NCLICKS}
"""Rows per topic in a fresh warehouse (the one message that is not an event is quarantined, not a row)."""
COMPACTION_GATE_RUN = "audit-before-compaction"


@dataclass
class Warehouse:
    path: Path
    fmt: str
    expected: dict[str, int] = field(default_factory=lambda: dict(EXPECTED))

    @property
    def total(self) -> int:
        return sum(self.expected.values())


def _produce(brokers, registry_url) -> None:
    """Page views in hours 5 and 13, clicks (another schema) in hour 0 of the next day, one bad message."""
    from ingest.client.producer import Producer
    from ingest.events.event_producer import EventProducer
    from ingest.events.loadgen import EventGenerator
    from ingest.events.registry_client import RegistryClient
    from ingest.events.schemas import CLICK, PAGE_VIEW
    from tests.harness.brokers import broker_list

    batches = [(VIEWS, PAGE_VIEW, N05, T05 + 60_000, 20), (VIEWS, PAGE_VIEW, N13, T13 + 120_000, 5),
               (CLICKS, CLICK, NCLICKS, T00_NEXT + 30_000, 10)]
    with EventProducer({"broker.list": broker_list(brokers)}, RegistryClient(registry_url),
                       monitoring_enable=False, background=False) as ep:
        for i, (topic, schema, n, time_ms, chunk) in enumerate(batches):
            gen = EventGenerator(schema, seed=i)
            for k in range(0, n, chunk):
                ep.send(topic, gen.batch(chunk), key=f"{topic}-{time_ms}-{k}", time_ms=time_ms)
        ep.flush()
    with Producer({"broker.list": broker_list(brokers), "producer.type": "sync"}) as p:
        p.send(VIEWS, [b"this message is not an event: the loader quarantines it"], key="bad")


def _load(spark, brokers, registry_url, dest: Path, fmt: str) -> None:
    from ingest.loader.job import run_load
    from tests.loader.helpers import loader_config

    cfg = loader_config(dest, brokers, registry_url, topics=f"{VIEWS}|{CLICKS}", format=fmt,
                        max_quarantine_ratio="0.05")
    result = run_load(cfg, spark)
    assert result.status == "committed", result.record


def _complete_windows() -> list[dict]:
    """An audit verdict: every 10-minute window of hour 13 of page-views COMPLETE."""
    return [{"topic": VIEWS, "row_type": "window", "producer": None, "window_start_ms": T13 + i * 600_000,
             "window_end_ms": T13 + (i + 1) * 600_000, "status": "COMPLETE", "judged": True,
             "loaded_rows": 0, "causes": {}} for i in range(6)]


def _compact_hour_13(dest: Path) -> list[dict]:
    from ingest.audit import history
    from ingest.compaction import runner
    from ingest.compaction.config import COMPACTION_CONFIG

    history.write_revision(str(dest), _complete_windows(), run_id=COMPACTION_GATE_RUN, audited_at_ms=T13 + HOUR_MS,
                           range_start_ms=T13, range_end_ms=T13 + HOUR_MS)
    cfg = COMPACTION_CONFIG.parse({"destination": str(dest), "compaction.grace.ms": "0"}, source="test")
    return runner.run(cfg, audit_reports=[history.run_revision(str(dest), COMPACTION_GATE_RUN)])


def _stage_uncommitted(dest: Path, brokers, registry_url, fmt: str) -> None:
    """Run one load task by hand and commit nothing: the staged files a crashed driver leaves."""
    from ingest.loader.plan import TaskRange
    from ingest.loader.state import open_state
    from ingest.loader.task import TaskSettings, run_task

    state = open_state(str(dest))
    (topic, broker_id, partition), rec = sorted((k, v) for k, v in state.offsets.items() if k[0] == VIEWS)[0]
    b = next(b for b in brokers if b.broker_id == broker_id)
    task = TaskRange(0, topic, broker_id, b.host, b.port, partition, 0, rec.offset)
    run_task(task, TaskSettings(str(dest), "crashed-run", fmt, registry_url))


def build(spark, brokers, registry_url, root: Path) -> dict[str, Warehouse]:
    """``{"parquet": Warehouse, "avro": Warehouse}``: the same events loaded in each format, with state."""
    _produce(brokers, registry_url)
    out = {}
    for fmt in ("parquet", "avro"):
        dest = root / fmt
        _load(spark, brokers, registry_url, dest, fmt)
        outcomes = _compact_hour_13(dest)
        assert [o["action"] for o in outcomes if o["hour"] == f"{VIEWS}/dt=2026-11-22/hour=13"] == ["compacted"], outcomes
        _stage_uncommitted(dest, brokers, registry_url, fmt)
        out[fmt] = Warehouse(dest, fmt)
    return out


def add_legacy(src: Warehouse, dest: Path) -> Warehouse:
    """A copy of ``src`` plus what the code before this change wrote: ``hour=05``-style directories,
    a ``.parquet`` audit revision and a ``.parquet`` staged leftover (Parquet warehouses only)."""
    from ingest.audit import history
    from ingest.loader.commit import commit_files, staging_relpath
    from ingest.loader.records import FileRecord
    from ingest.loader.state import open_state
    from ingest.storage import open_storage

    shutil.copytree(src.path, dest)
    storage = open_storage(str(dest))
    sample = open_state(str(dest)).files(VIEWS)[0]
    table = pq.read_table(dest / sample.path).slice(0, NLEGACY)
    added = []
    storage.mkdirs(storage.join(staging_relpath("legacy-load")))
    for partition, part in ((8, table.slice(0, NLEGACY // 2)), (9, table.slice(NLEGACY // 2))):
        name = f"{VIEWS}.b0.p{partition}.0-{part.num_rows}.parquet"
        staged = staging_relpath("legacy-load", name)          # the old staged name: no .staged suffix
        pq.write_table(part, dest / staged)
        added.append(FileRecord(
            path=f"{VIEWS}/dt=2026-11-21/hour=07/{name}",      # the old spelling: hour={hour:02d}
            topic=VIEWS, broker_id=0, partition=partition, start_offset=0, end_offset=part.num_rows,
            rows=part.num_rows, format="parquet", dt="2026-11-21", hour=7, bytes=(dest / staged).stat().st_size,
            schema_id=sample.schema_id, min_time_ms=T07_BEFORE, max_time_ms=T07_BEFORE + HOUR_MS - 1, staging=staged,
            run_id="legacy-load"))
    commit_files(storage, kind="load", run_id="legacy-load", offsets=[], added=added)
    revisions = dest / history.REVISIONS_DIR
    old = sorted(revisions.glob(f"*{history.SUFFIX}"))[0]
    shutil.copy(old, revisions / f"{0:015d}-legacy-run.parquet")
    leftover = dest / "_ingest/staging/legacy-crash/t0-a0-0badc0de/2026-11-22-05-1.parquet"
    leftover.parent.mkdir(parents=True)
    pq.write_table(table, leftover)
    expected = dict(src.expected)
    expected[VIEWS] += NLEGACY
    return Warehouse(dest, src.fmt, expected)
