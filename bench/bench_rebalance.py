"""Rebalance time of a consumer group: one of its confluent-kafka members SIGKILLed, or leaving cleanly, over and over.

One process tree: a real ZooKeeper and 3 real brokers (tests/harness/), a Kafka topic of ``--partitions``
partitions (replication factor 3), ``--members`` confluent-kafka consumers in one group, each its own
process (bench/rebalance_member.py: librdkafka's default assignors, eager; auto-commit), and a producer in
this process writing ``--rate`` records a second spread over every partition. For each
``session.timeout.ms`` of ``--session-timeouts`` (``heartbeat.interval.ms`` a third of it, at most
librdkafka's default 3 s), with every member up and consuming every partition, and after a random wait of
up to one heartbeat interval (the members heartbeat in step once a rebalance completes; a crash comes at
any point of that cycle):

- **SIGKILL**, ``--kills`` times: one member (the next in turn) is SIGKILLed; measured from the kill to
  (1) the first survivor's revoke callback (the coordinator expired the member after its session
  timeout and the survivors heard of the rebalance with their next heartbeat), (2) the moment every
  partition is assigned again among the survivors (the last survivor's assign callback), (3) the moment
  consumption has resumed on every partition (a record of each consumed by its new owner). Then the
  member is started again and the group settles before the next kill.
- **close()**, ``--kills`` times: the member gets SIGTERM and calls ``close()`` (a commit and LeaveGroup:
  no session timeout to wait for); the same three times from the signal.

Prints each event, then per row the median and max of each of the three times, and what dominates.
Every process is stopped by PID in ``finally``, also on SIGINT/SIGTERM/SIGHUP; the last line lists the
PIDs and that none is left. Usage::

    .venv/bin/python bench/bench_rebalance.py [--kills 20] [--members 5] [--partitions 100]
        [--session-timeouts 45000,6000] [--rate 1000]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.peers.run import Stop, raise_deferred, stop_on_signals, stopping_servers  # noqa: E402
from bench.replication_cluster import Cluster, busy_processes, machine  # noqa: E402
from ingest import znodes  # noqa: E402
from ingest.broker.assignment import assign  # noqa: E402
from tests.harness import reaper  # noqa: E402

TOPIC = "rebalance"
GROUP = "rebalance-bench"
MEMBER = REPO / "bench" / "rebalance_member.py"
HEARTBEAT_DEFAULT_MS = 3000  # librdkafka's heartbeat.interval.ms
#: the brokers: flushed as the other benchmarks flush (every 10,000 messages or 1 s), 2 in-sync replicas
SETTINGS = {"log.flush.interval": 10_000, "log.default.flush.interval.ms": 1000,
            "log.default.flush.scheduler.interval.ms": 200, "min.insync.replicas": 2,
            "zk.sessiontimeout.ms": 6000, "replica.fetch.wait.max.ms": 500}


def heartbeat_ms(session_ms: int) -> int:
    return min(HEARTBEAT_DEFAULT_MS, session_ms // 3)


class Member:
    """One member process and what its event file says so far (read incrementally)."""

    def __init__(self, name: str, bootstrap: str, session_ms: int, work: Path) -> None:
        self.name, self.bootstrap, self.session_ms, self.work = name, bootstrap, session_ms, work
        self.proc: subprocess.Popen | None = None
        self.pids: list[int] = []
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.path = self.work / f"{self.name}-{self.starts}.jsonl"
        self.read_at = 0
        self.assigned: list[int] = []
        self.assign_t: float | None = None
        self.first: dict[int, float] = {}
        self.revokes: list[float] = []
        self.assigns: list[float] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(MEMBER), self.bootstrap, GROUP, TOPIC, str(self.session_ms),
             str(heartbeat_ms(self.session_ms)), str(self.path)],
            cwd=str(REPO), stdin=subprocess.DEVNULL, stdout=open(self.work / f"{self.name}.out", "ab"),
            stderr=subprocess.STDOUT, start_new_session=True)
        reaper.watch(self.proc)  # stopped even if this process is SIGKILLed
        self.pids.append(self.proc.pid)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def read(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            f.seek(self.read_at)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.read_at += end
        for line in data[:end].splitlines():
            ev = json.loads(line)
            if ev["e"] == "assign":
                self.assigned, self.assign_t, self.first = ev["p"], ev["t"], {}
                self.assigns.append(ev["t"])
            elif ev["e"] == "revoke":
                self.assigned = [p for p in self.assigned if p not in ev["p"]]
                self.revokes.append(ev["t"])
            elif ev["e"] == "first":
                self.first[ev["p"]] = ev["t"]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        reaper.forget(self.proc)

    def stop(self, timeout: float = 30.0) -> None:
        if self.running:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self.proc is not None:
            reaper.forget(self.proc)


class Producer(threading.Thread):
    """confluent-kafka, acks=1: ``rate`` records a second, partition ``i % partitions`` for record ``i``."""

    def __init__(self, bootstrap: str, partitions: int, rate: int) -> None:
        super().__init__(name="rebalance-producer", daemon=True)
        from confluent_kafka import Producer as CProducer

        # log.connection.close off: the brokers stopped at the end are not news
        self.p = CProducer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "log.connection.close": False})
        self.partitions, self.rate = partitions, rate
        self.halt = threading.Event()
        self.sent = 0

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.halt.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while self.sent < due:
                try:
                    self.p.produce(TOPIC, b"x" * 100, partition=self.sent % self.partitions)
                except BufferError:
                    break
                self.sent += 1
            self.p.poll(0.01)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        self.p.flush(30)
        self.p = None  # destroyed before the brokers stop: no reconnect attempts logged


def settled(members: list[Member], partitions: int, since: float) -> bool:
    """Every live member has an assignment made after ``since``, together every partition exactly once,
    and each has consumed a record of each of its partitions since."""
    live = [m for m in members if m.running]
    for m in live:
        m.read()
    if any(m.assign_t is None or m.assign_t < since or not m.assigned for m in live):
        return False
    owned = sorted(p for m in live for p in m.assigned)
    return owned == list(range(partitions)) and all(set(m.first) >= set(m.assigned) for m in live)


def wait_settled(members: list[Member], partitions: int, since: float, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not settled(members, partitions, since):
        dead = [m.name for m in members if m.proc is not None and not m.running and m.proc.returncode not in
                (0, -signal.SIGKILL)]
        if dead:
            raise RuntimeError(f"{what}: member(s) {dead} exited; see their .out files")
        if time.monotonic() > deadline:
            state = {m.name: (len(m.assigned), len(m.first)) for m in members if m.running}
            raise RuntimeError(f"{what}: the group did not settle within {timeout:.0f} s "
                               f"(member: (partitions assigned, consuming) {state})")
        time.sleep(0.05)


def event(members: list[Member], victim: Member, how: str, partitions: int, timeout: float, delay: float) -> dict:
    """After ``delay`` s, kill (``sigkill``) or close (``close``) ``victim``; the three times from then; start it
    again."""
    survivors = [m for m in members if m is not victim]
    time.sleep(delay)
    for m in survivors:
        m.read()
    t0 = time.monotonic()
    if how == "sigkill":
        victim.kill()
    else:
        victim.proc.terminate()
    wait_settled(survivors, partitions, t0, timeout, f"{how} of {victim.name}")
    if how == "close":
        victim.proc.wait(30)
        reaper.forget(victim.proc)
    told = min(t for m in survivors for t in m.revokes if t >= t0)
    assigned = max(m.assign_t for m in survivors)
    resumed = max(t for m in survivors for t in m.first.values())
    res = {"told": told - t0, "assigned": assigned - t0, "resumed": resumed - t0}
    t1 = time.monotonic()
    victim.start()
    wait_settled(members, partitions, t1, timeout, f"{victim.name} back in the group")
    return res


def fmt_s(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} / {max(xs):.2f}" if xs else "-"


def run_group(args, cluster: Cluster, session_ms: int, work: Path, members_out: list[Member]) -> dict:
    bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in cluster.brokers)
    members = [Member(f"s{session_ms}-m{i}", bootstrap, session_ms, work) for i in range(args.members)]
    members_out.extend(members)
    t0 = time.monotonic()
    for m in members:
        m.start()
    timeout = session_ms / 1000 + args.settle_timeout
    wait_settled(members, args.partitions, t0, timeout, "the group's first rebalance")
    print(f"\nsession.timeout.ms {session_ms}, heartbeat.interval.ms {heartbeat_ms(session_ms)}: "
          f"{args.members} members consuming all {args.partitions} partitions after {time.monotonic() - t0:.1f} s "
          f"(member PIDs {[m.proc.pid for m in members]}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})", flush=True)
    rows: dict[str, list[dict]] = {"sigkill": [], "close": []}
    rnd = random.Random(args.seed + session_ms)
    for how in ("sigkill", "close"):
        for k in range(args.kills):
            victim = members[k % len(members)]
            # the members heartbeat in step (their timers start when a rebalance completes, and the group has
            # just settled): a kill at a random point of the heartbeat cycle, as a crash comes
            delay = rnd.uniform(0, heartbeat_ms(session_ms) / 1000)
            res = event(members, victim, how, args.partitions, timeout, delay)
            rows[how].append(res)
            print(f"  {how:<7} {k + 1:>2} of {args.kills} ({victim.name}, after {delay:.2f} s): "
                  f"first survivor told {res['told']:6.2f} s, "
                  f"every partition assigned {res['assigned']:6.2f} s, consumption resumed on every partition "
                  f"{res['resumed']:6.2f} s (load {os.getloadavg()[0]:.2f})", flush=True)
    for m in members:
        m.stop()
    return rows


def report(args, results: dict[int, dict]) -> str:
    out = [f"\n### Rebalance time: {args.members} confluent-kafka members, {args.partitions} partitions, "
           f"3 brokers; median / max over {args.kills} events, seconds\n"]
    out.append("| event | session.timeout.ms | heartbeat.interval.ms | n | to the first survivor told (revoke) "
               "| to every partition assigned | to consumption resumed on every partition |")
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for session_ms, rows in results.items():
        for how, label in (("sigkill", "member SIGKILLed"), ("close", "member leaves, close()")):
            xs = rows[how]
            out.append(f"| {label} | {session_ms} | {heartbeat_ms(session_ms)} | {len(xs)} "
                       f"| {fmt_s([x['told'] for x in xs])} | {fmt_s([x['assigned'] for x in xs])} "
                       f"| {fmt_s([x['resumed'] for x in xs])} |")
    out.append("\n### What dominates (medians)\n")
    for session_ms, rows in results.items():
        for how in ("sigkill", "close"):
            xs = rows[how]
            if not xs:
                continue
            told = statistics.median(x["told"] for x in xs)
            join = statistics.median(x["assigned"] - x["told"] for x in xs)
            fetch = statistics.median(x["resumed"] - x["assigned"] for x in xs)
            hb = heartbeat_ms(session_ms) / 1000
            wait = (f"the session timeout {session_ms / 1000:.1f} s from the member's last heartbeat, then the "
                    f"survivors' next heartbeat (every {hb:.1f} s)" if how == "sigkill"
                    else f"LeaveGroup, then the survivors' next heartbeat (every {hb:.1f} s)")
            out.append(f"- {how}, session.timeout.ms {session_ms}: until the survivors are told {told:.2f} s "
                       f"({wait}); told to every partition assigned (join + sync) {join:.2f} s; "
                       f"assigned to consuming everywhere {fetch:.2f} s")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs, and as many clean leaves, per session timeout")
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--session-timeouts", default="45000,6000",
                    help="comma-separated session.timeout.ms values, each a run of its own (45000 is librdkafka's "
                         "default; the brokers allow 6000 and up)")
    ap.add_argument("--rate", type=int, default=1000, help="records a second the producer writes, all partitions")
    ap.add_argument("--seed", type=int, default=1, help="of the random wait (0 to one heartbeat) before each event")
    ap.add_argument("--settle-timeout", type=float, default=120.0,
                    help="seconds beyond the session timeout that a rebalance may take before the run fails")
    args = ap.parse_args(argv)
    for name in ("kills", "members", "partitions", "rate"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} {getattr(args, name)}: allowed is an integer >= 1")
    if args.members < 2:
        ap.error(f"--members {args.members}: allowed is an integer >= 2 (survivors must take the partitions over)")
    try:
        sessions = [int(x) for x in args.session_timeouts.split(",") if x.strip()]
    except ValueError:
        sessions = []
    if not sessions or any(s < 6000 or s > 1_800_000 for s in sessions):
        ap.error(f"--session-timeouts {args.session_timeouts!r}: allowed is a comma-separated list of integers "
                 f"from 6000 to 1800000 (the brokers' group.min/max.session.timeout.ms)")
    stop_on_signals()
    print("; ".join(machine()), flush=True)
    print(f"load average at start {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min)", flush=True)
    others = busy_processes()
    print("other processes using CPU (1 s sample): " + ("; ".join(others) if others else "none above 5%"), flush=True)
    code = 0
    members: list[Member] = []
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-rebalance-") as work:
        cluster = Cluster(Path(work) / "cluster", SETTINGS)
        producer = None
        try:
            cluster.start()
            print(f"ZooKeeper and 3 brokers up (pid {cluster.zk_server.proc.pid}"
                  + "".join(f", pid {b.pid}" for b in cluster.brokers) + ")", flush=True)
            assignment = assign([b.broker_id for b in cluster.brokers], args.partitions, 3)
            cluster.zk.retry(cluster.zk.create, znodes.topic_dir(TOPIC),
                             znodes.assignment_value(assignment, znodes.KAFKA_FORMAT), makepath=True)
            for p in range(args.partitions):
                cluster.wait_state(TOPIC, p, lambda s: s.leader >= 0 and len(s.isr) == 3, 180, "3 in-sync replicas")
            bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in cluster.brokers)
            producer = Producer(bootstrap, args.partitions, args.rate)
            producer.start()
            for session_ms in sessions:
                results[session_ms] = run_group(args, cluster, session_ms, Path(work), members)
        except Stop as exc:
            print(f"\ninterrupted ({exc}): stopping every process", flush=True)
            code = 130
        except Exception as exc:  # noqa: BLE001 - reported, then everything is stopped
            print(f"\nfailed: {type(exc).__name__}: {exc}", flush=True)
            code = 1
        finally:
            def stop() -> None:
                if producer is not None:
                    producer.stop()
                for m in members:
                    m.stop()
                cluster.close()
            stopping_servers(stop)
            pids = [p for m in members for p in m.pids] + ([cluster.zk_server.proc.pid] if cluster.zk_server
                                                           and cluster.zk_server.proc else [])
            pids += [b.pid for b in cluster.brokers if b.pid]
            left = [p for p in pids if _alive(p)]
            print(f"stopped every process: PIDs {sorted(pids)}; left running: {left or 'none'}", flush=True)
            if left:
                code = code or 1
    raise_deferred("the processes")
    if results:
        print(report(args, results))
    print(f"\nload average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return code


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


if __name__ == "__main__":
    sys.exit(main())
