"""One hourly load over many partitions: where its time goes, how its tasks spread, what it leaves.

    .venv/bin/python bench/bench_load_scale.py [--topics 20] [--events 2000] [--plan-repeat 3]
                     [--ref 18c4b17] [--master 'local-cluster[2,1,1024]'] [--no-load] [--json]

Starts ZooKeeper, two broker processes and a registry (tests/harness/scale_cluster.py), creates
``--topics`` topics of 10 partitions each, replicated 0.7 and Kafka-format in turn (replication
factor 2), and produces ``--events`` page views to every partition. Then:

1. **Planning side by side**: discovery plus the plan of a first run into an empty destination,
   done by the code of ``--ref`` (``git archive`` into a temp dir) and by this tree, alternating,
   ``--plan-repeat`` times each, each in a fresh Python process; prints the median of each and
   the ratio this/ref.
2. **One load** of everything with ``spark-submit --master MASTER jobs/load.py`` (this tree), from
   which it prints the run's stages (prepare, plan, execute incl. the SparkContext start, commit),
   the planning share of the run, the task count and their spread (duration of the slowest task
   against the median), the commit's manifest and the loader state's size, the run record's size.
   The bench refuses a load that committed any other number of rows than was produced.

Prints the machine and the load average at start and end. Never part of a test run's timing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.harness.scale_cluster import PARTITIONS, ScaleCluster, topic_names  # noqa: E402

#: the commit before the loader's offset questions were batched per broker
DEFAULT_REF = "18c4b17"

#: run in a fresh process under one tree: discovery + the plan of a first run, timed
PLAN_SNIPPET = """
import json, sys, time
t0 = time.monotonic()
from ingest.clock import SYSTEM_CLOCK
from ingest.loader import discover, job
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
config = LOADER_CONFIG.parse(json.loads(sys.argv[1]), source="bench")
t1 = time.monotonic()
found = discover.discover_all(config)
t2 = time.monotonic()
state = LoaderState.load(open_storage(config["destination"]))
plan = job.make_plan(config, state, found.snapshots, "bench", SYSTEM_CLOCK, left_out=found.left_out)
t3 = time.monotonic()
import hashlib
digest = hashlib.sha256(repr(sorted((s.key, s.kind, s.earliest, s.latest, s.host, s.port)
                                    for s in found.snapshots)).encode()).hexdigest()[:16]
print(json.dumps({"discover_s": t2 - t1, "plan_s": t3 - t2, "partitions": len(plan.partitions),
                  "tasks": len(plan.tasks), "left_out": len(plan.left_out), "snapshots": digest}))
