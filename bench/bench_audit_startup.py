"""The fixed cost of auditing a small hour: ``spark-submit jobs/audit.py`` from start to exit, and where it goes.

    .venv/bin/python bench/bench_audit_startup.py [--count 10000] [--topics 3] [--format parquet|avro]
                     [--repeat 2] [--ref 18c4b17] [--variants before,after,after-c1] [--json]

Builds one destination in the loader's layout with tests/audit/synth.py (the audit tests'
builder: files committed through the loader's own commit protocol): ``--count`` events
spread over ``--topics`` topics and the six 10-minute windows of one hour, three producer
sessions per topic, and their monitoring events in the audit topic (one file); one window
of the first topic misses 5 events, so every step of the audit does its work (a DATA_LOSS
verdict, attribution, missing-id samples, exit code 3). Then runs
``spark-submit --master local[2] jobs/audit.py --config ... --from ... --to ... --report ...``
once per variant and repeat, alternating the order, each writing its own report:

- ``before``: the code of ``--ref`` (``git archive`` into a temp dir), the same command;
- ``after``: this tree;
- ``before-c1``, ``after-c1``: the same with the driver JVM option docs/spark-source.md recommends
  for short jobs (``-XX:TieredStopAtLevel=1``: C1 JIT only).

Every run must end with the same exit code and the same report rows (compared without the
run id and the audit time), so the two variants are shown to audit alike.

Each run's wall time is split at timestamps from its own output (a log4j2 profile with
milliseconds passed with ``-Dlog4j2.configurationFile``, the audit's ``audit step:`` log
lines) and from a ``sitecustomize`` that records when each Python process starts: JVM start,
driver Python imports, SparkContext start, SQL session, loader state, monitoring, distinct
counts, attribution (candidates, reconciliation, missing-id samples), report (revision,
JSON lines, HTML), SparkContext stop, JVM exit. CPU seconds are those of the whole process
tree (``RUSAGE_CHILDREN``). Prints the machine, the load average at start and end, a table
per variant (median of the repeats) and the ratio after/before.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_load_startup import (  # noqa: E402  (the same log profile, timestamps and machine facts)
    LOG4J2, SITECUSTOMIZE, _TS, _epoch, extract_ref, loadavg, machine, python_starts,
)

VARIANTS = ("before", "after", "before-c1", "after-c1")
C1 = "-XX:TieredStopAtLevel=1"
PHASES = (
    ("jvm", "JVM start (spark-submit to driver Python)"),
    ("driver", "driver Python imports"),
    ("context", "SparkContext start"),
    ("session", "SQL session to the audit's first step"),
    ("state", "loader state"),
    ("monitoring", "monitoring"),
    ("counts", "distinct counts"),
    ("attribution", "attribution + reconcile + samples"),
    ("report", "report (revision, JSON lines, HTML)"),
    ("stop", "SparkContext stop"),
    ("exit", "JVM exit"),
)
MARKS = {
    "context_start": "SparkContext: Running Spark version",
    "context_ready": "BlockManager: Initialized BlockManager",
    "state": "ingest.audit.job: audit step: loader state ...",
    "monitoring": "ingest.audit.job: audit step: monitoring ...",
    "monitoring_done": "ingest.audit.job: audit step: monitoring done",
    "counts_done": "ingest.audit.job: audit step: distinct counts done",
    "samples_done": "ingest.audit.job: audit step: missing-id samples done",
    "stopping": "SparkContext: SparkContext is stopping",
    "stopped": "SparkContext: Successfully stopped SparkContext",
}
W = 600_000
SESSIONS = 3
LOST = 5


def build(root: Path, count: int, topics: int, fmt: str) -> tuple[int, int]:
    """A destination holding ``count`` events of one hour and their monitoring; returns [from, to) in ms."""
    from tests.audit import synth

    dest = synth.Destination(root, fmt)
    names = [f"topic-{i}" for i in range(topics)]
    cells = [(t, s, w) for t in names for s in range(SESSIONS) for w in range(6)]
    per, extra = divmod(count, len(cells))
    batches: dict[str, list[dict]] = {t: [] for t in names}
    mons, report_seq, seq = [], {}, {}
    for i, (topic, s, w) in enumerate(cells):
        session = f"{topic}-s{s}"
        n = per + (1 if i < extra else 0)
        first = seq.get(session, 0)
        seq[session] = first + n
        lost = LOST if (topic, s, w) == (names[0], 0, 2) else 0
        batches[topic] += synth.events(session, range(first + lost, first + n), synth.T0 + w * W + lost)
        report_seq[session] = report_seq.get(session, 0) + 1
        mons.append(synth.mon(session, topic, synth.T0 + w * W, report_seq=report_seq[session], acked=n,
                              seq_min=first, seq_max=first + n - 1))
    dest.load(batches)
    dest.load({synth.AUDIT_TOPIC: mons})
    return synth.T0, synth.T0 + 6 * W


def marks(output: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in output.splitlines():
        m = _TS.match(line)
        if not m:
            continue
        for name, pat in MARKS.items():
            if name not in out and pat in line:
                out[name] = _epoch(m.group(1))
    return out


def report_rows(path: Path) -> list[dict]:
    """The report's rows without what differs between runs (run id, audit time, the figures: seconds)."""
    rows = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        for key in ("audit_run_id", "run_id", "audited_at_ms", "audited_at", "figures"):
            row.pop(key, None)
        rows.append(row)
    return rows


