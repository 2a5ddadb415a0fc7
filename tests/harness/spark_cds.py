"""A class-data-sharing archive for the test suite's Spark JVMs: each spark-submit starts in half the CPU.

Every spark-submit a test starts (the loads, audits and compactions of the demos, the crash test, the
Airflow DAG runs, the session's own SparkSession) spends most of its start-up loading and verifying
the same classes from Spark's 280 jars. JDK 17's dynamic CDS (JEP 350) records those classes
once, in an archive written at the exit of one JVM (``-XX:ArchiveClassesAtExit``), and later JVMs map
it (``-XX:SharedArchiveFile``). What the JVMs compute is the same; only where their class metadata
comes from differs.

Measured (``spark-submit`` of a 100-row count, C1 JIT, 3 runs each, alternating, load average 12-18):
19.3 s of CPU (user+sys) without the archive, 9.9 s with it.

The archive is made once per machine, JDK, Spark and venv path, under ``~/.cache/ingest-tests``
(``INGEST_TEST_CACHE`` to move it), by one small training job that tests/conftest.py starts in the
background at the start of a session (:func:`start_training`; 62 s of CPU measured, once), and
reused by later sessions. Before each test, tests/conftest.py adds the options to
``SPARK_SUBMIT_OPTS`` once the archive exists (:func:`ready_options`): JVMs started before that run
as they always did. A JVM whose class path does not match (another venv, an updated JDK) ignores the
archive; ``-Xlog:cds=off`` keeps that silent, so a test's output is the same with or without it.
A missing archive file named by ``-XX:SharedArchiveFile`` would turn off the JDK's own default CDS
too, so the option is only ever added once the file exists.

Off unless ``INGEST_TEST_CDS=1``: on a fresh machine, a JVM mapping an archive trained in the same run
once failed inside Spark's query planner with ``java.lang.InternalError: NoSuchMethodException: no such
method: java.lang.invoke.MethodHandle.linkToStatic(int,int,int,int,MemberName)int/invokeStatic`` (a
method-handle form the archive did not hold: JDK 17's dynamic archive keeps the lambda-form classes of
the training job only). A test suite that fails on the JVM's start-up cache is worse than a slower one.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.harness import reaper

log = logging.getLogger(__name__)

#: the options that map an existing archive; silent when the JVM cannot use it
_USE = "-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"

#: what the training job does: the classes of a session, a Python UDF round trip, Parquet write/read
_TRAINING_JOB = """\
from pyspark.sql import SparkSession
s = SparkSession.builder.appName("cds-training").getOrCreate()
df = s.range(1000).selectExpr("id", "cast(id as string) as name", "id % 7 as k")
df.write.mode("overwrite").parquet(OUT)
back = s.read.parquet(OUT).groupBy("k").count().collect()
assert sum(r["count"] for r in back) == 1000
assert s.sparkContext.parallelize(range(10), 2).map(lambda x: x * 2).sum() == 90
s.stop()
"""


def _spark_home() -> Path:
    import pyspark  # deferred like every pyspark import

    return Path(pyspark.__file__).resolve().parent


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else "java"


@functools.lru_cache(maxsize=None)
def archive_path() -> Path:
    """Where the archive for this JDK, Spark install and venv lives (the path names all three)."""
    jars = _spark_home() / "jars"
    names = sorted(p.name for p in jars.glob("*.jar"))
    java = os.path.realpath(subprocess.run(["sh", "-c", f"command -v {_java()}"], capture_output=True,
                                           text=True).stdout.strip() or _java())
    try:
        jstat = os.stat(java)
        java_id = f"{java}:{jstat.st_size}:{int(jstat.st_mtime)}"
    except OSError:
        java_id = java
    key = hashlib.sha256("\n".join([java_id, str(jars), *names]).encode()).hexdigest()[:16]
    root = Path(os.environ.get("INGEST_TEST_CACHE") or Path.home() / ".cache" / "ingest-tests")
    return root / f"spark-cds-{key}.jsa"


def train(path: Path, timeout: float = 1800.0) -> bool:
    """Make the archive at ``path`` with one training spark-submit; False if it could not be made, or
    if another process is making it (a lock next to it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False          # another process trains it; this one's JVMs start without it
        if path.exists():
            return True
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with tempfile.TemporaryDirectory(prefix="ingest-cds-") as d:
            job = Path(d) / "train.py"
            job.write_text(f"OUT = {str(Path(d) / 'out')!r}\n" + _TRAINING_JOB)
            env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
            env["SPARK_SUBMIT_OPTS"] = f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={tmp} -Xlog:cds=off " \
                                       "-Xlog:cds+dynamic=off"
            spark_submit = str(Path(sys.executable).parent / "spark-submit")
            try:
                r = subprocess.run([spark_submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                                    str(job)], env=env, cwd=d, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as exc:
                log.warning("no CDS archive for the test JVMs: %s", exc)
                tmp.unlink(missing_ok=True)
                return False
        if r.returncode != 0 or not tmp.exists():
            log.warning("no CDS archive for the test JVMs: training job exit %s: %s", r.returncode,
                        (r.stdout + r.stderr)[-2000:])
            tmp.unlink(missing_ok=True)
            return False
        os.replace(tmp, path)
        return True


def start_training() -> subprocess.Popen | None:
    """Start making the archive in a background process (``python -m tests.harness.spark_cds``), at low
    priority, unless it exists or ``INGEST_TEST_CDS=0``; the tests run meanwhile, and their JVMs use
    the archive once it is there (:func:`ready_options`). The caller stops the process at the end."""
    if os.environ.get("INGEST_TEST_CDS", "0") != "1" or archive_path().exists():
        return None
    proc = subprocess.Popen([sys.executable, "-m", "tests.harness.spark_cds"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            cwd=Path(__file__).resolve().parents[2],
                            preexec_fn=lambda: os.nice(10))
    reaper.watch(proc)  # stopped even if pytest itself is killed
    return proc


def stop_training(proc: subprocess.Popen | None) -> None:
    """Stop a training process still running (its process group: the spark-submit JVM and its Python)."""
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def ready_options() -> str:
    """The JVM options that use the archive, or '' while it does not exist (or ``INGEST_TEST_CDS=0``)."""
    if os.environ.get("INGEST_TEST_CDS", "0") != "1":
        return ""
    path = archive_path()
    return jvm_options(path) if path.exists() else ""


def jvm_options(path: Path | None) -> str:
    """The JVM options that use the archive at ``path`` ('' for None)."""
    return _USE.format(path=path) if path else ""


def add_to_spark_submit_opts(env, opts: str) -> bool:
    """Add ``opts`` to ``env['SPARK_SUBMIT_OPTS']`` (spark-submit's JVM reads it); True if they are there."""
    current = env.get("SPARK_SUBMIT_OPTS", "")
    if opts and opts not in current:
        env["SPARK_SUBMIT_OPTS"] = f"{current} {opts}".strip()
    return bool(opts)


if __name__ == "__main__":  # the background training process of start_training()
    logging.basicConfig(level=logging.INFO)
    sys.exit(0 if train(archive_path()) else 1)
