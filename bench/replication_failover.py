"""Leader failover time for bench/bench_replication.py: SIGKILL a partition's leader, time the
first acknowledged write on its successor, split by what ZooKeeper saw in between."""
from __future__ import annotations

import statistics
import threading
import time

from ingest import znodes
from ingest.client.replica_metadata import ReplicaMetadata
from ingest.errors import IngestError
from ingest.wire import protocol as p
from ingest.wire.connection import BrokerConnection
from ingest.wire.errors import check
from replication_cluster import N_BROKERS, Cluster, fmt, frame, payload_set


class Watcher:
    """Timestamps (monotonic) of ZooKeeper changes: live broker ids and one partition's state."""

    def __init__(self, cluster: Cluster, topic: str, partition: int) -> None:
        self.ids: list[tuple[float, set[int]]] = []
        self.states: list[tuple[float, znodes.PartitionState]] = []
        zk = cluster.zk

        def on_ids(children):
            self.ids.append((time.monotonic(), {int(c) for c in children}))

        def on_state(data, stat):
            if data:
                self.states.append((time.monotonic(), znodes.PartitionState.parse(data, stat.version)))

        zk.ChildrenWatch(znodes.BROKER_IDS, on_ids)
        zk.DataWatch(znodes.partition_state_path(topic, partition), on_state)

    def gone(self, broker: int, after: float) -> float | None:
        return next((t for t, ids in self.ids if t >= after and broker not in ids), None)

    def new_leader(self, old: int, after: float) -> tuple[float, int] | tuple[None, None]:
        return next(((t, s.leader) for t, s in self.states if t >= after and s.leader not in (old, -1)),
                    (None, None))


def first_ack(meta: ReplicaMetadata, topic: str, acks: int, mset: bytes, timeout_ms: int, retry_s: float,
              give_up: float, out: dict) -> None:
    """Loop until one write to ``topic``-0 with ``acks`` is acknowledged; record when and by whom."""
    fr = frame(topic, 0, mset, acks, timeout_ms)
    seen: dict[str, int] = {}
    attempts = 0
    while time.monotonic() < give_up:
        attempts += 1
        conn = None
        try:
            addr = meta.leader(topic, 0, refresh=True)
            conn = BrokerConnection(addr.host, addr.port, timeout_s=max(2.0, timeout_ms / 1000 + 1),
                                    broker_id=addr.broker_id)
            resp = conn.request(fr, p.ProduceAckResponse)
            check(resp.error, f"acks={acks}")
            out.update(t=time.monotonic(), broker=addr.broker_id, attempts=attempts, errors=seen)
            return
        except (IngestError, ValueError) as exc:
            seen[type(exc).__name__] = seen.get(type(exc).__name__, 0) + 1
        finally:
            if conn is not None:
                conn.close()
        time.sleep(retry_s)
    out.update(t=None, broker=None, attempts=attempts, errors=seen)


