"""Leaders write their in-sync-set changes in a few ZooKeeper transactions (real ZooKeeper, real brokers).

A follower of 200 partitions (Kafka-format topics, one leader for all) is SIGKILLed, the controller drops it
from every in-sync set, and it is started again: once it has caught up, its leader adds it back to all 200
sets. ZooKeeper gives every node written by one transaction the same ``mzxid``, so the number of distinct
``mzxid`` among the 200 states is the number of transactions that wrote the joins: 200 when the leader
writes each partition's set on its own, a handful when it writes every change a pass found in transactions
of ``controller.batch.partitions`` states. Nothing is wrapped or counted inside the code under test.

The second test places a version conflict in the middle of a leader's batch: the leader runs in the test
process (a real :class:`~ingest.broker.broker.BrokerServer`, its followers are broker processes) and, once,
just before its in-sync-set writer commits a pass of several changes, another ZooKeeper session rewrites the
state of one partition in the middle of them (same content, version + 1). ZooKeeper refuses that whole
transaction; the leader must read the batch back and decide again in the same pass (never leave the
partition to a later pass, nor skip it), and every follower must be back in every in-sync set.
"""
from __future__ import annotations

import pytest

from ingest import znodes
from ingest.broker.broker import BrokerServer
from ingest.broker.server_config import SERVER_CONFIG
from tests.harness import replicated as r
from tests.harness.brokers import HARNESS_DEFAULTS, broker_factory  # noqa: F401  (fixture)
from tests.harness.net import free_port

pytestmark = pytest.mark.slow

TOPICS = [f"isr-batched-{i}" for i in range(4)]
PARTITIONS = 50                      # per topic: 200 in all
BATCH = 100                          # controller.batch.partitions (the default): states per transaction
LAG_MS = 120_000                     # no shrink for lag during the test: only the follower's rejoin writes


def keys() -> list[tuple[str, int]]:
    return [(t, p) for t in TOPICS for p in range(PARTITIONS)]


def states(zk) -> dict[tuple[str, int], znodes.PartitionState | None]:
    """Every partition's state read now, with its version and the zxid of the transaction that last wrote it."""
    from kazoo.exceptions import NoNodeError   # kazoo: the test's own client

    out = {}
    for t, p in keys():
        try:
            data, stat = zk.retry(zk.get, znodes.partition_state_path(t, p))
        except NoNodeError:
            out[(t, p)] = None
            continue
        out[(t, p)] = znodes.PartitionState.parse(data, stat.version, stat.mzxid)
    return out


def create_topics(zk, leader: int, followers: list[int]) -> None:
    """Kafka-format topics with ``leader`` first in every assignment; wait until it leads all, every replica in
    sync."""
    for t in TOPICS:
        zk.retry(zk.create, znodes.topic_dir(t),
                 znodes.assignment_value({p: [leader, *followers] for p in range(PARTITIONS)}, znodes.KAFKA_FORMAT),
                 makepath=True)
    wait_isrs(zk, lambda s: s.leader == leader and set(s.isr) == {leader, *followers},
              f"broker {leader} leading all {len(keys())} partitions, {[leader, *followers]} in sync")


def wait_isrs(zk, ok, what: str) -> dict[tuple[str, int], znodes.PartitionState]:
    def done():
        found = states(zk)
        return found if all(s is not None and ok(s) for s in found.values()) else None
    return r.wait_for(done, 180, what, interval=0.2)


def rejoin_after_restart(zk, follower) -> dict[tuple[str, int], znodes.PartitionState]:
    """SIGKILL ``follower``, wait until no in-sync set names it, start it again, wait until every set does."""
    fid = follower.broker_id
    follower.kill()
    wait_isrs(zk, lambda s: fid not in s.isr, f"broker {fid} out of every in-sync set after its SIGKILL")
    follower.start(timeout=120)
    return wait_isrs(zk, lambda s: fid in s.isr, f"broker {fid} back in every in-sync set after its restart")


