"""The Kafka-protocol benchmark: confluent-kafka against this product and Tansu, beside the 0.7 path and RabbitMQ.

One process tree, one run, every row side by side. 200-byte messages, one partition:

* **produce, acks=1, one broker** and **produce, acks=all, RF 3 on 3 brokers**, then **consume from
  earliest** (the acks=1 topic of the same round: confluent-kafka's ``consume(10000)`` with
  ``fetch.queue.backoff.ms`` 10, the way a consumer that reads a backlog sets it), for
  - *this product, Kafka listener*: confluent-kafka (librdkafka) producer and consumer
    (bench/peers/kafka_clients.py: ``linger.ms`` 5, no compression, defaults otherwise) against the
    broker's Kafka listener; acks=all on a Kafka topic of replication factor 3 on 3 brokers with
    ZooKeeper. Skipped, saying so, when the broker has no Kafka listener (no ``listeners`` key, or
    nothing accepts connections on its port once the broker is up);
  - *this product, 0.7 path*: the product's own clients on the 0.7 port (bench/peers/ours.py, as
    bench/bench_peers.py runs them): sync ``Producer``, 50 messages per PRODUCE request, acks=1
    (acks=-1 on a 0.7 topic of replication factor 3 on the same 3 brokers); ``SimpleConsumer.fetch_batch``;
  - *Tansu* (bench/peers/tansu.py): an independent Kafka-protocol broker in Rust, in-memory storage,
    the same confluent-kafka clients; it has no replication of its own, so its acks=all row is one broker;
  - *RabbitMQ* (bench/peers/rabbitmq.py): persistent messages, publisher confirms awaited per 1,000
    (``--confirm-window``), ``basic_consume`` with prefetch 1,000; acks=all over 3 nodes would need a
    quorum queue on a RabbitMQ cluster: not run.
* **four more consume rows** for the Kafka-protocol systems only (the same topic): confluent-kafka's
  ``poll()`` one message a call; confluent-kafka with every setting librdkafka's default (its 1 s
  ``fetch.queue.backoff.ms`` paces it); kafka-python's ``poll(max_records=10000)`` and aiokafka's
  ``getmany(max_records=10000)`` with their defaults. The 0.7 path and RabbitMQ print "not run" there;
* **the limits**, measured in the same rounds: loopback TCP for the produced bytes in requests of the
  size librdkafka sent (``sendall``), loopback for the same bytes sent from a page-cached file with
  ``os.sendfile`` in 1 MB calls (librdkafka's ``max.partition.fetch.bytes``), sequential write +
  fdatasync of the same bytes where the broker writes, and the client's own ceiling (the
  ``produce()`` calls alone, nowhere to send) and the consumer's (``consume(10000)`` calls alone over
  this round's acks=1 topic once librdkafka has fetched all of it). Rows are printed as ratios to them.

Rows alternate: each round runs every row kind for every system, the systems' order rotating from
round to round, so that the machine's load falls on all of them alike; a row's figure is the best of
its rounds (every round is printed). Each row prints msg/s, MB/s of payload, the client's CPU
µs/msg (``time.process_time`` of this process: the Python code and librdkafka's threads) and the
server's (``/proc/<pid>/stat`` of the broker processes the row uses). The load average is printed
at the start, at every round and at the end.

Counts are exact: a produce row fails unless every message was delivered (no delivery error, nothing
left after flush) and the partition holds exactly N (this product's high watermark; Tansu's
ListOffsets answer is printed only, it lags); the consume row reads exactly N, checked by one more
second of polling (Kafka) or the log's end (0.7) or the queue's count (RabbitMQ). ``--verify`` also
compares every payload read with those sent, in order, and reads the acks=all topics back.

Every server is stopped in ``finally``, also on SIGINT, SIGTERM and SIGHUP (bench/peers/run.py), by
PID; the harness reaper (tests/harness/reaper.py) stops them if this process is killed. The last
line says which PIDs were stopped and that none is left.

Usage::

    .venv/bin/python bench/bench_kafka.py [--count 1000000] [--peer-count 100000] [--rounds 3]
        [--only ours-kafka,ours-0.7,tansu,rabbitmq]
        [--kinds acks1,acksall,consume,consume-poll,consume-defaults,consume-kafka-python,consume-aiokafka]
        [--broker-tree PATH] [--verify] [--json results.json]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.limits import loopback_seconds, raw_write, sendfile_loopback_seconds  # noqa: E402
from bench.peers.ours import produce_sync, read_batches  # noqa: E402
from bench.peers.ours_kafka import NO_LISTENER, OursServers, kafka_listener_missing  # noqa: E402
from bench.peers.process import alive  # noqa: E402
from bench.peers.run import (PAYLOAD_SIZE, Stop, machine, payloads, raise_deferred, stop_on_signals,  # noqa: E402
                             stopping_servers)
from bench.peers.tansu import Tansu, TansuMissing, binary  # noqa: E402
from bench.replication_cluster import busy_processes  # noqa: E402
from ingest.client.simple_consumer import SimpleConsumer  # noqa: E402
from ingest.ratelimited_log import flush_all  # noqa: E402
from ingest.records.message import HEADER_SIZE  # noqa: E402

SYSTEMS = ("ours-kafka", "ours-0.7", "tansu", "rabbitmq")
KINDS = ("acks1", "acksall", "consume", "consume-poll", "consume-defaults", "consume-kafka-python",
         "consume-aiokafka")
#: the consume rows that only Kafka-protocol clients run: confluent-kafka in two more ways, and two other clients
KAFKA_CONSUME = ("consume-poll", "consume-defaults", "consume-kafka-python", "consume-aiokafka")
NAMES = {"ours-kafka": "this product, Kafka listener", "ours-0.7": "this product, 0.7 path", "tansu": "Tansu",
         "rabbitmq": "RabbitMQ"}
LABELS = {"acks1": "produce, acks=1, one broker", "acksall": "produce, acks=all, RF 3 on 3 brokers",
          "consume": "consume from earliest, one broker", "consume-poll": "consume, poll() per message",
          "consume-defaults": "consume, librdkafka's defaults", "consume-kafka-python": "consume, kafka-python",
          "consume-aiokafka": "consume, aiokafka"}
BATCH_07 = 50
FETCH_CHUNK = 1 << 20  # librdkafka's max.partition.fetch.bytes
MSG_07 = HEADER_SIZE + PAYLOAD_SIZE  # a 0.7-path message on disk: the offsets advance by this much
# without a Kafka produce row to measure them: a record of a 200-byte value in a batch, and librdkafka's batch.size
ESTIMATED_WIRE = PAYLOAD_SIZE + 10
ESTIMATED_REQUEST = 1 << 20


CONSUME_MEANING = "confluent-kafka Consumer, assign from OFFSET_BEGINNING, consume(10000), fetch.queue.backoff.ms 10"
KAFKA_CONSUME_MEANING = {
    "consume-poll": "the same, poll() one message a call",
    "consume-defaults": "the same consume(10000), every setting librdkafka's default (fetch.queue.backoff.ms 1000)",
    "consume-kafka-python": "kafka-python KafkaConsumer, assign, seek_to_beginning, poll(max_records=10000), defaults",
    "consume-aiokafka": "aiokafka AIOKafkaConsumer, assign, seek_to_beginning, getmany(max_records=10000), defaults",
}


def meaning(system: str, kind: str, args) -> str:
    return {
        ("ours-kafka", "acks1"): "confluent-kafka Producer, linger.ms 5, acks=1, no compression",
        ("ours-kafka", "acksall"): "the same, acks=all; Kafka topic, RF 3, min.insync.replicas 2",
        ("ours-kafka", "consume"): CONSUME_MEANING,
        ("tansu", "acks1"): "confluent-kafka Producer, linger.ms 5, acks=1, no compression; memory storage",
        ("tansu", "acksall"): "the same, acks=all; ONE broker (Tansu has no replication of its own)",
        ("tansu", "consume"): CONSUME_MEANING,
        ("ours-0.7", "acks1"): f"sync Producer, {args.batch_07} per PRODUCE request, acks=1",
        ("ours-0.7", "acksall"): f"sync Producer, {args.batch_07} per request, acks=-1; 0.7 topic, RF 3",
        ("ours-0.7", "consume"): "SimpleConsumer.fetch_batch, 200 KB pulls, CRC checked",
        ("rabbitmq", "acks1"): f"basic_publish persistent, publisher confirms awaited per {args.confirm_window}",
        ("rabbitmq", "acksall"): "no equivalent (a quorum queue on a 3-node RabbitMQ cluster)",
        ("rabbitmq", "consume"): "basic_consume, prefetch 1000, basic_ack multiple per 1,000",
        **{(s, k): KAFKA_CONSUME_MEANING[k] for s in ("ours-kafka", "tansu") for k in KAFKA_CONSUME},
        **{(s, k): "no Kafka-protocol port (a Kafka client's row)" for s in ("ours-0.7", "rabbitmq")
           for k in KAFKA_CONSUME},
    }[(system, kind)]


class Bench:
    """One run: the servers, the rows of every round, the limits, and the report."""

    def __init__(self, args, work: Path) -> None:
        self.args = args
        self.work = work
        self.systems = args.only
        self.kinds = args.kinds
        self.msgs = payloads(max(args.count, args.peer_count))
        self.skip: dict[str, str] = {}           # system -> why its rows do not run
        self.skip_rows: dict[tuple[str, str], str] = {}  # (system, kind) -> why that row does not run
        self.servers: dict[str, object] = {}     # started servers by system ("ours" for both of ours)
        self.stopped: dict[str, dict] = {}
        self.rows: dict[str, dict[str, list]] = {k: {s: [] for s in self.systems} for k in self.kinds}
        self.limits: dict[str, list] = {}
        # (request bytes, wire bytes per message) of the latest Kafka produce row of each (system, kind)
        self.wire: dict[tuple[str, str], tuple[float, float]] = {}
        self.failed = False

    # -- servers -------------------------------------------------------------------------------

    def count(self, system: str) -> int:
        return self.args.peer_count if system == "rabbitmq" else self.args.count

    def start(self) -> None:
        ours_wanted = [s for s in ("ours-kafka", "ours-0.7") if s in self.systems]
        # asked whenever our brokers run: a broker with a Kafka listener gets a port of its own even for the
        # 0.7 rows alone (the default listener port would be the same for the 3 brokers of the cluster)
        missing = kafka_listener_missing(self.args.broker_tree) if ours_wanted else None
        if missing and "ours-kafka" in ours_wanted:
            self.skip["ours-kafka"] = f"skipped: {missing}"
        if ours_wanted and any(s not in self.skip for s in ours_wanted):
            kafka = missing is None
            self._start("ours", lambda: OursServers(self.work / "ours", self.args.broker_tree, kafka=kafka,
                                                    cluster="acksall" in self.kinds),
                        [s for s in ours_wanted if s not in self.skip])
            if kafka and "ours-kafka" in ours_wanted and "ours-kafka" not in self.skip:
                silent = self.servers["ours"].kafka_not_listening()
                if silent:
                    self.skip["ours-kafka"] = f"skipped: {NO_LISTENER} ({silent})"
                elif "acksall" in self.kinds and (why := self.servers["ours"].kafka_topics_create_missing()):
                    self.skip_rows[("ours-kafka", "acksall")] = f"skipped: {why}"
        if "tansu" in self.systems:
            try:
                binary()
            except TansuMissing as exc:
                self.skip["tansu"] = f"skipped: {exc}"
            else:
                self._start("tansu", Tansu, ["tansu"])
        if "rabbitmq" in self.systems:
            from bench.peers.rabbitmq import RABBITMQ_SERVER, RabbitMQ
            if not Path(RABBITMQ_SERVER).exists() or shutil.which("runuser") is None:
                self.skip["rabbitmq"] = "skipped: Debian's rabbitmq-server is not installed (scripts/bootstrap.sh)"
            else:
                try:
                    import pika  # noqa: F401 - test extra, imported here to skip cleanly without it
                except ImportError:
                    self.skip["rabbitmq"] = "skipped: pika is not installed (test extra)"
                else:
                    self._start("rabbitmq", RabbitMQ, ["rabbitmq"])

    def _start(self, key: str, make, systems: list[str]) -> None:
        t0 = time.perf_counter()
        server = make()
        self.servers[key] = server
        print(f"\n{key}: starting {getattr(server, 'version', '')} ...", flush=True)
        try:
            server.start()
        except Stop:
            raise
        except Exception as exc:  # noqa: BLE001 - a server that cannot start fails its rows, the others run
            self.failed = True
            for s in systems:
                self.skip[s] = f"failed: {key} did not start: {type(exc).__name__}: {str(exc)[-400:]}"
            print(f"{key}: did not start: {exc}", flush=True)
            return
        print(f"{key}: up in {time.perf_counter() - t0:.1f} s, server PIDs {self.pids(key)}", flush=True)

    def pids(self, key: str) -> list[int]:
        s = self.servers[key]
        return list(s.pids) if key == "ours" else list(s.server.pids)

    def stop_all(self) -> None:
        """Stop every started server by PID, the stop signals held back until all are stopped."""
        stopping_servers(self._stop_each)
        raise_deferred("the servers")

    def _stop_each(self) -> None:
        for key in reversed(list(self.servers)):
            server = self.servers[key]
            t0 = time.perf_counter()
            pids = self.pids(key)
            try:
                killed = server.stop()
            except Exception as exc:  # noqa: BLE001 - the others must still be stopped; the PIDs say what is left
                killed = [f"stop failed: {exc}"]
            pids = list(dict.fromkeys(pids + self.pids(key)))
            left = [p for p in pids if alive(p)]
            d = getattr(server, "dir", None)
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)
            self.stopped[key] = {"pids": pids, "killed": killed, "left": left}
            print(f"{key}: stopped PIDs {pids} in {time.perf_counter() - t0:.1f} s"
                  f"{' (SIGKILL: ' + str(killed) + ')' if killed else ''}; left running: {left or 'none'}",
                  flush=True)

    # -- rows ------------------------------------------------------------------------------------

    def run(self) -> None:
        n_rounds = self.args.rounds
        for r in range(n_rounds):
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"\nround {r + 1} of {n_rounds} (load average {load})", flush=True)
            order = self.systems[r % len(self.systems):] + self.systems[:r % len(self.systems)]
            for kind in self.kinds:
                for system in order:
                    res = self.row(system, kind, r)
                    self.rows[kind][system].append(res)
                    print(f"  {LABELS[kind]:<36} {NAMES[system]:<30} {self.line(res)}", flush=True)
            self.limit_round(r)
            self.dequeue_round(r)

    @staticmethod
    def line(res) -> str:
        if isinstance(res, str):
            return res
        return (f"{res['messages']:>9,} msgs {res['seconds']:7.2f} s {res['msg_s']:>11,.0f} msg/s  "
                f"client {res['client_us']:6.2f} µs/msg  server {res['server_us']:6.2f} µs/msg")

    def row(self, system: str, kind: str, r: int):
        if system in self.skip:
            return self.skip[system]
        if (system, kind) in self.skip_rows:
            return self.skip_rows[(system, kind)]
        if (system, kind) == ("rabbitmq", "acksall") or (kind in KAFKA_CONSUME and system in ("ours-0.7", "rabbitmq")):
            return "not run: " + meaning(system, kind, self.args)
        if (kind.startswith("consume") and "acks1" in self.kinds
                and not isinstance(self.rows["acks1"][system][-1], dict)):
            return "skipped: the acks=1 row of this round produced nothing to read"
        try:
            if kind in KAFKA_CONSUME:
                return getattr(self, f"_{system.replace('-', '_')}_consume")(r, kind)
            return getattr(self, f"_{system.replace('-', '_').replace('.', '')}_{kind}")(r)
        except Stop:
            raise
        except Exception as exc:  # noqa: BLE001 - one failed row is reported and fails the run; the rest run
            self.failed = True
            return f"failed: {type(exc).__name__}: {str(exc)[-400:]}"

    def measure(self, cpu, fn, n: int) -> dict:
        """Run ``fn`` (returns seconds, or a dict with ``seconds``) with this process's and the servers' CPU marked."""
        c0, s0 = time.process_time(), cpu()
        out = fn()
        client, server = time.process_time() - c0, cpu() - s0
        out = out if isinstance(out, dict) else {"seconds": out}
        secs = out["seconds"]
        out.update({"messages": n, "msg_s": n / secs, "mb_s": n * PAYLOAD_SIZE / secs / 1e6,
                    "client_us": client / n * 1e6, "server_us": server / n * 1e6})
        return out

    def topic(self, system: str, kind: str, r: int) -> str:
        prefix = {"ours-kafka": "k", "ours-0.7": "o", "tansu": "t", "rabbitmq": "q"}[system]
        return f"{prefix}{'all' if kind == 'acksall' else '1'}-r{r}"

    def verify(self, what: str, kept: list[bytes], n: int) -> None:
        if kept != self.msgs[:n]:
            same_set = sorted(kept) == sorted(self.msgs[:n])
            raise RuntimeError(f"{what}: the payloads read differ from those sent"
                               f"{' (the same set, another order)' if same_set else ''}")

    def kafka_produce(self, system: str, bootstrap: str, topic: str, acks: str, n: int, cpu) -> dict:
        from bench.peers import kafka_clients as kc
        res = self.measure(cpu, lambda: kc.produce(bootstrap, topic, self.msgs[:n], acks), n)
        if res["requests"]:
            kind = "acks1" if acks == "1" else "acksall"
            self.wire[(system, kind)] = (res["request_bytes"], res["request_bytes"] * res["requests"] / n)
        return res

    def wire_basis(self) -> tuple[float, float, str]:
        """(request bytes, wire bytes per message, where from) for the limits: the latest acks=1 row of
        the Kafka listener, else of Tansu, else any Kafka produce row, else an estimate."""
        for key in [("ours-kafka", "acks1"), ("tansu", "acks1"), *self.wire]:
            if key in self.wire:
                return (*self.wire[key], f"measured: librdkafka's Produce requests to {NAMES[key[0]]}, {key[1]}")
        return ESTIMATED_REQUEST, ESTIMATED_WIRE, "estimated: no Kafka produce row ran"

    def kafka_read_back(self, bootstrap: str, topic: str, n: int) -> None:
        from bench.peers import kafka_clients as kc
        _, got, _, kept = kc.consume(bootstrap, topic, n, keep=True)
        self.verify(f"{topic} read back", kept, got)

    def kafka_consume(self, bootstrap: str, topic: str, n: int, cpu, kind: str = "consume") -> dict:
        from bench.peers import kafka_clients as kc
        kept: list[bytes] = []
        read = {"consume": kc.consume, "consume-poll": lambda *a, **k: kc.consume(*a, loop="poll", **k),
                "consume-defaults": lambda *a, **k: kc.consume(*a, tuned=False, **k),
                "consume-kafka-python": kc.consume_kafka_python, "consume-aiokafka": kc.consume_aiokafka}[kind]

        def run():
            secs, got, nbytes, k = read(bootstrap, topic, n, keep=self.args.verify)
            kept.extend(k)
            if got != n or nbytes != n * PAYLOAD_SIZE:
                raise RuntimeError(f"{topic}: {got} messages / {nbytes} bytes read, expected {n} / {n * PAYLOAD_SIZE}")
            return secs
        res = self.measure(cpu, run, n)
        if self.args.verify:
            self.verify(topic, kept, n)
            res["verified"] = True
        return res

    # this product, Kafka listener

    def _ours_kafka_acks1(self, r: int) -> dict:
        from bench.peers import kafka_clients as kc
        ours, n, topic = self.servers["ours"], self.args.count, self.topic("ours-kafka", "acks1", r)
        kc.wait_topic(ours.bootstrap_one, topic, 1)
        res = self.kafka_produce("ours-kafka", ours.bootstrap_one, topic, "1", n, ours.one_cpu)
        self.exact_hw(ours.bootstrap_one, topic, n, res)
        return res

    def _ours_kafka_acksall(self, r: int) -> dict:
        from bench.peers import kafka_clients as kc
        ours, n, topic = self.servers["ours"], self.args.count, self.topic("ours-kafka", "acksall", r)
        ours.create_kafka_rf3(topic)
        kc.wait_topic(ours.bootstrap_cluster, topic, 3)
        res = self.kafka_produce("ours-kafka", ours.bootstrap_cluster, topic, "all", n, ours.cluster_cpu)
        self.exact_hw(ours.bootstrap_cluster, topic, n, res)
        if self.args.verify:
            self.kafka_read_back(ours.bootstrap_cluster, topic, n)
        return res

    def _ours_kafka_consume(self, r: int, kind: str = "consume") -> dict:
        ours = self.servers["ours"]
        return self.kafka_consume(ours.bootstrap_one, self.topic("ours-kafka", kind, r), self.args.count,
                                  ours.one_cpu, kind)

    @staticmethod
    def exact_hw(bootstrap: str, topic: str, n: int, res: dict) -> None:
        from bench.peers import kafka_clients as kc
        low, high = kc.watermarks(bootstrap, topic)
        res["watermarks"] = [low, high]
        if (low, high) != (0, n):
            raise RuntimeError(f"{topic}: log start offset {low}, high watermark {high} after {n} acknowledged "
                               f"messages; expected 0 and {n}")

    # Tansu

    def _tansu_acks1(self, r: int) -> dict:
        return self._tansu_produce(self.topic("tansu", "acks1", r), "1")

    def _tansu_acksall(self, r: int) -> dict:
        res = self._tansu_produce(self.topic("tansu", "acksall", r), "all")
        if self.args.verify:
            self.kafka_read_back(self.servers["tansu"].bootstrap, self.topic("tansu", "acksall", r), self.args.count)
        return res

    def _tansu_produce(self, topic: str, acks: str) -> dict:
        from bench.peers import kafka_clients as kc
        t, n = self.servers["tansu"], self.args.count
        t.create_topic(topic)
        kc.wait_topic(t.bootstrap, topic, 1)
        res = self.kafka_produce("tansu", t.bootstrap, topic, acks, n, t.server_cpu)
        t.check_alive()
        res["watermarks"] = list(kc.watermarks(t.bootstrap, topic))  # printed, not checked: Tansu's lags
        return res

    def _tansu_consume(self, r: int, kind: str = "consume") -> dict:
        t = self.servers["tansu"]
        res = self.kafka_consume(t.bootstrap, self.topic("tansu", kind, r), self.args.count, t.server_cpu, kind)
        t.check_alive()
        return res

    # this product, 0.7 path

    def _ours_07_acks1(self, r: int) -> dict:
        ours, n, topic = self.servers["ours"], self.args.count, self.topic("ours-0.7", "acks1", r)
        res = self.measure(ours.one_cpu, lambda: ours.one.produce(topic, self.msgs[:n], self.args.batch_07, "ack"), n)
        ours.one.wait_visible(topic, n, MSG_07)
        self.exact_end_07(ours.one.broker.host, ours.one.broker.port, topic, n)
        return res

    def _ours_07_acksall(self, r: int) -> dict:
        ours, n, topic = self.servers["ours"], self.args.count, self.topic("ours-0.7", "acksall", r)
        ours.create_07_rf3(topic)
        cfg = {"zk.connect": ours.zk_connect, "request.required.acks": -1}
        res = self.measure(ours.cluster_cpu, lambda: produce_sync(cfg, topic, self.msgs[:n], self.args.batch_07), n)
        host, port = ours.leader_07(topic)
        self.exact_end_07(host, port, topic, n)
        if self.args.verify:
            _, got, _, kept = read_batches(host, port, topic, n, keep=True)
            self.verify(f"{topic} read back", kept, got)
        return res

    def _ours_07_consume(self, r: int) -> dict:
        ours, n, topic = self.servers["ours"], self.args.count, self.topic("ours-0.7", "consume", r)
        kept: list[bytes] = []

        def run():
            secs, got, nbytes, k = ours.one.consume_batches(topic, n, keep=self.args.verify)
            kept.extend(k)
            if got != n or nbytes != n * PAYLOAD_SIZE:
                raise RuntimeError(f"{topic}: {got} messages / {nbytes} bytes read, expected {n} / {n * PAYLOAD_SIZE}")
            return secs
        res = self.measure(ours.one_cpu, run, n)
        if self.args.verify:
            self.verify(topic, kept, n)
            res["verified"] = True
        return res

    @staticmethod
    def exact_end_07(host: str, port: int, topic: str, n: int, timeout: float = 30.0) -> None:
        """The log's visible end is exactly ``n`` messages (it becomes visible with the flush)."""
        with SimpleConsumer(host, port) as c:
            deadline = time.monotonic() + timeout
            while (end := c.latest_offset(topic, 0)) < n * MSG_07 and time.monotonic() < deadline:
                time.sleep(0.05)
        if end != n * MSG_07:
            raise RuntimeError(f"{topic}: log end {end} after {n} acknowledged messages, expected {n * MSG_07} "
                               f"({n} x {MSG_07} bytes)")

    # RabbitMQ

    def _rabbitmq_acks1(self, r: int) -> dict:
        q, n, topic = self.servers["rabbitmq"], self.args.peer_count, self.topic("rabbitmq", "acks1", r)
        res = self.measure(q.server_cpu, lambda: q.produce(topic, self.msgs[:n], self.args.confirm_window, "ack"), n)
        if (queued := q.queued(topic)) != n:
            raise RuntimeError(f"{topic}: {queued} messages queued after {n} confirmed publishes")
        return res

    def _rabbitmq_consume(self, r: int) -> dict:
        q, n, topic = self.servers["rabbitmq"], self.args.peer_count, self.topic("rabbitmq", "consume", r)
        kept: list[bytes] = []

        def run():
            secs, got, nbytes, k = q.consume(topic, n, keep=self.args.verify)
            kept.extend(k)
            if got != n or nbytes != n * PAYLOAD_SIZE:
                raise RuntimeError(f"{topic}: {got} messages / {nbytes} bytes read, expected {n} / {n * PAYLOAD_SIZE}")
            return secs
        res = self.measure(q.server_cpu, run, n)
        if (queued := q.queued(topic)) != 0:
            raise RuntimeError(f"{topic}: {queued} messages still queued after reading {n}")
        if self.args.verify:
            self.verify(topic, kept, n)
            res["verified"] = True
        return res

    # -- limits ----------------------------------------------------------------------------------

    def limit_round(self, r: int) -> None:
        """The physical limits for this round's bytes: loopback (requests, sendfile), disk, the client alone."""
        from bench.peers import kafka_clients as kc
        n = self.args.count
        request, per_msg, basis = self.wire_basis()
        request = max(int(request), 1)
        chunks = -(-int(n * per_msg) // request)
        nbytes = chunks * request  # whole requests: at least the bytes of n messages
        out = {"request_bytes": request, "wire_bytes_per_msg": per_msg, "basis": basis}

        def put(name: str, secs: float, what: str) -> None:
            msgs = nbytes / per_msg
            res = {"seconds": secs, "msg_s": msgs / secs, "mb_s": nbytes / secs / 1e6, "what": what}
            self.limits.setdefault(name, []).append(res)
            out[name] = res

        put("loopback_produce", loopback_seconds(nbytes, chunk=request),
            f"loopback TCP, sendall of {request:,} B (the produce requests), recv_into 1 MB")
        data_dir = self.work / "limits"
        data_dir.mkdir(exist_ok=True)
        path = data_dir / "log"
        block = os.urandom(request)
        raw_write(path, block, chunks, False)
        put("sendfile_fetch", sendfile_loopback_seconds(path, FETCH_CHUNK),
            f"loopback TCP, os.sendfile of {FETCH_CHUNK:,} B from a page-cached file, recv_into 1 MB")
        path.unlink()
        t0 = time.perf_counter()
        raw_write(path, block, chunks, False)
        put("disk_write", time.perf_counter() - t0,
            f"sequential write of {request:,} B chunks + fdatasync, in the brokers' directory")
        path.unlink()
        secs = kc.enqueue_seconds("limit", self.msgs[:n])
        self.limits.setdefault("client_enqueue", []).append(
            {"seconds": secs, "msg_s": n / secs, "mb_s": n * per_msg / secs / 1e6,
             "what": "confluent-kafka produce() calls alone (no broker: enqueue only)"})
        out["client_enqueue"] = self.limits["client_enqueue"][-1]
        print(f"  limits ({basis}: {per_msg:.1f} B per message on the wire, requests of {request:,} B): "
              + ", ".join(f"{k} {v['msg_s']:,.0f} msg/s ({v['mb_s']:,.0f} MB/s)" for k, v in out.items()
                          if isinstance(v, dict)), flush=True)

    def dequeue_round(self, r: int) -> None:
        """The consumer's own ceiling: confluent-kafka's consume(10000) calls over messages already fetched,
        read from this round's acks=1 topic of the Kafka listener (else Tansu's)."""
        from bench.peers import kafka_clients as kc
        for system, bootstrap in (("ours-kafka", lambda: self.servers["ours"].bootstrap_one),
                                  ("tansu", lambda: self.servers["tansu"].bootstrap)):
            if "acks1" in self.kinds and system in self.systems and isinstance(self.rows["acks1"][system][-1], dict):
                n = self.args.count
                try:
                    secs = kc.dequeue_seconds(bootstrap(), self.topic(system, "acks1", r), n)
                except Stop:
                    raise
                except Exception as exc:  # noqa: BLE001 - a limit that cannot be measured is reported, not fatal
                    self.failed = True
                    print(f"  limit client_dequeue failed: {type(exc).__name__}: {exc}", flush=True)
                    return
                res = {"seconds": secs, "msg_s": n / secs, "mb_s": n * PAYLOAD_SIZE / secs / 1e6,
                       "what": f"confluent-kafka consume(10000) calls alone (every message already fetched, "
                               f"from {NAMES[system]})"}
                self.limits.setdefault("client_dequeue", []).append(res)
                print(f"  limit client_dequeue {res['msg_s']:,.0f} msg/s ({res['what']})", flush=True)
                return

    # -- report ----------------------------------------------------------------------------------

    def best(self, kind: str, system: str):
        got = [x for x in self.rows[kind][system] if isinstance(x, dict)]
        if got:
            return max(got, key=lambda x: x["msg_s"])
        rows = self.rows[kind][system]
        return rows[-1] if rows else "not run"

    def client_limit(self, kind: str, system: str) -> tuple[str, dict] | None:
        """The confluent-kafka client's own ceiling for a row it runs: produce() or consume() calls alone."""
        if system not in ("ours-kafka", "tansu") or kind in ("consume-kafka-python", "consume-aiokafka"):
            return None
        name = "client_dequeue" if kind.startswith("consume") else "client_enqueue"
        lim = self.best_limit(name)
        return (name, lim) if lim else None

    def best_limit(self, name: str) -> dict | None:
        got = self.limits.get(name, [])
        return max(got, key=lambda x: x["msg_s"]) if got else None

    def limit_for(self, kind: str) -> tuple[str, dict] | tuple[None, None]:
        if kind.startswith("consume"):
            lim = self.best_limit("sendfile_fetch")
            return ("sendfile_fetch", lim) if lim else (None, None)
        cands = [(k, self.best_limit(k)) for k in ("loopback_produce", "disk_write")]
        cands = [(k, v) for k, v in cands if v]
        return min(cands, key=lambda kv: kv[1]["msg_s"]) if cands else (None, None)

    def report(self, info: dict) -> str:
        out = [f"\n### Side by side: msg/s, best of {self.args.rounds} round(s) (every round in brackets)\n"]
        out.append("| row | " + " | ".join(NAMES[s] for s in self.systems) + " |")
        out.append("| --- |" + " ---: |" * len(self.systems))
        notes: dict[tuple[str, str], list[str]] = {}
        for kind in self.kinds:
            cells = []
            for s in self.systems:
                b = self.best(kind, s)
                if isinstance(b, dict):
                    every = " / ".join(f"{x['msg_s']:,.0f}" if isinstance(x, dict) else x.split(":")[0]
                                       for x in self.rows[kind][s])
                    cells.append(f"{b['msg_s']:,.0f} ({every})")
                else:
                    cells.append(b.split(":")[0])
                    notes.setdefault((s, b), []).append(LABELS[kind])
            out.append(f"| {LABELS[kind]} | " + " | ".join(cells) + " |")
        if notes:
            out.append("")
        for (s, why), kinds in notes.items():
            out.append(f"- {NAMES[s]} ({'; '.join(kinds)}): {why}")

        out.append("\n### Every row (its best round)\n")
        out.append("| row | system | what it is | messages | msg/s | MB/s | client CPU µs/msg | server CPU µs/msg "
                   "| ÷ limit |")
        out.append("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for kind in self.kinds:
            lim_name, lim = self.limit_for(kind)
            for s in self.systems:
                b = self.best(kind, s)
                what = meaning(s, kind, self.args)
                if isinstance(b, dict):
                    ratio = f"{b['msg_s'] / lim['msg_s']:.3f} of {lim_name}" if lim else "-"
                    client = self.client_limit(kind, s)
                    if client:
                        ratio += f"; {b['msg_s'] / client[1]['msg_s']:.2f} of {client[0]}"
                    out.append(f"| {LABELS[kind]} | {NAMES[s]} | {what} | {b['messages']:,} | {b['msg_s']:,.0f} "
                               f"| {b['mb_s']:.1f} | {b['client_us']:.2f} | {b['server_us']:.2f} | {ratio} |")
                else:
                    out.append(f"| {LABELS[kind]} | {NAMES[s]} | {what} | - | - | - | - | - | {b.split(':')[0]} |")

        if self.limits:
            out.append("\n### The limits, same run (best round)\n")
            out.append("| limit | what it is | msg/s | MB/s |")
            out.append("| --- | --- | ---: | ---: |")
            for name in ("loopback_produce", "sendfile_fetch", "disk_write", "client_enqueue", "client_dequeue"):
                b = self.best_limit(name)
                if b:
                    out.append(f"| {name} | {b['what']} | {b['msg_s']:,.0f} | {b['mb_s']:,.0f} |")
            request, per_msg, basis = self.wire_basis()
            out.append(f"\n(the same bytes for every limit: {self.args.count:,} messages of {per_msg:.1f} bytes on "
                       f"the wire, requests of {request:,.0f} bytes; {basis})")

        out.append("\n### Ratios, same run\n")
        out.extend(f"- {x}" for x in self.ratios())
        out.append("\n### The issue's aims (this run)\n")
        out.extend(f"- {a}" for a in self.aims())
        out.append(f"\nmachine: {info['machine']}; load average {info['load_start']} at start, "
                   f"{info['load_end']} at end")
        return "\n".join(out)

    def ratios(self) -> list[str]:
        """Each of this product's paths ÷ every other system, per row kind."""
        lines = []
        for kind in self.kinds:
            for mine in ("ours-kafka", "ours-0.7"):
                a = self.best(kind, mine) if mine in self.systems else None
                if not isinstance(a, dict):
                    continue
                for other in self.systems:
                    b = self.best(kind, other)
                    if other != mine and isinstance(b, dict) and not (mine == "ours-0.7" and other == "ours-kafka"):
                        lines.append(f"{LABELS[kind]}: {NAMES[mine]} ÷ {NAMES[other]} = {a['msg_s'] / b['msg_s']:.2f}x")
        return lines or ["(needs this product and another system with results in one run)"]

    def aims(self) -> list[str]:
        lines = []
        for kind, aim, label in (("acks1", 1_000_000, "Kafka-path produce acks=1, one broker"),
                                 ("consume", 2_000_000, "Kafka-path consume")):
            if kind not in self.kinds or "ours-kafka" not in self.systems:
                continue
            b = self.best(kind, "ours-kafka")
            lim_name, lim = self.limit_for(kind)
            if isinstance(b, dict):
                near = f"; {b['msg_s'] / lim['msg_s']:.3f} of the {lim_name} limit" if lim else ""
                client = self.client_limit(kind, "ours-kafka")
                if client:
                    near += (f"; {b['msg_s'] / client[1]['msg_s']:.2f} of the client's own ceiling ({client[0]}, "
                             f"{client[1]['msg_s']:,.0f} msg/s)")
                lines.append(f"{label} >= {aim:,} msg/s: {b['msg_s']:,.0f}{near}: "
                             f"{'MET' if b['msg_s'] >= aim else 'NOT MET'}")
            else:
                lines.append(f"{label} >= {aim:,} msg/s: not measured ({b})")
        return lines or ["(needs the Kafka listener's rows)"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000,
                    help="messages per row, Kafka-protocol systems and the 0.7 path")
    ap.add_argument("--peer-count", type=int, default=100_000, help="messages per row, RabbitMQ")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; every row's figure is its best round")
    ap.add_argument("--only", default=",".join(SYSTEMS), help="comma-separated subset of: " + ", ".join(SYSTEMS))
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of: " + ", ".join(KINDS))
    ap.add_argument("--broker-tree", type=Path, default=REPO,
                    help="the checkout whose brokers run (another branch's worktree, say); default this one")
    ap.add_argument("--batch-07", type=int, default=BATCH_07, help="messages per PRODUCE request, 0.7 path")
    ap.add_argument("--confirm-window", type=int, default=1000,
                    help="RabbitMQ: publishes between waits for their publisher confirms")
    ap.add_argument("--verify", action="store_true",
                    help="compare every payload read with those sent, in order; read the acks=all topics back")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    for name, allowed in (("only", SYSTEMS), ("kinds", KINDS)):
        chosen = [s.strip() for s in getattr(args, name).split(",") if s.strip()]
        unknown = [s for s in chosen if s not in allowed]
        if unknown or not chosen:
            ap.error(f"--{name}: unknown or no value(s) {unknown}; allowed: {', '.join(allowed)}")
        setattr(args, name, [s for s in allowed if s in chosen])  # the declared order
    for name in ("count", "peer_count", "rounds", "batch_07", "confirm_window"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)}: allowed is an integer >= 1")
    if any(k.startswith("consume") for k in args.kinds) and "acks1" not in args.kinds:
        ap.error("--kinds: consume reads what the acks1 row of the same round produced; give acks1 too")
    args.broker_tree = args.broker_tree.resolve()
    if not (args.broker_tree / "ingest" / "broker").is_dir():
        ap.error(f"--broker-tree {args.broker_tree}: not a checkout of this product (no ingest/broker)")
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    stop_on_signals()
    info = {"machine": machine(), "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    print(f"machine: {info['machine']}; load average at start {info['load_start']} (1, 5, 15 min)", flush=True)
    others = busy_processes()
    print("other processes using CPU (1 s sample): " + ("; ".join(others) if others else "none above 5%"), flush=True)
    print(f"{args.count:,} messages of {PAYLOAD_SIZE} bytes per row ({args.peer_count:,} for RabbitMQ), "
          f"{args.rounds} round(s); brokers of {args.broker_tree}", flush=True)
    code = 0
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as work:
        bench = Bench(args, Path(work))
        try:
            bench.start()
            bench.run()
        except Stop as exc:
            print(f"\ninterrupted ({exc}): stopping every server", flush=True)
            code = 130
        finally:
            bench.stop_all()
            flush_all(final=True)  # librdkafka's repeated lines, counted
            left = sorted(p for s in bench.stopped.values() for p in s["left"])
            every = sorted(p for s in bench.stopped.values() for p in s["pids"])
            print(f"stopped every server: PIDs {every}; left running: {left or 'none'}", flush=True)
    if code:
        return code
    info["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(bench.report(info))
    if left or bench.failed:
        code = 1
    if args.json:
        best = {k: {s: bench.best(k, s) for s in args.only} for k in args.kinds}
        Path(args.json).write_text(json.dumps({
            "info": info, "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "rows": bench.rows, "best": best, "limits": bench.limits, "skip": bench.skip,
            "servers": bench.stopped, "aims": bench.aims(), "ratios": bench.ratios()}, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
