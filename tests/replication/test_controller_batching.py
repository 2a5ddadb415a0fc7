"""The controller elects many partitions in a few ZooKeeper transactions (real ZooKeeper, real brokers).

A broker leading 200 partitions is SIGKILLed; every partition must get a new leader, none stays offline,
and the states must have been written in a few transactions: ZooKeeper gives every node written by one
transaction the same ``mzxid``, so the number of distinct ``mzxid`` among the 200 new states is the number
of transactions that wrote them (200 with one write per partition, 2 with ``controller.batch.partitions``
100). Nothing is wrapped or counted inside the code under test.

The second test places a version conflict in the middle of a batch: a controller in the test process
(a real :class:`~ingest.broker.controller.Controller` on its own session, as in test_controller_race.py)
reads the states through a view that, once, rewrites one of them (same content, version + 1, what a
leader's in-sync-set write does) between the read and the transaction. ZooKeeper refuses the whole
transaction; the controller must read that batch again and still elect every partition of it.
"""
from __future__ import annotations

import pytest

from ingest import znodes
from ingest.broker.controller import Controller, Rebalance
from ingest.broker.replication_view import ReplicationView
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

TOPICS = [f"batched-{i}" for i in range(4)]
PARTITIONS = 50                      # per topic: 200 in all
BATCH = 100                          # controller.batch.partitions (the default)
CONTROLLER_ID = 99


def keys() -> list[tuple[str, int]]:
    return [(t, p) for t in TOPICS for p in range(PARTITIONS)]


def states(zk) -> dict[tuple[str, int], tuple[znodes.PartitionState | None, int]]:
    """Every partition's state and the zxid of the transaction that last wrote it (-1 when none yet)."""
    from kazoo.exceptions import NoNodeError

    out = {}
    for t, p in keys():
        try:
            data, stat = zk.retry(zk.get, znodes.partition_state_path(t, p))
        except NoNodeError:
            out[(t, p)] = (None, -1)
            continue
        out[(t, p)] = (znodes.PartitionState.parse(data, stat.version, stat.mzxid), stat.mzxid)
    return out


def lead_everything(zk, leader: int, others: list[int]) -> None:
    """Create the topics with ``leader`` first in every assignment and wait until it leads all, in sync."""
    for t in TOPICS:
        r.create_topic(zk, t, {p: [leader, *others] for p in range(PARTITIONS)})
    full = (leader, *others)
    r.wait_for(lambda: all(s is not None and s.leader == leader and s.isr == full for s, _ in states(zk).values()),
               120, f"broker {leader} leading all {len(keys())} partitions with in-sync set {full}", interval=0.2)


def elected(zk, dead: int) -> dict[tuple[str, int], tuple[znodes.PartitionState, int]]:
    """Wait until no state names ``dead`` as leader or in-sync replica; the states then."""
    def done():
        found = states(zk)
        ok = all(s is not None and s.leader != dead and dead not in s.isr for s, _ in found.values())
        return found if ok else None
    return r.wait_for(done, 120, f"every partition re-elected without broker {dead}", interval=0.2)


def test_a_dead_leader_of_200_partitions_is_replaced_in_a_few_transactions(broker_factory, zk_connect, zk):  # noqa: F811
    brokers = broker_factory(n=3, zk_connect=zk_connect,
                             overrides=r.replication_overrides(lag_ms=120_000, **{"controller.batch.partitions": BATCH}))
    r.wait_for(lambda: r.controller(zk) is not None, 30, "a controller")
    ctl = r.controller(zk)
    victim = next(b.broker_id for b in brokers if b.broker_id != ctl)   # the controller survives the kill
    others = [b.broker_id for b in brokers if b.broker_id != victim]
    lead_everything(zk, victim, others)

    r.by_id(brokers, victim).kill()
    after = elected(zk, victim)

    assert all(s.leader in others and s.isr == tuple(others) for s, _ in after.values()), \
        "a partition was left offline or with a wrong in-sync set"
    zxids = {z for _, z in after.values()}
    # 200 partitions, BATCH per transaction: 2; a little room for a second pass the watches may start
    assert len(zxids) <= 2 * (len(keys()) // BATCH), \
        f"{len(zxids)} ZooKeeper transactions wrote the {len(keys())} new states (one per partition?)"


class ConflictingView:
    """The real view; once armed with a broker id, the controller's next two pipelined reads after that broker
    left the live brokers each have one state in their middle rewritten in ZooKeeper (same content, version
    + 1) by another session before the controller gets the states. Two: a pass queued by another watch may
    have started before the broker left and decide nothing; the pass after it writes what it decides."""

    def __init__(self, view: ReplicationView, writer) -> None:
        self._view = view
        self._writer = writer
        self.armed: int | None = None
        self.races = 2
        self.raced: tuple[str, int] | None = None

    def __getattr__(self, name):
        return getattr(self._view, name)

    def read_states(self, wanted):
        found = self._view.read_states(wanted)
        if self.armed is not None and self.armed not in self._view.brokers and len(wanted) > 1 and self.races:
            self.races -= 1
            key = wanted[len(wanted) // 2]
            state = found[key]
            self._writer.retry(self._writer.set, znodes.partition_state_path(*key), state.encode(),
                               version=state.zk_version)
            self.raced = key
        return found


@pytest.fixture
def own_controller(zk_connect, zk):
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=15)
    view = ConflictingView(ReplicationView(client).start(), zk)
    ctl = Controller(CONTROLLER_ID, client, view, rebalance=Rebalance(enable=False), batch_partitions=BATCH).start()
    try:
        r.wait_for(lambda: ctl.active, 30, "the in-process controller to take /controller")
        yield ctl, view
    finally:
        ctl.close()
        view.close()
        client.stop()
        client.close()


def test_a_version_conflict_in_a_batch_rereads_it_and_loses_no_partition(own_controller, broker_factory,  # noqa: F811
                                                                          zk_connect, zk):
    ctl, view = own_controller
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=r.replication_overrides(lag_ms=120_000))
    lead_everything(zk, 0, [1, 2])
    conflicts = ctl.batches.conflicts

    view.armed = 0
    r.by_id(brokers, 0).kill()
    after = elected(zk, 0)

    assert view.raced is not None, "the controller never read the states in one pipelined batch"
    assert ctl.batches.conflicts > conflicts, "the rewritten state did not make ZooKeeper refuse its batch"
    assert all(s.leader == 1 and s.isr == (1, 2) for s, _ in after.values()), \
        "a partition of the refused batch was skipped or elected wrongly"
    raced_state, _ = after[view.raced]
    assert raced_state.leader == 1
    assert ctl.active and r.controller(zk) == CONTROLLER_ID   # a lost race is not a newer controller
    assert len({z for _, z in after.values()}) <= 2 * (len(keys()) // BATCH)
