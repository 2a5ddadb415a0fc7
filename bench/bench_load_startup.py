"""The fixed cost of a small hourly load: ``spark-submit jobs/load.py`` from start to exit, and where it goes.

    .venv/bin/python bench/bench_load_startup.py [--count 10000] [--repeat 2] [--ref 77fcce0]
                     [--variants before,after,after-jvm] [--cds] [--json]

Starts one real broker process (2 partitions) and a registry, produces ``--count``
events, then runs ``spark-submit --master local[2] jobs/load.py --config ...`` once per
variant and repeat (alternating), each into a fresh destination, so every run loads
the same ``--count`` events:

- ``before``: the code of ``--ref`` (``git archive`` into a temp dir), its documented command;
- ``after``: this tree, the same command;
- ``after-jvm``: this tree with the driver JVM options docs/spark-source.md recommends for
  short jobs (``-XX:TieredStopAtLevel=1``; with ``--cds`` also a class-data-sharing archive
  made first by one training load of the same tree with ``-XX:ArchiveClassesAtExit``, as an
  operator would); ``after-c1``: the C1 option alone; ``before-jvm``, ``before-c1``: the
  same for the ``--ref`` code.

Each run's wall time is split at timestamps taken from its own output (a log4j2 profile
with milliseconds, ``-Dlog4j2.configurationFile`` on every variant's driver, and the job's
log lines; not a ``SPARK_CONF_DIR``: spark-submit puts that directory on the class path, and a
non-empty directory there makes ``-XX:ArchiveClassesAtExit`` fail at exit) and from a
``sitecustomize`` that records when each Python process starts (driver, planner, worker):
JVM start, driver Python imports + plan, SparkContext start, session/planning until the
job is submitted, tasks, commit, SparkContext stop, JVM exit. CPU seconds are those of
the whole process tree (``RUSAGE_CHILDREN``). Prints the machine, the load average at
start and end, a table per variant (median of the repeats) and the ratio after/before.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: log4j2 profile: Spark's default one (INFO to stderr) with millisecond timestamps
LOG4J2 = """\
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %p %c{1}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
"""

#: records "<epoch s> <pid> <command line>" for every Python process started with it on its path
SITECUSTOMIZE = """\
import os, time
_p = os.environ.get("BENCH_PY_STARTS")
if _p:
    try:
        with open("/proc/self/cmdline", "rb") as _f:
            _cmd = _f.read().replace(b"\\0", b" ").decode(errors="replace").strip()
        with open(_p, "a") as _f:
            _f.write(f"{time.time():.3f} {os.getpid()} {_cmd}\\n")
    except OSError:
        pass
"""

VARIANTS = ("before", "before-c1", "before-jvm", "after", "after-c1", "after-jvm")
C1 = "-XX:TieredStopAtLevel=1"

PHASES = (
    ("jvm", "JVM start (spark-submit to driver Python)"),
    ("driver_plan", "driver Python imports + plan"),
    ("to_context", "plan to SparkContext start"),
    ("context", "SparkContext start"),
    ("to_run", "context ready to tasks handed over (session)"),
    ("to_job", "tasks handed over to job submitted (planning)"),
    ("tasks", "job: tasks incl. Python workers"),
    ("commit", "commit"),
    ("stop", "SparkContext stop"),
    ("exit", "JVM exit"),
)


def machine() -> dict:
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor())
    mem_kb = int(next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines()
                      if ln.startswith("MemTotal")))
    return {"nproc": os.cpu_count(), "cpu": model, "ram_gb": round(mem_kb / 1024 / 1024, 1),
            "python": platform.python_version()}


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def extract_ref(ref: str, dest: Path) -> Path:
    """The tree of ``ref`` in ``dest`` (``git archive``, no worktree to clean up)."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def produce(broker, registry_url: str, topic: str, n: int) -> None:
    from ingest.events.event_producer import EventProducer
    from ingest.events.loadgen import EventGenerator
    from ingest.events.registry_client import RegistryClient

    gen = EventGenerator(seed=16)
    with EventProducer({"broker.list": broker.address}, RegistryClient(registry_url),
                       monitoring_enable=False, background=False) as ep:
        for i in range(0, n, 500):
            ep.send(topic, gen.batch(min(500, n - i)), key=f"k{i}")
        ep.flush()


_TS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time, as both loggers print


