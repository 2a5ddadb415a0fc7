"""Which way a broker sends the 0.7 port's broker-only requests to another broker (docs/replication.md).

A follower of a 0.7 replicated topic, and a leader's repair read, reach the other broker over its
inter-broker Kafka listener, as private api keys (:mod:`ingest.wire.kafka.port07_connection`), whenever
that broker registered in ZooKeeper that it serves them (``private_apis`` of ``/brokers/endpoints/[id]``)
and an endpoint of the inter-broker listener; otherwise over its 0.7 port, as before. A broker registers
them only when its 0.7 port does not take them (security configured, so it refuses them there, or
``port=-1``): in a secured cluster they go over the Kafka listener, with its TLS and the authorizer; an
unsecured cluster, and a broker of an older version during a rolling upgrade, keep the 0.7 port.
"""
from __future__ import annotations

from ingest.wire.connection import BrokerConnection
from ingest.wire.kafka.port07 import REPLICA_FETCH_KEY
from ingest.wire.kafka.port07_connection import Port07OverKafka


class Port07Carrier:
    """Connections to other brokers for the 0.7 broker-only requests.

    Args:
        view: the :class:`~ingest.broker.replication_view.ReplicationView` (live brokers, their endpoints and
            private api keys).
        listener: the inter-broker listener's name (None: no Kafka listener; the 0.7 port always).
        ssl_context: the client TLS context towards that listener when it speaks TLS.
        client_id: what this broker names itself in Kafka request headers.
        sasl: the broker's login on that listener when it speaks SASL (``inter.broker.sasl.*``).
    """

    def __init__(self, view, listener: str | None, ssl_context=None, client_id: str | None = None,
                 sasl=None) -> None:
        self.view = view
        self.listener = listener
        self.ssl_context = ssl_context
        self.client_id = client_id
        self.sasl = sasl

    def address(self, broker_id: int) -> tuple[bool, str, int] | None:
        """``(over Kafka, host, port)`` to reach ``broker_id``, or None while it is not registered."""
        if self.listener is not None and self.view.serves(broker_id, REPLICA_FETCH_KEY):
            endpoint = self.view.kafka_endpoint(broker_id, self.listener)
            if endpoint is not None:
                return (True, *endpoint)
        addr = self.view.brokers.get(broker_id)
        return None if addr is None or addr[1] < 0 else (False, *addr)   # port -1: that broker has no 0.7 port

    def connect(self, broker_id: int, timeout_s: float) -> BrokerConnection | None:
        """A (lazily opened) connection to ``broker_id`` for REPLICA_FETCH and DELETED_SEGMENTS, or None."""
        found = self.address(broker_id)
        if found is None:
            return None
        kafka, host, port = found
        if kafka:
            return Port07OverKafka(host, port, broker_id=broker_id, timeout_s=timeout_s,
                                   ssl_context=self.ssl_context, client_id=self.client_id, sasl=self.sasl)
        return BrokerConnection(host, port, broker_id=broker_id, timeout_s=timeout_s)
