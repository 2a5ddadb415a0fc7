"""The cluster bench/bench_replication.py measures: its own ZooKeeper and 3 broker processes,
and the request frames it sends (sets of 50 messages of 200 bytes).

Also what the bench prints about the machine: hardware, and which other processes used
the CPU (sampled from /proc), since benchmarks here share two cores with other work.
"""
from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from ingest import znodes
from ingest.broker.assignment import assign
from ingest.client.discovery import BrokerAddress
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.records.message_set import encode_message_set
from ingest.wire import protocol as p
from tests.harness.brokers import BrokerProcess, stop_all
from tests.harness.zookeeper import ZooKeeperServer

N_BROKERS = 3
PAYLOAD_SIZE = 200
BATCH = 50


class Cluster:
    """ZooKeeper + 3 brokers + a kazoo client of the bench's own, all stopped by ``close``.

    ``per_broker(i)`` adds overrides of broker ``i`` alone (its own listener port, say); ``root`` is the
    checkout the brokers run (this one unless given).
    """

    def __init__(self, work: Path, overrides: dict, *, per_broker=None, root: Path | None = None) -> None:
        self.work = work
        self.overrides = overrides
        self.per_broker = per_broker or (lambda i: {})
        self.root = root
        self.zk_server: ZooKeeperServer | None = None
        self.zk: KazooClient | None = None
        self.brokers: list[BrokerProcess] = []

    def start(self) -> "Cluster":
        self.zk_server = ZooKeeperServer()
        self.zk_server.start()
        self.zk = KazooClient(hosts=self.zk_server.connect, timeout=10.0)
        self.zk.start(timeout=30)
        for i in range(N_BROKERS):
            self.brokers.append(BrokerProcess(i, self.work / f"broker{i}", zk_connect=self.zk_server.connect,
                                              overrides={**self.overrides, **self.per_broker(i)}, root=self.root))
        for b in self.brokers:
            b.start(timeout=60)
        return self

    def close(self) -> None:
        try:
            stop_all(self.brokers)
        finally:
            for b in self.brokers:
                b.kill()
            if self.zk is not None:
                try:
                    self.zk.stop()
                    self.zk.close()
                except Exception:  # noqa: BLE001 - best effort at exit
                    pass
            if self.zk_server is not None:
                self.zk_server.stop()

    def addresses(self) -> list[BrokerAddress]:
        return [BrokerAddress(b.broker_id, b.host, b.port) for b in self.brokers]

    def metadata(self) -> ReplicaMetadata:
        return ReplicaMetadata(self.addresses, timeout_s=2.0, max_age_s=3600)

    def create_topic(self, topic: str, partitions: int, rf: int) -> dict[int, list[int]]:
        assignment = assign([b.broker_id for b in self.brokers], partitions, rf)
        self.zk.retry(self.zk.create, znodes.topic_dir(topic), znodes.assignment_value(assignment), makepath=True)
        return assignment

    def state(self, topic: str, partition: int) -> znodes.PartitionState | None:
        try:
            data, stat = self.zk.retry(self.zk.get, znodes.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return znodes.PartitionState.parse(data, stat.version)

    def controller(self) -> int | None:
        try:
            data, _ = self.zk.retry(self.zk.get, znodes.CONTROLLER)
        except NoNodeError:
            return None
        return znodes.parse_controller(data)

    def wait_state(self, topic: str, partition: int, ok, timeout: float, what: str) -> znodes.PartitionState:
        deadline = time.monotonic() + timeout
        while True:
            st = self.state(topic, partition)
            if st is not None and ok(st):
                return st
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}-{partition}: no {what} after {timeout:.0f}s (state {st})")
            time.sleep(0.05)


def brokers_cpu(cluster: Cluster) -> float:
    """CPU seconds (user + system) used so far by the running broker processes together."""
    total = 0.0
    for b in cluster.brokers:
        if b.running:
            fields = Path(f"/proc/{b.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total



def fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def machine() -> list[str]:
    mem = next((ln.split()[1] for ln in open("/proc/meminfo") if ln.startswith("MemTotal")), "?")
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        java = "java ?"
    return [f"machine: {os.cpu_count()} CPUs ({cpu}), {int(mem) / 1e6:.1f} GB RAM, Linux {platform.release()}, "
            f"Python {platform.python_version()}, {java}"]


def _proc_cpu() -> dict[int, tuple[int, float, str]]:
    """pid -> (ppid, CPU seconds so far, command) of every process readable in /proc."""
    tck = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        f = raw.rsplit(")", 1)[1].split()
        out[int(d)] = (int(f[1]), (int(f[11]) + int(f[12])) / tck, cmd or raw.split("(", 1)[1].split(")")[0])
    return out


def busy_processes(seconds: float = 1.0, top: int = 6) -> list[str]:
    """The processes outside this bench's own tree that used CPU during the next ``seconds``."""
    a = _proc_cpu()
    time.sleep(seconds)
    b = _proc_cpu()
    mine = {os.getpid()}
    for _ in range(4):   # this process, its children (brokers, ZooKeeper) and theirs
        mine |= {pid for pid, (ppid, _, _) in b.items() if ppid in mine}
    used = sorted(((b[pid][1] - a[pid][1], pid) for pid in b if pid in a and pid not in mine), reverse=True)
    return [f"{b[pid][2][:70]} (pid {pid}, {cpu / seconds:.0%} of a CPU)" for cpu, pid in used[:top] if cpu >= 0.05]


def payload_set(seed: int) -> bytes:
    rnd = os.urandom(PAYLOAD_SIZE * BATCH)
    return encode_message_set([rnd[i * PAYLOAD_SIZE:(i + 1) * PAYLOAD_SIZE] for i in range(BATCH)])


def frame(topic: str, partition: int, mset: bytes, acks: int, timeout_ms: int) -> bytes:
    produce = p.ProduceRequest(topic, partition, mset)
    return produce.encode() if acks == 0 else p.ProduceAcksRequest(acks, timeout_ms, produce).encode()
