"""This product in bench/bench_kafka.py: its brokers with the 0.7 port and, where the checkout has one, the Kafka listener.

* **One broker** (``ingest broker start``, no ZooKeeper, the settings of bench/peers/ours.py: one
  network thread, flushed every 10,000 messages or 1 s) serves the one-broker rows of both paths:
  0.7 topics on its ``port``, Kafka topics on ``listeners=PLAINTEXT://127.0.0.1:P``, auto-created by
  the producer's Metadata request as a broker without ZooKeeper does.
* **Three brokers and ZooKeeper** (bench/replication_cluster.py, the same settings, each broker its own
  listener port, ``min.insync.replicas`` 2) serve the acks=all rows: a 0.7 topic created the
  controller's way (its assignment znode) and a Kafka topic created with ``ingest topics create
  --format kafka``, each with one partition and replication factor 3; a row starts once all 3
  replicas are in sync.

The checkout whose brokers run is ``root`` (this one unless given: ``--broker-tree`` runs another
branch's worktree with the same interpreter). Whether it has a Kafka listener is read from its broker
config: a ``listeners`` key (:func:`kafka_listener_missing`); once the brokers are up, that something
accepts connections on those ports (:meth:`OursServers.kafka_not_listening`).
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.peers.ours import SETTINGS, Ours
from bench.peers.process import free_port
from bench.replication_cluster import Cluster, brokers_cpu

NO_LISTENER = "the broker has no Kafka listener"
_PROBE = ("import sys\n"
          "from ingest.broker.server_config import SERVER_CONFIG\n"
          "sys.exit(0 if 'listeners' in {k.name for k in SERVER_CONFIG.keys} else 3)\n")


def _env(root: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(root)}


def kafka_listener_missing(root: Path) -> str | None:
    """None when the broker of ``root`` has a ``listeners`` key (a Kafka listener), else why its rows are skipped."""
    r = subprocess.run([sys.executable, "-c", _PROBE], cwd=str(root), env=_env(root), capture_output=True,
                       text=True, timeout=60)
    if r.returncode == 3:
        return f"{NO_LISTENER} (no `listeners` key in the broker config of {root})"
    if r.returncode != 0:
        return f"cannot read the broker config of {root}: {(r.stdout + r.stderr).strip()[-300:]}"
    return None


def describe_tree(root: Path) -> str:
    """``<root> @ <commit> (<branch>)`` of the checkout, for the report."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=str(root), capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit, branch = git("rev-parse", "--short", "HEAD"), git("rev-parse", "--abbrev-ref", "HEAD")
    return f"{root} @ {commit or '?'} ({branch or '?'})"


def listener(port: int) -> dict:
    return {"listeners": f"PLAINTEXT://127.0.0.1:{port}"}


class OursServers:
    """The one broker and, if ``cluster``, ZooKeeper + 3 brokers; ``kafka``: whether they get Kafka listeners."""

    name = "this product"

    def __init__(self, work: Path, root: Path, *, kafka: bool, cluster: bool) -> None:
        self.work, self.root, self.kafka = work, root, kafka
        self.port = free_port() if kafka else None
        self.one = Ours(str(work / "one"), extra=listener(self.port) if kafka else None, root=str(root))
        ports = [free_port() for _ in range(3)] if kafka and cluster else []
        self.cluster_ports = ports
        self.cluster = (Cluster(work / "cluster", {**SETTINGS, "min.insync.replicas": 2, "zk.sessiontimeout.ms": 6000},
                                per_broker=(lambda i: listener(ports[i])) if kafka else None, root=root)
                        if cluster else None)
        self.version = describe_tree(root)

    def start(self) -> "OursServers":
        self.one.start()
        if self.cluster is not None:
            self.cluster.start()
        return self

    def kafka_not_listening(self, timeout: float = 10.0) -> str | None:
        """None when every Kafka listener port accepts a connection within ``timeout``, else which does not
        (a checkout can know the ``listeners`` key before its broker serves on it)."""
        ports = ([self.port] if self.port else []) + self.cluster_ports
        deadline = time.monotonic() + timeout
        for port in ports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                    break
                except OSError as exc:
                    if time.monotonic() > deadline:
                        return (f"`listeners` is set but nothing accepts connections on 127.0.0.1:{port} "
                                f"after {timeout:.0f} s: {exc}")
                    time.sleep(0.2)
        return None

    @property
    def pids(self) -> list[int]:
        pids = [self.one.broker.pid] if self.one.broker.pid else []
        if self.cluster is not None:
            pids += [b.pid for b in self.cluster.brokers if b.pid]
            if self.cluster.zk_server is not None and self.cluster.zk_server.proc is not None:
                pids.append(self.cluster.zk_server.proc.pid)
        return pids

    # -- where the clients connect -------------------------------------------------------------

    @property
    def bootstrap_one(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def bootstrap_cluster(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.cluster_ports)

    @property
    def zk_connect(self) -> str:
        return self.cluster.zk_server.connect

    # -- CPU of the processes a row uses ----------------------------------------------------------

    def one_cpu(self) -> float:
        return self.one.server_cpu()

    def cluster_cpu(self) -> float:
        return brokers_cpu(self.cluster)

    # -- replicated topics ----------------------------------------------------------------------

    def create_07_rf3(self, topic: str, timeout: float = 60.0) -> None:
        """A 0.7 topic, 1 partition on the 3 brokers, once its 3 replicas are in sync."""
        self.cluster.create_topic(topic, 1, 3)
        self.cluster.wait_state(topic, 0, lambda s: s.leader >= 0 and len(s.isr) == 3, timeout, "3 in-sync replicas")

    def create_kafka_rf3(self, topic: str) -> None:
        """A Kafka topic, 1 partition, replication factor 3, with the checkout's own ``ingest topics create``."""
        r = subprocess.run([sys.executable, "-m", "ingest.cli", "topics", "create", "--zookeeper", self.zk_connect,
                            "--topic", topic, "--partitions", "1", "--replication-factor", "3", "--format", "kafka"],
                           cwd=str(self.root), env=_env(self.root), capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"ingest topics create --format kafka {topic}: exit {r.returncode}: "
                               f"{(r.stdout + r.stderr).strip()[-400:]}")

    def kafka_topics_create_missing(self) -> str | None:
        """None when the checkout's ``ingest topics create`` takes ``--format`` (Kafka cluster topics), else why not."""
        r = subprocess.run([sys.executable, "-m", "ingest.cli", "topics", "create", "--help"], cwd=str(self.root),
                           env=_env(self.root), capture_output=True, text=True, timeout=120)
        if "--format" not in r.stdout:
            return (f"`ingest topics create` of {self.root} has no --format: no Kafka topics with ZooKeeper "
                    f"(replicated) to produce to")
        return None

    def leader_07(self, topic: str) -> tuple[str, int]:
        """(host, 0.7 port) of the partition's leader."""
        st = self.cluster.state(topic, 0)
        b = next(b for b in self.cluster.brokers if b.broker_id == st.leader)
        return b.host, b.port

    def stop(self) -> list[int]:
        """Stop every process: the one broker by PID, then the cluster's brokers (SIGKILL after 15 s) and
        ZooKeeper. Returns the one broker's PIDs that needed SIGKILL."""
        try:
            return self.one.stop()
        finally:
            if self.cluster is not None:
                self.cluster.close()
