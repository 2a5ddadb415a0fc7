"""The pipelines on a secured cluster, each under its own least-privilege principal.

Two clusters (a source datacenter and the aggregate target), one broker each, whose only Kafka listener
speaks SASL_SSL (certificates made by the test, users made with ``ingest users add``) and whose ACL
authorizer is on (``authorizer.class.name``; the brokers log in as the super user ``broker``). Real
brokers, a real ZooKeeper, a real registry, real Spark (local mode) and the real ``ingest mirror``.

- ``User:app`` may Write (and Describe) its topic only: the product's Producer, finding the Kafka listener
  in ZooKeeper, publishes events to it, and is refused another topic.
- ``User:loader`` has Read and Describe on the topic and nothing else: the hourly load loads exactly what
  was produced. ``User:peeker`` (Describe, no Read) runs the same load with ``jobs/load.py``: exit 2, one
  clear line naming the authorization failure, the committed state untouched (and no password printed).
- The Spark source (``spark.read.format("ingest")``) takes the loader's security keys as options: as
  ``User:loader`` it reads exactly the rows produced; as ``User:peeker`` the read fails naming
  TOPIC_AUTHORIZATION_FAILED and the topic, without the password.
- ``User:mirror`` has Read and Describe on the source topic, and ClusterAction (AppendAt) plus Describe on the
  topic (Metadata) on the target: the mirror copies every batch, at the same offsets.
"""
from __future__ import annotations

import collections
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import pytest

from ingest import znodes
from ingest.client.discovery import start_kazoo
from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.errors import IngestError
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState
from ingest.records.batch import MAGIC_OFFSET
from ingest.storage import open_storage
from tests.harness import replicated as r
from tests.harness import sasl as s
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.tls import make_pki
from tests.harness.wait import wait_until
from tests.harness.zookeeper import fresh_chroot
from tests.kafka.authz import allow
from tests.loader.helpers import REPO, committed_ids, spark_env
from tests.mirror.mirror_procs import MirrorProcess

pytestmark = pytest.mark.processes

PASSWORDS = {"app": "app-pw-7d1", "loader": "loader-pw-93a", "peeker": "peeker-pw-0c4", "mirror": "mirror-pw-5be"}
PARTITIONS = 2


@dataclass
class Secured:
    zk_connect: str
    zk: object
    broker: object

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.kafka_port}"


def _cluster(zookeeper, tmp_path_factory, pki, name: str, users: list[str]) -> Secured:
    zk_connect = fresh_chroot(zookeeper, f"/pipes-{name}")
    s.add_user(zk_connect, s.BROKER_USER, s.BROKER_PASSWORD, "SCRAM-SHA-512")
    for user in users:
        s.add_user(zk_connect, user, PASSWORDS[user])
    overrides = s.sasl_broker_overrides()
    overrides.update({"listener.security.protocol.map": "PLAINTEXT:SASL_SSL", "ssl.keystore.location": str(pki.server),
                      "ssl.truststore.location": str(pki.ca), "authorizer.class.name": "ingest.acls",
                      "super.users": f"User:{s.BROKER_USER}"})
    (broker,) = broker_cluster(tmp_path_factory, n=1, zk_connect=zk_connect, overrides=overrides)
    zk = start_kazoo(zk_connect, connection_timeout_ms=30_000)
    return Secured(zk_connect, zk, broker)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def clusters(zookeeper, tmp_path_factory, pki):
    made: list[Secured] = []
    try:
        made.append(_cluster(zookeeper, tmp_path_factory, pki, "dc1", ["app", "loader", "peeker", "mirror"]))
        made.append(_cluster(zookeeper, tmp_path_factory, pki, "agg", ["mirror"]))
        yield made
    finally:
        for c in made:
            c.zk.stop()
            c.zk.close()
        stop_all([c.broker for c in made])


@pytest.fixture(scope="module")
def topic(clusters):
    """A Kafka topic of two partitions on the source, with the ACLs of least privilege."""
    src = clusters[0]
    name = f"page-views-{uuid.uuid4().hex[:6]}"
    src.zk.retry(src.zk.create, znodes.topic_dir(name),
                 znodes.assignment_value({p: [src.broker.broker_id] for p in range(PARTITIONS)}, znodes.KAFKA_FORMAT),
                 makepath=True)
    for p in range(PARTITIONS):
        r.wait_for_leader_state(src.zk, name, p)
    for op in ("Write", "Describe"):
        allow(src.zk, "User:app", op, "Topic", name)
    for op in ("Read", "Describe"):
        allow(src.zk, "User:loader", op, "Topic", name)
        allow(src.zk, "User:mirror", op, "Topic", name)
    allow(src.zk, "User:peeker", "Describe", "Topic", name)
    allow(clusters[1].zk, "User:mirror", "ClusterAction", "Cluster", "kafka-cluster")   # AppendAt
    allow(clusters[1].zk, "User:mirror", "Describe", "Topic", name)   # Metadata: where the target partitions lead
    for events in ("audit-mirror", "audit-mirror-lost"):   # its tier events: their kind is asked by Metadata first
        allow(clusters[1].zk, "User:mirror", "Describe", "Topic", events)
    return name


