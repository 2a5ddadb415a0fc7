"""SASL for tests: users made with the real ``ingest users`` command, broker overrides for SASL listeners,
and each real client's settings for a SASL_PLAINTEXT login.

Brokers get one listener, ``PLAINTEXT``, whose security protocol is mapped to SASL_PLAINTEXT (Kafka
allows any name for any protocol), so :attr:`~tests.harness.brokers.BrokerProcess.kafka_port` is the SASL
port and the listener is also the inter-broker one: the brokers' followers log in as ``broker``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from tests.harness.brokers import REPO_ROOT

BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"


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
