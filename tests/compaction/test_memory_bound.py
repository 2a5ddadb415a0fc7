"""Compaction streams: an hour larger than the memory of the process that merges it compacts.

The limit is the one PySpark puts on each Python worker when ``spark.executor.pyspark.memory`` is
set: ``RLIMIT_AS`` (address space), which the worker sets on itself before it runs a task. In the
suite, ``ingest compaction run`` (the same per-hour merge, in process) runs under that limit; with
``INGEST_COMPACTION_SPARK_MEMORY=1`` also ``spark-submit jobs/compact.py`` with the limit set through
the config's ``spark.*`` keys (docs/testing.md). Each hour holds more than the room left under the
limit once pyarrow and fastavro are imported (about 235 MB); merging it whole (reading every file,
then writing every output) fails with a MemoryError, streaming (``compaction.batch.bytes`` at its
default) it compacts, and every row survives exactly once, in input order.
"""
from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.compaction.helpers import HOUR_START_MS, commit_hour_files, committed_paths, read_ids
from tests.harness import reaper
from tests.harness.spark import SHORT_JVM_OPTS

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
SPARK_ENV = "INGEST_COMPACTION_SPARK_MEMORY"
FILES = 12
URL_BYTES = 32_768
"""A page view with a 32 KB url (hex of random bytes: neither snappy nor deflate shrinks it much)."""
ALLOCATOR_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "2"}
"""What docs/operations.md tells operators to set with a worker memory limit: RLIMIT_AS counts address
space, and pyarrow's default allocator (mimalloc) reserves far more of it than it uses (1.4 GB of
address space for 0.3 GB resident, the same streaming merge)."""


def wide_record(rng: random.Random, seq: int) -> dict:
    return {"header": {"time": HOUR_START_MS + seq, "server": "web-1", "service": "frontend",
                       "session": f"s-{seq % 3}", "seq": seq},
            "url": rng.randbytes(URL_BYTES // 2).hex(), "member_id": seq}


def ids(paths: list[str], fmt: str) -> list[tuple[str, int]]:
    """``(session, seq)`` of every row, in file order (Parquet: the header column only)."""
    if fmt == "avro":
        return read_ids(paths, fmt)
    return [(h["session"], h["seq"]) for p in paths for h in pq.read_table(p, columns=["header"])["header"].to_pylist()]


def build_hour(root: Path, fmt: str, topic: str, rows_per_file: int) -> list[tuple[str, int]]:
    """``FILES`` committed files; every 20th row repeated in the next file.

    Returns the ids compaction must keep, in its input order: the first copy of each, files sorted by path.
    """
    rng = random.Random(fmt)
    files, carry, seq = [], [], 0
    for f in range(FILES):
        recs = list(carry)
        carry = []
        for _ in range(rows_per_file):
            r = wide_record(rng, seq)
            recs.append(r)
            if seq % 20 == 0:
                carry.append(r)
            seq += 1
        files.append((f % 2, f * 1000, f * 1000 + 999, recs))
    commit_hour_files(root, files, fmt, topic, run_id=f"load-{topic}")
    seen: set = set()
    return [i for i in ids(sorted(committed_paths(root, topic)), fmt) if not (i in seen or seen.add(i))]


def run_child(cmd: list[str], env: dict, cwd: Path, preexec_fn=None) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=preexec_fn)
    reaper.watch(proc)
    try:
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()  # our own child, by its handle
            proc.wait()
    reaper.forget(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def assert_compacted(dest: Path, expected: dict[str, tuple[str, list]]) -> None:
    for topic, (fmt, want) in expected.items():
        paths = committed_paths(dest, topic)
        assert all(".compacted." in p for p in paths), paths
        assert ids(paths, fmt) == want


def test_an_hour_larger_than_the_process_memory_compacts(tmp_path):
    """``ingest compaction run`` under a 600 MB RLIMIT_AS. Measured without a limit (same allocator settings):
    streaming, the process peaked at 415 MB of address space on the Parquet hour (118 MB of values) and 252 MB
    on the Avro hour (216 MB); merged whole, at 966 MB and 707 MB."""
    dest = tmp_path / "warehouse"
    expected = {"wide-pq": ("parquet", build_hour(dest, "parquet", "wide-pq", 300)),
                "wide-av": ("avro", build_hour(dest, "avro", "wide-av", 550))}
    limit = 600 * 1024 * 1024

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = dict(os.environ, **ALLOCATOR_ENV, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = run_child([sys.executable, "-m", "ingest.cli", "compaction", "run", "--set", f"destination={dest}",
                      "--set", "compaction.require.audit=false"], env, tmp_path, limit_memory)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    assert_compacted(dest, expected)


@pytest.mark.skipif(os.environ.get(SPARK_ENV) != "1", reason=f"{SPARK_ENV}=1 runs it (a spark-submit of 2-4 min)")
def test_an_hour_larger_than_the_task_memory_compacts_in_a_spark_task(tmp_path):
    """``spark.executor.pyspark.memory=700m``: streaming, the Parquet task peaked at 430 MB of address space and
    the Avro task at 250 MB; merged whole, the Parquet hour (157 MB of values) needs 1.1 GB and the Avro hour
    (275 MB) 0.8 GB."""
    dest = tmp_path / "warehouse"
    expected = {"wide-pq": ("parquet", build_hour(dest, "parquet", "wide-pq", 400)),
                "wide-av": ("avro", build_hour(dest, "avro", "wide-av", 700))}
    conf = tmp_path / "compaction.properties"
    conf.write_text(f"destination={dest}\ncompaction.require.audit=false\nspark.executor.pyspark.memory=700m\n"
                    + "".join(f"spark.executorEnv.{k}={v}\n" for k, v in ALLOCATOR_ENV.items()))
    py = sys.executable
    env = dict(os.environ, PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = run_child([str(Path(py).parent / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                      "--driver-java-options", SHORT_JVM_OPTS, str(ROOT / "jobs" / "compact.py"), "--config", str(conf)],
                     env, tmp_path)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    assert_compacted(dest, expected)
