"""Client test helpers: real broker processes (tests/harness/brokers.py) and polling."""
from __future__ import annotations


from ingest.wire import protocol
from ingest.wire.connection import BrokerConnection
from ingest.records.message_set import encode_message_set
from ingest.wire.errors import check
from tests.harness.wait import wait_until  # noqa: F401  (imported by the client tests)
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)




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
