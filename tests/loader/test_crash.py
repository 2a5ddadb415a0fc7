"""Exactly once under SIGKILL of the driver at every commit step and under failing task attempts.

Each run is a real ``spark-submit jobs/load.py`` with ``--master local[2,4]`` (so
Spark retries failed tasks) and ``INGEST_FAULTS=fail-first-attempt,<step>``: every
task's first attempt stages files and then fails, and the driver SIGKILLs itself at
the named commit step (ingest.loader.faults). One chain of runs crosses every
step; after each crash the state is either the previous or the new one, and the
following run finishes the job. The test never rolls the state forward itself, and
reading the state (which only reads) never does either.
"""
from __future__ import annotations

import subprocess

import pytest

from ingest.loader import layout, manifests
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.spark import SHORT_JVM_OPTS
from tests.loader.helpers import REPO, committed_ids, produce, spark_env, spark_submit

TOPIC = "crash-views"


def _submit(conf, crash=None, master="local[2,4]"):
    env = spark_env()
    env["INGEST_FAULTS"] = ",".join(["fail-first-attempt"] + ([crash] if crash else []))
    cmd = [spark_submit(), "--master", master, "--conf", "spark.ui.enabled=false",
           "--driver-java-options", SHORT_JVM_OPTS,  # short runs: C1 JIT starts faster
           str(REPO / "jobs" / "load.py"), "--config", str(conf)]
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=900)  # a hang guard only: a loaded 2-core machine is slow


def _killed_at(r, point):
    """The driver really SIGKILLed itself at ``point`` (not some other failure)."""
    return r.returncode != 0 and f"fault injection: SIGKILL at {point}" in (r.stdout + r.stderr)


def _tail(r):
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if " INFO " not in ln or "ingest" in ln]
    return "\n".join(lines[-60:])


def _visible_data_files(dest, topic=TOPIC):
    """What a Hive/Spark reader listing the topic directory would see."""
    st = open_storage(str(dest))
    return sorted(f.path[len(st.root) + 1:] for f in st.walk_files(st.join(topic)))


def _state(dest):
    return LoaderState.load(open_storage(str(dest)))  # reads only


@pytest.mark.slow
def test_sigkill_at_every_commit_step_and_failed_attempts_keep_exactly_once(brokers, registry_url, tmp_path):
    dest = tmp_path / "out"
    conf = tmp_path / "loader.properties"
    conf.write_text(
        f"destination={dest}\nbrokers={','.join(f'{b.host}:{b.port}' for b in brokers)}\n"
        f"registry.url={registry_url}\ntopics={TOPIC}\nformat=parquet\nmax.bytes.per.task=8000\n"
    )
    a = produce(brokers, registry_url, TOPIC, 240)

    # 1. killed after every task succeeded (and failed once), before the manifest: previous state.
    r = _submit(conf, "before-manifest")
    assert _killed_at(r, "before-manifest"), _tail(r)
    assert "fail-first-attempt): first attempt of task" in r.stdout + r.stderr, _tail(r)  # retried
    assert _state(dest).seq == 0 and _visible_data_files(dest) == []
    staged = list(open_storage(str(dest)).walk_files(str(dest / layout.STAGING_DIR)))
    assert staged, "tasks had staged files"

    # 2. killed right after the commit point: the new state is current, files still staged.
    r = _submit(conf, "after-manifest")
    assert _killed_at(r, "after-manifest"), _tail(r)
    st = _state(dest)
    assert st.seq == 1 and not manifests.is_published(st.storage, 1)
    assert _visible_data_files(dest) == []
    assert sum(f.rows for f in st.files(TOPIC)) == len(a)  # committed: exactly A, from successful attempts
    ids = committed_ids(dest, TOPIC)  # a reader reads the committed files from staging, moving nothing
    assert set(ids) == set(a) and max(ids.values()) == 1 and _visible_data_files(dest) == []

    b = produce(brokers, registry_url, TOPIC, 160, seed=7)

    # 3. next run rolls forward and is killed after publishing the first file.
    r = _submit(conf, "mid-publish")
    assert _killed_at(r, "mid-publish"), _tail(r)
    assert len(_visible_data_files(dest)) == 1 and _state(dest).seq == 1

    # 4. next run finishes publishing, killed before writing the published marker.
    r = _submit(conf, "after-publish")
    assert _killed_at(r, "after-publish"), _tail(r)
    st = _state(dest)
    assert st.seq == 1 and not manifests.is_published(st.storage, 1)
    assert _visible_data_files(dest) == sorted(f.path for f in st.files(TOPIC))

    # 5. next run completes the marker, loads B (tasks fail once again), commits, is killed before GC.
    r = _submit(conf, "before-gc")
    assert _killed_at(r, "before-gc"), _tail(r)
    st = _state(dest)
    assert st.seq == 2 and manifests.is_published(st.storage, 2)

    # Every message exactly once, nothing visible that is not committed.
    st = LoaderState.load(open_storage(str(dest)))
    ids = committed_ids(dest, TOPIC)
    assert set(ids) == set(a) | set(b)
    assert max(ids.values()) == 1 and sum(ids.values()) == len(a) + len(b)
    assert _visible_data_files(dest) == sorted(f.path for f in st.files(TOPIC))
    assert len(st.files(TOPIC)) > 2  # max.bytes.per.task split the partitions into several tasks


