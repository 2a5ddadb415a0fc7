"""SASL for tests: users made with the real ``ingest users`` command, broker overrides for SASL listeners,
and each real client's settings for a SASL_PLAINTEXT login.

Brokers get one listener, ``PLAINTEXT``, whose security protocol is mapped to SASL_PLAINTEXT (Kafka
allows any name for any protocol), so :attr:`~tests.harness.brokers.BrokerProcess.kafka_port` is the SASL
port and the listener is also the inter-broker one: the brokers' followers log in as ``broker``.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from typing import Any, Iterator

from ingest import znodes
from tests.harness import replicated as r
from tests.harness.brokers import REPO_ROOT, broker_cluster, stop_all
from tests.harness.zookeeper import fresh_chroot

BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
#: the client user every SASL cluster is made with
ALICE, ALICE_PW = "alice", "alice-secret"


def ingest_users(*args: str, password: str | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``ingest users ARGS`` (a password passed through the environment variable INGEST_TEST_PW)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    extra: list[str] = []
    if password is not None:
        env["INGEST_TEST_PW"] = password
        extra = ["--password-env", "INGEST_TEST_PW"]
    return subprocess.run([sys.executable, "-m", "ingest.cli", "users", *args, *extra], capture_output=True,
                          text=True, env=env, cwd=str(REPO_ROOT), timeout=timeout, stdin=subprocess.DEVNULL)


def add_user(zk_connect: str, name: str, password: str, *mechanisms: str) -> None:
    flags = [f for m in mechanisms for f in ("--mechanism", m)]
    done = ingest_users("add", name, "--zookeeper", zk_connect, *flags, password=password)
    assert done.returncode == 0, done.stderr


def sasl_broker_overrides(**extra: Any) -> dict[str, Any]:
    """server.properties overrides: the Kafka listener speaks SASL_PLAINTEXT, followers log in as ``broker``."""
    return {"listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "inter.broker.sasl.username": BROKER_USER, "inter.broker.sasl.password": BROKER_PASSWORD, **extra}


def confluent_settings(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


def kafka_python_settings(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password}


aiokafka_settings = kafka_python_settings   # aiokafka takes kafka-python's names


class Cluster:
    """Three SASL brokers, a ZooKeeper client on their chroot, and a way to make in-sync topics."""

    def __init__(self, brokers, zk, zk_connect):
        self.brokers, self.zk, self.zk_connect = brokers, zk, zk_connect

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.kafka_port}" for b in self.brokers)

    def topic(self, name: str) -> str:
        """A new one-partition Kafka topic on all three brokers, every replica in sync (followers logged in)."""
        topic = f"{name}-{uuid.uuid4().hex[:6]}"
        ids = [b.broker_id for b in self.brokers]
        self.zk.retry(self.zk.create, znodes.topic_dir(topic), znodes.assignment_value({0: ids}, znodes.KAFKA_FORMAT),
                      makepath=True)
        r.wait_for_state(self.zk, topic, 0, lambda st: st.leader in ids and set(st.isr) == set(ids), 120,
                         f"all of {ids} in the isr")
        return topic


@contextlib.contextmanager
def sasl_cluster(zookeeper, tmp_path_factory, chroot: str, **extra: Any) -> Iterator[Cluster]:
    """Three brokers whose Kafka listener (and inter-broker listener) is SASL, on a fresh ``chroot``.

    The users ``broker`` (the followers' login) and ``alice`` exist before the brokers start; ``extra``
    adds server.properties overrides (a SASL_SSL protocol map and its keystore, an authorizer).
    """
    from kazoo.client import KazooClient   # deferred: kazoo is only needed with ZooKeeper

    zk_connect = fresh_chroot(zookeeper, chroot)
    add_user(zk_connect, BROKER_USER, BROKER_PASSWORD, "SCRAM-SHA-512")
    add_user(zk_connect, ALICE, ALICE_PW)
    brokers = broker_cluster(tmp_path_factory, n=3, zk_connect=zk_connect,
                             overrides=sasl_broker_overrides(**r.replication_overrides(min_isr=2), **extra))
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        yield Cluster(brokers, zk, zk_connect)
    finally:
        zk.stop()
        zk.close()
        stop_all(brokers)
