"""Compaction merges an hour's small committed files, drops duplicates, swaps atomically, is idempotent."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.clock import FakeClock
from ingest.compaction.config import COMPACTION_CONFIG
from ingest.compaction.plan import HOUR_MS
from ingest.compaction.records import read_records
from ingest.compaction.runner import run
from ingest.errors import ConfigError
from ingest.storage import open_storage
from tests.compaction.helpers import (HOUR_START_MS, commit_hour_files, committed_paths, make_hour,
                                      read_ids, record)

ROOT = Path(__file__).resolve().parents[2]
AFTER_HOUR = HOUR_START_MS + HOUR_MS + 11 * 60 * 1000   # past the default 10-minute grace


def compact(root: Path, clock_ms: int = AFTER_HOUR, **overrides) -> dict[str, dict]:
    raw = {"destination": str(root), "compaction.require.audit": "false", **overrides}
    cfg = COMPACTION_CONFIG.parse(raw)
    return {r["hour"].split("/")[0]: r for r in run(cfg, clock=FakeClock(clock_ms))}


def data_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if not p.name.startswith(("_", ".")))


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_merges_small_files_into_one_without_duplicates(tmp_path, fmt):
    d, ids = make_hour(tmp_path, fmt)
    before = data_files(d)
    out = compact(tmp_path)["page-views"]
    assert out["action"] == "compacted", out
    assert out["files_in"] == len(before) == 6 and out["files_out"] == 1
    assert out["duplicates"] == out["rows_in"] - out["rows_out"] > 0
    paths = committed_paths(tmp_path)
    assert len(paths) == 1 and paths[0].endswith("." + fmt)
    assert data_files(d) == [os.path.basename(paths[0])]  # old files physically gone
    got = read_ids(paths, fmt)
    assert len(got) == len(set(got)) and set(got) == ids
    [rec] = read_records(open_storage(str(tmp_path)))
    assert rec["state"] == "committed" and sorted(os.path.basename(p) for p in rec["old"]) == before
    assert rec["hours"][0]["rows_out"] == len(ids)
    assert not (tmp_path / "_ingest" / "staging" / rec["id"]).exists()


def test_avro_keeps_schema_and_codec(tmp_path):
    import fastavro

    make_hour(tmp_path, "avro", files=3)
    compact(tmp_path)
    [path] = committed_paths(tmp_path)
    with open(path, "rb") as fh:
        reader = fastavro.reader(fh)
        assert reader.codec == "deflate"
        assert reader.writer_schema["name"] == "ingest.events.PageView"


def test_rerun_is_a_noop(tmp_path):
    make_hour(tmp_path, "parquet")
    compact(tmp_path, **{"compaction.target.bytes": "4096"})
    files = committed_paths(tmp_path)
    assert len(files) > 1  # split by the small target
    again = compact(tmp_path, **{"compaction.target.bytes": "4096"})["page-views"]
    assert again["action"] == "noop" and "already compacted" in again["reason"]
    assert committed_paths(tmp_path) == files
    assert len(list(read_records(open_storage(str(tmp_path))))) == 1


def test_target_size_splits_output_near_target(tmp_path):
    d, ids = make_hour(tmp_path, "parquet", files=8, per_file=400)
    total = sum((d / n).stat().st_size for n in data_files(d))
    target = total // 3
    out = compact(tmp_path, **{"compaction.target.bytes": str(target)})["page-views"]
    assert 3 <= out["files_out"] <= 5
    sizes = [os.path.getsize(p) for p in committed_paths(tmp_path)]
    assert max(sizes) < 2 * target
    assert set(read_ids(committed_paths(tmp_path), "parquet")) == ids


def test_open_hour_is_left_alone(tmp_path):
    d, _ = make_hour(tmp_path, "parquet")
    out = compact(tmp_path, clock_ms=HOUR_START_MS + HOUR_MS + 60_000)["page-views"]  # within the grace
    assert out["action"] == "skipped" and len(data_files(d)) == 6


def test_open_hour_compacted_when_asked(tmp_path):
    make_hour(tmp_path, "parquet")
    out = compact(tmp_path, clock_ms=HOUR_START_MS + 60_000, **{"compaction.include.open.hours": "true"})
    assert out["page-views"]["action"] == "compacted"


def test_late_file_after_compaction_is_merged_next_run(tmp_path):
    d, ids = make_hour(tmp_path, "parquet")
    compact(tmp_path)
    late = [record("s-late", i) for i in range(5)] + [record("s-a", 1)]  # one duplicate of old data
    commit_hour_files(tmp_path, [(0, 90000, 90999, late)], "parquet", run_id="load-late")
    out = compact(tmp_path)["page-views"]
    assert out["action"] == "compacted" and out["files_in"] == 2 and out["duplicates"] == 1
    got = read_ids(committed_paths(tmp_path), "parquet")
    assert sorted(got) == sorted(ids | {("s-late", i) for i in range(5)})


def test_audit_gate_compacts_only_complete_hours(tmp_path):
    make_hour(tmp_path, "parquet", topic="page-views")
    make_hour(tmp_path, "parquet", topic="clicks")
    report = tmp_path / "report.json"
    windows = [{"topic": t, "window_start_ms": HOUR_START_MS + i * 600_000, "status": "COMPLETE"}
               for t in ("page-views", "clicks") for i in range(6)]
    windows[-1]["status"] = "DATA_LOSS"  # one bad window of clicks
    report.write_text(json.dumps({"windows": windows}))
    cfg = COMPACTION_CONFIG.parse({"destination": str(tmp_path)})
    results = {r["hour"].split("/")[0]: r for r in
               run(cfg, audit_reports=[str(report)], clock=FakeClock(AFTER_HOUR))}
    assert results["page-views"]["action"] == "compacted"
    assert results["clicks"]["action"] == "skipped" and "COMPLETE" in results["clicks"]["reason"]
    assert len(committed_paths(tmp_path, "clicks")) == 6


def test_missing_audit_report_is_a_clear_error(tmp_path):
    cfg = COMPACTION_CONFIG.parse({"destination": str(tmp_path)})
    with pytest.raises(ConfigError, match="--audit-report"):
        run(cfg)


def test_bad_target_names_key_and_range():
    with pytest.raises(ConfigError, match="compaction.target.bytes.*allowed is an integer"):
        COMPACTION_CONFIG.parse({"compaction.target.bytes": "12"})


def _compact_cmd(root: Path) -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "compaction", "run",
            "--set", f"destination={root}", "--set", "compaction.require.audit=false",
            "--set", "compaction.grace.ms=0"]


# (env var, crash point, committed?) -- ours before the commit, the loader's inside it
CRASHES = [
    ("INGEST_COMPACTION_CRASH_AT", "staged", False),
    ("INGEST_FAULTS", "before-manifest", False),
    ("INGEST_FAULTS", "after-manifest", True),
    ("INGEST_FAULTS", "mid-publish", True),
    ("INGEST_FAULTS", "after-publish", True),
]


@pytest.mark.processes
@pytest.mark.parametrize("env_var,point,committed", CRASHES, ids=[c[1] for c in CRASHES])
def test_sigkill_mid_compaction_then_rerun_completes(tmp_path, env_var, point, committed):
    d, ids = make_hour(tmp_path, "parquet", files=5)
    old = committed_paths(tmp_path)
    env = dict(os.environ, **{env_var: point})
    proc = subprocess.run(_compact_cmd(tmp_path), env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr  # really SIGKILLed at the crash point

    # What a reader sees right now (LoaderState recovery rolls a committed manifest forward):
    now = committed_paths(tmp_path)
    if committed:
        assert len(now) == 1 and ".compacted." in now[0]  # the new set only
        assert sorted(read_ids(now, "parquet")) == sorted(ids)
    else:
        assert now == old  # the old set only
        assert set(read_ids(now, "parquet")) == ids

    env.pop(env_var)
    proc = subprocess.run(_compact_cmd(tmp_path), env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    paths = committed_paths(tmp_path)
    assert len(paths) == 1 and ".compacted." in paths[0]
    assert sorted(read_ids(paths, "parquet")) == sorted(ids)
    assert data_files(d) == [os.path.basename(paths[0])]
    staging = tmp_path / "_ingest" / "staging"
    assert not [p.name for p in staging.iterdir() if p.name.startswith("c")]  # no compaction leftovers
    states = sorted(r["state"] for r in read_records(open_storage(str(tmp_path))))
    assert states == (["committed"] if committed else ["abandoned", "committed"])


def test_audit_gate_needs_the_whole_hour_covered(tmp_path):
    from ingest.compaction.audit_gate import complete_hours
    from ingest.loader.layout import hour_bucket

    def rows(topic, starts, status="COMPLETE"):
        return [{"topic": topic, "row_type": "window", "window_start_ms": HOUR_START_MS + s * 600_000,
                 "window_end_ms": HOUR_START_MS + (s + 1) * 600_000, "status": status} for s in starts]

    report = tmp_path / "rows.jsonl"
    lines = rows("full", range(6)) + rows("tail-only", range(3, 6)) + rows("pending", range(5)) \
        + rows("pending", [5], "PENDING") \
        + [{"topic": "tail-only", "row_type": "producer", "window_start_ms": HOUR_START_MS, "status": "COMPLETE"}]
    report.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    dt, hour = hour_bucket(HOUR_START_MS)
    assert complete_hours([str(report)]) == {("full", dt, hour)}


def test_audit_gate_reads_a_one_line_report(tmp_path):
    from ingest.compaction.audit_gate import complete_hours, report_range
    from ingest.loader.layout import hour_bucket

    report = tmp_path / "one.jsonl"
    report.write_text(json.dumps({"topic": "t", "row_type": "window", "window_start_ms": HOUR_START_MS,
                                  "window_end_ms": HOUR_START_MS + HOUR_MS, "status": "COMPLETE"}) + "\n")
    dt, hour = hour_bucket(HOUR_START_MS)
    assert complete_hours([str(report)]) == {("t", dt, hour)}
    assert report_range([str(report)]) == (HOUR_START_MS, HOUR_START_MS + HOUR_MS)


def test_spark_job_merges_each_hour_in_a_spark_task(tmp_path, spark):
    """jobs/compact.py's map: hours merged by Spark tasks, committed once by the driver."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("jobs_compact", ROOT / "jobs" / "compact.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    _, ids_a = make_hour(tmp_path, "parquet", topic="page-views")
    _, ids_b = make_hour(tmp_path, "avro", topic="clicks")
    cfg = COMPACTION_CONFIG.parse({"destination": str(tmp_path), "compaction.require.audit": "false"})
    results = {r["hour"].split("/")[0]: r for r in run(cfg, clock=FakeClock(AFTER_HOUR), map_fn=job.spark_map(spark))}
    assert results["page-views"]["action"] == results["clicks"]["action"] == "compacted"
    assert set(read_ids(committed_paths(tmp_path, "page-views"), "parquet")) == ids_a
    assert set(read_ids(committed_paths(tmp_path, "clicks"), "avro")) == ids_b
    [rec] = read_records(open_storage(str(tmp_path)))
    assert rec["state"] == "committed" and len(rec["hours"]) == 2


