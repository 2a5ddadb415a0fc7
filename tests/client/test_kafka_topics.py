"""The product's own clients on both kinds of topic (docs/kafka-protocol.md D5), against real broker processes.

- Producer (sync and async, keys, gzip) and EventProducer to a Kafka-format topic: confluent-kafka reads every
  record back byte-exact, with its key, at the offsets the producer's callbacks reported;
- records produced by confluent-kafka (keys, headers, two partitions) are printed by ``ingest console-consumer``,
  found through ``--bootstrap-server`` and through ZooKeeper's ``/brokers/endpoints``;
- one producer, both kinds: a topic the 0.7 side holds stays a 0.7 topic (byte offsets, read by the
  SimpleConsumer), a new topic is Kafka-format (``topic.format.default``), or 0.7 when that key says so; a
  producer that knows only Kafka listeners refuses a 0.7 topic clearly;
- a replicated Kafka topic (3 brokers, RF 3, min.insync 2) across a leader SIGKILL with the product's
  Producer (acks=-1, retries): nothing acknowledged is lost; a ZooKeeper consumer group refuses the topic
  clearly (groups of Kafka-format topics do not exist yet).
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ingest import znodes
from ingest.client.consumer_group import ConsumerConnector
from ingest.client.producer import Producer
from ingest.client.simple_consumer import SimpleConsumer
from ingest.errors import WrongTopicKindError
from ingest.events.event_producer import EventProducer
from ingest.events.registry_client import RegistryClient
from ingest.events.serde import EventDeserializer
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.registry import RegistryProcess
from tests.harness.wait import wait_until
from tests.kafka.clients import confluent_consume, confluent_produce, messages

pytestmark = pytest.mark.processes
REPO = Path(__file__).resolve().parents[2]


def _bootstrap(brokers) -> str:
    return ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers)


def _ingest(*args: str, stdin: bytes = b"", timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], input=stdin, capture_output=True,
                          timeout=timeout, env=env, cwd=REPO)


def test_producer_to_a_kafka_topic_is_read_back_by_confluent_kafka_byte_exact(broker_factory):
    broker, = broker_factory(1, num_partitions=2)
    config = {"broker.list": broker.address, "bootstrap.servers": f"127.0.0.1:{broker.kafka_port}",
              "compression.codec": "gzip"}
    results = []
    sent = []
    with Producer(config) as sync:
        for i in range(200):
            payloads = [f"s{i}-{j}-".encode() + os.urandom(i % 50) for j in range(1 + i % 3)]
            key = f"key{i % 7}".encode() if i % 2 else None
            sync.send("kt", payloads, key=key, callback=lambda res, p=payloads, k=key: results.append((res, p, k)))
            sent.extend((p, key) for p in payloads)
        assert sync.routes.kind("kt") == "kafka"
    with Producer({**config, "producer.type": "async", "batch.size": 50, "queue.time": 20}) as asyn:
        for i in range(300):
            payload = f"a{i}-".encode() + os.urandom(i % 40)
            key = f"key{i % 5}" if i % 3 else None      # a str key is sent as its UTF-8 bytes
            asyn.send("kt", [payload], key=key, callback=lambda res, p=payload, k=key: results.append((res, [p], k)))
            sent.append((payload, None if key is None else key.encode()))
    assert all(res.error is None for res, _, _ in results)
    assert sum(res.count for res, _, _ in results) == len(sent) == sum(len(p) for _, p, _ in results)

    got = confluent_consume(f"127.0.0.1:{broker.kafka_port}", "kt", 2, len(sent))
    by_offset = {(p, o): (k, v) for p, rows in got.items() for o, k, v, _h, _t in rows}
    assert len(by_offset) == len(sent)
    for p, rows in got.items():
        assert [o for o, *_ in rows] == list(range(len(rows))), "offsets 0, 1, 2, ... per partition"
    # every callback's first offset names its records, in order, with their keys
    for res, payloads, key in results:
        for i, payload in enumerate(payloads):
            k = None if key is None else (key.encode() if isinstance(key, str) else key)
            assert by_offset[(res.partition, res.first_offset + i)] == (k, payload)
    # a key keeps its partition (Kafka's murmur2, as the Java client places it)
    partitions_of_key = {}
    for (p, _o), (k, _v) in by_offset.items():
        if k is not None:
            partitions_of_key.setdefault(k, set()).add(p)
    assert all(len(ps) == 1 for ps in partitions_of_key.values())


def test_event_producer_and_its_monitoring_events_on_kafka_topics(broker_factory, tmp_path_factory):
    broker, = broker_factory(1)
    registry = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    try:
        client = RegistryClient(registry.url)
        config = {"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}", "producer.type": "async",
                  "queue.time": 20}
        ep = EventProducer(config, client, background=False, monitoring_window_ms=60_000,
                           monitoring_grace_ms=0, monitoring_interval_ms=100)
        headers = []
        for i in range(50):
            headers += ep.send("page-views", [{"member_id": i, "page_key": "home", "url": "/", "referrer": None,
                                               "user_agent": "ua", "ip": "10.0.0.1", "locale": "en_US",
                                               "response_ms": i, "is_guest": False}])
        stats = ep.close(timeout_s=60)
        assert stats["acked"] == 50 and stats["failed"] == 0 and stats["monitoring_pending"] == 0
        assert stats["monitoring_published"] >= 1
        assert ep.producer.routes.kind("page-views") == "kafka"

        bootstrap = f"127.0.0.1:{broker.kafka_port}"
        rows = confluent_consume(bootstrap, "page-views", 1, 50)[0]
        decoder = EventDeserializer(client)
        events = [decoder.deserialize(v) for _o, _k, v, _h, _t in rows]
        assert [(e["header"]["session"], e["header"]["seq"], e["member_id"]) for e in events] == [
            (h["session"], h["seq"], i) for i, h in enumerate(headers)]
        monitoring = [decoder.deserialize(v) for _o, _k, v, _h, _t in
                      confluent_consume(bootstrap, "audit-monitoring", 1, stats["monitoring_published"])[0]]
        assert len(monitoring) == stats["monitoring_published"]
        final = [m for m in monitoring if m["topic"] == "page-views" and m["is_final"]]
        assert final and max(m["count_acked"] for m in final) == 50
    finally:
        registry.stop()


def test_console_consumer_prints_what_confluent_kafka_produced(broker_factory, zk_connect):
    broker, = broker_factory(1, zk_connect=zk_connect)
    bootstrap = f"127.0.0.1:{broker.kafka_port}"
    msgs = messages("console", 300, 1, 1_700_000_000_000)
    confluent_produce(bootstrap, "kcon", msgs, "all", "snappy")
    values = sorted(m.value for m in msgs if b"\n" not in m.value)
    for where in (("--bootstrap-server", bootstrap), ("--zk", zk_connect)):
        out = _ingest("console-consumer", *where, "--topic", "kcon", "--from-beginning", "--timeout-ms", "3000",
                      "--print-offsets")
        assert out.returncode == 0, out.stderr.decode()
        lines = [line.split(b"\t", 3) for line in out.stdout.split(b"\n") if line.startswith(b"kcon\t")]
        assert [int(o) for _t, _p, o, _v in lines[:len(msgs)]] == list(range(len(lines[:len(msgs)])))
        # a value holding a newline prints as two lines: compare those without one, byte-exact
        printed = {v for _t, _p, _o, v in lines}
        assert set(values) <= printed, where
    refused = _ingest("console-consumer", "--bootstrap-server", bootstrap, "--topic", "kcon", "--group", "g")
    assert refused.returncode == 2 and b"consumer groups of Kafka-format topics" in refused.stderr


def test_console_producer_round_trip_on_a_kafka_topic(broker_factory):
    broker, = broker_factory(1)
    bootstrap = f"127.0.0.1:{broker.kafka_port}"
    lines = [b"line-%d" % i for i in range(40)]
    r1 = _ingest("console-producer", "--bootstrap-server", bootstrap, "--topic", "kline",
                 stdin=b"\n".join(lines) + b"\n")
    assert r1.returncode == 0 and b"40 acknowledged, 0 failed" in r1.stderr, r1.stderr.decode()
    assert [v for _o, _k, v, _h, _t in confluent_consume(bootstrap, "kline", 1, 40)[0]] == lines
    r2 = _ingest("console-consumer", "--bootstrap-server", bootstrap, "--topic", "kline", "--from-beginning",
                 "--max-messages", "40")
    assert r2.returncode == 0 and r2.stdout.split(b"\n")[:-1] == lines, r2.stderr.decode()


def test_one_producer_keeps_each_topic_on_its_own_kind(broker_factory):
    broker, = broker_factory(1)
    bootstrap = f"127.0.0.1:{broker.kafka_port}"
    with Producer({"broker.list": broker.address}) as old:       # no Kafka listener known: 0.7, as before
        old.send("old07", [b"a", b"b"])
        assert old.routes.kind("old07") == "0.7"
    results = []
    with Producer({"broker.list": broker.address, "bootstrap.servers": bootstrap}) as both:
        both.send("old07", [b"c"], callback=results.append)
        both.send("new-k", [b"d"], callback=results.append)
        assert (both.routes.kind("old07"), both.routes.kind("new-k")) == ("0.7", "kafka")
    with Producer({"broker.list": broker.address, "bootstrap.servers": bootstrap,
                   "topic.format.default": "0.7"}) as chooser:
        chooser.send("new-07", [b"e"])
        chooser.send("new-k", [b"f"])        # exists as a Kafka topic: stays one
        assert (chooser.routes.kind("new-07"), chooser.routes.kind("new-k")) == ("0.7", "kafka")
    with SimpleConsumer(broker.host, broker.port) as c:
        assert [m.payload for m in c.iter_range("old07", 0, 0, c.latest_offset("old07", 0))] == [b"a", b"b", b"c"]
        assert [m.payload for m in c.iter_range("new-07", 0, 0, c.latest_offset("new-07", 0))] == [b"e"]
    assert results[0].first_offset > 2, "a byte offset after two messages"
    assert [v for _o, _k, v, _h, _t in confluent_consume(bootstrap, "new-k", 1, 2)[0]] == [b"d", b"f"]
    with Producer({"bootstrap.servers": bootstrap}) as kafka_only:
        with pytest.raises(WrongTopicKindError, match="is a 0.7 topic"):
            kafka_only.send("old07", [b"x"])


def test_replicated_kafka_topic_across_a_leader_sigkill_loses_nothing_acknowledged(broker_factory, zk_connect, zk):
    brokers = broker_factory(3, zk_connect, overrides=r.replication_overrides(min_isr=2))
    zk.retry(zk.create, znodes.topic_dir("krep"), znodes.assignment_value({0: [0, 1, 2]}, znodes.KAFKA_FORMAT),
             makepath=True)
    ids = {b.broker_id for b in brokers}
    state = r.wait_for_state(zk, "krep", 0, lambda s: s.leader in ids and set(s.isr) == ids, 120, "all in sync")
    acked: list[bytes] = []
    failed: list[tuple[bytes, BaseException]] = []
    stop = threading.Event()

    def publish() -> None:
        with Producer({"zk.connect": zk_connect, "request.required.acks": -1, "message.send.max.retries": 100,
                       "delivery.timeout.ms": 120_000, "retry.backoff.ms": 50}) as p:
            i = 0
            while not stop.is_set():
                batch = [b"v-%08d" % (i + k) for k in range(5)]
                i += 5
                try:
                    p.send("krep", batch)
                    acked.extend(batch)
                except Exception as exc:   # a refused batch is reported, never counted acknowledged
                    failed.extend((v, exc) for v in batch)

    t = threading.Thread(target=publish, daemon=True)
    t.start()
    try:
        wait_until(lambda: len(acked) > 200, timeout=60, what="first acknowledgements")
        victim = r.by_id(brokers, state.leader)
        before = len(acked)
        victim.kill()
        r.wait_for_state(zk, "krep", 0, lambda s: s.leader >= 0 and s.leader != victim.broker_id, 60, "new leader")
        wait_until(lambda: len(acked) > before + 200, timeout=90, what="acknowledgements through the new leader")
        victim.start()
    finally:
        stop.set()
        t.join(180)
    assert not t.is_alive()
    assert not failed, f"{len(failed)} refused, e.g. {failed[:2]}"
    bootstrap = _bootstrap([b for b in brokers if b.running])
    rows = confluent_consume(bootstrap, "krep", 1, len(acked))[0]
    read = {v for _o, _k, v, _h, _t in rows}
    missing = set(acked) - read
    assert not missing, f"{len(missing)} acknowledged values lost, e.g. {sorted(missing)[:3]}"
    assert [o for o, *_ in rows] == list(range(len(rows)))
    # a consumer group of this design cannot read a Kafka-format topic: it says so instead of waiting silently
    connector = ConsumerConnector({"zk.connect": zk_connect, "groupid": "g-kafka"})
    try:
        with pytest.raises(WrongTopicKindError, match="consumer groups of Kafka-format topics"):
            connector.create_streams({"krep": 1})
    finally:
        connector.shutdown()
