"""One hourly load over many partitions: where its time goes, how its tasks spread, what it leaves.

    .venv/bin/python bench/bench_load_scale.py [--topics 20] [--events 2000] [--plan-repeat 3]
                     [--ref 18c4b17] [--master 'local-cluster[2,1,1024]'] [--no-load] [--no-audit] [--json]

Starts ZooKeeper, two broker processes and a registry (tests/harness/scale_cluster.py), creates
``--topics`` topics of 10 partitions each, replicated 0.7 and Kafka-format in turn (replication
factor 2), and produces ``--events`` page views to every partition, stamped in the hour that began
two hours ago (a closed hour: the audit judges it and compaction merges it right away), with the
producer's monitoring events (the audit topic) up to the hour's end (its idle windows as heartbeats,
as of a producer up all hour). Then:

1. **Planning side by side**: discovery plus the plan of a first run into an empty destination,
   done by the code of ``--ref`` (``git archive`` into a temp dir) and by this tree, alternating,
   ``--plan-repeat`` times each, each in a fresh Python process; prints the median of each and
   the ratio this/ref.
2. **One load** of everything with ``spark-submit --master MASTER jobs/load.py`` (this tree), from
   which it prints the run's stages (prepare, plan, execute incl. the SparkContext start, commit),
   the planning share of the run, the task count and their spread (duration of the slowest task
   against the median), the commit's manifest and the loader state's size, the run record's size.
   The load takes the audit topic too, as the hourly DAG's does. The bench refuses a load that
   committed any other number of rows of the topics than was produced.
3. **The audit of that hour** as the hourly DAG runs it (``spark-submit jobs/audit.py --from HOUR
   --to HOUR+1h --run-id ID``, conf/audit.properties' keys): its verdict, the steps it timed and its
   counts over the hour (acknowledged, loaded distinct, missing); the bench refuses any verdict but
   OK with every produced event loaded.
4. **The compaction of that hour** (``spark-submit jobs/compact.py --audit-run ID``, one Spark task
   per topic-hour, gated on the audit's revision): hours compacted, files, rows, its run's seconds
   (plan, merge tasks, commit: from its record under ``_compaction/runs/``) and the spark-submit wall;
   beside it, before it, the plain streaming pyarrow rewrite of the same files, topic-hour by
   topic-hour in one process (``stream`` of bench/bench_compaction.py), and the throughput ratio.
   The bench refuses a compaction that did not merge every topic's hour into the same rows.

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
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_compaction import stream  # noqa: E402
from ingest.audit.config import DEFAULT_AUDIT_TOPIC  # noqa: E402
from ingest.loader.state import LoaderState  # noqa: E402
from ingest.storage import open_storage  # noqa: E402
from tests.harness.scale_cluster import PARTITIONS, PastHourClock, ScaleCluster, topic_names  # noqa: E402

HOUR_MS = 3_600_000

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


def spark_submit(job: str, args: list[str], master: str, work: Path) -> tuple[subprocess.CompletedProcess, float]:
    """``spark-submit --master MASTER jobs/<job>.py ARGS`` of this tree; output kept in ``work/<job>.out``."""
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": py, "PYSPARK_DRIVER_PYTHON": py}
    opts = "-XX:TieredStopAtLevel=1"
    cmd = [str(Path(py).parent / "spark-submit"), "--master", master, "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.executorEnv.PYSPARK_PYTHON={py}", "--driver-java-options", opts,
           "--conf", f"spark.executor.extraJavaOptions={opts}", str(REPO / "jobs" / f"{job}.py"), *args]
    began = time.monotonic()
    r = subprocess.run(cmd, env=env, cwd=str(REPO), capture_output=True, text=True, timeout=7200)
    wall = time.monotonic() - began
    (work / f"{job}.out").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    return r, wall


def run_load(cluster: ScaleCluster, dest: Path, master: str, work: Path) -> tuple[dict, float]:
    conf = work / "loader.properties"
    conf.write_text(f"destination={dest}\nzk.connect={cluster.zk_connect}\nregistry.url={cluster.registry.url}\n"
                    f"topics=scale-.*|{DEFAULT_AUDIT_TOPIC}\nformat=parquet\n")
    r, wall = spark_submit("load", ["--config", str(conf)], master, work)
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


def run_audit(cluster: ScaleCluster, dest: Path, master: str, work: Path, hour_ms: int) -> dict:
    """The audit of ``[hour_ms, hour_ms + 1 h)`` as the DAG runs it; its verdict, steps and counts."""
    conf = work / "audit.properties"
    conf.write_text((REPO / "conf" / "audit.properties").read_text()
                    + f"\ndestination={dest}\nregistry.url={cluster.registry.url}\n")
    report = work / "audit.jsonl"
    run_id = "bench-load-scale-audit"
    r, wall = spark_submit("audit", ["--config", str(conf), "--from", str(hour_ms), "--to", str(hour_ms + HOUR_MS),
                                     "--report", str(report), "--run-id", run_id], master, work)
    if r.returncode not in (0, 3, 4, 5) or not report.exists():
        raise RuntimeError(f"the audit failed (exit {r.returncode}); output in {work / 'audit.out'}:\n"
                           f"{r.stderr[-3000:]}")
    rows = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    windows = [w for w in rows if w["row_type"] == "window" and w["topic"].startswith("scale-")]
    verdict = next(w for w in rows if w["row_type"] == "verdict")
    figures = next((ln for ln in r.stdout.splitlines() if ln.startswith(f"audit {run_id} read ")), "")
    return {"exit": r.returncode, "wall_s": round(wall, 1), "run_id": run_id, "verdict": verdict["verdict"],
            "status": verdict["status"], "figures_line": figures,
            "topics": len({w["topic"] for w in windows}), "windows": len(windows),
            "judged": sum(1 for w in windows if w["judged"]),
            "statuses": dict(sorted(Counter(w["status"] for w in windows).items())),
            "acked": sum(w["produced_acked"] or 0 for w in windows),
            "loaded_distinct": sum(w["loaded_distinct"] or 0 for w in windows),
            "missing": sum(w["missing"] or 0 for w in windows)}


def hour_paths(dest: Path, hour_ms: int) -> dict[str, list[str]]:
    """The committed data files of every scale topic's ``hour_ms`` hour, by topic."""
    state = LoaderState.load(open_storage(str(dest)))
    dt = time.strftime("%Y-%m-%d", time.gmtime(hour_ms / 1000))
    hour = time.gmtime(hour_ms / 1000).tm_hour
    out: dict[str, list[str]] = {}
    for f in state.files(kind="data"):
        if f.topic.startswith("scale-") and f.dt == dt and f.hour is not None and int(f.hour) == hour:
            out.setdefault(f.topic, []).append(state.full_path(f))
    return {t: sorted(ps) for t, ps in out.items()}


