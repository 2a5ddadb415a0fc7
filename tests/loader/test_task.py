"""The phases of a load task, called directly: stage messages, close files, quarantine,
the fault seam, and the typed outcome's trip through Spark rows."""
from __future__ import annotations

import io
import json
import time
from dataclasses import asdict

import fastavro
import pyarrow.parquet as pq
import pytest

from ingest.errors import CommitError, ConfigError
from ingest.events.envelope import HeaderFactory, ProducerIdentity
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import PAGE_VIEW, load_schema
from ingest.events.serde import EventSerializer
from ingest.loader import layout, task as task_mod
from ingest.loader.faults import FAULTS_ENV, NO_FAULTS, Faults
from ingest.loader.fetch import Corrupt
from ingest.loader.plan import PartitionSnapshot, TaskRange, build_plan
from ingest.loader.quarantine import QuarantinedMessage
from ingest.loader.results import DATA, QUARANTINE, StagedFile, TaskOutcome, TaskSummary
from ingest.loader.task import Staged, TaskSettings, close_data_files, stage_messages, stage_quarantine
from ingest.records.message_batch import MessageAndOffset
from ingest.storage import open_storage

HOUR = 3_600_000
T0 = 1_795_000_000_000 // HOUR * HOUR  # start of an hour in 2026


def _task(task_id=0, start=0, end=1000):
    return TaskRange("pv", 3, 1, "127.0.0.1", 9, task_id=task_id, start=start, end=end)


def _payloads(registry_url, times):
    ser = EventSerializer(RegistryClient(registry_url), "pv-task-value", load_schema(PAGE_VIEW))
    hf = HeaderFactory(ProducerIdentity.new("svc"))
    out = []
    for t, record in zip(times, EventGenerator(PAGE_VIEW, seed=5).batch(len(times))):
        record["header"] = hf.next(time_ms=t)
        out.append(ser.serialize(record))
    return out


def _read(storage, staged_file):
    data = storage.read_bytes(storage.join(staged_file.staging))
    if staged_file.format == "avro":
        return list(fastavro.reader(io.BytesIO(data)))
    return pq.read_table(io.BytesIO(data)).to_pylist()


@pytest.mark.parametrize("fmt", ["avro", "parquet"])
def test_stage_messages_buckets_by_hour_and_quarantines_what_does_not_decode(registry_url, tmp_path, fmt):
    times = [T0 + 10, T0 + 20, T0 + HOUR + 5, T0 + 30]
    good = _payloads(registry_url, times)
    items, offset = [], 0
    for p in good[:2] + [b"not an avro event"] + good[2:]:
        items.append(MessageAndOffset(offset, offset + len(p) + 10, p))
        offset += len(p) + 10
    items.insert(1, Corrupt(offset, offset + 40, b"\x01" * 30, "CRC mismatch"))
    task = _task(end=offset + 40)
    settings = TaskSettings(destination=str(tmp_path), run_id="r1", format=fmt, registry_url=registry_url)
    storage = open_storage(str(tmp_path))

    staged = stage_messages(items, task, settings, storage, task_mod.new_decoder(settings),
                            Staged(task_mod.stage_dir("r1", task, 0)))
    assert staged.messages == 4 and staged.last_time_ms == T0 + 30
    files = close_data_files(staged, task, 0, fmt, storage)
    assert [(f.kind, (f.dt, f.hour), f.rows, f.min_time_ms, f.max_time_ms) for f in files] == [
        (DATA, layout.hour_bucket(T0), 3, T0 + 10, T0 + 30),
        (DATA, layout.hour_bucket(T0 + HOUR), 1, T0 + HOUR + 5, T0 + HOUR + 5)]
    assert all(f.staging.startswith("_ingest/staging/r1/t0-a0-") and f.path.startswith("pv/dt=") for f in files)
    assert [r["header"]["time"] for r in _read(storage, files[0])] == [T0 + 10, T0 + 20, T0 + 30]

    qfile = stage_quarantine(staged, task, 0, storage)
    assert (qfile.kind, qfile.rows, qfile.format) == (QUARANTINE, 2, "jsonl")
    lines = storage.read_bytes(storage.join(qfile.staging)).decode().splitlines()
    back = [QuarantinedMessage.from_json_line(line) for line in lines]
    assert back == staged.quarantine
    assert [(q.reason, q.payload) for q in back][0] == ("CRC mismatch", b"\x01" * 30)
    assert back[1].payload == b"not an avro event" and "magic byte" in back[1].reason
    assert json.loads(lines[1])["payload_b64"]  # the line format: raw bytes as base64


def test_no_quarantine_file_without_quarantined_messages(tmp_path):
    assert stage_quarantine(Staged("_ingest/staging/r/x"), _task(), 0, open_storage(str(tmp_path))) is None


