"""Fixtures of the Kafka 0.7 client tests: the Python 2.7 interpreter and one 2-broker cluster.

The cluster (a real ZooKeeper chroot, two real broker processes with 2 partitions per topic)
is shared by every test of this package to keep them fast; each test uses its own topic and
group names, so none sees another's data.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.brokers import BrokerProcess, broker_cluster, stop_all
from tests.harness.py27 import Py27Unavailable, interpreter
from tests.harness.zookeeper import fresh_chroot


@pytest.fixture(scope="session")
def py27() -> Path:
    """The python of .venv-py27 (samsa, brod); skips only when no 2.7 interpreter exists here."""
    try:
        return interpreter()
    except Py27Unavailable as exc:
        pytest.skip(str(exc))


@dataclass
class Cluster07:
    zk_connect: str
    brokers: list[BrokerProcess]

    def hp(self, i: int = 0) -> dict:
        """``host``/``port`` of broker ``i`` as the drivers' operations take them."""
        return {"host": self.brokers[i].host, "port": self.brokers[i].port}

    @property
    def broker_list(self) -> str:
        return ",".join(b.address for b in self.brokers)


@pytest.fixture(scope="package")
def cluster07(zookeeper, tmp_path_factory, py27) -> Cluster07:
    zk_connect = fresh_chroot(zookeeper, "/k07")
    brokers = broker_cluster(tmp_path_factory, 2, zk_connect, num_partitions=2)
    yield Cluster07(zk_connect, brokers)
    stop_all(brokers)
