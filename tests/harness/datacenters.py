"""The paper's deployment for tests: two datacenter clusters mirrored into an offline cluster.

Usage guide
-----------

::

    from tests.harness.datacenters import datacenters   # noqa: F401  (pytest fixture)

    def test_something(datacenters):
        dc = datacenters(brokers_per_dc=1, dc_overrides={"log.retention.hours": 1})
        dc.clusters["dc1"].zk_connect        # "127.0.0.1:PORT/t-.../dc1": the dc1 cluster's chroot
        dc.offline.brokers[0]                # a tests.harness.brokers.BrokerProcess
        dc.registry.url                      # the one schema registry every cluster's events use
        m = dc.start_mirror("m1", whitelist="page-views")   # ``ingest mirror --config FILE``
        m.kill(); m.start()                  # SIGKILL and start again (same config, same mirror.id)
        # at teardown every broker, mirror and the registry is stopped (also on Ctrl-C)

Layout: one chroot per cluster under the test's own chroot of the session
ZooKeeper (``<zk_connect>/dc1``, ``/dc2``, ``/offline``), each with its own broker
processes (``ingest broker start``, harness defaults of tests/harness/brokers.py,
broker ids from 0 in every cluster). The mirror config is written from the keys of
the design (BRIEF13 "Mirror"): ``sources=dc1,dc2``, ``source.<name>.zk.connect``,
``target.zk.connect`` = the offline cluster, ``registry.url``, plus the overrides
given to :meth:`Datacenters.start_mirror` (``_`` for ``.`` in keyword names). ``mirror.id`` is
left to its default (``<host>-<pid>``), so a restarted mirror is a new group member, as under
systemd.

Cleanup follows tests/harness/brokers.py: every process runs in its own session
and is only signalled by its own pid or process group; the fixture stops
everything in ``finally`` of its generator, which pytest runs on failure and on
KeyboardInterrupt alike.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.harness.brokers import BrokerProcess, broker_list, stop_all
from tests.harness.registry import RegistryProcess
from tests.harness import reaper

REPO_ROOT = Path(__file__).resolve().parents[2]
DATACENTERS = ("dc1", "dc2")
OFFLINE = "offline"
MIRROR_DEFAULTS: dict[str, Any] = {
    "checkpoint.interval.ms": 200,
    "topic.refresh.ms": 500,
    "status.log.interval.ms": 5000,
}


def ensure_chroot(zk_connect: str) -> None:
    """Create the chroot path of ``host:port/chroot`` (brokers register below it)."""
    from kazoo.client import KazooClient  # deferred: kazoo only where ZooKeeper is used

    hosts, _, chroot = zk_connect.partition("/")
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    try:
        client.retry(client.ensure_path, "/" + chroot)
    finally:
        client.stop()
        client.close()


@dataclass
class Cluster:
    """One broker cluster: its name, its ZooKeeper chroot and its broker processes."""

    name: str
    zk_connect: str
    brokers: list[BrokerProcess] = field(default_factory=list)

    @property
    def broker_list(self) -> str:
        return broker_list(self.brokers)

    def broker(self, broker_id: int) -> BrokerProcess:
        return next(b for b in self.brokers if b.broker_id == broker_id)

    def partitions(self, topic: str) -> list[tuple[BrokerProcess, int, int, int]]:
        """(broker, partition, earliest, latest) of ``topic``: per broker for a 0.7 topic (METADATA), at
        the leader for a replicated one (TOPIC_METADATA; ``latest`` is the high watermark)."""
        from ingest.client.discovery import BrokerAddress
        from ingest.client.replica_metadata import ReplicaMetadata
        from ingest.client.simple_consumer import SimpleConsumer

        out = []
        running = [b for b in self.brokers if b.running]
        for b in running:
            with SimpleConsumer(b.host, b.port, timeout_s=10.0) as c:
                for pm in c.metadata([topic]).topics.get(topic, []):
                    out.append((b, pm.partition, pm.earliest, pm.latest))
        if out:
            return out
        md = ReplicaMetadata(lambda: [BrokerAddress(b.broker_id, b.host, b.port) for b in running])
        replicated = md.topic(topic, refresh=True)
        for p in replicated.partitions if replicated is not None and replicated.error == 0 else ():
            leader = next((b for b in running if b.broker_id == p.leader), None)
            if leader is None:
                raise AssertionError(f"{self.name}: {topic}/{p.partition} has no running leader ({p.leader})")
            with SimpleConsumer(leader.host, leader.port, timeout_s=10.0) as c:
                out.append((leader, p.partition, c.earliest_offset(topic, p.partition),
                            c.latest_offset(topic, p.partition)))
        return sorted(out, key=lambda t: t[1])

    def messages(self, topic: str) -> list[bytes]:
        """Every visible message payload of ``topic`` in this cluster (partition by partition)."""
        from ingest.client.simple_consumer import SimpleConsumer

        out: list[bytes] = []
        for b, partition, earliest, latest in self.partitions(topic):
            with SimpleConsumer(b.host, b.port, timeout_s=10.0) as c:
                out.extend(bytes(m.payload) for m in c.iter_range(topic, partition, earliest, latest))
        return out


def lose_unflushed_tail(broker: BrokerProcess, topic: str, partition: int, flushed_end: int) -> int:
    """A machine crash: SIGKILL ``broker`` and cut ``topic-partition`` back to ``flushed_end``.

    A SIGKILLed process leaves its writes in the page cache, which a machine crash
    loses: the bytes after the last fsync (``flushed_end``, the offset consumers saw)
    are cut from the newest segment, as tests/replication/test_kills.py does. Returns
    the bytes cut. The caller restarts the broker (recovery keeps the flushed prefix).
    """
    from ingest.broker.segment import SUFFIX, parse_segment_name

    broker.kill()
    cut = 0
    for path in sorted((broker.log_dir / f"{topic}-{partition}").iterdir()):
        base = parse_segment_name(path.name) if path.name.endswith(SUFFIX) else None
        if base is None:
            continue
        size = path.stat().st_size
        keep = min(size, max(0, flushed_end - base))
        if keep < size:
            cut += size - keep
            with open(path, "r+b") as f:
                f.truncate(keep)
    return cut


def retention_below(broker: BrokerProcess, topic: str, partition: int, cut: int) -> tuple[int, int]:
    """Retention on a stopped broker: delete the segments of ``topic-partition`` that end at or below ``cut``.

    The broker's own ``Log.delete_segments`` (what its retention thread runs once segments are
    old enough; its shortest period, a minute, is too slow for a test), on its log directory
    while it is stopped, as tests/audit/test_audit_e2e.py does. Returns (segments, bytes).
    The caller starts the broker again.
    """
    from ingest.broker.log_config import LOG_CONFIG
    from ingest.broker.log_manager import LogManager

    broker.stop()
    props = broker.properties()
    lm = LogManager(LOG_CONFIG.parse({"log.dir": str(broker.log_dir), "log.file.size": props.get("log.file.size", 1 << 30)}))
    lm.startup()
    try:
        return lm.get_log(topic, partition).delete_segments(lambda seg: seg.base_offset + seg.size <= cut)
    finally:
        lm.shutdown()


class MirrorProcess:
    """One ``ingest mirror --config FILE`` subprocess (own session, output in ``output_path``)."""

    def __init__(self, name: str, config_path: Path, output_path: Path) -> None:
        self.name = name
        self.config_path = config_path
        self.output_path = output_path
        self.proc: subprocess.Popen | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, settle_s: float = 1.0) -> "MirrorProcess":
        """Start; raises RuntimeError with its output when it exits within ``settle_s``."""
        if self.running:
            raise RuntimeError(f"mirror {self.name} is already running (pid {self.proc.pid})")
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.output_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ingest.cli", "mirror", "--config", str(self.config_path)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(REPO_ROOT),
                env=env, start_new_session=True)
            reaper.watch(self.proc)  # stopped even if pytest itself is killed
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mirror {self.name} exited with {self.proc.returncode} at start:\n"
                                   + self.output()[-3000:])
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        """SIGKILL (no checkpoint, no deregistration) and reap."""
        if self.running:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait (a graceful stop writes its checkpoints); SIGKILL after ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def restart(self) -> "MirrorProcess":
        self.stop()
        return self.start()

    def output(self) -> str:
        try:
            return self.output_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class Datacenters:
    """dc1 and dc2 (sources), the offline cluster (target), the registry, and mirror processes."""

    def __init__(self, root_zk: str, workdir: Path) -> None:
        self.root_zk = root_zk
        self.workdir = workdir
        self.clusters: dict[str, Cluster] = {}
        self.registry: RegistryProcess | None = None
        self.mirrors: list[MirrorProcess] = []

    @property
    def offline(self) -> Cluster:
        return self.clusters[OFFLINE]

    @property
    def sources(self) -> list[Cluster]:
        return [self.clusters[n] for n in DATACENTERS]

    def start_cluster(self, name: str, n: int, overrides: dict[str, Any]) -> Cluster:
        cluster = Cluster(name, f"{self.root_zk}/{name}")
        self.clusters[name] = cluster
        ensure_chroot(cluster.zk_connect)
        for broker_id in range(n):
            b = BrokerProcess(broker_id, self.workdir / name / f"broker{broker_id}", zk_connect=cluster.zk_connect,
                              overrides=overrides)
            cluster.brokers.append(b)  # recorded before start: teardown stops a half-started one
            b.start()
        return cluster

    def mirror_properties(self, name: str, **overrides: Any) -> dict[str, Any]:
        props: dict[str, Any] = {
            "mirror.group": "mirror",
            "sources": ",".join(DATACENTERS),
            **{f"source.{dc}.zk.connect": self.clusters[dc].zk_connect for dc in DATACENTERS},
            "target.zk.connect": self.offline.zk_connect,
            "registry.url": self.registry.url if self.registry else "",
            **MIRROR_DEFAULTS,
        }
        props.update({k.replace("_", "."): v for k, v in overrides.items()})
        return props

    def start_mirror(self, name: str, *, start: bool = True, **overrides: Any) -> MirrorProcess:
        """Write ``<workdir>/<name>.properties`` and start ``ingest mirror`` on it."""
        path = self.workdir / f"{name}.properties"
        lines = [f"# written by tests/harness/datacenters.py for mirror {name}"]
        lines += [f"{k}={v}" for k, v in self.mirror_properties(name, **overrides).items()]
        path.write_text("\n".join(lines) + "\n")
        mirror = MirrorProcess(name, path, self.workdir / f"{name}.out")
        self.mirrors.append(mirror)
        return mirror.start() if start else mirror

    def stop(self) -> None:
        """Mirrors first (they write to the offline cluster), then every broker, then the registry."""
        for m in self.mirrors:
            try:
                m.stop(timeout=10)
            except Exception:  # noqa: BLE001 - keep stopping the others
                m.kill()
        stop_all([b for c in self.clusters.values() for b in c.brokers])
        if self.registry is not None:
            self.registry.stop()


def build(root_zk: str, workdir: Path, *, brokers_per_dc: int = 1, offline_brokers: int = 1,
          dc_overrides: dict[str, Any] | None = None, offline_overrides: dict[str, Any] | None = None,
          registry: bool = True, topology: list[Datacenters] | None = None) -> Datacenters:
    """Start the topology; ``topology`` (a list) receives it before anything starts, for cleanup."""
    dc = Datacenters(root_zk, workdir)
    if topology is not None:
        topology.append(dc)
    if registry:
        dc.registry = RegistryProcess(workdir / "registry-store")
        dc.registry.start()
    for name in DATACENTERS:
        dc.start_cluster(name, brokers_per_dc, dict(dc_overrides or {}))
    dc.start_cluster(OFFLINE, offline_brokers, dict(offline_overrides or {}))
    return dc


@pytest.fixture
def datacenters(zk_connect, tmp_path_factory) -> Callable[..., Datacenters]:
    """``datacenters(brokers_per_dc=1, ...)`` -> a started :class:`Datacenters`; all stopped at teardown."""
    started: list[Datacenters] = []

    def make(**kw: Any) -> Datacenters:
        return build(zk_connect, tmp_path_factory.mktemp("datacenters"), topology=started, **kw)

    try:
        yield make
    finally:
        for dc in started:
            dc.stop()
