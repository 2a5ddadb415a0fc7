"""A real warehouse for the reader tests: real loads, a real compaction, real state beside the data.

:func:`build` loads every topic of real brokers with the loader on the session
SparkSession, once as Parquet and once as Avro. The topics: page views, clicks
(another schema) and the producer's monitoring events in ``audit-monitoring``,
which every production warehouse holds and whose rows carry a data field
``topic`` of their own (the topic they count). Page views come in two schema
versions (the second adds a field, as a compatible evolution does), so a reader
that takes its columns from one file loses some. What was written (every event
the loads read, fetched again from the brokers and decoded with its writer
schema) is kept in :attr:`Warehouse.written`, for the tests to compare column
values with.

Beside the data lies every kind of state a destination holds: commit manifests
and run records, a quarantine file (one message that is not an event), an audit
revision, a compaction run record (the compaction of one hour, gated by that
revision), and the staged files of a run that never committed (a task run by
hand, exactly what a crashed driver leaves). :func:`add_legacy` turns a copy
into a destination as the code before the ``hour=H`` layout left it: an
``hour=05`` directory, a revision named ``.parquet`` and a staged file named
``.parquet``.
"""
from __future__ import annotations

import collections
import shutil
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq

VIEWS, CLICKS, MONITORING = "page-views", "clicks", "audit-monitoring"
DAY = datetime(2026, 11, 22, tzinfo=timezone.utc)
HOUR_MS = 3_600_000
T05 = int(DAY.timestamp() * 1000) + 5 * HOUR_MS          # 2026-11-22 05:00 UTC
T13 = T05 + 8 * HOUR_MS                                   # 2026-11-22 13:00 UTC
T00_NEXT = T05 + 19 * HOUR_MS                             # 2026-11-23 00:00 UTC
T07_BEFORE = T05 - 22 * HOUR_MS                           # 2026-11-21 07:00 UTC (the legacy hour)
T02_NEXT = T00_NEXT + 2 * HOUR_MS + 900_000               # 2026-11-23 02:15 UTC: the producer closes
N05, N05_V2, N13, NCLICKS, NLEGACY = 60, 10, 40, 30, 10
V2_FIELD = {"name": "experiment", "type": ["null", "string"], "default": None,
            "doc": "A/B test the member was in (page-view schema version 2)"}
COMPACTION_GATE_RUN = "audit-before-compaction"


@dataclass(frozen=True)
class Written:
    """One event as its producer wrote it (Avro-decoded), with the directory it must be read from."""

    topic: str
    dt: date
    hour: int
    record: dict


def placed(topic: str, record: dict) -> Written:
    """Where the loader puts a record: the UTC date and hour of its ``header.time``."""
    t = datetime.fromtimestamp(record["header"]["time"] / 1000, tz=timezone.utc)
    return Written(topic, t.date(), t.hour, record)


@dataclass
class Warehouse:
    """``written``: every event the loads read from the brokers, as Avro decodes it (plus, on a
    legacy copy, the rows it added); the one message that is not an event is quarantined, not a row."""

    path: Path
    fmt: str
    written: list[Written]

    @property
    def expected(self) -> dict[str, int]:
        """Rows per topic."""
        return dict(collections.Counter(w.topic for w in self.written))

    @property
    def total(self) -> int:
        return len(self.written)