def run_once(tree: Path, conf: Path, rng: tuple[int, int], work: Path, label: str, java_opts: str,
             env_base: dict) -> dict:
    starts = work / f"{label}.starts"
    report = work / f"{label}.jsonl"
    env = dict(env_base, PYTHONPATH=f"{work / 'site'}{os.pathsep}{tree}", BENCH_PY_STARTS=str(starts))
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", "--driver-java-options",
           f"-Dlog4j2.configurationFile=file:{work / 'log4j2.properties'} {java_opts}".strip(),
           str(tree / "jobs" / "audit.py"), "--config", str(conf), "--from", str(rng[0]), "--to", str(rng[1]),
           "--report", str(report), "--run-id", label.replace("-", "_")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    t_end = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = r.stdout + "\n" + r.stderr
    (work / f"{label}.out").write_text(output)
    if r.returncode not in (0, 3) or not report.exists():
        raise RuntimeError(f"{label}: exit {r.returncode}\n{output[-4000:]}")
    m = marks(output)
    driver = next((t for t, c in python_starts(starts) if "jobs/audit.py" in c), None)
    points = [t0, driver, m.get("context_start"), m.get("context_ready"), m.get("state"), m.get("monitoring"),
              m.get("monitoring_done"), m.get("counts_done"), m.get("samples_done"), m.get("stopping"),
              m.get("stopped"), t_end]
    phases = {}
    for (key, _), a, b in zip(PHASES, points, points[1:]):
        phases[key] = round(b - a, 2) if a is not None and b is not None else None
    return {"wall_s": round(t_end - t0, 2),
            "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
            "exit_code": r.returncode, "rows": report_rows(report), "phases": phases}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=3)
    ap.add_argument("--format", choices=("parquet", "avro"), default="parquet")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--ref", default="18c4b17", help="git commit of the 'before' code")
    ap.add_argument("--variants", default="before,after,after-c1",
                    help="comma list of before, after, before-c1, after-c1")
    ap.add_argument("--json", action="store_true", help="print the raw results as JSON too")
    args = ap.parse_args()
    variants = args.variants.split(",")
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variant(s) {bad}; known: {', '.join(VARIANTS)}")
    info = machine()
    load_start = loadavg()
    print(f"machine: nproc {info['nproc']}, {info['cpu']}, {info['ram_gb']} GB RAM, Python {info['python']}")
    print(f"load average at start: {load_start}")
    work = Path(tempfile.mkdtemp(prefix="bench-audit-startup-"))
    results: dict[str, list[dict]] = {v: [] for v in variants}
    try:
        (work / "site").mkdir()
        (work / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (work / "log4j2.properties").write_text(LOG4J2)
        trees = {"after": REPO}
        if any(v.startswith("before") for v in variants):
            trees["before"] = extract_ref(args.ref, work / "ref")
        rng = build(work / "dest", args.count, args.topics, args.format)
        conf = work / "audit.properties"
        conf.write_text(f"destination={work / 'dest'}\n")
        print(f"{args.count:,} events, {args.topics} topics, {args.format}, one hour; "
              f"spark-submit --master local[2] jobs/audit.py")
        env_base = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        for k in ("SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS", "INGEST_FAULTS"):
            env_base.pop(k, None)
        for i in range(args.repeat):
            for v in (variants if i % 2 == 0 else variants[::-1]):
                res = run_once(trees[v.split("-")[0]], conf, rng, work, f"{v}-{i}", C1 if v.endswith("-c1") else "",
                               env_base)
                results[v].append(res)
                print(f"  {v} run {i + 1}: {res['wall_s']} s wall, {res['cpu_s']} s CPU, exit {res['exit_code']}, "
                      f"load {loadavg()}", flush=True)
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    first = next(iter(results.values()))[0]
    for v, runs in results.items():
        for r in runs:
            if (r["exit_code"], r["rows"]) != (first["exit_code"], first["rows"]):
                raise RuntimeError(f"{v}: exit code or report rows differ from {variants[0]}'s first run")
    loaded = sum(r.get("loaded_rows") or 0 for r in first["rows"] if r.get("row_type") != "producer")
    print(f"every run: exit code {first['exit_code']}, the same {len(first['rows'])} report rows "
          f"({loaded:,} loaded rows counted)")
    print(f"load average at end: {loadavg()}")
    print(f"\nmedian of {args.repeat} run(s), seconds")
    print(f"{'phase':<44}" + "".join(f"{v:>11}" for v in variants))

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
        base, base_cpu = (med([r[k] for r in results["before"]]) for k in ("wall_s", "cpu_s"))
        for v in [x for x in variants if x != "before"]:
            wall, cpu = (med([r[k] for r in results[v]]) for k in ("wall_s", "cpu_s"))
            print(f"ratio {v}/before: wall {wall / base:.2f}, CPU {cpu / base_cpu:.2f}")
    for v in variants:
        if v.startswith("after"):
            wall = med([r["wall_s"] for r in results[v]])
            print(f"aim <= 15 s wall, {v}: {'met' if wall <= 15 else 'not met'} ({wall} s; "
                  f"load average {load_start} at start, {loadavg()} at end)")
    if args.json:
        print(json.dumps({"machine": info, "load_start": load_start, "load_end": loadavg(),
                          "results": {v: [{k: x for k, x in r.items() if k != "rows"} for r in rs]
                                      for v, rs in results.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
