"""Client test helpers: real broker processes (tests/harness/brokers.py) and polling."""
from __future__ import annotations

import time
from typing import Callable

from ingest.broker import protocol
from ingest.broker.message_set import encode_message_set
from ingest.client.connection import BrokerConnection, check
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition",
               interval: float = 0.05):
    """Poll until ``predicate()`` is truthy; return its value, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def create_topic(brokers, topic: str, payload: bytes = b"init") -> int:
    """Create ``topic`` on every broker by acknowledged produce of one message to partition 0.

    Returns the number of messages written (one per broker).
    """
    for b in brokers:
        conn = BrokerConnection(b.host, b.port, timeout_s=10)
        try:
            resp = conn.request(protocol.ProduceAckRequest(topic, 0, encode_message_set([payload])).encode(),
                                protocol.ProduceAckResponse)
            check(resp.error, f"create {topic} on {b}")
        finally:
            conn.close()
    return len(brokers)
