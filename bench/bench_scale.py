"""Controller scale: 3 brokers, 1,000 partitions of replication factor 3, a steady load, SIGKILLs.

One process tree, per value of ``--batch`` (``controller.batch.partitions``: 1 is one ZooKeeper read and one
write per partition, the controller's way before batching; 100 the default), in turn: the bench starts a
real ZooKeeper (tests/harness/zookeeper.py) and 3 real broker processes (tests/harness/brokers.py) in a
temporary directory, creates ``--topics`` topics with ``--partitions`` partitions in all (replication
factor 3, Kafka's round-robin assignment) by writing their assignment znodes, waits until every partition
has a leader and all three replicas in sync, and stops everything at exit (also on Ctrl-C or SIGTERM).

The topics are Kafka-format topics. A load thread then writes all the time: a confluent-kafka producer
(acks=1, ``linger.ms`` 5), round robin over every partition, ``--rate`` messages of 100 bytes a second in
all. The bench watches every partition state (one ZooKeeper watch per state node, as a broker does).

Measured, with that load running:

- *steady*: threads and RSS of each broker (/proc), ZooKeeper's node count and zxid (its ``srvr``
  command; every write transaction takes one zxid) over ``--steady-s`` seconds: its write rate, and the
  watches it holds (``wchs``);
- *kills* (``--kills`` times, the brokers in turn, the controller among them): SIGKILL a broker once
  every partition has its three replicas in sync; *detect* = until its ``/brokers/ids`` node vanished
  (``zk.sessiontimeout.ms`` plus up to a ZooKeeper tick), *elect* = until every partition it led names
  another leader (from the state watches), *offline* = partitions whose leader is -1 then, ZooKeeper
  transactions from the kill until *elect* (zxid difference: the dead session's ephemeral nodes count
  too); then the broker is restarted and *rejoin* = from the restart until it is back in the in-sync set of
  every partition it holds. The rejoin is split: *registered* = from the restart until its ``/brokers/ids``
  node is back (process start, log recovery), *first join* and *last join* = from then until the first and
  the last in-sync set that names it again was written, and *ISR transactions* = the distinct ``mzxid`` of
  those writes (ZooKeeper gives every node written by one transaction the same one).

``--reference REV`` adds, before the runs of this checkout, the same runs with brokers of another commit
(its tree extracted with ``git archive`` into the temporary directory), for a before/after in one run.

Usage::

    .venv/bin/python bench/bench_scale.py [--partitions 1000] [--topics 100] [--kills 10] [--batch 1,100]
    .venv/bin/python bench/bench_scale.py --quick     # 60 partitions, 2 kills: a smoke run
    .venv/bin/python bench/bench_scale.py --partitions 300 --topics 30 --kills 3 --batch 100 --reference main
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import znodes  # noqa: E402
from ingest.broker.assignment import assign  # noqa: E402
from bench_fetchers import extract  # noqa: E402
from replication_cluster import N_BROKERS, Cluster, busy_processes, fmt, machine  # noqa: E402

REPLICATION = 3


def zk_command(connect: str, word: str) -> str:
    """The answer of one ZooKeeper four-letter command (``srvr``, ``wchs``)."""
    host, port = connect.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(word.encode())
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def zk_stats(connect: str) -> dict[str, int]:
    """zxid and node count from ``srvr``, watches from ``wchs`` (-1 where ZooKeeper refuses the command)."""
    out = {"zxid": -1, "nodes": -1, "watches": -1}
    for line in zk_command(connect, "srvr").splitlines():
        if line.startswith("Zxid:"):
            out["zxid"] = int(line.split(":", 1)[1].strip(), 16) & 0xFFFFFFFF   # the counter within the epoch
        elif line.startswith("Node count:"):
            out["nodes"] = int(line.split(":", 1)[1])
    for line in zk_command(connect, "wchs").splitlines():
        if "Total watches:" in line:
            out["watches"] = int(line.rsplit(":", 1)[1])
    return out


def proc_status(pid: int) -> tuple[int, float]:
    """(threads, RSS in MB) of a running process."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