"""


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    mem = next((ln.split()[1] for ln in open("/proc/meminfo") if ln.startswith("MemTotal")), "0")
    return (f"machine: nproc {os.cpu_count()} ({cpu}), {int(mem) / 1e6:.1f} GB RAM, Linux {platform.release()}, "
            f"Python {platform.python_version()}")


def checkout(ref: str, into: Path) -> Path:
    """The tree of ``ref`` under ``into`` (``git archive``)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def time_plan(tree: Path, raw_config: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run([sys.executable, "-c", PLAN_SNIPPET, json.dumps(raw_config)], capture_output=True, text=True,
                       env=env, cwd=str(tree), timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"planning under {tree} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def dir_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``."""
    total = files = 0
    for p in path.rglob("*"):
        if p.is_file():
            total += p.stat().st_size
            files += 1
    return total, files


def run_load(cluster: ScaleCluster, dest: Path, master: str, work: Path) -> tuple[dict, float]:
    conf = work / "loader.properties"
    conf.write_text(f"destination={dest}\nzk.connect={cluster.zk_connect}\nregistry.url={cluster.registry.url}\n"
                    "topics=scale-.*\nformat=parquet\n")
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": py, "PYSPARK_DRIVER_PYTHON": py}
    opts = "-XX:TieredStopAtLevel=1"
    cmd = [str(Path(py).parent / "spark-submit"), "--master", master, "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.executorEnv.PYSPARK_PYTHON={py}", "--driver-java-options", opts,
           "--conf", f"spark.executor.extraJavaOptions={opts}", str(REPO / "jobs" / "load.py"), "--config", str(conf)]
    began = time.monotonic()
    r = subprocess.run(cmd, env=env, cwd=str(REPO), capture_output=True, text=True, timeout=7200)
    wall = time.monotonic() - began
    (work / "load.out").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"the load failed (exit {r.returncode}); output in {work / 'load.out'}:\n{r.stderr[-3000:]}")
    records = sorted((dest / "_ingest" / "runs").glob("*.json"))
    return json.loads(records[-1].read_text()), wall


def load_figures(record: dict, dest: Path, wall: float) -> dict:
    durations = sorted(p["duration_ms"] for p in record["partitions"] if p["tasks"])
    seconds = record["stage_seconds"]
    manifest = dest / "_ingest" / "commits" / f"{record['commit_seq']:012d}.json"
    state_bytes, state_files = dir_bytes(dest / "_ingest")
    run_record = next((dest / "_ingest" / "runs").glob(f"{record['run_id']}.json"))
    return {
        "wall_s": round(wall, 1), "duration_s": record["duration_ms"] / 1000, "stage_seconds": seconds,
        "plan_share": seconds["plan"] / (record["duration_ms"] / 1000),
        "tasks": record["totals"]["tasks"], "messages": record["totals"]["messages"],
        "task_ms_median": statistics.median(durations) if durations else None,
        "task_ms_p90": durations[int(0.9 * (len(durations) - 1))] if durations else None,
        "task_ms_max": durations[-1] if durations else None,
        "manifest_bytes": manifest.stat().st_size if manifest.exists() else None,
        "state_bytes": state_bytes, "state_files": state_files,
        "run_record_bytes": run_record.stat().st_size,
        "run_record_lines": run_record.read_text().count("\n") + 1,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--topics", type=int, default=20, help="topics of 10 partitions (default 20: 200 partitions)")
    ap.add_argument("--events", type=int, default=2000, help="events per partition")
    ap.add_argument("--plan-repeat", type=int, default=3)
    ap.add_argument("--ref", default=DEFAULT_REF, help="the code planning is compared with (git ref)")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--no-load", action="store_true", help="planning only, no Spark load")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    print(machine())
    print(f"load average at start: {loadavg()}")
    work = Path(tempfile.mkdtemp(prefix="bench-load-scale-"))
    cluster = ScaleCluster(work / "cluster")
    out: dict = {"topics": args.topics, "partitions": args.topics * PARTITIONS, "events_per_partition": args.events}
    try:
        cluster.start()
        print(f"cluster: ZooKeeper, brokers (pid {cluster.brokers[0].pid}) (pid {cluster.brokers[1].pid}), "
              f"registry {cluster.registry.url}")
        topics = topic_names(args.topics)
        cluster.create_topics(topics)
        began = time.monotonic()
        sent = cluster.produce(topics, args.events)
        produced = sum(sent.values())
        print(f"{len(topics)} topics x {PARTITIONS} partitions = {out['partitions']} partitions, "
              f"{produced} events produced in {time.monotonic() - began:.1f} s")

        ref_tree = checkout(args.ref, work / "ref")
        raw = {"zk.connect": cluster.zk_connect, "registry.url": cluster.registry.url, "topics": "scale-.*"}
        runs: dict[str, list[dict]] = {"ref": [], "this": []}
        for i in range(args.plan_repeat):
            for name, tree in (("ref", ref_tree), ("this", REPO)):
                runs[name].append(time_plan(tree, {**raw, "destination": str(work / f"plan-{name}-{i}")}))
        print(f"\nplanning a first run over {out['partitions']} partitions (median of {args.plan_repeat}, "
              f"fresh process each, alternating):")
        print(f"{'':22}{'ref ' + args.ref:>14}{'this tree':>14}{'this/ref':>10}")
        for key, title in (("discover_s", "discovery (offsets)"), ("plan_s", "plan (segments etc.)")):
            a = statistics.median(r[key] for r in runs["ref"])
            b = statistics.median(r[key] for r in runs["this"])
            out[f"ref_{key}"], out[f"this_{key}"] = a, b
            print(f"{title:22}{a:>13.3f}s{b:>13.3f}s{b / a if a else float('nan'):>10.2f}")
        for name in runs:
            tasks = {r["tasks"] for r in runs[name]}
            parts = {r["partitions"] for r in runs[name]}
            print(f"  {name}: {parts} partitions planned, {tasks} tasks, left out {[r['left_out'] for r in runs[name]]}")
        digests = {r["snapshots"] for rs in runs.values() for r in rs}
        if len(digests) != 1:
            raise RuntimeError(f"ref and this tree found different partitions or offsets: {runs}")
        print("  both found the same partitions, offsets and leaders")

        if not args.no_load:
            dest = work / "dest"
            record, wall = run_load(cluster, dest, args.master, work)
            if record["totals"]["messages"] != produced:
                raise RuntimeError(f"the load committed {record['totals']['messages']} rows, {produced} were produced")
            fig = load_figures(record, dest, wall)
            out["load"] = fig
            s = fig["stage_seconds"]
            print(f"\nload: spark-submit --master {args.master} jobs/load.py, {produced} events committed")
            print(f"  stages: prepare {s['prepare']:.2f} s, plan {s['plan']:.2f} s, execute {s['execute']:.2f} s "
                  f"(incl. SparkContext start), commit {s['commit']:.2f} s; run {fig['duration_s']:.1f} s, "
                  f"spark-submit wall {fig['wall_s']:.1f} s")
            print(f"  planning share of the run: {fig['plan_share']:.1%}")
            print(f"  tasks {fig['tasks']}: median {fig['task_ms_median']} ms, p90 {fig['task_ms_p90']} ms, "
                  f"max {fig['task_ms_max']} ms (max/median "
                  f"{fig['task_ms_max'] / max(1, fig['task_ms_median']):.1f})")
            print(f"  commit manifest {fig['manifest_bytes']} bytes; state under _ingest/ {fig['state_bytes']} bytes "
                  f"in {fig['state_files']} files; run record {fig['run_record_bytes']} bytes, "
                  f"{fig['run_record_lines']} lines")
    finally:
        cluster.close()
        print(f"\nload average at end: {loadavg()}")
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