def _new_topic(src: Secured, prefix: str) -> str:
    """A Kafka topic of :data:`PARTITIONS` partitions with the source's least-privilege ACLs (app, loader, peeker)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    src.zk.retry(src.zk.create, znodes.topic_dir(name),
                 znodes.assignment_value({p: [src.broker.broker_id] for p in range(PARTITIONS)}, znodes.KAFKA_FORMAT),
                 makepath=True)
    for p in range(PARTITIONS):
        r.wait_for_leader_state(src.zk, name, p)
    for op in ("Write", "Describe"):
        allow(src.zk, "User:app", op, "Topic", name)
    for op in ("Read", "Describe"):
        allow(src.zk, "User:loader", op, "Topic", name)
    allow(src.zk, "User:peeker", "Describe", "Topic", name)
    return name


def client_security(pki, user: str, prefix: str = "", mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    return {f"{prefix}security.protocol": "SASL_SSL", f"{prefix}ssl.ca.location": str(pki.ca),
            f"{prefix}sasl.mechanism": mechanism, f"{prefix}sasl.username": user,
            f"{prefix}sasl.password": PASSWORDS[user]}


def produce(src: Secured, pki, registry_url: str, topic: str, n: int, seed: int) -> list[tuple]:
    """``n`` page views through the product's EventProducer as ``User:app`` (the listener found in ZooKeeper)."""
    from ingest.events.event_producer import EventProducer
    from ingest.events.loadgen import EventGenerator
    from ingest.events.registry_client import RegistryClient

    gen = EventGenerator(seed=seed)
    ids = []
    config = {"zk.connect": src.zk_connect, **client_security(pki, "app")}
    with EventProducer(config, RegistryClient(registry_url), monitoring_enable=False, background=False) as ep:
        for i in range(0, n, 25):
            headers = ep.send(topic, gen.batch(min(25, n - i)), key=f"k{seed}-{i}")
            ids.extend((h["session"], h["seq"]) for h in headers)
        ep.flush()
    return ids


def _ends(bootstrap: str, pki, topic: str) -> list[int]:
    sec = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanism": "SCRAM-SHA-512",
           "sasl.username": s.BROKER_USER, "sasl.password": s.BROKER_PASSWORD}
    with KafkaFetcher({"bootstrap.servers": bootstrap, "request.timeout.ms": 5000, **sec}) as f:
        return [f.latest(topic, p) for p in range(PARTITIONS)]