class States:
    """Every partition's state, kept by one DataWatch each, with the time of each change."""

    def __init__(self, cluster: Cluster, keys: list[tuple[str, int]]) -> None:
        self.latest: dict[tuple[str, int], znodes.PartitionState] = {}
        self.changes: dict[tuple[str, int], list[tuple[float, znodes.PartitionState]]] = {k: [] for k in keys}
        self.ids: list[tuple[float, set[int]]] = []
        self.lock = threading.Lock()
        zk = cluster.zk
        for key in keys:
            zk.DataWatch(znodes.partition_state_path(*key), self._watch(key))
        zk.ChildrenWatch(znodes.BROKER_IDS, lambda ch: self.ids.append((time.monotonic(), {int(c) for c in ch})))

    def _watch(self, key):
        def watch(data, stat) -> None:
            if data:
                st = znodes.PartitionState.parse(data, stat.version, stat.mzxid)
                with self.lock:
                    self.latest[key] = st
                    self.changes[key].append((time.monotonic(), st))
        return watch

    def all(self, ok) -> bool:
        with self.lock:
            return len(self.latest) == len(self.changes) and all(ok(s) for s in self.latest.values())

    def wait(self, ok, timeout: float, what: str) -> float:
        deadline = time.monotonic() + timeout
        while not self.all(ok):
            if time.monotonic() > deadline:
                with self.lock:
                    bad = [(k, s) for k, s in self.latest.items() if not ok(s)][:5]
                raise RuntimeError(f"no {what} after {timeout:.0f} s (e.g. {bad})")
            time.sleep(0.05)
        return time.monotonic()

    def leaders(self) -> dict[tuple[str, int], int]:
        with self.lock:
            return {k: s.leader for k, s in self.latest.items()}


class Load(threading.Thread):
    """A confluent-kafka (librdkafka) producer, acks=1: round robin over every partition, ``rate`` messages of
    100 bytes a second in all; it finds new leaders itself (metadata refresh) as any Kafka client does."""

    def __init__(self, cluster: Cluster, keys: list[tuple[str, int]], rate: float) -> None:
        super().__init__(name="load", daemon=True)
        from confluent_kafka import Producer

        self.keys, self.rate = keys, rate
        self.stop = threading.Event()
        self.acked = 0
        self.errors: dict[str, int] = {}
        bootstrap = ",".join(f"{b.host}:{b.kafka_port}" for b in cluster.brokers)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                                  "message.timeout.ms": 60_000, "retry.backoff.ms": 100,
                                  "topic.metadata.refresh.interval.ms": 10_000, "log_level": 0})
        self.value = os.urandom(100)

    def _done(self, err, _msg) -> None:
        if err is None:
            self.acked += 1
        else:
            self.errors[err.name()] = self.errors.get(err.name(), 0) + 1

    def run(self) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        i = 0
        while not self.stop.is_set():
            topic, part = self.keys[i % len(self.keys)]
            try:
                self.producer.produce(topic, self.value, partition=part, on_delivery=self._done)
                i += 1
            except BufferError:
                self.errors["BufferError"] = self.errors.get("BufferError", 0) + 1
            self.producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self.stop.wait(delay)
            else:
                next_at = time.monotonic()   # behind: no burst to catch up
        self.producer.flush(30)


