"""Real broker processes for tests: ``ingest broker start`` run as subprocesses.

Usage guide
-----------

One broker, static broker list (no ZooKeeper)::

    from tests.harness.brokers import BrokerProcess, broker_cluster, broker_list, stop_all

    def test_something(tmp_path_factory):
        brokers = broker_cluster(tmp_path_factory, n=1)
        try:
            b = brokers[0]
            ... connect to (b.host, b.port); producer config "broker.list": broker_list(brokers) ...
        finally:
            stop_all(brokers)

Or let a fixture clean up (import it into your conftest.py or test module)::

    from tests.harness.brokers import broker_factory   # noqa: F401  (pytest fixture)

    def test_cluster(broker_factory, zk_connect):
        brokers = broker_factory(n=3, zk_connect=zk_connect, num_partitions=4)
        brokers[1].kill()                 # SIGKILL, for fault tests
        brokers[1].restart()              # same id, port and log dir; waits until serving

Config overrides: keyword arguments with ``_`` for ``.`` (``num_partitions=4``)
or an ``overrides={"log.flush.interval": 500}`` dict; both reach the broker as
``server.properties`` keys. Harness defaults favour fast tests: messages are
flushed (and so visible to consumers) after every append
(``log.flush.interval=1``), ZooKeeper sessions time out after 3 s.

``start()`` returns only once the broker answers a METADATA request (so it is
recovered, registered in ZooKeeper when enabled, and serving); if the process
exits first, it raises ``BrokerStartError`` with the tail of the broker's
output. ``stop()`` sends SIGTERM and returns the exit code (0 on a graceful
stop); ``kill()`` sends SIGKILL. The broker's combined stdout/stderr is in
``b.output_path`` (``b.output()`` reads it). Each broker runs in its own
process group and is only ever signalled by its own pid.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from tests.harness.net import free_port
from tests.harness import reaper

REPO_ROOT = Path(__file__).resolve().parents[2]

HARNESS_DEFAULTS: dict[str, Any] = {
    "log.flush.interval": 1,
    "log.default.flush.interval.ms": 100,
    "log.default.flush.scheduler.interval.ms": 100,
    "zk.sessiontimeout.ms": 3000,
    "zk.connectiontimeout.ms": 10000,
    "num.threads": 2,
    "shutdown.timeout.ms": 5000,
}


class BrokerStartError(RuntimeError):
    """The broker process exited or never answered during ``start()``."""


class BrokerProcess:
    """One ``ingest broker start`` subprocess with its own log dir and port.

    Attributes:
        broker_id, host, port, log_dir: as configured (kept across ``restart``).
        address: ``"id:host:port"`` (host ``127.0.0.1`` unless given), one entry of a ``broker.list``.
        config_path, output_path: the generated server.properties and the process output.
    """

    def __init__(self, broker_id: int, workdir: str | Path, *, port: int | None = None,
                 zk_connect: str | None = None, overrides: dict[str, Any] | None = None,
                 host: str = "127.0.0.1", command_prefix: Sequence[str] = (),
                 root: str | Path | None = None) -> None:
        self.broker_id = broker_id
        #: the checkout whose ``ingest`` the broker runs (this one unless given: a benchmark can start
        #: the brokers of another branch's worktree with the same interpreter)
        self.root = Path(root) if root is not None else REPO_ROOT
        self.host = host
        #: prepended to the broker's command line, e.g. ``["ip", "netns", "exec", NS]`` to run it
        #: inside a network namespace (tests/harness/netns.py); it must exec the command (same pid)
        self.command_prefix = list(command_prefix)
        self.port = port or free_port()
        self.kafka_port = free_port()
        """The port of the broker's Kafka listener (``listeners``), kept across ``restart``."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.workdir / "logs"
        self.config_path = self.workdir / "server.properties"
        self.output_path = self.workdir / "broker.out"
        self.zk_connect = zk_connect
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.broker_id}:{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {
            "brokerid": self.broker_id,
            "hostname": self.host,
            "port": self.port,
            "listeners": f"PLAINTEXT://{self.host}:{self.kafka_port}",
            "log.dir": str(self.log_dir),
            **HARNESS_DEFAULTS,
        }
        if self.zk_connect:
            props["enable.zookeeper"] = "true"
            props["zk.connect"] = self.zk_connect
        props.update(self.overrides)
        return props

    def _write_config(self) -> None:
        lines = [f"# written by tests/harness/brokers.py for broker {self.broker_id}"]
        for key, value in self.properties().items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            lines.append(f"{key}={value}")
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        """Launch the process and wait until it serves requests."""
        if self.running:
            raise BrokerStartError(f"broker {self.broker_id} is already running (pid {self.pid})")
        self._write_config()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.root) + os.pathsep + env.get("PYTHONPATH", "")
        out = open(self.output_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [*self.command_prefix, sys.executable, "-m", "ingest.cli", "broker", "start",
                 "--config", str(self.config_path)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=str(self.root), env=env, start_new_session=True,
            )
            reaper.watch(self.proc)  # stopped even if pytest itself is killed
        finally:
            out.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"broker {self.broker_id} exited with code {self.proc.returncode} during start-up:\n"
                    + self.output()[-3000:])
            if self.ping():
                return self
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerStartError(f"broker {self.broker_id} not serving on port {self.port} "
                                       f"after {timeout}s:\n" + self.output()[-3000:])
            time.sleep(0.05)

    def ping(self, timeout: float = 1.0) -> bool:
        """True when the broker answers a METADATA request right now."""
        from ingest.wire.protocol import MetadataRequest, MetadataResponse, recv_response

        try:
            with socket.create_connection((self.host, self.port), timeout=timeout) as s:
                s.sendall(MetadataRequest(()).encode())
                return MetadataResponse.decode(recv_response(s)).error == 0
        except (OSError, ValueError, Exception):  # noqa: BLE001 - any failure means "not yet"
            return False

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait; returns the exit code (0 after a graceful stop)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise BrokerStartError(f"broker {self.broker_id} ignored SIGTERM for {timeout}s:\n"
                                       + self.output()[-3000:])
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL (no flush, no deregistration) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self, timeout: float = 30.0) -> "BrokerProcess":
        """Stop (if running) and start again with the same id, port and log dir."""
        self.stop()
        return self.start(timeout)

    def output(self) -> str:
        try:
            return self.output_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"BrokerProcess({self.address}, {state}, log_dir={self.log_dir})"