def test_status_lists_hours_and_runs(tmp_path, capsys):
    from ingest.cli import main

    make_hour(tmp_path, "parquet")
    assert main(["compaction", "status", "--set", f"destination={tmp_path}"]) == 0
    assert "6 file(s)" in capsys.readouterr().out
    compact(tmp_path)
    assert main(["compaction", "status", "--set", f"destination={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "1 file(s)" in out and "compacted" in out and "committed, 6 -> 1 files" in out


def test_bad_time_is_one_clear_line(tmp_path, capsys):
    from ingest.cli import main

    assert main(["compaction", "run", "--set", f"destination={tmp_path}", "--from", "yesterday"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'yesterday'" in err[0] and "ISO-8601" in err[0]


def test_the_checkpoint_interval_key_reaches_the_committer(tmp_path):
    """``state.checkpoint.interval`` of the compaction config decides when its commit writes a checkpoint."""
    from ingest.loader.state import LoaderState
    make_hour(tmp_path, "parquet")
    before = LoaderState.load(open_storage(str(tmp_path)))
    assert before.checkpoint_seq in (None, 0)  # the loader commits of make_hour stay under the default 100
    compact(tmp_path, **{"state.checkpoint.interval": "1"})
    after = LoaderState.load(open_storage(str(tmp_path)))
    assert after.seq == before.seq + 1 and after.checkpoint_seq == after.seq
