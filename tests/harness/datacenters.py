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
given to :meth:`Datacenters.start_mirror` (``_`` for ``.`` in keyword names).

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
            "mirror.id": name,
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