def test_fault_seam_is_one_env_var_and_inert_by_default():
    assert Faults.from_env({}) is NO_FAULTS
    f = Faults.from_env({FAULTS_ENV: "fail-first-attempt, before-gc,slow-first-attempt=5"})
    assert (f.fail_first_attempt, f.crash_at, f.slow_first_attempt_ms) == (True, {"before-gc"}, 5)
    with pytest.raises(ConfigError, match=r"unknown fault 'crash-everywhere'; known: before-manifest"):
        Faults.parse("crash-everywhere")
    with pytest.raises(ConfigError, match="slow-first-attempt=soon"):
        Faults.parse("slow-first-attempt=soon")
    with pytest.raises(ValueError, match="unknown crash point"):
        NO_FAULTS.crash_point("nowhere")
    NO_FAULTS.crash_point("before-gc")  # not asked for: returns
    NO_FAULTS.task_staged(0, 0, 3)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match=r"fault injection \(fail-first-attempt\): first attempt of task 0 "
                                           r"fails after staging 3 files"):
        f.task_staged(0, 0, 3)
    assert time.monotonic() - began >= 0.005  # task 0's first attempt lingered first
    f.task_staged(0, 1, 3)  # a retry succeeds


def test_the_driver_faults_travel_to_executors_in_the_task_settings(tmp_path):
    from ingest.loader.config import LOADER_CONFIG
    from ingest.loader.job import task_settings

    config = LOADER_CONFIG.parse({"destination": str(tmp_path), "brokers": "127.0.0.1:9",
                                  "registry.url": "http://127.0.0.1:9"}, source="test")
    assert task_settings(config, "r").faults == ""
    settings = task_settings(config, "r", Faults.parse("fail-first-attempt"))
    shipped = TaskSettings.from_json(json.loads(json.dumps(asdict(settings))))  # what the data source options carry
    assert Faults.parse(shipped.faults).fail_first_attempt and shipped == settings


def _outcome(task_id, *, files=1, messages=10, decoder=None):
    summary = TaskSummary(task_id, 0, "pv", 3, 1, task_id * 100, task_id * 100 + 100, messages, 1, 12, 7, T0 + task_id,
                          decoder=decoder)
    staged = tuple(StagedFile(task_id, 0, "pv", 3, 1, task_id * 100, task_id * 100 + 100, DATA,
                              f"pv/dt=2026-11-18/hour=05/f{task_id}.{i}.avro", f"_ingest/staging/r/t{task_id}/{i}",
                              4, 123, "avro", "2026-11-18", 5, 42, T0, T0 + 9) for i in range(files))
    return TaskOutcome(summary, staged)


def test_outcomes_round_trip_through_spark_rows_and_refuse_incomplete_reports():
    from ingest.loader.results import RESULT_FIELDS, outcome_rows, outcomes_from_rows

    columns = [name for name, _ in RESULT_FIELDS]
    outcomes = [_outcome(0, files=2, decoder="compiled"), _outcome(1, files=0)]
    rows = [dict(zip(columns, row)) for o in reversed(outcomes) for row in outcome_rows(o)]
    assert all(len(r) == len(RESULT_FIELDS) for r in rows) and len(rows) == 4
    assert outcomes_from_rows(rows) == outcomes
    with pytest.raises(CommitError, match=r"tasks \[0\] reported staged files but no summary"):
        outcomes_from_rows([r for r in rows if not (r["task_id"] == 0 and r["kind"] == "task")])
    with pytest.raises(CommitError, match="task 1 reported twice"):
        outcomes_from_rows(rows + rows[:1])


def test_driver_phases_work_on_the_typed_outcomes():
    from ingest.loader.job import check_reports, file_records
    from ingest.loader.runrecord import partition_entries

    snap = PartitionSnapshot("pv", 3, 1, "127.0.0.1", 9, earliest=0, latest=200)
    plan = build_plan(run_id="r", base_seq=0, snapshots=[snap], committed={}, max_bytes_per_task=100,
                      segment_starts=lambda s: (100,))
    assert [t.task_id for t in plan.tasks] == [0, 1]
    outcomes = [_outcome(0, files=2), _outcome(1)]
    check_reports(plan, outcomes)
    with pytest.raises(CommitError, match="incomplete or repeated"):
        check_reports(plan, outcomes[:1])
    recs = file_records(outcomes, "r")
    assert [r.path for r in recs] == sorted(f.path for o in outcomes for f in o.files)
    assert {(r.run_id, r.kind, r.schema_id, r.staging[:18]) for r in recs} == {("r", DATA, 42, "_ingest/staging/r/")}
    (entry,) = partition_entries(plan, outcomes)
    assert (entry["messages"], entry["quarantined"], entry["cpu_ms"], len(entry["files"])) == (20, 2, 14, 3)
    assert "decoders" not in entry  # Avro tasks decode rows, not columns
    (entry,) = partition_entries(plan, [_outcome(0, decoder="python"), _outcome(1, decoder="compiled")])
    assert entry["decoders"] == ["compiled", "python"]  # the run record says which column decoder ran
