"""Idempotent produce against plain acks=all, same run, same topics; and what rebuilding producer state costs.

**Produce rows** (200-byte messages, partition 0, alternating row by row and round by round, the best
round of each printed with every round beside it):

- *confluent-kafka, acks=all* (librdkafka, ``linger.ms`` 5, the settings of bench/peers/kafka_clients.py):
  plain with librdkafka's defaults (up to 1,000,000 requests in flight per connection), plain with
  ``max.in.flight.requests.per.connection`` 5, and ``enable.idempotence`` true (which caps it at 5, as
  every Kafka client does), against (a) one broker without ZooKeeper and (b) a Kafka topic of
  replication factor 3 on 3 brokers with ZooKeeper, ``min.insync.replicas`` 2 (bench/peers/ours_kafka.py);
- *confluent-kafka against Tansu* (bench/peers/tansu.py, one broker, memory storage), the same three
  settings: an independent broker's figure for what librdkafka's idempotence costs by itself (it keeps
  about one Produce request in flight per partition, measured from its statistics, where the plain
  producer keeps up to 5); "not run" when Tansu is not installed;
- *this product's KafkaProducer, acks=all*, ``enable.idempotence`` false vs true (a synchronous client:
  ``send`` of every message, then ``flush``), against the same two.

Each row checks that the partition's high watermark grew by exactly N (nothing lost, nothing twice). The
ratios printed are idempotent / plain of the same client and cluster (the aim: >= 0.90), and for
confluent-kafka also idempotent / plain with the same 5 requests in flight (the broker's own cost).

**Append rows** (no server): the leader's append of ``--rebuild-batches`` batches of 10 records into a
Kafka-format log, plain and idempotent (one producer id, sequences checked and recorded), alternating,
CPU seconds of this process, best of 3: the broker's own cost of the check.

**Rebuild rows** (no server): a Kafka-format log of ``--rebuild-batches`` one-record batches of 2,000
producer ids, opened again (a) with the snapshot the last roll wrote (only the active segment is
scanned, as after any restart) and (b) with every snapshot deleted (the whole log scanned: a log written
before snapshots existed); each beside the open of the same log as a plain log would cost (the
recovery scan of the newest segment), and the headers scanned per second. Rebuild rows are CPU seconds
of this process (``time.process_time``: the machine's load does not inflate them), best of 3.

Every server is stopped in ``finally`` (also on SIGINT/SIGTERM/SIGHUP); the last line names the PIDs
stopped.

Usage::

    .venv/bin/python bench/bench_idempotence.py [--count 200000] [--own-count 50000] [--rounds 3]
        [--rebuild-batches 300000] [--json results.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import confluent_kafka as ck

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.peers import kafka_clients as kc  # noqa: E402
from bench.peers.ours_kafka import OursServers  # noqa: E402
from bench.peers.run import Stop, machine, payloads, stop_on_signals, stopping_servers  # noqa: E402
from bench.peers.tansu import Tansu, TansuMissing  # noqa: E402
from ingest.broker.kafka_log import KafkaLog, KafkaLogSettings  # noqa: E402
from ingest.clock import SystemClock  # noqa: E402
from ingest.client.kafka.producer import KafkaProducer  # noqa: E402
from ingest.records.builder import build_batch  # noqa: E402


def confluent_produce(bootstrap: str, topic: str, msgs: list[bytes], extra: dict) -> dict:
    """confluent-kafka with bench/peers/kafka_clients.py's settings and ``extra``; one message sent and
    flushed before the clock starts, so that the connections, the metadata and (with idempotence) the
    producer id are there, as in a running service. Returns seconds; raises if a delivery failed."""
    failures: list[str] = []
    p = ck.Producer({**kc._producer_config(bootstrap, "all"), **extra,
                     "on_delivery": lambda err, _m: failures.append(str(err))})
    p.produce(topic, msgs[0], partition=0)
    if p.flush(60) or failures:
        raise RuntimeError(f"{topic}: the warm-up message was not delivered: {failures[:1]}")
    send, poll = p.produce, p.poll
    t0 = time.perf_counter()
    for m in msgs[1:]:
        while True:
            try:
                send(topic, m, partition=0)
                break
            except BufferError:   # the local queue is full: let librdkafka send
                poll(0.001)
    left = p.flush(120)
    seconds = time.perf_counter() - t0
    if left or failures:
        raise RuntimeError(f"{topic}: {left} unsent after flush, {len(failures)} failure(s) {failures[:1]}")
    return {"seconds": seconds, "count": len(msgs) - 1}


def own_produce(bootstrap: str, topic: str, msgs: list[bytes], idempotent: bool) -> dict:
    """The product's KafkaProducer: every message sent, then flushed; seconds from the first send."""
    with KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=idempotent,
                       batch_size=1 << 20, linger_ms=5) as p:
        p.partitions_for(topic)
        if idempotent:   # the producer id is asked for before the first batch: outside the clock, as the metadata
            p._ensure_id(topic, 0, time.monotonic() + 30)
        t0 = time.perf_counter()
        for m in msgs:
            p.send(topic, m, partition=0)
        delivered = p.flush()
        seconds = time.perf_counter() - t0
    n = sum(d.records for d in delivered)
    if n != len(msgs):
        raise RuntimeError(f"{topic}: {n} of {len(msgs)} delivered")
    return {"seconds": seconds}


