"""``ingest demo --topology datacenters``: the paper's deployment in miniature.

Steps: one ZooKeeper with a chroot per cluster (``/ingest-demo/dc1``, ``/dc2``,
``/offline``) -> two brokers in each datacenter cluster and one in the offline
cluster -> one schema registry shared by every datacenter (mirrored bytes carry
schema ids, so all clusters must agree on them) -> two mirror processes
(``ingest mirror --config``, one consumer group) pulling every topic from dc1
and dc2 into the offline cluster -> producers (``ingest produce``) of page views
and clicks in each datacenter, to that datacenter's cluster -> a latency probe
consuming the offline cluster -> the hourly load from the offline cluster (twice)
-> the tiered audit -> summary with the end-to-end latency and the tiers per
window.

Demo-only settings, said in the output: 10-second monitoring windows (producers
and mirrors) with a 5-second audit grace; the mirrors publish their counts every
2 s; no compaction step (the single-cluster demo shows it).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from ingest.demo.latency import LatencyProbe, LatencySummary
from ingest.demo.pipeline import (GRACE_MS, MIN_DURATION_FOR_TWO_LOADS_S, WINDOW_MS, Demo, _last_json, iso, say,
                                  write_properties)
from ingest.demo.processes import free_port
from ingest.demo.summary import render_datacenters
from ingest.errors import DemoError
from ingest.jobs_support import EXIT_NOTHING_JUDGED
from ingest.zk_security import new_kazoo

log = logging.getLogger(__name__)

DATACENTERS = ("dc1", "dc2")
OFFLINE = "offline"
CHROOT_BASE = "/ingest-demo"
BROKERS_PER_DC = 2
OFFLINE_BROKERS = 1
MIRRORS = ("mirror-1", "mirror-2")
DC_TOPICS = (  # topic, schema, share of --rate (split evenly between the datacenters)
    ("page-views", "page_view", 1.0),
    ("clicks", "click", 0.4),
)
AUDITED = "|".join(t for t, _, _ in DC_TOPICS)
MONITORING_TOPIC = "audit-monitoring"
MIRROR_INTERVAL_MS = 2000
MIRROR_SETTLE_S = 3.0
CATCH_UP_TIMEOUT_S = 120.0


class DatacentersDemo(Demo):
    """One run of the datacenters topology; ``sup.close()`` stops what it started."""

    def __init__(self, opts) -> None:
        super().__init__(opts)
        self.clusters: dict[str, dict] = {}  # name -> {"zk": connect string, "brokers": [host:port]}
        self.mirrors = []
        self.probe: LatencyProbe | None = None
        self.latency: LatencySummary | None = None

    # --- services ------------------------------------------------------------

    def start_clusters(self) -> None:
        if not self.zk_connect:
            raise DemoError("--topology datacenters needs ZooKeeper (one chroot per cluster, the mirrors' "
                            "checkpoints): install it with `apt-get install zookeeper` and drop --no-zookeeper")
        for name, count in [*((dc, BROKERS_PER_DC) for dc in DATACENTERS), (OFFLINE, OFFLINE_BROKERS)]:
            zk = f"{self.zk_connect}{CHROOT_BASE}/{name}"
            _ensure_chroot(self.zk_connect, f"{CHROOT_BASE}/{name}")
            brokers = [self._start_broker(name, i, zk) for i in range(count)]
            self.clusters[name] = {"zk": zk, "brokers": brokers}
            role = "offline cluster (mirror target, loaded hourly)" if name == OFFLINE else "datacenter cluster"
            say(f"{name}: {role}, ZooKeeper chroot {CHROOT_BASE}/{name}, brokers {', '.join(brokers)}")

    def _start_broker(self, cluster: str, broker_id: int, zk: str) -> str:
        port = free_port()
        props = {
            "brokerid": broker_id, "hostname": "127.0.0.1", "port": port,
            "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
            "log.dir": self.work / cluster / f"broker-{broker_id}" / "logs", "num.partitions": 2,
            "log.flush.interval": 100, "log.default.flush.interval.ms": 200,
            "log.default.flush.scheduler.interval.ms": 200, "enable.zookeeper": "true", "zk.connect": zk,
        }
        cfg = write_properties(self.work / f"{cluster}-broker-{broker_id}.properties", props,
                               f"demo {cluster} broker {broker_id}")
        child = self.sup.start(f"{cluster}-broker-{broker_id}",
                               [self.py, "-m", "ingest.cli", "broker", "start", "--config", str(cfg)])
        self.sup.wait_port(child, port, timeout_s=60)
        return f"127.0.0.1:{port}"

    def create_topics(self) -> None:
        """The topics of every datacenter, replicated on its two brokers, before the mirrors look.

        Created up front (as an operator would), not by their first message: the mirrors record a
        topic's source -> target partition mapping when they first see it; a partition appearing
        later takes a spare target partition, or is mirrored at-least-once once the spares are used
        up (docs/mirroring-data-path.md).
        """
        for dc in DATACENTERS:
            for topic in (*(t for t, _, _ in DC_TOPICS), MONITORING_TOPIC):
                self.sup.run(f"create-{dc}-{topic}", [
                    self.py, "-m", "ingest.cli", "topics", "create", "--zookeeper", self.clusters[dc]["zk"],
                    "--topic", topic, "--partitions", str(BROKERS_PER_DC),
                    "--replication-factor", str(BROKERS_PER_DC),
                    "--format", "0.7"], timeout_s=60)   # the demo's producers and mirror speak 0.7
        say(f"topics: {', '.join(t for t, _, _ in DC_TOPICS)}, {MONITORING_TOPIC} in {', '.join(DATACENTERS)}: "
            f"{BROKERS_PER_DC} partitions, replicated on {BROKERS_PER_DC} brokers")

    def mirror_config(self, name: str) -> Path:
        props: dict[str, object] = {
            "mirror.group": "demo-mirror", "mirror.id": name, "sources": ",".join(DATACENTERS),
            **{f"source.{dc}.zk.connect": self.clusters[dc]["zk"] for dc in DATACENTERS},
            "target.zk.connect": self.clusters[OFFLINE]["zk"], "registry.url": self.registry_url,
            "monitoring.window.ms": WINDOW_MS, "monitoring.interval.ms": MIRROR_INTERVAL_MS,
            "checkpoint.interval.ms": 500, "topic.refresh.ms": 1000, "status.log.interval.ms": 10_000,
        }
        return write_properties(self.work / f"{name}.properties", props,
                                f"demo {name}: dc1 + dc2 -> offline, 10 s monitoring windows")

    def start_mirrors(self) -> None:
        for name in MIRRORS:
            self.mirrors.append(self.sup.start(name, [self.py, "-m", "ingest.cli", "mirror", "--config",
                                                      str(self.mirror_config(name))]))
        time.sleep(MIRROR_SETTLE_S)
        self.check_mirrors()
        say(f"mirrors: {', '.join(MIRRORS)} (one group: {', '.join(DATACENTERS)} -> {OFFLINE}, every topic; "
            f"exactly-once copies, counts to audit-mirror every {MIRROR_INTERVAL_MS // 1000}s)")

    def check_mirrors(self) -> None:
        for child in self.mirrors:
            if not child.alive():
                raise DemoError(f"{child.name} exited with {child.proc.returncode}; log: {child.log_path}\n"
                                f"{child.tail(1500)}")

    def start_dc_producers(self) -> list:
        children = []
        for dc in DATACENTERS:
            for topic, schema, share in DC_TOPICS:
                rate = max(1.0, self.opts.rate * share / len(DATACENTERS))
                count = max(1, int(rate * self.opts.duration_s))
                children.append(self.sup.start(f"produce-{dc}-{topic}", [
                    self.py, "-m", "ingest.cli", "produce", "--zk", self.clusters[dc]["zk"],
                    "--registry", self.registry_url, "--topic", topic, "--schema", schema, "--count", str(count),
                    "--rate", str(rate), "--service", f"frontend-{dc}", "--window-ms", str(WINDOW_MS), "--json"]))
        say(f"producers: {', '.join(t for t, _, _ in DC_TOPICS)} in each of {', '.join(DATACENTERS)} for "
            f"{self.opts.duration_s:.0f}s (~{self.opts.rate:.0f} page views/s in all), monitoring events every "
            f"{WINDOW_MS // 1000}s window to each datacenter's audit-monitoring (mirrored like any topic)")
        return children

    def loader_config(self) -> Path:
        return write_properties(self.work / "loader.properties", {
            "destination": self.warehouse, "registry.url": self.registry_url, "format": self.opts.fmt,
            "zk.connect": self.clusters[OFFLINE]["zk"]}, "demo loader: the offline cluster")

    def audit_config(self) -> Path:
        return write_properties(self.work / "audit.properties", {
            "destination": self.warehouse, "window.ms": WINDOW_MS, "grace.ms": GRACE_MS, "topics": AUDITED},
            "demo audit: 10 s windows, 5 s grace, tiers producers -> source -> target -> warehouse")

    # --- the run -------------------------------------------------------------

    def run(self) -> int:
        try:
            return self._run()
        finally:
            if self.probe is not None:
                self.probe.stop()  # its consumer leaves ZooKeeper before the demo stops ZooKeeper

    def _run(self) -> int:
        t0 = time.monotonic()
        say(f"ingest demo --topology datacenters: working directory {self.work}")
        self.start_zookeeper()
        self.start_clusters()
        self.start_registry()
        self.create_topics()
        self.start_mirrors()
        self.probe = LatencyProbe(self.clusters[OFFLINE]["zk"], self.registry_url, AUDITED).start()
        start_ms = int(time.time() * 1000)
        producers = self.start_dc_producers()
        loader_cfg = self.loader_config()
        if self.opts.duration_s >= MIN_DURATION_FOR_TWO_LOADS_S:
            time.sleep(min(self.opts.duration_s / 2, 20))
            self.check_mirrors()
            say("load #1 from the offline cluster (spark-submit jobs/load.py) while producers publish ...")
            self.submit("load-1", "load.py", ["--config", str(loader_cfg)])
            say(f"load #1 committed in {self.step_times['load-1']:.0f}s")
        for child in producers:
            self.sup.wait(child, self.opts.duration_s + 120, ok_codes=(0, 1))
            self.produced[child.name.removeprefix("produce-")] = _last_json(child.log_path)
        acked = sum(int(p.get("acknowledged", 0)) for p in self.produced.values())
        say(f"producers finished ({acked} events acknowledged by the datacenter clusters); waiting until the "
            f"offline cluster holds them all ...")
        caught_up = self.probe.wait_for(acked, CATCH_UP_TIMEOUT_S)
        self.check_mirrors()
        self.latency = self.probe.stop()
        if not caught_up:
            say(f"WARNING: the offline cluster shows {self.latency.count if self.latency else 0} of {acked} events "
                f"after {CATCH_UP_TIMEOUT_S:.0f}s; the audit will say where they are")
        # the last window closes, the mirrors publish their last counts, then the grace passes
        end_ms = int(time.time() * 1000)
        window_end = (end_ms // WINDOW_MS + 1) * WINDOW_MS
        wait_ms = max(window_end + GRACE_MS, end_ms + 3 * MIRROR_INTERVAL_MS) - int(time.time() * 1000)
        time.sleep(max(0.0, wait_ms / 1000))
        say("load #2 from the offline cluster (spark-submit jobs/load.py) ...")
        self.submit("load-2", "load.py", ["--config", str(loader_cfg)])
        say(f"load #2 committed in {self.step_times['load-2']:.0f}s")
        # audited from the window of the first event: a window that closed while the producers were
        # still starting has no monitoring event and would be reported as NO_MONITORING
        first_ms = self.probe.first_event_ms or start_ms
        report = self.reports / "audit.jsonl"
        say("tiered audit (spark-submit jobs/audit.py) ...")
        audit_code = self.submit("audit", "audit.py", [
            "--config", str(self.audit_config()), "--from", iso(first_ms // WINDOW_MS * WINDOW_MS),
            "--to", iso(window_end), "--report", str(report)], ok_codes=(0, 3, 4, EXIT_NOTHING_JUDGED))
        say(f"audit finished in {self.step_times['audit']:.0f}s (exit {audit_code})")
        say()
        say(render_datacenters(self.work, self.warehouse, report, self.produced, self.latency,
                               time.monotonic() - t0, audit_code))
        if self.latency is None:
            raise DemoError("no event reached the offline cluster, so no latency was measured; "
                            f"see the mirrors' logs in {self.work / 'logs'}")
        return 0 if audit_code == 0 else audit_code


def _ensure_chroot(zk_connect: str, path: str) -> None:
    client = new_kazoo(zk_connect)
    client.start(timeout=30)
    try:
        client.retry(client.ensure_path, path)
    finally:
        client.stop()
        client.close()