def _produce(brokers, registry_url) -> None:
    """Page views in hours 5 and 13 (in hour 5 also some of schema version 2), clicks (another schema)
    in hour 0 of the next day, one bad message,
    and the producer's monitoring events of those windows, published when it closes at 02:15 of the
    next day (their ``header.time``, so they are rows of ``audit-monitoring/dt=2026-11-23/hour=2``)."""
    from ingest.client.producer import Producer
    from ingest.clock import FakeClock
    from ingest.events.event_producer import EventProducer
    from ingest.events.loadgen import EventGenerator
    from ingest.events.registry_client import RegistryClient
    from ingest.events.schemas import CLICK, PAGE_VIEW, load_schema
    from tests.harness.brokers import broker_list

    batches = [(VIEWS, PAGE_VIEW, N05, T05 + 60_000, 20), (VIEWS, PAGE_VIEW, N13, T13 + 120_000, 5),
               (CLICKS, CLICK, NCLICKS, T00_NEXT + 30_000, 10)]
    with EventProducer({"broker.list": broker_list(brokers), "producer.type": "sync"}, RegistryClient(registry_url),
                       clock=FakeClock(T02_NEXT), background=False, monitoring_heartbeats=False) as ep:
        for i, (topic, schema, n, time_ms, chunk) in enumerate(batches):
            gen = EventGenerator(schema, seed=i)
            for k in range(0, n, chunk):
                ep.send(topic, gen.batch(chunk), key=f"{topic}-{time_ms}-{k}", time_ms=time_ms)
        v2 = load_schema(PAGE_VIEW)
        v2["fields"].append(V2_FIELD)
        ep.register_topic(VIEWS, v2)
        views = EventGenerator(PAGE_VIEW, seed=len(batches)).batch(N05_V2)
        ep.send(VIEWS, [{**v, "experiment": f"exp-{i % 3}" if i % 2 else None} for i, v in enumerate(views)],
                key="v2", time_ms=T05 + 1_800_000)
        ep.flush()
    with Producer({"broker.list": broker_list(brokers), "producer.type": "sync"}) as p:
        p.send(VIEWS, [b"this message is not an event: the loader quarantines it"], key="bad")


def _load(spark, brokers, registry_url, dest: Path, fmt: str) -> None:
    """Every topic of the brokers, as a default loader config has it (``topics=.*``)."""
    from ingest.loader.job import run_load
    from tests.loader.helpers import loader_config

    cfg = loader_config(dest, brokers, registry_url, format=fmt, max_quarantine_ratio="0.05")
    result = run_load(cfg, spark)
    assert result.status == "committed", result.record


def _written(dest: Path, brokers, registry_url) -> list[Written]:
    """Every event the load of ``dest`` read (its committed offsets), fetched again from the brokers and
    decoded with its writer schema: what the producers wrote, independent of the loader's files."""
    from ingest.client.simple_consumer import SimpleConsumer
    from ingest.errors import EventDecodeError
    from ingest.events.registry_client import RegistryClient
    from ingest.events.serde import EventDeserializer
    from ingest.loader.state import open_state

    decoder = EventDeserializer(RegistryClient(registry_url))
    written: list[Written] = []
    undecodable = 0
    for (topic, broker_id, partition), rec in sorted(open_state(str(dest)).offsets.items()):
        b = next(b for b in brokers if b.broker_id == broker_id)
        with SimpleConsumer(b.host, b.port) as consumer:
            for m in consumer.iter_range(topic, partition, consumer.earliest_offset(topic, partition), rec.offset):
                try:
                    written.append(placed(topic, decoder.deserialize(bytes(m.payload), topic=topic)))
                except EventDecodeError:
                    undecodable += 1
    assert undecodable == 1, undecodable  # the one message that is not an event
    return written


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
    task = TaskRange(topic, broker_id, partition, b.host, b.port, task_id=0, start=0, end=rec.offset)
    run_task(task, TaskSettings(str(dest), "crashed-run", fmt, registry_url))


def build(spark, brokers, registry_url, root: Path) -> dict[str, Warehouse]:
    """``{"parquet": Warehouse, "avro": Warehouse}``: the same events loaded in each format, with state."""
    _produce(brokers, registry_url)
    out = {}
    for fmt in ("parquet", "avro"):
        dest = root / fmt
        _load(spark, brokers, registry_url, dest, fmt)
        written = _written(dest, brokers, registry_url)
        counts = collections.Counter(w.topic for w in written)
        assert (counts[VIEWS], counts[CLICKS]) == (N05 + N05_V2 + N13, NCLICKS), counts
        assert {w.record["topic"] for w in written if w.topic == MONITORING} == {VIEWS, CLICKS}
        outcomes = _compact_hour_13(dest)
        assert [o["action"] for o in outcomes if o["hour"] == f"{VIEWS}/dt=2026-11-22/hour=13"] == ["compacted"], outcomes
        _stage_uncommitted(dest, brokers, registry_url, fmt)
        out[fmt] = Warehouse(dest, fmt, written)
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
    legacy = [Written(VIEWS, date(2026, 11, 21), 7, row) for row in table.to_pylist()]
    return Warehouse(dest, src.fmt, src.written + legacy)