def produce_row(client: str, bootstrap: str, topic: str, msgs: list[bytes], kind: str) -> float:
    """msg/s of one row; on this product the high watermark is checked to grow by exactly N (Tansu's
    ListOffsets answer lags, bench/bench_kafka.py: there the producer's own count is the check)."""
    ours = client != "confluent-kafka (Tansu)"
    before = kc.watermarks(bootstrap, topic)[1] if ours else 0
    if client.startswith("confluent-kafka"):
        extra = ({"enable.idempotence": True} if kind == "idempotent" else
                 {"enable.idempotence": False, "max.in.flight.requests.per.connection": 5}
                 if kind == "plain, 5 in flight" else {"enable.idempotence": False})
        r = confluent_produce(bootstrap, topic, msgs, extra)
    else:
        r = own_produce(bootstrap, topic, msgs, kind == "idempotent")
    if ours:
        grew = kc.watermarks(bootstrap, topic)[1] - before
        if grew != len(msgs):   # the warm-up message included
            raise RuntimeError(f"{client} {kind} {topic}: the high watermark grew by {grew}, not {len(msgs)}")
    return r.get("count", len(msgs)) / r["seconds"]


def append_rows(batches: int, rounds: int = 3) -> dict:
    """CPU seconds of a leader's appends of plain and of idempotent batches (alternating, best of ``rounds``)."""
    value = os.urandom(200)
    plain = build_batch([value] * 10)
    idem = [build_batch([value] * 10, producer_id=77, producer_epoch=0, base_sequence=10 * i) for i in range(batches)]
    best = {"plain": float("inf"), "idempotent": float("inf")}
    for _ in range(rounds):
        for kind in ("plain", "idempotent"):
            work = Path(tempfile.mkdtemp(prefix="bench-idem-append-"))
            try:
                lg = KafkaLog(work / "t-0", KafkaLogSettings(), SystemClock())
                t0 = time.process_time()
                for i in range(batches):
                    lg.append(plain if kind == "plain" else idem[i])
                best[kind] = min(best[kind], time.process_time() - t0)
                assert lg.log_end == 10 * batches
                lg.close()
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return {"batches": batches, "plain_us_per_batch": best["plain"] / batches * 1e6,
            "idempotent_us_per_batch": best["idempotent"] / batches * 1e6,
            "ratio_plain_over_idempotent": best["plain"] / best["idempotent"]}


