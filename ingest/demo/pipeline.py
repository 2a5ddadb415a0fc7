"""The demo pipeline, step by step, on embedded defaults in a fresh working directory.

Steps: ZooKeeper (if ``/usr/share/java/zookeeper.jar`` exists; otherwise a
static broker list, said plainly) -> two brokers -> the schema registry ->
producers of page views, clicks and service metrics with monitoring events for
``--duration`` seconds -> a first load while they publish and a second one after
(two hourly runs in miniature) -> the audit -> compaction -> summary.

Demo-only settings, each said in the output: 10-second monitoring windows with a
5-second grace (production: 10 minutes and 30 minutes), and compaction of the
still-open hour without waiting for the audit's verdict (production compacts
only closed hours the audit judged complete).
"""
from __future__ import annotations

import json
import logging
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import ingest
from ingest.demo.processes import Supervisor, free_port
from ingest.demo.summary import render
from ingest.errors import DemoError
from ingest.jobs_support import EXIT_NOTHING_JUDGED
from ingest.loader.state import LoaderState
from ingest.storage import open_storage

log = logging.getLogger(__name__)

ZK_JAR = Path("/usr/share/java/zookeeper.jar")
ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/*"
MARKER = ".ingest-demo"
WINDOW_MS = 10_000
GRACE_MS = 5_000
TOPICS = (  # topic, schema, share of --rate
    ("page-views", "page_view", 1.0),
    ("clicks", "click", 0.4),
    ("service-metrics", "service_metric", 0.1),
)
KAFKA_TOPIC = ("orders", 0.2)
"""Published with confluent-kafka by a foreign service (ingest/demo/kafka_orders.py, share of --rate): no
monitoring events, judged from the brokers' counts."""
SPARK_TIMEOUT_S = 240
MIN_DURATION_FOR_TWO_LOADS_S = 20


@dataclass(frozen=True)
class DemoOptions:
    workdir: str = "./demo-work"
    duration_s: float = 60.0
    rate: float = 100.0
    fmt: str = "parquet"
    use_zookeeper: bool = True


def say(text: str = "") -> None:
    print(text, flush=True)


def project_root() -> Path:
    """The checkout holding ``jobs/`` (the package is installed editable from it)."""
    root = Path(ingest.__file__).resolve().parents[1]
    if not (root / "jobs" / "load.py").exists():
        raise DemoError(f"jobs/load.py not found next to the ingest package ({root}); run the demo from a "
                        f"checkout installed with scripts/bootstrap.sh")
    return root


def spark_submit() -> str:
    candidate = Path(sys.executable).with_name("spark-submit")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("spark-submit")
    if not found:
        raise DemoError("spark-submit not found next to this python or on PATH; install pyspark (scripts/bootstrap.sh)")
    return found


def fresh_workdir(path: str) -> Path:
    work = Path(path).resolve()
    if work.exists() and any(work.iterdir()):
        if not (work / MARKER).exists():
            raise DemoError(f"--workdir {work} exists, is not empty and is not a previous demo's directory; "
                            f"choose another --workdir")
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / MARKER).write_text("created by `ingest demo`; the next demo run replaces this directory\n")
    return work


def write_properties(path: Path, values: dict[str, object], header: str) -> Path:
    lines = [f"# {header}"] + [f"{k}={v}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


class Demo:
    """One demo run; :meth:`run` is the whole thing, ``sup.close()`` stops what it started."""

    def __init__(self, opts: DemoOptions) -> None:
        self.opts = opts
        self.root = project_root()
        self.work = fresh_workdir(opts.workdir)
        self.py = sys.executable
        self.spark_submit = spark_submit()
        self.sup = Supervisor(self.work / "logs", env={
            **__import__("os").environ, "PYSPARK_PYTHON": self.py, "PYSPARK_DRIVER_PYTHON": self.py,
        })
        self.warehouse = self.work / "warehouse"
        self.reports = self.work / "reports"
        self.reports.mkdir()
        self.zk_connect: str | None = None
        self.brokers: list[str] = []
        self.kafka_listeners: list[str] = []   # host:port of each broker's Kafka listener
        self.registry_url = ""
        self.produced: dict[str, dict] = {}
        self.step_times: dict[str, float] = {}

    # --- services ------------------------------------------------------------

    def start_zookeeper(self) -> None:
        if not self.opts.use_zookeeper:
            say("ZooKeeper: not used (--no-zookeeper); brokers are given to clients as a static broker list")
            return
        if not (ZK_JAR.exists() and shutil.which("java")):
            say(f"ZooKeeper: NOT INSTALLED ({ZK_JAR} missing), so the demo uses a static broker list instead; "
                f"install it with `apt-get install zookeeper` to see broker discovery")
            return
        port = free_port()
        zk_dir = self.work / "zookeeper"
        (zk_dir / "data").mkdir(parents=True)
        cfg = zk_dir / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ndataDir={zk_dir / 'data'}\nclientPort={port}\n"
                       "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n")
        child = self.sup.start("zookeeper", ["java", "-Xmx256m", f"-Dzookeeper.log.dir={zk_dir}", "-cp", ZK_CLASSPATH,
                                             "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)])
        self.sup.wait_port(child, port, timeout_s=60)
        self.zk_connect = f"127.0.0.1:{port}"
        say(f"ZooKeeper: 127.0.0.1:{port} (brokers register under /brokers; clients discover them there)")

    def start_brokers(self, count: int = 2) -> None:
        for broker_id in range(count):
            port = free_port()
            props = {
                "brokerid": broker_id, "hostname": "127.0.0.1", "port": port,
                "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                "log.dir": self.work / f"broker-{broker_id}" / "logs", "num.partitions": 2,
                "log.flush.interval": 100, "log.default.flush.interval.ms": 200,
                "log.default.flush.scheduler.interval.ms": 200,
                "enable.zookeeper": "true" if self.zk_connect else "false",
                # broker-tier counts of what producers hand the Kafka listener (the orders topic's audit)
                "audit.counts.enable": "true", "schema.registry.url": self.registry_url,
                "audit.counts.window.ms": WINDOW_MS, "audit.counts.interval.ms": 1000,
            }
            if self.zk_connect:
                props["zk.connect"] = self.zk_connect
            cfg = write_properties(self.work / f"broker-{broker_id}.properties", props, f"demo broker {broker_id}")
            child = self.sup.start(f"broker-{broker_id}", [self.py, "-m", "ingest.cli", "broker", "start", "--config", str(cfg)])
            self.sup.wait_port(child, port, timeout_s=60)
            self.brokers.append(f"127.0.0.1:{port}")
            self.kafka_listeners.append(props["listeners"].removeprefix("PLAINTEXT://"))
        say(f"brokers: {', '.join(self.brokers)} (2 partitions per topic each)")

    def start_registry(self) -> None:
        port = free_port()
        child = self.sup.start("registry", [self.py, "-m", "ingest.cli", "registry", "start", "--port", str(port),
                                            "--store", str(self.work / "registry")])
        self.sup.wait_port(child, port, timeout_s=60)
        self.registry_url = f"http://127.0.0.1:{port}"
        say(f"schema registry: {self.registry_url}")

    def discovery_args(self) -> list[str]:
        if self.zk_connect:
            return ["--zk", self.zk_connect]
        return ["--brokers", ",".join(f"{i}:{b}" for i, b in enumerate(self.brokers))]

    # --- jobs ----------------------------------------------------------------

    def start_producers(self) -> list:
        children = []
        for topic, schema, share in TOPICS:
            rate = max(1.0, self.opts.rate * share)
            count = max(1, int(rate * self.opts.duration_s))
            children.append(self.sup.start(f"produce-{topic}", [
                self.py, "-m", "ingest.cli", "produce", *self.discovery_args(), "--registry", self.registry_url,
                "--topic", topic, "--schema", schema, "--count", str(count), "--rate", str(rate),
                "--window-ms", str(WINDOW_MS), "--json"]))
        topic, share = KAFKA_TOPIC
        rate = max(1.0, self.opts.rate * share)
        children.append(self.sup.start(f"produce-{topic}", [
            self.py, "-m", "ingest.demo.kafka_orders", "--bootstrap", ",".join(self.kafka_listeners),
            "--registry", self.registry_url, "--topic", topic, "--count", str(max(1, int(rate * self.opts.duration_s))),
            "--rate", str(rate)]))
        say(f"a foreign service: {topic} with confluent-kafka's AvroSerializer through the Kafka listeners, no "
            "monitoring events: the brokers count what they append (audit-broker)")
        say(f"producers: {', '.join(t for t, _, _ in TOPICS)} for {self.opts.duration_s:.0f}s "
            f"(~{self.opts.rate:.0f} page views/s), monitoring events every {WINDOW_MS // 1000}s window "
            f"to audit-monitoring")
        return children

    def configs(self) -> dict[str, Path]:
        common = {"destination": self.warehouse}
        loader = {**common, "registry.url": self.registry_url, "format": self.opts.fmt,
                  "bootstrap.servers": ",".join(self.kafka_listeners)}
        if self.zk_connect:
            loader["zk.connect"] = self.zk_connect
        else:
            loader["brokers"] = ",".join(self.brokers)
        return {
            "loader": write_properties(self.work / "loader.properties", loader, "demo loader"),
            "audit": write_properties(self.work / "audit.properties", {
                **common, "window.ms": WINDOW_MS, "grace.ms": GRACE_MS}, "demo audit: 10 s windows, 5 s grace"),
            "compaction": write_properties(self.work / "compaction.properties", {
                **common, "compaction.require.audit": "false", "compaction.include.open.hours": "true",
                "compaction.target.bytes": 64 * 1024 * 1024}, "demo compaction: the open hour, no audit gate"),
        }

    def submit(self, name: str, app: str, args: list[str], ok_codes=(0,)) -> int:
        started = time.monotonic()
        child = self.sup.start(name, [self.spark_submit, "--master", "local[2]", "--driver-memory", "1g",
                                      "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4",
                                      str(self.root / "jobs" / app), *args], cwd=self.work)
        code = self.sup.wait(child, SPARK_TIMEOUT_S, ok_codes)
        self.step_times[name] = time.monotonic() - started
        return code

    def run(self) -> int:
        t0 = time.monotonic()
        say(f"ingest demo: working directory {self.work}")
        self.start_zookeeper()
        self.start_registry()   # before the brokers: they register the broker-tier counts' schema with it
        self.start_brokers()
        start_ms = int(time.time() * 1000)
        producers = self.start_producers()
        cfg = self.configs()
        if self.opts.duration_s >= MIN_DURATION_FOR_TWO_LOADS_S:
            # a first hourly load while the producers publish (they keep going meanwhile)
            time.sleep(min(self.opts.duration_s / 2, 20))
            say("load #1 (spark-submit jobs/load.py) while producers publish ...")
            self.submit("load-1", "load.py", ["--config", str(cfg["loader"])])
            say(f"load #1 committed in {self.step_times['load-1']:.0f}s")
        else:
            say(f"(--duration under {MIN_DURATION_FOR_TWO_LOADS_S}s: one load after the producers instead of two)")
        for child in producers:
            self.sup.wait(child, self.opts.duration_s + 120, ok_codes=(0, 1))
            self.produced[child.name.removeprefix("produce-")] = _last_json(child.log_path)
        say("producers finished; waiting for the last monitoring window to close ...")
        end_ms = int(time.time() * 1000)
        window_end = (end_ms // WINDOW_MS + 1) * WINDOW_MS
        time.sleep(max(0.0, (window_end + GRACE_MS - int(time.time() * 1000)) / 1000))
        say("load #2 (spark-submit jobs/load.py) ...")
        self.submit("load-2", "load.py", ["--config", str(cfg["loader"])])
        say(f"load #2 committed in {self.step_times['load-2']:.0f}s")
        report = self.reports / "audit.jsonl"
        say("audit (spark-submit jobs/audit.py) ...")
        audit_code = self.submit("audit", "audit.py", [
            "--config", str(cfg["audit"]), "--from", iso(start_ms // WINDOW_MS * WINDOW_MS),
            "--to", iso(window_end), "--report", str(report)], ok_codes=(0, 3, 4, EXIT_NOTHING_JUDGED))
        say(f"audit finished in {self.step_times['audit']:.0f}s (exit {audit_code})")
        files_before = _committed_files(self.warehouse)
        say("compaction (ingest compaction run: the code of jobs/compact.py without Spark's start-up) of the "
            "demo's hour; demo only: no audit gate, no grace ...")
        summary_path = self.reports / "compaction.json"
        self.sup.run("compact", [self.py, "-m", "ingest.cli", "compaction", "run", "--config", str(cfg["compaction"]),
                                 "--summary", str(summary_path)], timeout_s=SPARK_TIMEOUT_S)
        files_after = _committed_files(self.warehouse)

        say()
        say(render(self.work, self.warehouse, report, self.produced, files_before, files_after,
                   summary_path, time.monotonic() - t0, audit_code))
        return 0 if audit_code == 0 else audit_code


def _last_json(path: Path) -> dict:
    for line in reversed(path.read_text(errors="replace").splitlines()):
        if line.startswith("{") and '"acknowledged"' in line:
            return json.loads(line)
    return {}


def _committed_files(warehouse: Path) -> dict[str, int]:
    state = LoaderState.load(open_storage(str(warehouse)))
    out: dict[str, int] = {}
    for f in state.files():
        out[f.topic] = out.get(f.topic, 0) + 1
    return out


def run_demo(opts: DemoOptions, demo_class: type[Demo] = Demo) -> int:
    """Run the demo (``demo_class``: the topology); every started process is stopped on return, error,
    Ctrl-C or SIGTERM."""
    demo = demo_class(opts)

    def on_signal(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return demo.run()
    except KeyboardInterrupt:
        say("\ninterrupted: stopping everything the demo started ...")
        raise
    finally:
        demo.sup.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
        say(f"stopped {len(demo.sup.children)} process(es) the demo started; logs in {demo.work / 'logs'}")
