"""One cluster for the Spark source tests: ZooKeeper chroot, two broker processes, a registry, and data.

Package-scoped (started once for all the tests of tests/explore/): a Kafka 0.7 topic on
both brokers (two partitions each) written with two schema versions and event
times out of order, a gzip-compressed topic, a topic in Kafka 0.6/0.7's own message
formats (magic 0, magic 1, a gzip magic-1 wrapper), and a replicated topic.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest

from ingest.records.message import CODEC_GZIP, MAGIC_V0, MAGIC_V1
from tests.explore.helpers import T0, Sent, events, send
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.registry import RegistryProcess
from tests.harness.replication_topics import create_replicated_topic, metadata_of, produce_acked, wait_for_leaders
from tests.harness.wire import WireClient

VIEWS, GZIP, REPL, OLD = "sx-views", "sx-gzip", "sx-repl", "sx-kafka07"
# event-time steps (seconds after T0) per 0.7 partition: out of order on purpose
STEPS = {(0, 0): [0, 5, 2, 9, 3, 11, 7, 15],
         (0, 1): [1, 4, 6, 8, 10, 12, 14, 16],
         (1, 0): [3, 3, 1, 20, 2, 18, 19, 4],
         (1, 1): [30, 31, 32, 33, 34, 35, 36, 37]}


@dataclass
class Cluster:
    zk_connect: str
    brokers: list
    registry_url: str
    registry_dir: object
    sent: dict[str, list[Sent]] = field(default_factory=dict)  # topic -> every message, in log order per partition

    @property
    def broker_csv(self) -> str:
        return ",".join(f"{b.host}:{b.port}" for b in self.brokers)


@pytest.fixture(scope="package")
def module_zk_connect(zookeeper):
    """A chroot of its own for the module's cluster (the per-test ``zk_connect`` would outlive no test)."""
    from kazoo.client import KazooClient  # deferred: kazoo

    chroot = f"/sx-{uuid.uuid4().hex[:10]}"
    c = KazooClient(hosts=zookeeper.connect)
    c.start(timeout=15)
    c.retry(c.ensure_path, chroot)
    c.stop()
    c.close()
    return zookeeper.connect + chroot


def _seed_views(c: Cluster) -> None:
    sent: list[Sent] = []
    for version in (1, 2):  # every partition gets 4 v1 events, then 4 v2 events (subject latest = v2)
        for (bid, p), steps in STEPS.items():
            half = steps[:4] if version == 1 else steps[4:]
            batch = events(c.registry_url, VIEWS, [T0 + s * 1000 for s in half], seed=10 * bid + p + version,
                           v2=version == 2)
            with WireClient(c.brokers[bid].host, c.brokers[bid].port) as w:
                sent += send(w, VIEWS, p, f"{bid}-{p}", batch)
    c.sent[VIEWS] = sent


def _seed_gzip(c: Cluster) -> None:
    b = c.brokers[0]
    batches = [events(c.registry_url, GZIP, [T0 + i * 1000 for i in range(k, k + 3)], seed=k, v2=True)
               for k in (0, 3)]
    plain = events(c.registry_url, GZIP, [T0 + 6000], seed=6, v2=True)
    with WireClient(b.host, b.port) as w:
        c.sent[GZIP] = (send(w, GZIP, 0, "0-0", batches[0], codec=CODEC_GZIP) + send(w, GZIP, 0, "0-0", plain)
                        + send(w, GZIP, 0, "0-0", batches[1], codec=CODEC_GZIP))


def _seed_kafka07_formats(c: Cluster) -> None:
    """Messages as Kafka 0.6/0.7 producers write them: magic 0, magic 1 (CRC over the payload), a gzip magic-1
    wrapper of magic-1 messages."""
    b = c.brokers[1]
    batches = [events(c.registry_url, OLD, [T0 + i * 1000 for i in range(k, k + n)], seed=k, v2=True)
               for k, n in ((0, 2), (2, 2), (4, 3))]
    with WireClient(b.host, b.port) as w:
        c.sent[OLD] = (send(w, OLD, 1, "1-1", batches[0], magic=MAGIC_V0)
                       + send(w, OLD, 1, "1-1", batches[1], magic=MAGIC_V1)
                       + send(w, OLD, 1, "1-1", batches[2], codec=CODEC_GZIP, magic=MAGIC_V1))


def _seed_replicated(c: Cluster, zk) -> None:
    from ingest.records.message_batch import iter_messages
    from ingest.records.message_set import encode_message_set

    create_replicated_topic(zk, REPL, {0: [0, 1], 1: [1, 0]})
    md = metadata_of(c.brokers)
    wait_for_leaders(md, REPL, 2, isr=2)
    sent = []
    for p in (0, 1):
        batch = events(c.registry_url, REPL, [T0 + (p * 10 + i) * 1000 for i in range(5)], seed=40 + p, v2=True)
        payloads = [x for x, _, _ in batch]
        base = produce_acked(md, REPL, p, payloads)
        offs = [m.offset for m in iter_messages(encode_message_set(payloads), base)]
        sent += [Sent(str(p), o, t, rec) for o, (_, rec, t) in zip(offs, batch)]
    c.sent[REPL] = sent


@pytest.fixture(scope="package")
def cluster(tmp_path_factory, module_zk_connect):
    from kazoo.client import KazooClient  # deferred: kazoo

    reg_dir = tmp_path_factory.mktemp("sx-registry")
    registry = RegistryProcess(reg_dir).start()
    brokers = []
    zk = KazooClient(hosts=module_zk_connect)
    try:
        brokers = broker_cluster(tmp_path_factory, n=2, zk_connect=module_zk_connect, num_partitions=2,
                                 overrides={"min.insync.replicas": 1,
                                            # small segments: each 0.7 partition's two batches land in two
                                            # segments (reads cross a segment start; maxBytesPerPartition cuts)
                                            "log.file.size": 1500,
                                            # no timed high-watermark checkpoint rewrite while a test
                                            # checks that a read writes no file
                                            "replica.high.watermark.checkpoint.interval.ms": 3_600_000,
                                            # nor a re-registration after a session expiry on a loaded machine
                                            "zk.sessiontimeout.ms": 30_000})
        zk.start(timeout=15)
        c = Cluster(module_zk_connect, brokers, registry.url, reg_dir)
        _seed_views(c)
        _seed_gzip(c)
        _seed_kafka07_formats(c)
        _seed_replicated(c, zk)
        yield c
    finally:
        zk.stop()
        zk.close()
        stop_all(brokers)
        registry.stop()


@pytest.fixture(scope="package")
def read(spark, cluster):
    """``read(topic, df=False, **options)`` -> row dicts sorted by partition and offset (``df=True``: the
    DataFrame); ``brokers`` and ``registry.url`` from the cluster unless ``zk.connect`` is given."""
    from ingest.explore import register
    from tests.explore.helpers import as_compared, key

    register(spark)

    def run(topic, *, df=False, **options):
        r = spark.read.format("ingest").option("topic", topic).option("registry.url", cluster.registry_url)
        if "zk.connect" not in options:
            r = r.option("brokers", cluster.broker_csv)
        for k, v in options.items():
            r = r.option(k, v)
        frame = r.load()
        return frame if df else sorted((as_compared(x) for x in frame.collect()), key=key)

    return run
