"""The Kafka paper's experiment (NetDB 2011, section 5) in one run: this product, RabbitMQ, ActiveMQ.

Starts one broker of each system on loopback (this product: ``ingest broker start``; RabbitMQ:
Debian's ``rabbitmq-server`` as the ``rabbitmq`` user; ActiveMQ: Debian's ``activemq`` jar with a
STOMP-only configuration), each with its data under a temporary directory, persistent messages
and asynchronous flushing to its store. For each system, in the same process tree: producer
batch 1 and batch 50, without and with acknowledgement, then one consumer reading the batch-50
messages back with pulls of ~200 KB / 1,000 messages. Prints, per system and side by side, msg/s,
MB/s (payload bytes), client CPU µs/msg (``time.process_time`` of this process, including the
clients' threads) and server CPU µs/msg (``/proc/<pid>/stat`` of ``beam.smp``, the ActiveMQ
``java``, our broker), the ratios of this product to each peer, and the issue's three aims.

Every server is stopped by PID at the end, also on an exception, Ctrl-C or SIGTERM (see
bench/peers/process.py); the last line says which PIDs were stopped and that none is left.

Usage::

    .venv/bin/python bench/bench_peers.py [--count 1000000] [--peer-count 100000]
        [--only ours,rabbitmq,activemq] [--verify] [--json results.json]
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.peers.activemq import ActiveMQ  # noqa: E402
from bench.peers.ours import Ours  # noqa: E402
from bench.peers.process import alive  # noqa: E402
from bench.peers.rabbitmq import RabbitMQ  # noqa: E402
from bench.peers.run import (PAYLOAD_SIZE, machine, payloads, raise_deferred, stop_on_signals,  # noqa: E402
                             stopping_servers)

BATCH = 50
SYSTEMS = ("ours", "rabbitmq", "activemq")
# (key, label); the peers' meaning of each row is in the printed notes
EXPERIMENTS = (
    ("p1", "produce, batch 1, no ack"),
    ("p50", "produce, batch 50, no ack"),
    ("p50a", "produce, batch 50, acknowledged"),
    ("p50tx", "produce, batch 50, one transaction each"),
    ("p1a", "produce, batch 1, acknowledged"),
    ("consume", "consume, pulls of ~200 KB / 1,000 messages"),
    ("consume_batch", "consume, fetch_batch (one object per pull)"),
)
MEANING = {
    "ours": {"p1": "PRODUCE per message, acks=0", "p50": "PRODUCE of 50 messages, acks=0",
             "p50a": "PRODUCE of 50, request.required.acks=1, response awaited",
             "p1a": "PRODUCE of 1, acks=1, response awaited",
             "consume": "SimpleConsumer.fetch, 200 KB pulls, CRC checked",
             "consume_batch": "SimpleConsumer.fetch_batch + payloads(), 200 KB pulls, CRC checked"},
    "rabbitmq": {"p1": "basic_publish, persistent, no confirms (AMQP has no producer batch)",
                 "p50a": "50 basic_publish, then wait for their publisher confirms",
                 "p50tx": "tx_select; 50 basic_publish, tx_commit",
                 "p1a": "basic_publish, wait for its publisher confirm",
                 "consume": "basic_consume, prefetch 1000, basic_ack multiple per 1,000"},
    "activemq": {"p1": "STOMP SEND persistent, no receipt (STOMP has no producer batch)",
                 "p50a": "50 STOMP SEND, the 50th with a receipt awaited",
                 "p50tx": "STOMP BEGIN, 50 SEND, COMMIT with a receipt awaited",
                 "p1a": "STOMP SEND persistent with receipt awaited",
                 "consume": "SUBSCRIBE ack:client, activemq.prefetchSize 1000, cumulative ACK per 100"},
}


def run_system(key: str, count: int, msgs: list[bytes], verify: bool, workdir: str) -> dict:
    """Start one system, run its experiments, stop it; returns its rows and the PIDs it stopped."""
    system = Ours(workdir) if key == "ours" else RabbitMQ() if key == "rabbitmq" else ActiveMQ()
    result = {"system": system.name, "version": system.version, "count": count, "rows": {}, "pids": [],
              "left": []}
    ack1 = max(1, count // 10)
    print(f"\n{system.name}: starting ...", flush=True)
    t_start = time.perf_counter()
    try:
        system.start()
        result["pids"] = list(system.server.pids)
        print(f"{system.name}: up in {time.perf_counter() - t_start:.1f} s, server PIDs {result['pids']}; "
              f"{count:,} messages per experiment ({ack1:,} for batch 1 acknowledged)", flush=True)
        marks = {}

        def mark():
            marks["client"], marks["server"] = time.process_time(), system.server_cpu()

        def row(name, seconds, n):
            client = time.process_time() - marks["client"]
            server = system.server_cpu() - marks["server"]
            result["rows"][name] = {"messages": n, "seconds": seconds, "msg_s": n / seconds,
                                    "mb_s": n * PAYLOAD_SIZE / seconds / 1e6,
                                    "client_us": client / n * 1e6, "server_us": server / n * 1e6,
                                    "meaning": MEANING[key].get(name, "")}
            r = result["rows"][name]
            print(f"  {name:14s} {n:>9,} msgs {seconds:7.2f} s {r['msg_s']:>11,.0f} msg/s  "
                  f"client {r['client_us']:6.1f} µs/msg  server {r['server_us']:6.1f} µs/msg", flush=True)

        plan = [("p1", 1, "none", count), ("p50", BATCH, "none", count), ("p50a", BATCH, "ack", count),
                ("p50tx", BATCH, "tx", count), ("p1a", 1, "ack", ack1)]
        for name, batch, mode, n in plan:
            if (name == "p50" and key != "ours") or (name == "p50tx" and key == "ours"):
                continue  # AMQP 0-9-1 and STOMP have no producer batch; our broker has no transactions
            mark()
            row(name, system.produce(f"bench_{name}", msgs[:n], batch, mode), n)
        if key == "ours":
            system.wait_visible("bench_p50a", count, PAYLOAD_SIZE + 10)
        consumers = [("consume", system.consume)]
        if key == "ours" and system.has_fetch_batch:
            consumers.append(("consume_batch", system.consume_batches))
        for name, fn in consumers:
            mark()
            secs, n, nbytes, kept = fn("bench_p50a", count, keep=verify)
            row(name, secs, n)
            result["rows"][name]["payload_bytes"] = nbytes
            if n != count or nbytes != count * PAYLOAD_SIZE:
                raise RuntimeError(f"{system.name} {name}: {n} messages / {nbytes} bytes, "
                                   f"expected {count} / {count * PAYLOAD_SIZE}")
            if verify:
                result["rows"][name]["verified"] = sorted(kept) == sorted(msgs[:count])
                if not result["rows"][name]["verified"]:
                    raise RuntimeError(f"{system.name} {name}: the payloads read differ from those sent")
    finally:
        t_stop = time.perf_counter()
        result["pids"] = list(dict.fromkeys(result["pids"] + list(system.server.pids)))
        killed = stopping_servers(system.stop)
        result["killed"] = killed
        result["left"] = [p for p in result["pids"] if alive(p)]
        shutil.rmtree(getattr(system, "dir", "/nonexistent"), ignore_errors=True)
        print(f"{system.name}: stopped PIDs {result['pids']} in {time.perf_counter() - t_stop:.1f} s"
              f"{' (SIGKILL: ' + str(killed) + ')' if killed else ''}; left running: {result['left'] or 'none'}",
              flush=True)
    return result


def fmt_ratio(ours: float | None, peer: float | None) -> str:
    return f"{ours / peer:.2f}x" if ours and peer else "-"


def report(results: dict, info: dict) -> str:
    out = []
    for key, res in results.items():
        out.append(f"\n### {res['system']} ({res['version']}), {res['count']:,} messages\n")
        out.append("| experiment | what it is | messages | msg/s | MB/s | client CPU µs/msg | server CPU µs/msg |")
        out.append("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
        for name, label in EXPERIMENTS:
            r = res["rows"].get(name)
            if r:
                out.append(f"| {label} | {r['meaning']} | {r['messages']:,} | {r['msg_s']:,.0f} | {r['mb_s']:.1f} "
                           f"| {r['client_us']:.1f} | {r['server_us']:.1f} |")
            elif name != "consume_batch":
                out.append(f"| {label} | {MEANING[key].get(name, 'no equivalent')} | - | - | - | - | - |")
    ours = results.get("ours", {}).get("rows", {})
    peers = [k for k in ("rabbitmq", "activemq") if k in results]
    if ours and peers:
        out.append("\n### Comparison: msg/s, and this product ÷ peer (same run)\n")
        head = "| experiment | this product |" + "".join(f" {results[k]['system']} | ours ÷ {results[k]['system']} |"
                                                      for k in peers)
        out.append(head)
        out.append("| --- | ---: |" + " ---: | ---: |" * len(peers))
        for name, label in EXPERIMENTS:
            o = ours.get(name, {}).get("msg_s")
            cells = []
            for k in peers:
                p = results[k]["rows"].get(name, {}).get("msg_s")
                cells.append(f" {p:,.0f} | {fmt_ratio(o, p)} |" if p else " - | - |")
            out.append(f"| {label} | {o:,.0f} |" + "".join(cells) if o else f"| {label} | - |" + "".join(cells))
    out.append("\n### The issue's aims (this run)\n")
    out.extend(f"- {a}" for a in aims(results))
    out.append(f"\nmachine: {info['machine']}; load average {info['load_start']} at start, "
               f"{info['load_end']} at end")
    return "\n".join(out)


def aims(results: dict) -> list[str]:
    ours = results.get("ours", {}).get("rows", {})
    lines = []

    def best(key, names):
        rows = results.get(key, {}).get("rows", {})
        got = [(rows[n]["msg_s"], n) for n in names if n in rows]
        return max(got) if got else (None, None)

    rmq_best, rmq_name = best("rabbitmq", ["p1", "p50a", "p50tx"])
    if ours.get("p50") and rmq_best:
        r = ours["p50"]["msg_s"] / rmq_best
        lines.append(f"producer batch 50 >= 2x RabbitMQ: {ours['p50']['msg_s']:,.0f} vs RabbitMQ's fastest "
                     f"producer ({dict(EXPERIMENTS)[rmq_name]}) {rmq_best:,.0f} msg/s = {r:.2f}x: {'MET' if r >= 2 else 'NOT MET'}")
    if ours.get("consume"):
        o = max(ours["consume"]["msg_s"], ours.get("consume_batch", {}).get("msg_s", 0))
        for key in ("rabbitmq", "activemq"):
            p = results.get(key, {}).get("rows", {}).get("consume", {}).get("msg_s")
            if p:
                lines.append(f"consumer >= 4x {results[key]['system']}: {o:,.0f} vs {p:,.0f} msg/s = {o / p:.2f}x: "
                             f"{'MET' if o / p >= 4 else 'NOT MET'}")
    p = results.get("rabbitmq", {}).get("rows", {}).get("p50a", {}).get("msg_s")
    if ours.get("p50a") and p:
        r = ours["p50a"]["msg_s"] / p
        lines.append(f"acknowledged produce (acks=1, batch 50) >= RabbitMQ publisher confirms per 50: "
                     f"{ours['p50a']['msg_s']:,.0f} vs {p:,.0f} msg/s = {r:.2f}x: {'MET' if r >= 1 else 'NOT MET'}")
    return lines or ["(needs this product and the peers in one run)"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000, help="messages per experiment, this product")
    ap.add_argument("--peer-count", type=int, default=100_000, help="messages per experiment, RabbitMQ and ActiveMQ")
    ap.add_argument("--only", default=",".join(SYSTEMS), help="comma-separated subset of: " + ", ".join(SYSTEMS))
    ap.add_argument("--verify", action="store_true", help="compare every payload read with those sent")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SYSTEMS]
    if unknown:
        ap.error(f"--only: unknown system(s) {unknown}; allowed: {', '.join(SYSTEMS)}")
    # SIGINT too: a shell starts background jobs with SIGINT ignored, and Python then raises no
    # KeyboardInterrupt; the servers must be stopped whichever way the benchmark is interrupted.
    stop_on_signals()
    info = {"machine": machine(), "load_start": round(os.getloadavg()[0], 2)}
    print(f"machine: {info['machine']}; load average at start {info['load_start']} (1 min)", flush=True)
    msgs = payloads(max(args.count if "ours" in only else 0, args.peer_count))
    results = {}
    code = 0
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as work:
        for key in SYSTEMS:
            if key not in only:
                continue
            count = args.count if key == "ours" else args.peer_count
            results[key] = run_system(key, count, msgs, args.verify, os.path.join(work, key))
            if results[key]["left"]:
                code = 1
            raise_deferred(results[key]["system"])
    info["load_end"] = round(os.getloadavg()[0], 2)
    print(report(results, info))
    if args.json:
        Path(args.json).write_text(json.dumps({"info": info, "results": results, "aims": aims(results)}, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