def _batches(bootstrap: str, pki, topic: str, partition: int) -> list[tuple[int, bytes]]:
    sec = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanism": "SCRAM-SHA-512",
           "sasl.username": s.BROKER_USER, "sasl.password": s.BROKER_PASSWORD}
    out = []
    with KafkaFetcher({"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 0, **sec}) as f:
        pos, end = f.earliest(topic, partition), f.latest(topic, partition)
        while pos < end:
            got = f.fetch(topic, partition, pos)
            for p, h in got.batches:
                out.append((h.base_offset, bytes(got.data[p + MAGIC_OFFSET:p + h.size])))
            pos = got.next_offset
    return out


def loader_raw(src: Secured, pki, registry_url: str, dest, topic: str, user: str) -> dict:
    return {"destination": str(dest), "zk.connect": src.zk_connect, "registry.url": registry_url, "topics": topic,
            "format": "avro", **client_security(pki, user, mechanism="SCRAM-SHA-512")}


def test_the_app_writes_only_its_topic(clusters, pki, registry_url, topic):
    from ingest.client.producer import Producer

    assert len(produce(clusters[0], pki, registry_url, topic, 10, seed=99)) == 10
    config = {"zk.connect": clusters[0].zk_connect, "delivery.timeout.ms": 10_000, **client_security(pki, "app")}
    with Producer(config) as producer:
        with pytest.raises(IngestError) as info:
            producer.send(f"clicks-{uuid.uuid4().hex[:6]}", [b"not mine"])
    assert "TOPIC_AUTHORIZATION_FAILED" in str(info.value), info.value


def test_the_load_reads_as_loader_and_a_principal_without_read_changes_nothing(clusters, pki, registry_url, topic,
                                                                               spark, tmp_path):
    src = clusters[0]
    dest = tmp_path / "lake"
    before = collections.Counter(committed_ids(dest, topic)) if dest.exists() else collections.Counter()
    assert not before
    produced = produce(src, pki, registry_url, topic, 60, seed=1)
    result = run_load(LOADER_CONFIG.parse(loader_raw(src, pki, registry_url, dest, topic, "loader")), spark)
    assert result.status == "committed", result
    loaded = committed_ids(dest, topic)
    produced_counts = collections.Counter(produced)
    assert all(loaded[i] == 1 for i in produced_counts) and sum(loaded.values()) >= len(produced)
    first_state = LoaderState.load(open_storage(str(dest))).offsets

    more = produce(src, pki, registry_url, topic, 40, seed=2)
    raw = loader_raw(src, pki, registry_url, dest, topic, "peeker")
    raw["sasl.password"] = "${env:INGEST_TEST_LOADER_PW}"   # a secret reference, resolved by the loader
    props = tmp_path / "loader.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in raw.items()) + "spark.master=local[1]\n")
    env = spark_env()
    env["INGEST_TEST_LOADER_PW"] = PASSWORDS["peeker"]
    done = subprocess.run([sys.executable, "jobs/load.py", "--config", str(props)], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "jobs/load.py: error:" in done.stderr and "TOPIC_AUTHORIZATION_FAILED" in done.stderr, done.stderr[-3000:]
    assert PASSWORDS["peeker"] not in done.stderr + done.stdout
    for f in dest.rglob("*"):   # the run records (the failed run's too) and the state never hold a password
        if f.is_file():
            assert not any(pw.encode() in f.read_bytes() for pw in PASSWORDS.values()), f
    assert LoaderState.load(open_storage(str(dest))).offsets == first_state
    assert committed_ids(dest, topic) == loaded

    result = run_load(LOADER_CONFIG.parse(loader_raw(src, pki, registry_url, dest, topic, "loader")), spark)
    assert result.status == "committed", result
    after = committed_ids(dest, topic)
    assert all(after[i] == 1 for i in collections.Counter(produced + more))
    assert sum(after.values()) == sum(_ends(src.bootstrap, pki, topic))   # every record, once


def test_the_spark_source_reads_with_the_loaders_security_options(clusters, pki, registry_url, spark):
    from ingest.explore import register

    src = clusters[0]
    topic = _new_topic(src, "explored")
    produced = produce(src, pki, registry_url, topic, 50, seed=4)
    register(spark)

    def read(user: str):
        reader = spark.read.format("ingest").option("topic", topic).option("zk.connect", src.zk_connect) \
            .option("registry.url", registry_url)
        for k, v in client_security(pki, user, mechanism="SCRAM-SHA-512").items():
            reader = reader.option(k, v)
        return reader.load().select("header.session", "header.seq", "partition", "offset").collect()

    rows = read("loader")
    assert collections.Counter((x.session, x.seq) for x in rows) == collections.Counter(produced)
    assert sorted((x.partition, x.offset) for x in rows) == \
        [(p, o) for p, end in enumerate(_ends(src.bootstrap, pki, topic)) for o in range(end)]
    with pytest.raises(Exception) as refused:   # Spark wraps the source's error in its own exception types
        read("peeker")
    text = str(refused.value)
    assert "TOPIC_AUTHORIZATION_FAILED" in text and topic in text, text[-3000:]
    assert PASSWORDS["peeker"] not in text


def test_the_mirror_copies_every_batch_as_mirror(clusters, pki, registry_url, topic, tmp_path):
    src, agg = clusters
    produce(src, pki, registry_url, topic, 30, seed=3)
    props = {"sources": "dc1", "source.dc1.zk.connect": src.zk_connect, "target.zk.connect": agg.zk_connect,
             "mirror.id": "m-secured", "checkpoint.interval.ms": 150, "topic.refresh.ms": 500,
             "registry.url": registry_url, "monitoring.interval.ms": 100, "whitelist": topic, **client_security(pki, "mirror", "source.dc1."),
             **client_security(pki, "mirror", "target.", mechanism="SCRAM-SHA-512")}
    mirror = MirrorProcess(tmp_path, props).start()
    try:
        want = _ends(src.bootstrap, pki, topic)

        def caught_up() -> bool:
            try:
                return _ends(agg.bootstrap, pki, topic) == want
            except IngestError:
                return False   # the target topic is not there yet

        wait_until(caught_up, timeout=120, what=f"the target at the source ends {want}")
    finally:
        mirror.stop()
    for p in range(PARTITIONS):
        assert _batches(agg.bootstrap, pki, topic, p) == _batches(src.bootstrap, pki, topic, p)
    assert PASSWORDS["mirror"] not in mirror.output()
    # its monitoring events (0.7 topic audit-mirror on the target): every copied record counted as acknowledged
    assert _mirror_counts(agg, registry_url) == sum(want), mirror.output()[-3000:]


def _mirror_counts(cluster: Secured, registry_url: str) -> int:
    """The sum of ``count_acked`` over the latest revision of each (session, window) in ``audit-mirror``."""
    from ingest.client.simple_consumer import SimpleConsumer
    from ingest.events.registry_client import RegistryClient
    from ingest.events.serde import EventDeserializer

    deserializer = EventDeserializer(RegistryClient(registry_url))
    latest: dict[tuple, dict] = {}
    with SimpleConsumer(cluster.broker.host, cluster.broker.port) as c:
        for m in c.iter_range("audit-mirror", 0, 0, c.latest_offset("audit-mirror", 0)):
            e = deserializer.deserialize(m.payload)
            k = (e["producer_session_id"], e["window_start_ms"])
            if k not in latest or e["revision"] > latest[k]["revision"]:
                latest[k] = e
    return sum(e["count_acked"] for e in latest.values())
