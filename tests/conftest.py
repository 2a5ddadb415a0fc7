"""Fixtures shared by every test package: real ZooKeeper, one SparkSession, a clock."""
from __future__ import annotations


import pytest

from ingest.clock import FakeClock
from tests.harness.zookeeper import ZooKeeperServer, fresh_chroot, zookeeper_available


@pytest.fixture(scope="session")
def zookeeper():
    """A real ZooKeeper server for the whole test session."""
    if not zookeeper_available():
        pytest.skip("Debian package zookeeper is not installed (scripts/bootstrap.sh installs it)")
    server = ZooKeeperServer().start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper) -> str:
    """A connect string with a fresh chroot, so tests never see each other's znodes."""
    return fresh_chroot(zookeeper)


@pytest.fixture
def zk(zk_connect):
    """A started kazoo client on the test's own chroot."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="session")
def spark():
    """The one local[2] SparkSession shared by all tests of this session."""
    from tests.harness.spark import make_session

    session = make_session()
    yield session
    session.stop()


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()
