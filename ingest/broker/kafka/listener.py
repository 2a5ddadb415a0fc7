"""The Kafka listeners of a broker: one network layer (:class:`~ingest.broker.server.SocketServer`) per
entry of ``listeners``, each with its :class:`~ingest.broker.kafka.dispatcher.KafkaDispatcher`.

The same network layer as the 0.7 port (processors, fairness, budgets, timeouts, graceful stop:
docs/protocol.md), each listener on its own port. Started after the logs are recovered; a listener
bound to port 0 advertises the port it got. A listener whose protocol is SSL serves TLS with the
broker's keystore (:mod:`ingest.broker.tls_config`).
"""
from __future__ import annotations

import logging

from ingest.broker.kafka.dispatcher import KafkaDispatcher
from ingest.broker.listeners import PLAINTEXT, Listeners, parse_protocol_map
from ingest.broker.server import SocketServer
from ingest.broker.tls_config import SSL, listener_context

SASL_SSL = "SASL_SSL"   # TLS as SSL's, with the SASL login on top (ingest.broker.kafka.sasl)

log = logging.getLogger(__name__)


class KafkaListeners:
    """Every Kafka listener of one broker: bind (``bind``), serve (``start``), stop (``stop``)."""

    def __init__(self, config, apis, listeners: Listeners) -> None:
        self.config = config
        self.apis = apis
        self.listeners = listeners
        self.servers: dict[str, SocketServer] = {}
        self.dispatchers: dict[str, KafkaDispatcher] = {}

    def bind(self) -> Listeners:
        """Bind every listener's port; returns the listeners with the ports bound (also ``self.listeners``).

        Raises:
            ConfigError: a port cannot be bound (naming the listener and the key).
        """
        protocols = parse_protocol_map(self.config["listener.security.protocol.map"])
        try:
            for e in self.listeners.bind:
                protocol = protocols.get(e.name, PLAINTEXT)
                d = KafkaDispatcher(e.name, self.apis.handlers(), security_protocol=protocol, sasl=self.apis.sasl)
                self.dispatchers[e.name] = d
                self.servers[e.name] = SocketServer.from_config(
                    self.config, d, e.host, e.port, name=f"kafka-{e.name.lower()}",
                    bind_keys=f"listener {e.name} of 'listeners'",
                    ssl_context=listener_context(self.config, e.name) if protocol in (SSL, SASL_SSL) else None)
        except BaseException:
            self.stop()
            raise
        self.listeners = self.listeners.with_bound_ports({n: s.port for n, s in self.servers.items()})
        return self.listeners

    def attach_coordinated(self, coordinated) -> None:
        """Requests needing ZooKeeper go to ``coordinated`` (the broker's coordination thread)."""
        for d in self.dispatchers.values():
            d.coordinated = coordinated

    def start(self) -> "KafkaListeners":
        for s in self.servers.values():
            s.start()
        for e in self.listeners.advertised:
            log.info("Kafka listener %s advertised as %s", e.name, e.url)
        return self

    def stop(self) -> None:
        for s in self.servers.values():
            s.stop()

    def port(self, name: str | None = None) -> int:
        """The bound port of listener ``name`` (default: the first)."""
        e = self.listeners.bind[0] if name is None else next(x for x in self.listeners.bind if x.name == name)
        return e.port
