"""A real ZooKeeper server (Debian package ``zookeeper``) on a loopback port.

Started from its jar with ``ZooKeeperServerMain`` (the Debian service scripts
are awkward, see ENVIRONMENT.md). One server per test session; tests that need
isolation use a fresh chroot path (``zk_chroot`` fixture).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.harness.net import free_port, wait_for_port
from tests.harness import reaper

ZK_JAR = Path("/usr/share/java/zookeeper.jar")
CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/*"


def zookeeper_available() -> bool:
    return ZK_JAR.exists() and shutil.which("java") is not None


class ZooKeeperServer:
    """A standalone ZooKeeper process; ``connect`` is ``client_address:port`` (``127.0.0.1:port`` by default).

    ``client_address`` is the address it listens on: loopback by default; a
    network-partition test passes its bridge address (``tests/harness/netns.py``)
    so brokers in network namespaces reach it (``0.0.0.0`` listens everywhere and
    ``connect`` then names loopback).
    """

    def __init__(self, tick_ms: int = 500, client_address: str = "127.0.0.1") -> None:
        self.client_address = client_address
        self.host = "127.0.0.1" if client_address == "0.0.0.0" else client_address
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="zk-"))
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "ZooKeeperServer":
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={self.dir / 'data'}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.client_address}\n"
            "admin.enableServer=false\n"
            # short sessions so expiry tests run fast: min = 2 ticks, max = 20 ticks
            "minSessionTimeout=1000\nmaxSessionTimeout=10000\n"
            "4lw.commands.whitelist=ruok,stat,srvr,cons,wchs\n"
        )
        (self.dir / "data").mkdir(exist_ok=True)
        log = open(self.dir / "zookeeper.log", "wb")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.log.dir=" + str(self.dir),
             "-cp", CLASSPATH, "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        reaper.watch(self.proc)  # stopped even if pytest itself is killed
        wait_for_port(self.port, host=self.host, timeout=60)
        return self

    def kill(self) -> None:
        """SIGKILL the server, as a crash. Its port and data dir stay: ``start()`` brings the same
        server back, with the znodes and sessions its transaction log holds."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def expire_session(client, hosts: str) -> None:
    """Really expire a kazoo client's ZooKeeper session.

    ``hosts`` is the connect string the client was made with. Opens a second connection with the same session id and password and closes
    it: the server then expires the session, and the first client sees
    ``KazooState.LOST`` and must re-register what it owned.
    """
    from kazoo.client import KazooClient

    session_id, password = client.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=5.0)
    twin.start(timeout=10)
    twin.stop()
    twin.close()
    deadline = time.monotonic() + 20
    while client.client_id and client.client_id[0] == session_id and time.monotonic() < deadline:
        time.sleep(0.05)


def fresh_chroot(server: ZooKeeperServer, prefix: str = "/t") -> str:
    """A connect string on a new, empty chroot of ``server`` (``<connect>/<prefix>-<random>``),
    so tests and packages never see each other's znodes."""
    import uuid

    from kazoo.client import KazooClient  # deferred like every kazoo import

    chroot = f"{prefix}-{uuid.uuid4().hex[:10]}"
    c = KazooClient(hosts=server.connect)
    c.start(timeout=15)
    try:
        c.ensure_path(chroot)
    finally:
        c.stop()
        c.close()
    return server.connect + chroot
