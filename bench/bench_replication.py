"""Replication: produce throughput per acknowledgement level, and leader failover time.

One process tree: the bench starts a real ZooKeeper (tests/harness/zookeeper.py)
and 3 real broker processes (tests/harness/brokers.py, ``ingest broker start``)
in a temporary directory, and stops all of them at exit, also on Ctrl-C or
SIGTERM. Replicated topics are created the controller's way, by writing the
assignment znode (``znodes.assignment_value`` at ``/brokers/topics/T``); the
bench then waits until every partition has a leader in its state znode.

1. **Throughput** (200-byte messages, message sets of 50, pre-encoded frames so the
   client costs next to nothing): topic ``rf3`` (3 partitions, replication factor 3,
   one leader per broker) with acks=0 (PRODUCE, then one acknowledged request per
   connection as a barrier), acks=1 and acks=-1 (PRODUCE_ACKS); the reference in the
   same run is acks=1 on topic ``rf1`` (3 partitions, replication factor 1, same
   leaders). Each partition is driven by N threads, each with its own
   ``BrokerConnection`` to the leader found with ``ReplicaMetadata`` and one request
   in flight, for ``--seconds``; the rows are repeated for every N of ``--inflight``
   (acks=0 only for the first). A failed request is counted, not its messages, and the
   thread goes on. "until replicated" is the time after the last answer until every
   partition's high watermark (OFFSETS latest on the leader) reached the bytes
   written. The product's ``Producer`` (sync, batch.size 50, one partition) gets a
   row for acks=1 and acks=-1 where it supports them.
2. **Failover** (``--kills`` times): topic ``failover`` (1 partition, replication
   factor 3). SIGKILL its leader, then two client threads (acks=1 and acks=-1) loop:
   leader from a fresh TOPIC_METADATA, send one set, on any error sleep
   ``--retry-ms`` and retry; the time from the kill to the first acknowledged write is
   the failover time. ZooKeeper watches split it: *detect* = kill until the broker's
   ``/brokers/ids`` node vanished (its session expired: ``zk.sessiontimeout.ms`` plus
   up to one ZooKeeper tick), *elect* = until the state znode names a new leader,
   *client* = until the first ack. Then the killed broker is restarted and the bench
   waits until it is back in the in-sync set (*rejoin*).

Usage::

    .venv/bin/python bench/bench_replication.py [--seconds 5] [--kills 20] [--zk-session-ms 3000]
    .venv/bin/python bench/bench_replication.py --quick      # seconds-long smoke run
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest.wire import protocol as p  # noqa: E402
from ingest.wire.connection import BrokerConnection  # noqa: E402
from ingest.client.discovery import BrokerAddress  # noqa: E402
from ingest.errors import (IngestError, LeaderNotAvailableError, NotEnoughReplicasAfterAppendError,  # noqa: E402
                           NotLeaderForPartitionError, RequestTimedOutError)
from ingest.records.message_set import encode_message_set  # noqa: E402
from ingest.wire.errors import check  # noqa: E402
from replication_cluster import (BATCH, N_BROKERS, PAYLOAD_SIZE, Cluster, brokers_cpu,  # noqa: E402
                                 busy_processes, fmt, frame, machine, payload_set)
from replication_failover import failover, print_failover  # noqa: E402


APPENDED_ANYWAY = (RequestTimedOutError, NotEnoughReplicasAfterAppendError)


def latest(addr: BrokerAddress, topic: str, partition: int, within_s: float = 30.0) -> int:
    """The partition's log end at ``addr``; asked again while the broker has not yet applied the
    leadership that ZooKeeper already names it for (a new topic's first seconds on a busy machine)."""
    deadline = time.monotonic() + within_s
    while True:
        conn = BrokerConnection(addr.host, addr.port, timeout_s=5)
        try:
            resp = conn.request(p.OffsetsRequest(topic, partition, p.LATEST_TIME, 1).encode(), p.OffsetsResponse)
            check(resp.error, f"OFFSETS {topic}-{partition}")
            return resp.offsets[0] if resp.offsets else 0
        except (LeaderNotAvailableError, NotLeaderForPartitionError):
            if time.monotonic() >= deadline:
                raise
        finally:
            conn.close()
        time.sleep(0.1)


def throughput(cluster: Cluster, topic: str, partitions: int, acks: int, seconds: float, inflight: int,
               timeout_ms: int) -> dict:
    """Drive every partition's leader for ``seconds``; return counts, wall time and time to full replication."""
    meta = cluster.metadata()
    leaders = {q: meta.wait_for_leader(topic, q, time.monotonic() + 30) for q in range(partitions)}
    start_hw = {q: latest(leaders[q], topic, q) for q in range(partitions)}
    msets = [payload_set(i) for i in range(4)]
    frames = {q: [frame(topic, q, m, acks, timeout_ms) for m in msets] for q in range(partitions)}
    barrier_frames = {q: frame(topic, q, msets[0], 1, timeout_ms) for q in range(partitions)}
    sent = {(q, k): 0 for q in range(partitions) for k in range(inflight)}
    extra = dict(sent)     # sets appended but not acknowledged (time-outs): the high watermark must pass them too
    errors: list[str] = []
    latencies: list[float] = []
    ends: list[float] = []
    go = threading.Barrier(partitions * inflight + 1)
    t0 = [0.0]

    def worker(q: int, k: int) -> None:
        """Send until the deadline; a failed request is counted (not its messages), the leader looked
        up again and the loop goes on."""
        fr = frames[q]
        n = 0
        lat = []
        addr = leaders[q]
        conn = BrokerConnection(addr.host, addr.port, timeout_s=30, broker_id=addr.broker_id, nodelay=acks != 0)
        go.wait()
        deadline = t0[0] + seconds
        while True:
            try:
                if acks == 0:
                    while time.perf_counter() < deadline:
                        for i in range(20):
                            conn.send(fr[i & 3])
                        n += 20
                    resp = conn.request(barrier_frames[q], p.ProduceAckResponse)
                    check(resp.error, f"barrier {topic}-{q}")
                    n += 1
                else:
                    while time.perf_counter() < deadline:
                        t = time.perf_counter()
                        resp = conn.request(fr[n & 3], p.ProduceAckResponse)
                        check(resp.error, f"acks={acks} {topic}-{q}")
                        lat.append(time.perf_counter() - t)
                        n += 1
                break
            except IngestError as exc:
                errors.append(f"{topic}-{q} thread {k} at {time.perf_counter() - t0[0]:.2f} s: {exc}")
                if isinstance(exc, APPENDED_ANYWAY):
                    extra[(q, k)] += 1
                conn.close()
                if time.perf_counter() >= deadline:
                    break
                try:
                    addr = meta.wait_for_leader(topic, q, time.monotonic() + 5)
                except IngestError:
                    pass
                conn = BrokerConnection(addr.host, addr.port, timeout_s=30, broker_id=addr.broker_id,
                                        nodelay=acks != 0)
        sent[(q, k)] = n
        latencies.extend(lat)
        ends.append(time.perf_counter())
        conn.close()

    threads = [threading.Thread(target=worker, args=(q, k), daemon=True)
               for q in range(partitions) for k in range(inflight)]
    for t in threads:
        t.start()
    cpu0 = brokers_cpu(cluster)
    t0[0] = time.perf_counter()
    go.wait()
    for t in threads:
        t.join()
    wall = max(ends) - t0[0]
    msgs = sum(sent.values()) * BATCH
    set_bytes = len(msets[0])
    # every partition's high watermark must reach what was written (all sets have the same size)
    want = {q: start_hw[q] + sum(n + extra[key] for key, n in sent.items() if key[0] == q) * set_bytes
            for q in range(partitions)}
    replicated = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(latest(leaders[q], topic, q) >= want[q] for q in range(partitions)):
            replicated = time.perf_counter() - t0[0] - wall
            break
        time.sleep(0.02)
    if errors:
        states = {q: cluster.state(topic, q) for q in range(partitions)}
        errors.append(f"partition states after the row: {states}")
    return {"msgs": msgs, "wall": wall, "bytes": msgs * (set_bytes / BATCH), "errors": errors,
            "replicated": replicated, "cpu": brokers_cpu(cluster) - cpu0, "latencies": latencies}


def producer_row(cluster: Cluster, topic: str, acks: int, seconds: float) -> dict | str:
    """``acks`` through the product's Producer (sync, one batch of 50 per send), or why not."""
    try:
        from ingest.client.producer import Producer
        cfg = {"zk.connect": cluster.zk_server.connect, "request.required.acks": acks, "producer.type": "sync",
               "batch.size": BATCH}
        prod = Producer(cfg)
    except Exception as exc:  # noqa: BLE001 - a missing feature is reported, not fatal
        return f"skipped: Producer refuses acks={acks} ({type(exc).__name__}: {str(exc)[:160]})"
    rnd = os.urandom(PAYLOAD_SIZE * BATCH)
    batch = [rnd[i * PAYLOAD_SIZE:(i + 1) * PAYLOAD_SIZE] for i in range(BATCH)]
    n = 0
    lat = []
    cpu0 = brokers_cpu(cluster)
    try:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            t = time.perf_counter()
            prod.send(topic, batch)
            lat.append(time.perf_counter() - t)
            n += 1
        wall = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001
        return f"failed after {n} batches: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        stats = dict(prod.stats)
        prod.close()
    return {"msgs": n * BATCH, "wall": wall, "bytes": n * BATCH * (len(encode_message_set(batch)) / BATCH),
            "errors": [f"Producer stats {stats}"] if stats.get("failed") else [], "replicated": None,
            "cpu": brokers_cpu(cluster) - cpu0, "latencies": lat}


def print_throughput(rows: list[tuple[str, dict | str]]) -> dict:
    print("| experiment | messages | seconds | msg/s | MB/s | until replicated (s) | brokers' CPU µs/msg "
          "| request ms p50 / p99 / max | failed requests |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    rates = {}
    for name, r in rows:
        if isinstance(r, str):
            print(f"| {name} | | | | | | | | {r} |")
            continue
        rate = r["msgs"] / r["wall"]
        rates[name] = rate
        failed = [e for e in r["errors"] if not e.startswith("partition states")]
        err = f"{len(failed)}, first: {failed[0][:120]}" if failed else "0"
        lat = sorted(r["latencies"])
        lat_s = (f"{lat[len(lat) // 2] * 1e3:.1f} / {lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3:.1f} / "
                 f"{lat[-1] * 1e3:.0f}") if lat else ""
        print(f"| {name} | {r['msgs']:,} | {r['wall']:.2f} | {rate:,.0f} | {r['bytes'] / r['wall'] / 1e6:,.1f} "
              f"| {fmt(r['replicated'])} | {r['cpu'] / max(1, r['msgs']) * 1e6:.1f} | {lat_s} | {err} |")
    return rates


def print_ratios(rows: list[tuple[str, dict | str]], levels: list[int]) -> None:
    """msg/s per acknowledgement level side by side, and the two ratios the issue asks for, per in-flight level."""
    rate = {(r["key"], r["level"]): r["msgs"] / r["wall"] for _, r in rows if isinstance(r, dict) and "key" in r}
    print("\n| in flight per partition | acks=1 RF=1 msg/s | acks=1 RF=3 msg/s | acks=-1 RF=3 msg/s "
          "| **acks=-1 / acks=1** (aim >= 0.5) | **acks=1 RF=3 / RF=1** (cost of replication) | acks=-1 RF=3 / acks=1 RF=1 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for level in levels:
        ref, a1, aall = (rate.get((k, level)) for k in ("rf1", "acks1", "acksall"))
        cells = [f"{x:,.0f}" if x else "" for x in (ref, a1, aall)]
        ratios = [f"{x / y:.2f}" if x and y else "" for x, y in ((aall, a1), (a1, ref), (aall, ref))]
        print(f"| {level} | " + " | ".join(cells + ratios) + " |")
    a0, a1 = rate.get(("acks0", levels[0])), rate.get(("acks1", levels[0]))
    if a0 and a1:
        print(f"\nratio acks=0 / acks=1 (RF=3, {levels[0]} in flight): {a0 / a1:.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput row")
    ap.add_argument("--inflight", default="1,2,4,8",
                    help="comma-separated: threads (connections, requests in flight) per partition; "
                         "the rows run once per value")
    ap.add_argument("--partitions", type=int, default=3, help="partitions of the throughput topics")
    ap.add_argument("--kills", type=int, default=20, help="leader SIGKILLs in the failover phase")
    ap.add_argument("--zk-session-ms", type=int, default=3000, help="the brokers' zk.sessiontimeout.ms")
    ap.add_argument("--min-insync", type=int, default=2, help="the brokers' min.insync.replicas")
    ap.add_argument("--timeout-ms", type=int, default=2000, help="PRODUCE_ACKS timeout_ms (acks=-1)")
    ap.add_argument("--retry-ms", type=int, default=25, help="failover client: sleep between retries")
    ap.add_argument("--phases", default="throughput,failover",
                    help="comma-separated: throughput, failover ('none': start and stop the cluster only)")
    ap.add_argument("--rows", default="rf1,acks0,acks1,acksall,producer",
                    help="throughput rows to run: rf1, acks0, acks1, acksall, producer")
    ap.add_argument("--keep-dir", help="put the brokers' directories (logs, output) here and keep them")
    ap.add_argument("--quick", action="store_true",
                    help="seconds-long smoke run: 0.5 s rows, 2 in flight per partition only, 2 kills")
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.kills, args.inflight = 0.5, min(args.kills, 2), "2"
    phases = {x.strip() for x in args.phases.split(",") if x.strip()} - {"none"}
    unknown = phases - {"throughput", "failover"}
    if unknown:
        ap.error(f"unknown phase(s) {sorted(unknown)}: allowed are throughput, failover, none")

    rows = {x.strip() for x in args.rows.split(",") if x.strip()}
    try:
        levels = [int(x) for x in args.inflight.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        ap.error(f"--inflight {args.inflight!r}: allowed is a comma-separated list of integers >= 1, e.g. 1,2,4")
    if rows - {"rf1", "acks0", "acks1", "acksall", "producer"}:
        ap.error(f"unknown row(s) {sorted(rows - {'rf1', 'acks0', 'acks1', 'acksall', 'producer'})}: "
                 "allowed are rf1, acks0, acks1, acksall, producer")

    def on_term(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    logging.getLogger("kazoo").setLevel(logging.ERROR)   # its start-up race with ZooKeeper is not news

    def log(msg: str) -> None:
        print(msg, flush=True)

    overrides = {"num.partitions": 1, "log.flush.interval": 10_000, "log.default.flush.interval.ms": 200,
                 "log.default.flush.scheduler.interval.ms": 100, "num.threads": 2, "log.file.size": 1 << 30,
                 "socket.send.buffer": 1 << 20, "socket.receive.buffer": 1 << 20,
                 "zk.sessiontimeout.ms": args.zk_session_ms, "min.insync.replicas": args.min_insync}
    for line in machine():
        log(line)
    log(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    others = busy_processes()
    log("other processes using CPU (1 s sample): " + ("; ".join(others) if others else "none above 5%"))
    log(f"broker settings: {overrides}")
    tp_rows: list[tuple[str, dict | str]] = []
    fo_rows: list[dict] = []
    t_start = time.monotonic()
    with (contextlib.nullcontext(args.keep_dir) if args.keep_dir
          else tempfile.TemporaryDirectory(prefix="bench-replication-")) as work:
        cluster = Cluster(Path(work), overrides)
        try:
            cluster.start()
            log(f"ZooKeeper {cluster.zk_server.connect} (pid {cluster.zk_server.proc.pid}), brokers "
                + ", ".join(f"{b.broker_id}@{b.port} (pid {b.pid})" for b in cluster.brokers)
                + f", started in {time.monotonic() - t_start:.1f} s")
            if "throughput" in phases:
                n = args.partitions
                for topic, rf in (("rf3", N_BROKERS), ("rf1", 1)):
                    cluster.create_topic(topic, n, rf)
                    for q in range(n):
                        cluster.wait_state(topic, q, lambda s: s.leader >= 0 and len(s.isr) == rf, 60, "leader")
                log(f"throughput: {n} partitions x {levels} connections each, {args.seconds} s per row, "
                    f"sets of {BATCH} x {PAYLOAD_SIZE} B")
                for i, level in enumerate(levels):
                    for key, name, topic, acks in (("rf1", "acks=1, RF=1 (reference)", "rf1", 1),
                                                   ("acks0", "acks=0, RF=3", "rf3", 0),
                                                   ("acks1", "acks=1, RF=3", "rf3", 1),
                                                   ("acksall", "acks=-1, RF=3", "rf3", -1)):
                        if key not in rows or (key == "acks0" and i > 0):
                            continue
                        name = f"{name}, {level} in flight"
                        r = throughput(cluster, topic, n, acks, args.seconds, level, args.timeout_ms)
                        r["level"], r["key"] = level, key
                        tp_rows.append((name, r))
                        log(f"  {name}: {r['msgs'] / r['wall']:,.0f} msg/s, failed requests {len(r['errors'])}")
                        for e in r["errors"][:3] + r["errors"][-1:]:
                            log(f"    {e}")
                if "producer" in rows:
                    cluster.create_topic("producer", 1, N_BROKERS)
                    cluster.wait_state("producer", 0, lambda s: s.leader >= 0, 60, "leader")
                for acks in ((1, -1) if "producer" in rows else ()):
                    name = f"Producer sync, acks={acks}, RF=3, 1 partition"
                    tp_rows.append((name, producer_row(cluster, "producer", acks, args.seconds)))
                    log(f"  {name}: " + (tp_rows[-1][1] if isinstance(tp_rows[-1][1], str) else
                                         f"{tp_rows[-1][1]['msgs'] / tp_rows[-1][1]['wall']:,.0f} msg/s"))
                log("other processes using CPU after the throughput rows: " + ("; ".join(busy_processes()) or "none"))
            if "failover" in phases:
                fo_rows = failover(cluster, args.kills, args.timeout_ms, args.retry_ms / 1000, log)
                log("other processes using CPU after the failovers: " + ("; ".join(busy_processes()) or "none"))
                log(f"load average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        except KeyboardInterrupt:
            log("interrupted: stopping the brokers and ZooKeeper")
            raise
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            cluster.close()
            signal.signal(signal.SIGINT, signal.default_int_handler)
            log(f"brokers and ZooKeeper stopped; load average after: "
                f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    if tp_rows:
        rates = print_throughput(tp_rows)
        print_ratios(tp_rows, levels)
        p1, pall = (rates.get(f"Producer sync, acks={a}, RF=3, 1 partition") for a in (1, -1))
        if p1 and pall:
            print(f"ratio Producer acks=-1 / acks=1 (RF=3, 1 partition, one request in flight): {pall / p1:.2f}")
    if fo_rows:
        print_failover(fo_rows, args.zk_session_ms, 500)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
