"""A controller whose state write loses a version race keeps deciding (real ZooKeeper, real brokers).

The controller writes a partition's state in a ZooKeeper multi: ``check`` of the controller epoch,
then ``set_data`` of the state at the version it read. When a leader's in-sync-set write lands between
the read and the multi, the ``set_data`` fails with BadVersion and ZooKeeper reports the epoch check
as rolled back (kazoo: ``[RolledBackError, BadVersionError]``). That is a lost race, to be re-read and
retried, not a newer controller: the controller must stay active while it holds ``/controller``, or no
broker decides anything until its session ends.

The controller here runs in the test process (a real :class:`~ingest.broker.controller.Controller` on
its own kazoo session, over a real :class:`~ingest.broker.replication_view.ReplicationView`) so that the
race is placed exactly: its view performs, once, a real conditional write of the state it just read
(what a leader's in-sync-set update does) before handing the state to the controller. Three real
broker processes lead and follow; a SIGKILLed follower gives the controller a decision to write, and a
SIGKILLed leader afterwards shows it still elects.
"""
from __future__ import annotations

import threading

import pytest

from ingest import znodes
from ingest.broker.controller import Controller, Rebalance
from ingest.broker.replication_view import ReplicationView
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

TOPIC = "raced"
CONTROLLER_ID = 99


class RacedView:
    """The real view; once armed, the next state it reads is rewritten in ZooKeeper (same content,
    version + 1) by another session before the controller gets it, as a leader's in-sync-set write."""

    def __init__(self, view: ReplicationView, writer) -> None:
        self._view = view
        self._writer = writer
        self.armed = threading.Event()
        self.raced = threading.Event()

    def __getattr__(self, name):
        return getattr(self._view, name)

    def read_state(self, topic: str, partition: int):
        return self._race(topic, partition, self._view.read_state(topic, partition))

    def read_states(self, keys):   # the controller's pipelined reads
        return {key: self._race(*key, state) for key, state in self._view.read_states(keys).items()}

    def _race(self, topic: str, partition: int, state):
        if state is not None and self.armed.is_set():
            self.armed.clear()
            path = znodes.partition_state_path(topic, partition)
            self._writer.retry(self._writer.set, path, state.encode(), version=state.zk_version)
            self.raced.set()
        return state


@pytest.fixture
def own_controller(zk_connect, zk):
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=15)
    view = RacedView(ReplicationView(client).start(), zk)
    ctl = Controller(CONTROLLER_ID, client, view, rebalance=Rebalance(enable=False)).start()
    try:
        r.wait_for(lambda: ctl.active, 30, "the in-process controller to take /controller")
        yield ctl, view
    finally:
        ctl.close()
        view.close()
        client.stop()
        client.close()


def test_a_lost_version_race_is_retried_and_the_controller_keeps_electing(own_controller, broker_factory,  # noqa: F811
                                                                         zk_connect, zk):
    ctl, view = own_controller
    # a long lag bound: only the controller (not the leader's lag check) reacts to a dead follower
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=r.replication_overrides(lag_ms=120_000))
    r.create_topic(zk, TOPIC, {0: [0, 1, 2]})
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader == 0 and s.isr == (0, 1, 2), 60, "leader 0, isr 0,1,2")
    epoch = r.controller_epoch(zk)

    view.armed.set()
    r.by_id(brokers, 2).kill()           # its session ends: the controller drops it from the in-sync set
    r.wait_for(view.raced.is_set, 60, "the controller to read the state after broker 2's death")
    after = r.wait_for_state(zk, TOPIC, 0, lambda s: s.isr == (0, 1), 60,
                             "the in-sync set without broker 2, written after the lost race")
    assert after.leader == 0 and after.leader_epoch == state.leader_epoch + 1
    assert ctl.active, "the controller stepped down after losing a version race"

    r.by_id(brokers, 0).kill()           # the leader dies: the same controller elects broker 1
    elected = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader == 1, 60, "broker 1 elected after the leader died")
    assert elected.isr == (1,)
    assert (ctl.active, r.controller(zk), r.controller_epoch(zk)) == (True, CONTROLLER_ID, epoch)


def test_a_failed_epoch_check_still_means_a_newer_controller(own_controller, broker_factory,  # noqa: F811
                                                             zk_connect, zk):
    """The other side of the same answer: when the epoch ``check`` itself fails (a newer controller
    bumped ``/controller_epoch``), the write is refused and this controller steps down."""
    ctl, _view = own_controller
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=r.replication_overrides(lag_ms=120_000))
    r.create_topic(zk, TOPIC, {0: [0, 1, 2]})
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.isr == (0, 1, 2), 60, "isr 0,1,2")
    data, stat = zk.retry(zk.get, znodes.CONTROLLER_EPOCH)
    zk.retry(zk.set, znodes.CONTROLLER_EPOCH, str(int(data) + 1).encode(), version=stat.version)
    r.by_id(brokers, 2).kill()
    r.wait_for(lambda: not ctl.active, 60, "the fenced controller to step down")
    assert r.partition_state(zk, TOPIC, 0).isr == state.isr   # its decision never landed