def _merge(overrides: dict[str, Any] | None, kw: dict[str, Any]) -> dict[str, Any]:
    merged = {k.replace("_", "."): v for k, v in kw.items()}
    merged.update(overrides or {})
    return merged


def broker_cluster(tmp_path_factory, n: int = 1, zk_connect: str | None = None, *,
                   overrides: dict[str, Any] | None = None, first_id: int = 0,
                   **kw: Any) -> list[BrokerProcess]:
    """Start ``n`` brokers (ids ``first_id``..) and wait until all serve.

    The caller stops them (``stop_all``), or use the ``broker_factory`` fixture.
    If one fails to start, the ones already started are killed.
    """
    brokers: list[BrokerProcess] = []
    try:
        for i in range(n):
            bid = first_id + i
            work = tmp_path_factory.mktemp(f"broker{bid}")
            brokers.append(BrokerProcess(bid, work, zk_connect=zk_connect,
                                         overrides=_merge(overrides, kw)).start())
    except BaseException:
        for b in brokers:
            b.kill()
        raise
    return brokers


def broker_list(brokers: list[BrokerProcess]) -> str:
    """``"id:host:port,..."`` for a producer's ``broker.list``."""
    return ",".join(b.address for b in brokers)


def stop_all(brokers: list[BrokerProcess]) -> None:
    """SIGTERM every running broker (SIGKILL if one hangs)."""
    for b in brokers:
        if b.running:
            b.proc.send_signal(signal.SIGTERM)
    for b in brokers:
        try:
            b.stop(timeout=15)
        except BrokerStartError:
            pass


@pytest.fixture
def broker_factory(tmp_path_factory) -> Callable[..., list[BrokerProcess]]:
    """``broker_factory(n=1, zk_connect=None, **overrides)``: brokers stopped at teardown."""
    started: list[BrokerProcess] = []
    next_id = [0]

    def make(n: int = 1, zk_connect: str | None = None, *, overrides: dict[str, Any] | None = None,
             **kw: Any) -> list[BrokerProcess]:
        brokers = broker_cluster(tmp_path_factory, n, zk_connect, overrides=overrides,
                                 first_id=next_id[0], **kw)
        next_id[0] += n
        started.extend(brokers)
        return brokers

    yield make
    stop_all(started)


class RawClient:
    """A minimal blocking wire client for tests (no retries, no discovery).

    ``request(req)`` sends a protocol request object (or raw frame bytes) and
    returns the response bytes after ``size`` (decode with the matching
    ``protocol.*Response.decode``); ``send`` writes without reading.
    """

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)

    def send(self, req: Any) -> None:
        self.sock.sendall(req if isinstance(req, (bytes, bytearray)) else req.encode())

    def request(self, req: Any) -> bytes:
        from ingest.wire.protocol import recv_response

        self.send(req)
        return recv_response(self.sock)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection within ``timeout`` (reads and drops data)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