def rebuild_rows(batches: int) -> dict:
    """Opening a log again: with the last roll's snapshot, without any, and the same log's plain recovery."""
    work = Path(tempfile.mkdtemp(prefix="bench-idem-rebuild-"))
    try:
        d = work / "t-0"
        settings = KafkaLogSettings(segment_bytes=max(1 << 20, batches * 270 // 8))   # about 8 segments
        lg = KafkaLog(d, settings, SystemClock())
        value = os.urandom(200)
        for i in range(batches):
            lg.append(build_batch([value], producer_id=10_000 + i % 2000, producer_epoch=0,
                                  base_sequence=i // 2000))
        lg.close()
        size = sum(f.stat().st_size for f in d.glob("*.log"))
        segments = len(list(d.glob("*.log")))

        def reopen() -> tuple[float, float, int]:
            """(CPU s of the whole open, CPU s of the producer state's part of it, producers)."""
            t0 = time.process_time()
            x = KafkaLog(d, settings, SystemClock())
            took = time.process_time() - t0
            t1 = time.process_time()
            with x._lock:
                x._load_producers_locked()   # the same work again, alone
            state = time.process_time() - t1
            n = len(x.producers)
            x.close()
            return took, state, n

        def best(k: int = 3) -> tuple[float, float, int]:
            runs = [reopen() for _ in range(k)]
            return min(r[0] for r in runs), min(r[1] for r in runs), runs[0][2]

        with_snapshot, state_snap, n1 = best()
        saved = list(d.glob("*.snapshot"))
        for p in saved:
            p.unlink()
        whole_open, state_all, n2 = best()
        assert n1 == n2 == 2000, (n1, n2)
        return {"batches": batches, "bytes": size, "segments": segments, "snapshots": len(saved),
                "open_with_snapshot_s": with_snapshot, "state_with_snapshot_s": state_snap,
                "open_without_snapshot_s": whole_open, "state_without_snapshot_s": state_all,
                "headers_per_s": batches / state_all}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=200_000, help="messages per confluent-kafka row")
    ap.add_argument("--own-count", type=int, default=50_000, help="messages per row of the product's client")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rebuild-batches", type=int, default=300_000)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    stop_on_signals()
    print(f"machine: {machine()}; load average {os.getloadavg()}")
    out: dict = {"rows": {}, "rounds": []}
    work = Path(tempfile.mkdtemp(prefix="bench-idem-"))
    servers = OursServers(work, REPO, kafka=True, cluster=True)
    tansu: Tansu | None = None
    stopped: list[int] = []
    try:
        servers.start()
        clusters = {"one broker": servers.bootstrap_one, "RF 3, 3 brokers": servers.bootstrap_cluster}
        topic = {"one broker": "idem", "RF 3, 3 brokers": "idem3", "Tansu": "idemt"}
        try:
            tansu = Tansu().start()
            tansu.create_topic("idemt", 1)
        except TansuMissing as exc:
            print(f"Tansu rows not run: {exc}")
            tansu = None
        kc.wait_topic(servers.bootstrap_one, "idem", 1)
        servers.create_kafka_rf3("idem3")
        kc.wait_topic(servers.bootstrap_cluster, "idem3", 3)
        kinds = {"confluent-kafka": ("plain", "plain, 5 in flight", "idempotent"),
                 "KafkaProducer": ("plain", "idempotent")}
        rows = [(client, cl, kind) for client in kinds for cl in clusters for kind in kinds[client]]
        if tansu is not None:
            kinds["confluent-kafka (Tansu)"] = kinds["confluent-kafka"]
            clusters_t = {**clusters, "Tansu": tansu.bootstrap}
            rows += [("confluent-kafka (Tansu)", "Tansu", k) for k in kinds["confluent-kafka"]]
        else:
            clusters_t = clusters
        msgs = {"confluent-kafka": payloads(args.count), "KafkaProducer": payloads(args.own_count)}
        msgs["confluent-kafka (Tansu)"] = msgs["confluent-kafka"]
        for r in range(args.rounds):
            order = rows if r % 2 == 0 else list(reversed(rows))
            got = {}
            for client, cl, idem in order:
                got[(client, cl, idem)] = produce_row(client, clusters_t[cl], topic[cl], msgs[client], idem)
            out["rounds"].append({f"{c} | {cl} | {k}": v for (c, cl, k), v in got.items()})
            print(f"round {r + 1}: load average {os.getloadavg()[0]:.2f}: " +
                  ", ".join(f"{c} {cl} {k}: {v:,.0f}" for (c, cl, k), v in got.items()))
        print("\nproduce, acks=all, 200-byte messages (msg/s, best of rounds; every round above)")
        for client, ks in kinds.items():
            for cl in (["Tansu"] if "Tansu" in client else clusters):
                best = {k: max(rd[f"{client} | {cl} | {k}"] for rd in out["rounds"]) for k in ks}
                row = {**best, "idempotent / plain": best["idempotent"] / best["plain"]}
                if "plain, 5 in flight" in best:
                    row["idempotent / plain, 5 in flight"] = best["idempotent"] / best["plain, 5 in flight"]
                out["rows"][f"{client} | {cl}"] = row
                print(f"  {client:16s} {cl:16s} " + "  ".join(
                    f"{k} {v:,.0f}" if " / " not in k else f"{k} {v:.2f}" for k, v in row.items()))
    except Stop as exc:
        print(f"stopped: {exc}")
        return 130
    finally:
        pids = servers.pids
        stopping_servers(servers.stop)
        if tansu is not None:
            pids += list(tansu.server.pids)
            stopping_servers(tansu.stop)
        stopped = pids
        shutil.rmtree(work, ignore_errors=True)
    ap_ = append_rows(args.rebuild_batches)
    out["append"] = ap_
    print(f"\nleader appends of {ap_['batches']:,} batches of 10 records (CPU, best of 3): plain "
          f"{ap_['plain_us_per_batch']:.1f} us/batch, idempotent {ap_['idempotent_us_per_batch']:.1f} us/batch, "
          f"throughput idempotent / plain {ap_['ratio_plain_over_idempotent']:.2f}")
    rb = rebuild_rows(args.rebuild_batches)
    out["rebuild"] = rb
    print(f"\nproducer state rebuilt on open: {rb['batches']:,} one-record batches of 2,000 producer ids, "
          f"{rb['bytes'] / 1e6:.0f} MB in {rb['segments']} segments ({rb['snapshots']} snapshots)")
    print(f"  with the last roll's snapshot: open {rb['open_with_snapshot_s'] * 1000:.0f} ms CPU, of which the "
          f"producer state {rb['state_with_snapshot_s'] * 1000:.0f} ms (the active segment's headers)")
    print(f"  without any snapshot: open {rb['open_without_snapshot_s'] * 1000:.0f} ms CPU, of which the producer "
          f"state {rb['state_without_snapshot_s'] * 1000:.0f} ms ({rb['headers_per_s']:,.0f} batch headers/s)")
    print(f"load average {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    print(f"stopped PIDs {sorted(stopped)}; none left running")
    return 0


if __name__ == "__main__":
    sys.exit(main())