def rewrite_reference(paths: dict[str, list[str]], out_dir: Path) -> float:
    """Seconds of the plain streaming rewrite (bench/bench_compaction.py ``stream``) of every topic's hour."""
    out_dir.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    for i, (topic, ps) in enumerate(sorted(paths.items())):
        stream(ps, "parquet", out_dir / f"{i}.parquet")
    return time.perf_counter() - began


def run_compaction(dest: Path, master: str, work: Path, audit_run: str) -> dict:
    """``jobs/compact.py`` gated on the audit's revision; its outcomes and the seconds of its run."""
    conf = work / "compaction.properties"
    conf.write_text((REPO / "conf" / "compaction.properties").read_text() + f"\ndestination={dest}\n")
    summary = work / "compaction.json"
    r, wall = spark_submit("compact", ["--config", str(conf), "--audit-run", audit_run, "--summary", str(summary)],
                           master, work)
    if r.returncode != 0:
        raise RuntimeError(f"the compaction failed (exit {r.returncode}); output in {work / 'compact.out'}:\n"
                           f"{r.stderr[-3000:]}")
    hours = json.loads(summary.read_text())["hours"]
    [record] = [json.loads(p.read_text()) for p in (dest / "_compaction" / "runs").glob("*.json")]
    done = [h for h in hours if h["action"] == "compacted"]
    return {"wall_s": round(wall, 1), "run_s": (record["finished_ms"] - record["started_ms"]) / 1000,
            "hours": len(hours), "compacted": len(done), "compacted_topics": sorted(h["hour"].split("/")[0] for h in done),
            "files_in": sum(h["files_in"] for h in done), "files_out": sum(h["files_out"] for h in done),
            "rows_in": sum(h["rows_in"] for h in done), "rows_out": sum(h["rows_out"] for h in done),
            "bytes_in": sum(h["bytes_in"] for h in done), "bytes_out": sum(h["bytes_out"] for h in done),
            "skipped": sorted(f"{h['hour']}: {h['reason']}" for h in hours if h["action"] != "compacted")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--topics", type=int, default=20, help="topics of 10 partitions (default 20: 200 partitions)")
    ap.add_argument("--events", type=int, default=2000, help="events per partition")
    ap.add_argument("--plan-repeat", type=int, default=3)
    ap.add_argument("--ref", default=DEFAULT_REF, help="the code planning is compared with (git ref)")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--no-load", action="store_true", help="planning only, no Spark load")
    ap.add_argument("--no-audit", action="store_true", help="no audit and compaction after the load")
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
        hour_ms = (int(time.time() * 1000) // HOUR_MS - 2) * HOUR_MS   # a closed hour: the audit judges it
        sent = cluster.produce(topics, args.events, monitoring=True, clock=PastHourClock(hour_ms + 60_000),
                               close_at_ms=hour_ms + HOUR_MS - 1)
        produced = sum(sent.values())
        print(f"{len(topics)} topics x {PARTITIONS} partitions = {out['partitions']} partitions, "
              f"{produced} events produced in {time.monotonic() - began:.1f} s, stamped in the hour "
              f"{time.strftime('%Y-%m-%d %H:00', time.gmtime(hour_ms / 1000))} UTC, with monitoring events")

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
            loaded = sum(p["messages"] for p in record["partitions"] if p["topic"].startswith("scale-"))
            if loaded != produced:
                raise RuntimeError(f"the load committed {loaded} rows of the topics, {produced} were produced")
            fig = load_figures(record, dest, wall)
            out["load"] = fig
            s = fig["stage_seconds"]
            print(f"\nload: spark-submit --master {args.master} jobs/load.py, {produced} events committed "
                  f"(and {fig['messages'] - produced} monitoring events of {DEFAULT_AUDIT_TOPIC})")
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
            print(f"  load average after the load: {loadavg()}")

        if not args.no_load and not args.no_audit:
            a = run_audit(cluster, dest, args.master, work, hour_ms)
            out["audit"] = a
            print(f"\naudit: spark-submit --master {args.master} jobs/audit.py of the hour, exit {a['exit']}, "
                  f"spark-submit wall {a['wall_s']:.1f} s")
            print(f"  {a['figures_line']}")
            print(f"  {a['topics']} topics, {a['windows']} windows ({a['judged']} judged): "
                  + ", ".join(f"{k} {v}" for k, v in a["statuses"].items()))
            print(f"  acknowledged {a['acked']}, loaded distinct {a['loaded_distinct']}, missing {a['missing']}")
            print(f"  verdict: {a['verdict']}")
            print(f"  load average after the audit: {loadavg()}")
            if (a["exit"], a["status"], a["acked"], a["loaded_distinct"], a["missing"]) != (0, "OK", produced,
                                                                                          produced, 0):
                raise RuntimeError(f"the audit did not find every produced event loaded ({produced}): {a}")

            paths = hour_paths(dest, hour_ms)
            in_bytes = sum(os.path.getsize(p) for ps in paths.values() for p in ps)
            ref_s = rewrite_reference(paths, work / "rewrite")
            c = run_compaction(dest, args.master, work, a["run_id"])
            c.update(reference_s=ref_s, reference_bytes_in=in_bytes)
            out["compaction"] = c
            print(f"\ncompaction: spark-submit --master {args.master} jobs/compact.py --audit-run {a['run_id']}, "
                  f"spark-submit wall {c['wall_s']:.1f} s")
            print(f"  {c['compacted']} of {c['hours']} topic-hours compacted: files {c['files_in']} -> "
                  f"{c['files_out']}, rows {c['rows_in']} -> {c['rows_out']}, bytes {c['bytes_in']} -> {c['bytes_out']}")
            for line in c["skipped"]:
                print(f"  not compacted: {line}")
            rows_in = c["rows_in"]
            print(f"  {'':38}{'seconds':>9}{'rows/s':>12}{'MB/s in':>9}")
            print(f"  {'compaction run (plan, tasks, commit)':38}{c['run_s']:>9.2f}{rows_in / c['run_s']:>12,.0f}"
                  f"{in_bytes / c['run_s'] / 1e6:>9.1f}")
            print(f"  {'plain rewrite, stream, 1 process':38}{ref_s:>9.2f}{rows_in / ref_s:>12,.0f}"
                  f"{in_bytes / ref_s / 1e6:>9.1f}")
            print(f"  compaction/stream throughput: {ref_s / c['run_s']:.2f}")
            print(f"  load average after the compaction: {loadavg()}")
            expect = sorted(topics)
            if (c["compacted_topics"], c["rows_in"], c["rows_out"], c["files_in"]) != (
                    expect, produced, produced, sum(len(ps) for ps in paths.values())):
                raise RuntimeError(f"the compaction did not merge every topic's hour ({len(expect)} topics, "
                                   f"{produced} rows): {c}")
    finally:
        cluster.close()
        print(f"\nload average at end: {loadavg()}")
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