@pytest.mark.slow
def test_local_cluster_output_is_identical_to_local_mode(spark, brokers, registry_url, tmp_path):
    """Executors in separate JVMs (local-cluster) write exactly what local[2] writes, even when
    every task's first attempt stages its files in its executor process and then fails: the
    retries (Spark's spark.task.maxFailures) stage again and only the successful attempts' files
    are committed, none of the failed attempts' staged files becomes visible.

    Speculation cannot be shown here: Spark never runs two attempts of one task on the same
    host (TaskSetManager's ``hasAttemptOnHost``), and every local-cluster executor has the same
    host; a task marked speculatable waits its first attempt out. Retries exercise the same
    property: several attempts of one task stage files, exactly one attempt's are committed."""
    from ingest.loader.job import run_load
    from tests.loader.helpers import loader_config, read_rows

    topic = "cluster-views"
    produce(brokers, registry_url, topic, 150, chunk=10)
    cluster_dest, local_dest = tmp_path / "cluster", tmp_path / "local"
    conf = tmp_path / "loader.properties"
    conf.write_text(
        f"destination={cluster_dest}\nbrokers={','.join(f'{b.host}:{b.port}' for b in brokers)}\n"
        f"registry.url={registry_url}\ntopics={topic}\nformat=avro\nmax.bytes.per.task=12000\n"
    )
    env = spark_env()
    env["INGEST_FAULTS"] = "fail-first-attempt"  # shipped to the executors in the task settings
    r = subprocess.run([spark_submit(), "--master", "local-cluster[2,1,1024]", "--conf", "spark.ui.enabled=false",
                        "--conf", f"spark.executorEnv.PYSPARK_PYTHON={env['PYSPARK_PYTHON']}",
                        "--driver-java-options", SHORT_JVM_OPTS,  # short runs: C1 JIT starts faster
                        "--conf", f"spark.executor.extraJavaOptions={SHORT_JVM_OPTS}",
                        str(REPO / "jobs" / "load.py"), "--config", str(conf)],
                       env=env, cwd=REPO, capture_output=True, text=True, timeout=900)  # a hang guard only
    assert r.returncode == 0, _tail(r)
    assert "COMMITTED" in r.stdout
    assert "fail-first-attempt): first attempt of task" in r.stdout + r.stderr, _tail(r)  # executors failed, retried
    run_load(loader_config(local_dest, brokers, registry_url, topics=topic, format="avro", max_bytes_per_task=12000,
                           avro_codec="snappy"), spark)
    a = LoaderState.load(open_storage(str(cluster_dest)))
    b = LoaderState.load(open_storage(str(local_dest)))
    assert [f.path for f in a.files(topic)] == [f.path for f in b.files(topic)] and len(a.files(topic)) > 1
    assert _visible_data_files(cluster_dest, topic) == sorted(f.path for f in a.files(topic))  # no failed attempt's file

    def key(r):
        return (r["header"]["session"], r["header"]["seq"])

    rows_a, rows_b = sorted(read_rows(a, topic), key=key), sorted(read_rows(b, topic), key=key)
    assert len(rows_a) == 150 and rows_a == rows_b