def create_topics(cluster: Cluster, topics: int, partitions: int) -> list[tuple[str, int]]:
    """Kafka-format topics (their followers copy on ``num.replica.fetchers`` threads per leader), Kafka's
    round-robin assignment over the 3 brokers."""
    per = [partitions // topics + (1 if i < partitions % topics else 0) for i in range(topics)]
    ids = [b.broker_id for b in cluster.brokers]
    keys = []
    for i, n in enumerate(per):
        name = f"scale-{i:03d}"
        cluster.zk.retry(cluster.zk.create, znodes.topic_dir(name),
                         znodes.assignment_value(assign(ids, n, REPLICATION), znodes.KAFKA_FORMAT), makepath=True)
        keys += [(name, q) for q in range(n)]
    return keys


def rejoin_parts(states: States, keys: list[tuple[str, int]], vid: int, t_restart: float) -> dict:
    """Where a rejoin's time went: until ``vid`` registered again, until the first and the last state naming
    it in the in-sync set was written, and how many ZooKeeper transactions (distinct mzxid) wrote those."""
    t_reg = next((t for t, ids in states.ids if t >= t_restart and vid in ids), None)
    joins = []
    with states.lock:
        for k in keys:
            joined = next(((t, s.mzxid) for t, s in states.changes[k] if t >= t_restart and vid in s.isr), None)
            if joined is not None:
                joins.append(joined)
    times = sorted(t for t, _ in joins)
    base = t_reg if t_reg is not None else t_restart
    return {"registered": None if t_reg is None else t_reg - t_restart,
            "first_join": times[0] - base if times else None, "last_join": times[-1] - base if times else None,
            "isr_tx": len({z for _, z in joins}), "joined": len(joins)}


def run_one(work: Path, batch: int, args, log, *, root: Path | None = None, label: str = "this checkout") -> dict:
    overrides = {"num.partitions": 1, "log.flush.interval": 10_000, "log.default.flush.interval.ms": 1000,
                 "log.default.flush.scheduler.interval.ms": 500, "num.threads": 2, "log.file.size": 1 << 20,
                 "zk.sessiontimeout.ms": args.zk_session_ms, "min.insync.replicas": 1,
                 "replica.lag.time.max.ms": 10_000, "replica.fetch.wait.max.ms": 500,
                 "auto.leader.rebalance.enable": False, "controller.batch.partitions": batch}
    log(f"\n== {label}, controller.batch.partitions={batch}: {args.partitions} partitions x RF {REPLICATION} in "
        f"{args.topics} topics, {N_BROKERS} brokers; broker settings {overrides}")
    cluster = Cluster(work, overrides, root=root)
    res: dict = {"batch": batch, "label": label, "kills": []}
    load = None
    t0 = time.monotonic()
    try:
        cluster.start()
        log(f"ZooKeeper {cluster.zk_server.connect} (pid {cluster.zk_server.proc.pid}), brokers "
            + ", ".join(f"{b.broker_id}@{b.port} (pid {b.pid})" for b in cluster.brokers))
        keys = create_topics(cluster, args.topics, args.partitions)
        states = States(cluster, keys)
        t_ready = states.wait(lambda s: s.leader >= 0 and len(s.isr) == REPLICATION, args.timeout_s,
                              "leader and full in-sync set for every partition")
        res["setup_s"] = t_ready - t0
        log(f"all {len(keys)} partitions led with {REPLICATION} replicas in sync {res['setup_s']:.1f} s after start")
        load = Load(cluster, keys, args.rate)
        load.start()
        time.sleep(min(5.0, args.steady_s))
        z0, t_z0 = zk_stats(cluster.zk_server.connect), time.monotonic()
        acked0 = load.acked
        time.sleep(args.steady_s)
        z1, t_z1 = zk_stats(cluster.zk_server.connect), time.monotonic()
        per_broker = [proc_status(b.pid) for b in cluster.brokers]
        res.update(threads=[t for t, _ in per_broker], rss=[m for _, m in per_broker], nodes=z1["nodes"],
                   watches=z1["watches"], write_rate=(z1["zxid"] - z0["zxid"]) / (t_z1 - t_z0),
                   produce_rate=(load.acked - acked0) / (t_z1 - t_z0))
        log(f"steady: threads {res['threads']}, RSS {[round(m) for m in res['rss']]} MB, znodes {res['nodes']}, "
            f"watches {res['watches']}, ZooKeeper writes {res['write_rate']:.1f}/s, "
            f"acked messages {res['produce_rate']:.0f}/s")
        for i in range(args.kills):
            states.wait(lambda s: s.leader >= 0 and len(s.isr) == REPLICATION, args.timeout_s, "full in-sync sets")
            victim = cluster.brokers[i % N_BROKERS]
            vid = victim.broker_id
            led = [k for k, leader in states.leaders().items() if leader == vid]
            was_ctl = cluster.controller() == vid
            zk_before = zk_stats(cluster.zk_server.connect)["zxid"]
            t_kill = time.monotonic()
            victim.kill()
            t_elect = states.wait(lambda s: s.leader != vid, args.timeout_s, f"new leaders without broker {vid}")
            zk_after = zk_stats(cluster.zk_server.connect)["zxid"]
            offline = sum(1 for leader in states.leaders().values() if leader < 0)
            t_gone = next((t for t, ids in states.ids if t >= t_kill and vid not in ids), None)
            with states.lock:
                elected_at = [next((t for t, s in states.changes[k] if t >= t_kill and s.leader not in (vid, -1)), t_elect)
                              for k in led]
            t_all = max(elected_at, default=t_elect)
            t_restart = time.monotonic()
            victim.start(timeout=args.timeout_s)
            t_back = states.wait(lambda s: vid in s.isr, args.timeout_s, f"broker {vid} back in every in-sync set")
            row = {"broker": vid, "controller": was_ctl, "led": len(led), "offline": offline,
                   "detect": None if t_gone is None else t_gone - t_kill, "elect": t_all - t_kill,
                   "writes": zk_after - zk_before, "rejoin": t_back - t_restart,
                   **rejoin_parts(states, keys, vid, t_restart)}
            row["after_expiry"] = None if row["detect"] is None else row["elect"] - row["detect"]
            res["kills"].append(row)
            log(f"kill {i + 1}/{args.kills}: broker {vid}{' (controller)' if was_ctl else ''} led {len(led)}; "
                f"detect {fmt(row['detect'])} s, all re-elected {row['elect']:.2f} s ({fmt(row['after_expiry'])} s "
                f"after its session ended), offline {offline}, ZooKeeper transactions {row['writes']}, "
                f"back in every ISR {row['rejoin']:.2f} s after restart (registered after {fmt(row['registered'])} s, "
                f"then first/last join {fmt(row['first_join'])}/{fmt(row['last_join'])} s, {row['joined']} joins "
                f"in {row['isr_tx']} ZooKeeper transactions); load average "
                f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        res["load_errors"] = dict(load.errors)
        res["acked"] = load.acked
    finally:
        if load is not None:
            load.stop.set()
            load.join(10)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cluster.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        log(f"brokers and ZooKeeper stopped; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return res


def med(vals):
    vals = [v for v in vals if v is not None]
    return (statistics.median(vals), max(vals)) if vals else (None, None)


def report(results: list[dict], args) -> None:
    print(f"\nscale run: {args.partitions} partitions x RF {REPLICATION} ({args.partitions * REPLICATION} replicas) "
          f"in {args.topics} topics, {N_BROKERS} brokers, zk.sessiontimeout.ms={args.zk_session_ms}, "
          f"load {args.rate:.0f} acks=1 messages/s")
    head = [f"{r['label']}, controller.batch.partitions={r['batch']}" for r in results]
    print("| | " + " | ".join(head) + " |")
    print("| --- |" + " ---: |" * len(results))

    def row(name, cell):
        print(f"| {name} | " + " | ".join(cell(r) for r in results) + " |")
    row("threads per broker", lambda r: "/".join(str(t) for t in r["threads"]))
    row("RSS per broker (MB)", lambda r: "/".join(f"{m:.0f}" for m in r["rss"]))
    row("ZooKeeper znodes", lambda r: str(r["nodes"]))
    row("ZooKeeper watches", lambda r: str(r["watches"]))
    row("ZooKeeper writes/s under steady load", lambda r: f"{r['write_rate']:.1f}")
    row("acked messages/s", lambda r: f"{r['produce_rate']:.0f}")
    row("setup: every partition led, all in sync (s)", lambda r: f"{r['setup_s']:.1f}")
    for key, name in (("detect", "kill to session expired (s)"), ("elect", "kill to every partition re-elected (s)"),
                      ("after_expiry", "**session expired to every partition re-elected (s)**"),
                      ("writes", "ZooKeeper transactions per kill"), ("rejoin", "restart to back in every ISR (s)"),
                      ("registered", "restart to registered again (s)"),
                      ("first_join", "registered to its first ISR join (s)"),
                      ("last_join", "registered to its last ISR join (s)"),
                      ("isr_tx", "ZooKeeper transactions writing its ISR joins")):
        row(f"{name}, median / max", lambda r, key=key: " / ".join(
            fmt(v) if key not in ("writes", "isr_tx") or v is None else f"{v:.0f}"
            for v in med([k[key] for k in r["kills"]])))
    row("partitions offline after a kill (max)", lambda r: str(max((k["offline"] for k in r["kills"]), default=0)))
    row("kills (of the controller)", lambda r: f"{len(r['kills'])} ({sum(k['controller'] for k in r['kills'])})")
    row("load errors", lambda r: ", ".join(f"{k} x{v}" for k, v in sorted(r["load_errors"].items())) or "none")
    by = {(r["label"], r["batch"]): r for r in results}
    refs = [r for r in results if r["label"] != "this checkout"]
    for ref in refs:
        mine = next((r for r in results if r["label"] == "this checkout" and r["batch"] == ref["batch"]), None)
        for key, name in (("rejoin", "restart to back in every ISR"), ("last_join", "registered to last ISR join"),
                          ("isr_tx", "ZooKeeper transactions writing the ISR joins")):
            a = med([k[key] for k in mine["kills"]])[0] if mine else None
            b = med([k[key] for k in ref["kills"]])[0]
            if a is not None and b:
                print(f"ratio {name}, this checkout / {ref['label']} (median, batch {ref['batch']}): {a / b:.2f}")
    if len({r["batch"] for r in results}) > 1 and not refs:
        one, many = results[0], results[-1]
        for key, name in (("after_expiry", "re-election after the session expired"),
                          ("writes", "ZooKeeper transactions per kill")):
            a, b = med([k[key] for k in many["kills"]])[0], med([k[key] for k in one["kills"]])[0]
            if a is not None and b:
                print(f"ratio {name}, batch {many['batch']} / batch {one['batch']} (median): {a / b:.2f}")
    worst = max((k["after_expiry"] for r in by.values() for k in r["kills"] if k["after_expiry"] is not None),
                default=None)
    print(f"aims: < 20 threads per broker; every partition re-elected within 5 s of the session expiry "
          f"(worst {fmt(worst)} s); no partition offline")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000, help="partitions in all (replication factor 3)")
    ap.add_argument("--topics", type=int, default=100, help="topics the partitions are spread over")
    ap.add_argument("--kills", type=int, default=10, help="broker SIGKILLs per run (the brokers in turn)")
    ap.add_argument("--batch", default="1,100",
                    help="comma-separated controller.batch.partitions values: one cluster run for each")
    ap.add_argument("--rate", type=float, default=100.0, help="acks=1 messages per second in all")
    ap.add_argument("--steady-s", type=float, default=10.0, help="seconds of steady load measured")
    ap.add_argument("--zk-session-ms", type=int, default=6000, help="the brokers' zk.sessiontimeout.ms")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="give up waiting for a state after this")
    ap.add_argument("--keep-dir", help="put the brokers' directories here and keep them")
    ap.add_argument("--reference", metavar="REV",
                    help="also run every --batch value with brokers of this commit first (e.g. main)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 60 partitions in 6 topics, 2 kills, 2 s steady")
    args = ap.parse_args(argv)
    if args.quick:
        args.partitions, args.topics, args.kills, args.steady_s = 60, 6, min(args.kills, 2), 2.0
    try:
        batches = [int(x) for x in args.batch.split(",") if x.strip()]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1 or max(batches) > 1000:
        ap.error(f"--batch {args.batch!r}: allowed is a comma-separated list of integers from 1 to 1000")
    if args.topics < 1 or args.partitions < args.topics:
        ap.error(f"--partitions {args.partitions} --topics {args.topics}: allowed is 1 <= topics <= partitions")

    def on_term(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    logging.getLogger("kazoo").setLevel(logging.ERROR)

    def log(msg: str) -> None:
        print(msg, flush=True)

    for line in machine():
        log(line)
    log(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    others = busy_processes()
    log("other processes using CPU (1 s sample): " + ("; ".join(others) if others else "none above 5%"))
    results = []
    with (contextlib.nullcontext(args.keep_dir) if args.keep_dir
          else tempfile.TemporaryDirectory(prefix="bench-scale-")) as work:
        runs = [(f"reference {args.reference}", extract(args.reference, Path(work) / "reference"))] \
            if args.reference else []
        runs.append(("this checkout", None))
        for label, root in runs:
            for batch in batches:
                sub = Path(work) / f"{'ref' if root else 'this'}-batch{batch}"
                results.append(run_one(sub, batch, args, log, root=root, label=label))
    log(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(results, args)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
