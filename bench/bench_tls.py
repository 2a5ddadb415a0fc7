"""TLS against plaintext on the Kafka listener: confluent-kafka produce and consume through one broker's SSL
and PLAINTEXT listeners, in the same run, alternating, ratios printed.

One broker process with both listeners (tests/harness/brokers.py; certificates made with openssl by
tests/harness/tls.py). Each round, for each protocol (the order alternating): produce N 200-byte
messages to a new one-partition topic (``acks`` 1, ``linger.ms`` 5, delivery reports for errors only;
the clock runs from the first ``produce()`` to ``flush()`` returning with nothing left), then consume
them from the beginning (``assign``, ``consume(10000)``, ``fetch.queue.backoff.ms`` 10) until exactly
N. A row's figure is the best of its rounds; every round is printed, with the CPU each side spent per
message (this process: the Python calls and librdkafka's threads, ``time.process_time``; the broker:
``/proc/<pid>/stat``), which the machine's load disturbs less than the rates. The broker is stopped in
``finally`` (and by the harness reaper if this process is killed), and its files removed.

Then replication (``--replicated-count`` messages, 0 to skip): three clusters of three brokers on one
ZooKeeper (a chroot each), whose one Kafka listener is the client and the inter-broker listener and speaks
PLAINTEXT, SSL, or SASL_SSL (SCRAM-SHA-512 for the followers and the producer); no authorizer, so the
figures are the protocols' cost. Each round, for each cluster (the order rotating), a new topic of
replication factor 3 (``min.insync.replicas`` 2, all three replicas in sync before the clock starts) gets
the messages with ``acks=all``; the best round and the CPU per message of this process and of the three
brokers together, as ratios to PLAINTEXT.

Usage::

    .venv/bin/python bench/bench_tls.py [--count 300000] [--rounds 3] [--replicated-count 100000]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import confluent_kafka as ck  # noqa: E402

from ingest import znodes  # noqa: E402
from tests.harness import replicated as r  # noqa: E402
from tests.harness import sasl  # noqa: E402
from tests.harness.brokers import BrokerProcess, stop_all  # noqa: E402
from tests.harness.net import free_port  # noqa: E402
from tests.harness.tls import make_pki  # noqa: E402
from tests.harness.zookeeper import ZooKeeperServer, fresh_chroot  # noqa: E402

PAYLOAD = 200
REPLICATED = ("PLAINTEXT", "SSL", "SASL_SSL")
SCRAM = "SCRAM-SHA-512"
FLUSH = {"log.flush.interval": 10_000, "log.default.flush.interval.ms": 1000,
         "log.default.flush.scheduler.interval.ms": 100}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(pid: int | list[int], fn, *args) -> tuple[float, float, float]:
    """``(wall seconds, this process's CPU seconds, the broker(s)' CPU seconds)`` of ``fn(*args)``."""
    pids = pid if isinstance(pid, list) else [pid]
    c0, b0 = time.process_time(), sum(cpu_s(p) for p in pids)
    wall = fn(*args)
    return wall, time.process_time() - c0, sum(cpu_s(p) for p in pids) - b0


def produce(bootstrap: str, sec: dict, topic: str, msgs: list[bytes], acks: str = "1") -> float:
    errors: list = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "delivery.report.only.error": True,
                     **sec})
    p.list_topics(timeout=30)      # connected (and the TLS handshake done) before the clock starts
    start = time.perf_counter()
    for m in msgs:
        while True:
            try:
                p.produce(topic, m, partition=0, on_delivery=lambda e, _m: errors.append(e))
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(120)
    took = time.perf_counter() - start
    assert left == 0 and not errors, (left, errors[:3])
    return took


def consume(bootstrap: str, sec: dict, topic: str, n: int) -> float:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-tls", "enable.auto.commit": False,
                     "fetch.queue.backoff.ms": 10, **sec})
    try:
        c.list_topics(topic, timeout=30)
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        got, start = 0, time.perf_counter()
        while got < n:
            for m in c.consume(10000, timeout=1.0):
                assert m.error() is None, m.error()
                got += 1
        took = time.perf_counter() - start
        assert got == n, got
        return took
    finally:
        c.close()


def replicated_cluster(work: Path, pki, zk_server: ZooKeeperServer, protocol: str) -> tuple[list, dict, str]:
    """Three started brokers whose one listener (clients and followers) speaks ``protocol``; returns
    ``(brokers, the client's settings, the chroot's connect string)``."""
    zk_connect = fresh_chroot(zk_server, f"/bench-{protocol.lower()}")
    overrides = r.replication_overrides(min_isr=2, **FLUSH, **{
        "listener.security.protocol.map": f"PLAINTEXT:{protocol}"})
    sec: dict = {}
    if protocol != "PLAINTEXT":
        overrides.update({"ssl.keystore.location": str(pki.server), "ssl.truststore.location": str(pki.ca)})
        sec = {"security.protocol": protocol, "ssl.ca.location": str(pki.ca)}
    if protocol.startswith("SASL"):
        sasl.add_user(zk_connect, sasl.BROKER_USER, sasl.BROKER_PASSWORD, SCRAM)
        sasl.add_user(zk_connect, "bench", "bench-secret", SCRAM)
        overrides.update(sasl.sasl_broker_overrides(**{"sasl.mechanism.inter.broker.protocol": SCRAM}))
        overrides["listener.security.protocol.map"] = f"PLAINTEXT:{protocol}"
        sec.update({"sasl.mechanism": SCRAM, "sasl.username": "bench", "sasl.password": "bench-secret"})
    brokers = [BrokerProcess(i, work / f"{protocol.lower()}-broker{i}", zk_connect=zk_connect, overrides=overrides)
               for i in range(3)]
    for b in brokers:
        b.start(timeout=60)
    return brokers, sec, zk_connect


def replicated_topic(zk_connect: str, topic: str, brokers=()) -> None:
    """``topic`` on all three brokers, all three in sync (the followers fetched over the protocol).

    When they do not get in sync, each broker's log lines about the topic, its ZooKeeper session and
    the controller are printed before the error: what is needed to tell why.
    """
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=30)
    try:
        zk.retry(zk.create, znodes.topic_dir(topic), znodes.assignment_value({0: [0, 1, 2]}, znodes.KAFKA_FORMAT),
                 makepath=True)
        r.wait_for_state(zk, topic, 0, lambda st: st.leader >= 0 and set(st.isr) == {0, 1, 2}, 120,
                         f"{topic}: three replicas in sync")
    except AssertionError:
        for b in brokers:
            lines = [line for line in b.output().splitlines()
                     if topic in line or "session" in line.lower() or "controller" in line.lower()]
            print(f"--- broker {b.broker_id}, {len(lines)} lines on {topic}, its session, the controller (last 60):\n"
                  + "\n".join(lines[-60:]), flush=True)
        raise
    finally:
        zk.stop()
        zk.close()


def bench_replicated(args, work: Path, pki, msgs: list[bytes]) -> None:
    """acks=all on a replication-factor-3 topic, PLAINTEXT vs SSL vs SASL_SSL, in one run."""
    n = args.replicated_count
    msgs = msgs[:n] if n <= len(msgs) else [msgs[i % len(msgs)] for i in range(n)]
    zk_server = ZooKeeperServer()
    clusters: dict[str, tuple[list, dict, str]] = {}
    best: dict[str, float] = {}
    cpu: dict[str, list[tuple[float, float]]] = {}
    print(f"\nreplication: {n} messages of {PAYLOAD} bytes, acks=all, replication factor 3, min.insync.replicas 2; "
          f"load average {os.getloadavg()}", flush=True)
    try:
        zk_server.start()
        for protocol in REPLICATED:
            clusters[protocol] = replicated_cluster(work, pki, zk_server, protocol)
        for rnd in range(args.rounds):
            order = list(REPLICATED[rnd % 3:] + REPLICATED[:rnd % 3])
            for name in order:
                brokers, sec, zk_connect = clusters[name]
                topic = f"bench-acks-all-{name.lower()}-{rnd}"
                replicated_topic(zk_connect, topic, brokers)
                bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers)
                wall, client, broker = measured([b.pid for b in brokers], produce, bootstrap, sec, topic, msgs, "all")
                best[name] = max(best.get(name, 0.0), n / wall)
                cpu.setdefault(name, []).append((client / n * 1e6, broker / n * 1e6))
                print(f"replicated round {rnd + 1} {name:9s} produce acks=all {n / wall:>9,.0f} msg/s (CPU µs/msg "
                      f"client {cpu[name][-1][0]:.2f}, 3 brokers {cpu[name][-1][1]:.2f})   "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for brokers, _sec, _zk in clusters.values():
            stop_all(brokers)
        zk_server.stop()
    plain = best["PLAINTEXT"]
    print("acks=all " + "   ".join(f"{name} {best[name]:>9,.0f} msg/s" for name in REPLICATED) + "   " +
          "   ".join(f"{name}/PLAINTEXT {best[name] / plain:.2f}" for name in REPLICATED[1:]))
    p_cpu = [min(c[i] for c in cpu["PLAINTEXT"]) for i in (0, 1)]
    for name in REPLICATED[1:]:
        t_cpu = [min(c[i] for c in cpu[name]) for i in (0, 1)]
        print(f"{'':8s} {name} CPU µs/msg (least of the rounds): client {t_cpu[0]:.2f} (PLAINTEXT {p_cpu[0]:.2f}), "
              f"3 brokers {t_cpu[1]:.2f} (PLAINTEXT {p_cpu[1]:.2f}), together {name}/PLAINTEXT "
              f"{sum(t_cpu) / sum(p_cpu):.2f}")
    print("replicated broker pids " + " ".join(str(b.pid) for bs, _s, _z in clusters.values() for b in bs)
          + " stopped")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--replicated-count", type=int, default=100_000,
                    help="messages per round of the acks=all replication part (0: skip it)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    try:
        run(args, work)
    finally:   # the brokers' logs: hundreds of MB on a shared machine
        shutil.rmtree(work, ignore_errors=True)


def run(args, work: Path) -> None:
    pki = make_pki(work / "pki")
    b = BrokerProcess(0, work / "broker")
    ssl_port = free_port()
    b.overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{b.kafka_port},SSL://127.0.0.1:{ssl_port}",
                   "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                   "ssl.keystore.location": str(pki.server), **FLUSH}
    systems = {"PLAINTEXT": (f"127.0.0.1:{b.kafka_port}", {}),
               "SSL": (f"127.0.0.1:{ssl_port}", {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)})}
    base = os.urandom(PAYLOAD * 64)
    msgs = [i.to_bytes(8, "big") + base[(i % 64) * PAYLOAD:(i % 64) * PAYLOAD + PAYLOAD - 8]
            for i in range(args.count)]
    best: dict[tuple[str, str], float] = {}
    cpu: dict[tuple[str, str], list[tuple[float, float]]] = {}
    print(f"{args.count} messages of {PAYLOAD} bytes, one partition, acks=1; load average {os.getloadavg()}")
    b.start()
    try:
        for rnd in range(args.rounds):
            order = list(systems) if rnd % 2 == 0 else list(reversed(systems))
            for name in order:
                bootstrap, sec = systems[name]
                topic = f"bench-tls-{name.lower()}-{rnd}"
                runs = {"produce": measured(b.pid, produce, bootstrap, sec, topic, msgs)}
                time.sleep(1.5)    # the flusher makes the last messages visible
                runs["consume"] = measured(b.pid, consume, bootstrap, sec, topic, args.count)
                line = []
                for kind, (wall, client, broker) in runs.items():
                    rate = args.count / wall
                    best[(name, kind)] = max(best.get((name, kind), 0.0), rate)
                    cpu.setdefault((name, kind), []).append((client / args.count * 1e6, broker / args.count * 1e6))
                    line.append(f"{kind} {rate:>9,.0f} msg/s (CPU µs/msg client {cpu[(name, kind)][-1][0]:.2f}, "
                                f"broker {cpu[(name, kind)][-1][1]:.2f})")
                print(f"round {rnd + 1} {name:9s} " + "   ".join(line) + f"   load {os.getloadavg()[0]:.1f}",
                      flush=True)
    finally:
        b.stop()
    print()
    for kind in ("produce", "consume"):
        plain, tls = best[("PLAINTEXT", kind)], best[("SSL", kind)]
        print(f"{kind:8s} PLAINTEXT {plain:>9,.0f} msg/s ({plain * PAYLOAD / 1e6:5.1f} MB/s)   "
              f"SSL {tls:>9,.0f} msg/s ({tls * PAYLOAD / 1e6:5.1f} MB/s)   SSL/PLAINTEXT {tls / plain:.2f}")
        for side, i in (("client", 0), ("broker", 1)):
            p_cpu = min(c[i] for c in cpu[("PLAINTEXT", kind)])
            t_cpu = min(c[i] for c in cpu[("SSL", kind)])
            ratio = f"{t_cpu / p_cpu:.2f}" if p_cpu else "n/a (below the clock's tick)"
            print(f"{'':8s} {side} CPU µs/msg (least of the rounds): PLAINTEXT {p_cpu:.2f}   SSL {t_cpu:.2f}   "
                  f"SSL/PLAINTEXT {ratio}")
    print(f"broker pid {b.pid} stopped")
    if args.replicated_count > 0:
        bench_replicated(args, work, pki, msgs)


if __name__ == "__main__":
    main()