def test_a_restarted_follower_of_200_partitions_rejoins_in_a_few_transactions(broker_factory, zk_connect, zk):  # noqa: F811
    # the default fetch wait (500 ms; the harness's 100 makes more, smaller waves of catch-up)
    brokers = broker_factory(n=3, zk_connect=zk_connect,
                             overrides=r.replication_overrides(lag_ms=LAG_MS, **{"controller.batch.partitions": BATCH,
                                                                                 "replica.fetch.wait.max.ms": 500}))
    leader, *followers = [b.broker_id for b in brokers]
    create_topics(zk, leader, followers)
    follower = r.by_id(brokers, followers[0])

    after = rejoin_after_restart(zk, follower)

    assert all(s.leader == leader and set(s.isr) == {leader, *followers} for s in after.values())
    zxids = {s.mzxid for s in after.values()}
    # one transaction per pass of the leader's writer that found joins (each pass writes at most BATCH per
    # transaction), a pass per wave of the follower's catch-up: measured 3 here, 12 with a 100 ms fetch wait,
    # 15-23 for 1,000 partitions in bench/bench_scale.py; one write per partition makes 200
    assert len(zxids) <= len(keys()) // 4, \
        f"{len(zxids)} ZooKeeper transactions wrote the {len(keys())} rejoined in-sync sets (one per partition?)"


@pytest.fixture
def in_process_leader(tmp_path, zk_connect):
    """A broker in this process (id 9), its replica manager reachable; stopped at the end."""
    cfg = SERVER_CONFIG.parse({**HARNESS_DEFAULTS, **r.replication_overrides(lag_ms=LAG_MS),
                               "brokerid": 9, "port": free_port(), "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                               "log.dir": str(tmp_path / "leader"), "enable.zookeeper": "true",
                               "zk.connect": zk_connect, "controller.batch.partitions": BATCH})
    b = BrokerServer(cfg).start()
    try:
        yield b
    finally:
        b.stop()


class RacingWrites:
    """Wraps the leader's ``isr_batches.write``: once armed, the first pass with several changes has the state
    of the change in its middle rewritten by another ZooKeeper session (same content, version + 1) before the
    leader's transaction; after that pass, what ZooKeeper holds for that partition is kept."""

    def __init__(self, batches, writer) -> None:
        self._write = batches.write
        self._writer = writer
        self.armed = False
        self.raced: tuple[str, int] | None = None
        self.raced_after_pass: znodes.PartitionState | None = None
        batches.write = self.write

    def write(self, changes, decide):
        changes = list(changes)
        racing = self.armed and self.raced is None and len(changes) > 1
        if racing:
            (topic, p, _), held, _ = changes[len(changes) // 2]
            path = znodes.partition_state_path(topic, p)
            data, _stat = self._writer.retry(self._writer.get, path)
            self._writer.retry(self._writer.set, path, data, version=held.zk_version)
            self.raced = (topic, p)
        written = self._write(changes, decide)
        if racing:
            data, stat = self._writer.retry(self._writer.get, znodes.partition_state_path(*self.raced))
            self.raced_after_pass = znodes.PartitionState.parse(data, stat.version, stat.mzxid)
        return written


def test_a_version_conflict_in_a_leaders_batch_rereads_it_and_loses_no_change(in_process_leader, broker_factory,  # noqa: F811
                                                                                zk_connect, zk):
    leader = in_process_leader
    brokers = broker_factory(n=2, zk_connect=zk_connect, overrides=r.replication_overrides(lag_ms=LAG_MS))
    followers = [b.broker_id for b in brokers]
    create_topics(zk, leader.broker_id, followers)
    batches = leader.replicas.isr_batches
    racing = RacingWrites(batches, zk)
    conflicts = batches.conflicts

    racing.armed = True
    after = rejoin_after_restart(zk, r.by_id(brokers, followers[0]))

    assert racing.raced is not None, "the leader never wrote several in-sync-set changes in one pass"
    assert batches.conflicts > conflicts, "the rewritten state did not make ZooKeeper refuse its transaction"
    assert racing.raced_after_pass is not None and followers[0] in racing.raced_after_pass.isr, \
        f"the refused change of {racing.raced} was not read back and written in the same pass " \
        f"(state after the pass: {racing.raced_after_pass})"
    full = {leader.broker_id, *followers}
    assert all(s.leader == leader.broker_id and set(s.isr) == full for s in after.values())
    part = leader.replicas.partitions[racing.raced]
    assert set(part.isr) == full and not part.isr_pending   # the leader uses the set ZooKeeper accepted