def marks(output: str) -> dict[str, float]:
    """First time (epoch s) each marker line appears in a run's output."""
    patterns = {
        "plan_done": "INFO ingest.loader.job: run ",
        "context_start": "SparkContext: Running Spark version",
        "context_ready": "BlockManager: Initialized BlockManager",
        "running": "INFO ingest.loader.job: running ",
        "job_start": "SparkContext: Starting job",
        "job_end": "DAGScheduler: Job 0 finished",
        "committed": "INFO ingest.loader.commit: committed manifest",
        "stopping": "SparkContext: SparkContext is stopping",
        "stopped": "SparkContext: Successfully stopped SparkContext",
    }
    out: dict[str, float] = {}
    for line in output.splitlines():
        m = _TS.match(line)
        if not m:
            continue
        for name, pat in patterns.items():
            if name not in out and pat in line:
                out[name] = _epoch(m.group(1))
    return out


def python_starts(path: Path) -> list[tuple[float, str]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        t, _pid, cmd = line.split(" ", 2)
        rows.append((float(t), cmd))
    return rows


def _role(cmd: str) -> str:
    if "jobs/load.py" in cmd:
        return "driver"
    for name in ("lookup_data_sources", "create_data_source", "plan_data_source_read", "daemon", "worker"):
        if name in cmd:
            return name
    return cmd[-40:]


def run_once(tree: Path, conf: Path, work: Path, label: str, java_opts: str, env_base: dict) -> dict:
    starts = work / f"{label}.starts"
    starts.unlink(missing_ok=True)
    env = dict(env_base, PYTHONPATH=f"{work / 'site'}{os.pathsep}{tree}", BENCH_PY_STARTS=str(starts))
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", "--driver-java-options",
           f"-Dlog4j2.configurationFile=file:{work / 'log4j2.properties'} {java_opts}".strip()]
    cmd += [str(tree / "jobs" / "load.py"), "--config", str(conf)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    t_end = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = r.stdout + "\n" + r.stderr
    (work / f"{label}.out").write_text(output)
    if r.returncode != 0 or "messages " not in r.stdout:
        raise RuntimeError(f"{label}: exit {r.returncode}\n{output[-4000:]}")
    m = marks(output)
    py = python_starts(starts)
    driver = next((t for t, c in py if _role(c) == "driver"), None)
    # the loaded rows, from the summary line "partitions 2, tasks 2, messages 10000, ..."
    msgs = int(re.search(r"messages (\d+)", r.stdout).group(1))
    points = [t0, driver, m.get("plan_done"), m.get("context_start"), m.get("context_ready"), m.get("running"),
              m.get("job_start"), m.get("job_end"), m.get("committed"), m.get("stopped"), t_end]
    phases = {}
    for (key, _), a, b in zip(PHASES, points, points[1:]):
        phases[key] = round(b - a, 2) if a is not None and b is not None else None
    if m.get("running") is None:  # code without the "running N task(s)" line: one phase to the job
        phases["to_job"] = round(m["job_start"] - m["context_ready"], 2)
    return {
        "wall_s": round(t_end - t0, 2),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "messages": msgs, "phases": phases,
        "python_processes": [(round(t - t0, 2), _role(c)) for t, c in py],
    }


def train_cds(tree: Path, conf_for, work: Path, env_base: dict, name: str) -> Path | None:
    """One load with ``-XX:ArchiveClassesAtExit``: the archive an operator makes once (docs/spark-source.md)."""
    archive = work / f"load-{name}.jsa"
    run_once(tree, conf_for(f"cds-training-{name}"), work, f"cds-training-{name}",
             f"{C1} -XX:ArchiveClassesAtExit={archive} -Xlog:cds=off -Xlog:cds+dynamic=off", env_base)
    return archive if archive.exists() else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--ref", default="77fcce0", help="git commit of the 'before' code")
    ap.add_argument("--variants", default="before,after,after-jvm",
                    help="comma list of before, before-c1, before-jvm, after, after-c1, after-jvm")
    ap.add_argument("--cds", action="store_true", help="*-jvm also use a CDS archive made by a training load")
    ap.add_argument("--json", action="store_true", help="print the raw results as JSON too")
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    from tests.harness.brokers import BrokerProcess
    from tests.harness.registry import RegistryProcess

    variants = args.variants.split(",")
    info = machine()
    load_start = loadavg()
    print(f"machine: nproc {info['nproc']}, {info['cpu']}, {info['ram_gb']} GB RAM, Python {info['python']}")
    print(f"load average at start: {load_start}")
    work = Path(tempfile.mkdtemp(prefix="bench-load-startup-"))
    (work / "site").mkdir()
    (work / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (work / "log4j2.properties").write_text(LOG4J2)
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variant(s) {bad}; known: {', '.join(VARIANTS)}")
    trees = {"after": REPO}
    if any(v.startswith("before") for v in variants):
        trees["before"] = extract_ref(args.ref, work / "ref")
    env_base = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    for k in ("SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS", "INGEST_FAULTS"):
        env_base.pop(k, None)
    broker = BrokerProcess(0, work / "broker", overrides={"num.partitions": 2}).start()
    registry = RegistryProcess(work / "registry").start()
    print(f"broker (pid {broker.pid}), registry (pid {registry.proc.pid}); {args.count:,} events to topic views")
    results: dict[str, list[dict]] = {v: [] for v in variants}
    try:
        produce(broker, registry.url, "views", args.count)
        n = 0

        def conf_for(label: str) -> Path:
            nonlocal n
            n += 1
            path = work / f"load-{n}.properties"
            path.write_text(f"destination={work / f'dest-{n}-{label}'}\nbrokers={broker.host}:{broker.port}\n"
                            f"registry.url={registry.url}\ntopics=views\nformat=parquet\n")
            return path

        opts = {v: C1 if v.endswith(("-c1", "-jvm")) else "" for v in variants}
        for v in variants:
            if v.endswith("-jvm") and args.cds:
                tree = v.split("-")[0]
                archive = train_cds(trees[tree], conf_for, work, env_base, tree)
                if archive:
                    opts[v] += f" -XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
                else:
                    print(f"CDS training made no archive; {v} runs without one")
        for i in range(args.repeat):
            order = variants if i % 2 == 0 else variants[::-1]
            for v in order:
                res = run_once(trees[v.split("-")[0]], conf_for(v), work, f"{v}-{i}", opts[v],
                               env_base)
                if res["messages"] != args.count:
                    raise RuntimeError(f"{v}: loaded {res['messages']} messages, expected {args.count}")
                results[v].append(res)
                print(f"  {v} run {i + 1}: {res['wall_s']} s wall, {res['cpu_s']} s CPU, load {loadavg()}",
                      flush=True)
    finally:
        broker.stop()
        registry.stop()
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    print(f"load average at end: {loadavg()}")
    print(f"\nspark-submit --master local[2] jobs/load.py, {args.count:,} events (2 partitions, Parquet); "
          f"median of {args.repeat} run(s), seconds")
    header = f"{'phase':<44}" + "".join(f"{v:>11}" for v in variants)
    print(header)

    def med(values):
        values = [x for x in values if x is not None]
        return round(statistics.median(values), 2) if values else None

    for key, title in PHASES:
        row = [med([r["phases"][key] for r in results[v]]) for v in variants]
        print(f"{title:<44}" + "".join(f"{'-' if x is None else x:>11}" for x in row))
    for key, title in (("wall_s", "total wall"), ("cpu_s", "CPU of the process tree")):
        row = [med([r[key] for r in results[v]]) for v in variants]
        print(f"{title:<44}" + "".join(f"{x:>11}" for x in row))
    if "before" in variants:
        base = med([r["wall_s"] for r in results["before"]])
        base_cpu = med([r["cpu_s"] for r in results["before"]])
        for v in variants:
            if v != "before":
                print(f"ratio {v}/before: wall {med([r['wall_s'] for r in results[v]]) / base:.2f}, "
                      f"CPU {med([r['cpu_s'] for r in results[v]]) / base_cpu:.2f}")
    for v in variants:
        print(f"Python processes started, {v} (s after submit): {results[v][0]['python_processes']}")
    for v in variants:
        if v.startswith("after"):
            wall = med([r["wall_s"] for r in results[v]])
            print(f"aim <= 15 s wall, {v}: {'met' if wall <= 15 else 'not met'} ({wall} s; "
                  f"load average {load_start} at start, {loadavg()} at end)")
    if args.json:
        print(json.dumps({"machine": info, "load_start": load_start, "load_end": loadavg(), "results": results},
                         indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
