"""Compaction merges an hour's small files, drops duplicates, replaces atomically, and is idempotent."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.clock import FakeClock
from ingest.compaction.compact import HOUR_MS, Settings, compact_hour, discover_hours
from ingest.compaction.config import COMPACTION_CONFIG
from ingest.compaction.replace import CRASH_ENV, HourRef, Replacer
from ingest.compaction.runner import run
from ingest.errors import ConfigError
from ingest.storage import open_storage
from tests.compaction.helpers import HOUR_START_MS, hour_dir, make_hour, read_ids, record, write_file

ROOT = Path(__file__).resolve().parents[2]
AFTER_HOUR = HOUR_START_MS + HOUR_MS + 11 * 60 * 1000   # past the default 10-minute grace


def settings(root: Path, target: int = 128 * 1024 * 1024, min_files: int = 2) -> Settings:
    return Settings(str(root), target, min_files, 600_000)


def the_hour(root: Path) -> HourRef:
    [hour] = discover_hours(open_storage(str(root)))
    return hour


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_merges_small_files_into_one_without_duplicates(tmp_path, fmt):
    d, ids = make_hour(tmp_path, fmt)
    before = sorted(os.listdir(d))
    clock = FakeClock(AFTER_HOUR)
    out = compact_hour(open_storage(str(tmp_path)), settings(tmp_path), the_hour(tmp_path), clock)
    assert out.action == "compacted", out
    assert out.files_in == len(before) == 6 and out.files_out == 1
    assert out.duplicates == out.rows_in - out.rows_out > 0
    files = sorted(str(p) for p in d.iterdir())
    assert len(files) == 1 and files[0].endswith("." + fmt)
    got = read_ids(files, fmt)
    assert len(got) == len(set(got)) and set(got) == ids
    [rec] = Replacer(open_storage(str(tmp_path))).records(the_hour(tmp_path))
    assert rec["state"] == "done" and sorted(rec["old"]) == before and rec["rows_out"] == len(ids)
    assert not os.listdir(tmp_path / "_compaction" / "staging")


def test_avro_keeps_schema_and_codec(tmp_path):
    import fastavro

    d, _ = make_hour(tmp_path, "avro", files=3)
    compact_hour(open_storage(str(tmp_path)), settings(tmp_path), the_hour(tmp_path), FakeClock(AFTER_HOUR))
    [f] = d.iterdir()
    with open(f, "rb") as fh:
        reader = fastavro.reader(fh)
        assert reader.codec == "deflate"
        assert reader.writer_schema["name"] == "ingest.events.PageView"


def test_rerun_is_a_noop(tmp_path):
    d, _ = make_hour(tmp_path, "parquet")
    st, clock = open_storage(str(tmp_path)), FakeClock(AFTER_HOUR)
    compact_hour(st, settings(tmp_path, target=4096), the_hour(tmp_path), clock)
    files = sorted(os.listdir(d))
    assert len(files) > 1  # split by the small target
    again = compact_hour(st, settings(tmp_path, target=4096), the_hour(tmp_path), clock)
    assert again.action == "noop" and "already compacted" in again.reason
    assert sorted(os.listdir(d)) == files
    assert len(Replacer(st).records(the_hour(tmp_path))) == 1


def test_target_size_splits_output_near_target(tmp_path):
    d, ids = make_hour(tmp_path, "parquet", files=8, per_file=400)
    total = sum(p.stat().st_size for p in d.iterdir())
    target = total // 3
    out = compact_hour(open_storage(str(tmp_path)), settings(tmp_path, target=target),
                       the_hour(tmp_path), FakeClock(AFTER_HOUR))
    assert 3 <= out.files_out <= 5
    sizes = [p.stat().st_size for p in d.iterdir()]
    assert max(sizes) < 2 * target
    assert set(read_ids([str(p) for p in d.iterdir()], "parquet")) == ids


def test_open_hour_is_left_alone(tmp_path):
    d, _ = make_hour(tmp_path, "parquet")
    out = compact_hour(open_storage(str(tmp_path)), settings(tmp_path), the_hour(tmp_path),
                       FakeClock(HOUR_START_MS + HOUR_MS + 60_000))  # within the grace period
    assert out.action == "skipped" and len(os.listdir(d)) == 6


def test_late_file_after_compaction_is_merged_next_run(tmp_path):
    d, ids = make_hour(tmp_path, "parquet")
    st, clock = open_storage(str(tmp_path)), FakeClock(AFTER_HOUR)
    compact_hour(st, settings(tmp_path), the_hour(tmp_path), clock)
    late = [record("s-late", i) for i in range(5)] + [record("s-a", 1)]  # one duplicate of old data
    write_file(d / "page-views.b0.p0.90000-90999.parquet", late, "parquet")
    out = compact_hour(st, settings(tmp_path), the_hour(tmp_path), clock)
    assert out.action == "compacted" and out.files_in == 2 and out.duplicates == 1
    got = read_ids([str(p) for p in d.iterdir()], "parquet")
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
    assert len(os.listdir(hour_dir(tmp_path, "clicks"))) == 6


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


@pytest.mark.parametrize("step", ["staged", "committed", "renamed", "deleted"])
def test_sigkill_mid_compaction_then_rerun_completes(tmp_path, step):
    d, ids = make_hour(tmp_path, "parquet", files=5)
    old = sorted(os.listdir(d))
    env = dict(os.environ, **{CRASH_ENV: step})
    proc = subprocess.run(_compact_cmd(tmp_path), env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr  # really killed at the crash point
    replacer, hour = Replacer(open_storage(str(tmp_path))), the_hour(tmp_path)
    visible = replacer.visible_files(hour)
    names = sorted(os.path.basename(p) for p in visible)
    if step == "staged":
        assert names == old  # before the commit point readers see the old set only
    else:
        assert all(".compacted." in n for n in names)  # after it, the new set only
    got = read_ids(visible, "parquet")
    assert set(got) == ids and (step == "staged" or len(got) == len(ids))

    env.pop(CRASH_ENV)
    proc = subprocess.run(_compact_cmd(tmp_path), env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = sorted(os.listdir(d))
    assert len(files) == 1 and ".compacted." in files[0]
    got = read_ids([str(d / files[0])], "parquet")
    assert sorted(got) == sorted(ids)
    assert not os.listdir(tmp_path / "_compaction" / "staging")
    records = replacer.records(hour)
    assert all(r["state"] == "done" for r in records) and len(records) == 1