def failover(cluster: Cluster, kills: int, timeout_ms: int, retry_s: float, log) -> list[dict]:
    topic = "failover"
    cluster.create_topic(topic, 1, N_BROKERS)
    cluster.wait_state(topic, 0, lambda s: s.leader >= 0 and len(s.isr) == N_BROKERS, 60, "leader with full isr")
    watcher = Watcher(cluster, topic, 0)
    meta = cluster.metadata()
    mset = payload_set(0)
    by_id = {b.broker_id: b for b in cluster.brokers}
    rows = []
    for i in range(kills):
        st = cluster.wait_state(topic, 0, lambda s: s.leader >= 0 and len(s.isr) == N_BROKERS, 120,
                                "leader with all replicas in sync")
        warm: dict = {}
        first_ack(meta, topic, -1, mset, timeout_ms, retry_s, time.monotonic() + 30, warm)
        if warm["t"] is None:
            raise RuntimeError(f"kill {i + 1}: no acks=-1 write succeeds before the kill: {warm['errors']}")
        leader = st.leader
        was_controller = cluster.controller() == leader
        victim = by_id[leader]
        t_kill = time.monotonic()
        victim.kill()
        results = {1: {}, -1: {}}
        give_up = t_kill + 60
        threads = [threading.Thread(target=first_ack, args=(meta, topic, a, mset, timeout_ms, retry_s, give_up,
                                                            results[a]), daemon=True) for a in (1, -1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # the clients may learn of the new leader (TOPIC_METADATA) before our own watches fire
        settle = time.monotonic() + 5
        while (watcher.gone(leader, t_kill) is None or watcher.new_leader(leader, t_kill)[0] is None) \
                and time.monotonic() < settle:
            time.sleep(0.02)
        t_gone = watcher.gone(leader, t_kill)
        t_elect, new_leader = watcher.new_leader(leader, t_kill)
        t_restart = time.monotonic()
        victim.start(timeout=60)
        restarted = time.monotonic() - t_restart
        cluster.wait_state(topic, 0, lambda s: leader in s.isr, 120, f"broker {leader} back in the isr")
        rejoin = time.monotonic() - t_restart

        def since(t):
            return None if t is None else t - t_kill
        row = {"kill": i + 1, "killed": leader, "controller": was_controller, "new_leader": new_leader,
               "ack1": since(results[1]["t"]), "ack_all": since(results[-1]["t"]),
               "detect": since(t_gone), "elect": since(t_elect), "restart": restarted, "rejoin": rejoin,
               "errors": {**results[1]["errors"], **{k + "(-1)": v for k, v in results[-1]["errors"].items()}}}
        rows.append(row)
        log(f"kill {i + 1}/{kills}: broker {leader}{' (controller)' if was_controller else ''} -> "
            f"leader {new_leader}; acks=1 {fmt(row['ack1'])} s, acks=-1 {fmt(row['ack_all'])} s "
            f"(detect {fmt(row['detect'])}, elect {fmt(row['elect'])}); back in isr {rejoin:.2f} s after restart")
    return rows


def print_failover(rows: list[dict], session_ms: int, tick_ms: int) -> None:
    print(f"\nfailover over {len(rows)} SIGKILLs of the leader (zk.sessiontimeout.ms={session_ms}, "
          f"ZooKeeper tickTime={tick_ms} ms)")
    print("| seconds from SIGKILL to | median | min | max | n |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for key, name in (("detect", "broker's /brokers/ids node gone (session expired)"),
                      ("elect", "new leader in the state znode"),
                      ("ack1", "**first acks=1 write acknowledged**"),
                      ("ack_all", "**first acks=-1 write acknowledged**")):
        vals = [r[key] for r in rows if r[key] is not None]
        missing = len(rows) - len(vals)
        if vals:
            print(f"| {name} | {statistics.median(vals):.2f} | {min(vals):.2f} | {max(vals):.2f} | {len(vals)}"
                  f"{f' ({missing} n/a)' if missing else ''} |")
    for key, name in (("elect", "detect"), ("ack1", "elect"), ("ack_all", "elect")):
        d = [r[key] - r[name] for r in rows if r[key] is not None and r[name] is not None]
        if d:
            print(f"| ({key} minus {name}) | {statistics.median(d):.2f} | {min(d):.2f} | {max(d):.2f} | {len(d)} |")
    ctl = [r["ack_all"] for r in rows if r["controller"] and r["ack_all"] is not None]
    other = [r["ack_all"] for r in rows if not r["controller"] and r["ack_all"] is not None]
    if ctl:
        print(f"acks=-1 failover when the leader was also the controller: median {statistics.median(ctl):.2f} s "
              f"(n={len(ctl)}); otherwise: {fmt(statistics.median(other) if other else None)} s (n={len(other)})")
    rejoin = [r["rejoin"] for r in rows]
    restart = [r["restart"] for r in rows]
    print(f"killed broker restarted (serving) in median {statistics.median(restart):.2f} s, back in the isr "
          f"{statistics.median(rejoin):.2f} s after the restart began (max {max(rejoin):.2f} s)")
    errs: dict[str, int] = {}
    for r in rows:
        for k, v in r["errors"].items():
            errs[k] = errs.get(k, 0) + v
    print("errors seen by the retrying clients: " + (", ".join(f"{k} x{v}" for k, v in sorted(errs.items()))
                                                   or "none"))
