"""Who is on one connection of a Kafka listener: the listener, its security protocol, the client, the principal.

One :class:`Session` per connection, made by the dispatcher when the connection is accepted (for
TLS: once the handshake is done, with the client's certificate) and passed with every request of
that connection. Principals are Kafka's strings: ``User:ANONYMOUS`` on PLAINTEXT and on SSL without a
client certificate, ``User:<subject DN, RFC 2253>`` with one (Kafka's default principal builder),
``User:<username>`` once a SASL login succeeded. On a SASL listener (SASL_PLAINTEXT, SASL_SSL) the
session carries its SASL exchange (:class:`~ingest.broker.kafka.sasl.SaslExchange`) until it
completes: only ApiVersions, SaslHandshake and SaslAuthenticate are served before.

Concurrency: a session belongs to its connection's network thread; requests served on another
thread (the coordination thread) only read it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.wire.tls import ANONYMOUS

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


@dataclass(slots=True)
class Session:
    """One connection's identity (see the module docstring)."""

    listener: str
    security_protocol: str
    client: str               # host:port of the peer
    principal: str = ANONYMOUS
    authenticated: bool = False   # a client certificate or a SASL login proved the principal
    sasl: object | None = None    # the SaslExchange of a SASL listener's connection

    @property
    def client_host(self) -> str:
        """The peer's address without its port (what Kafka's ACLs call the host)."""
        host = self.client.rpartition(":")[0] or self.client
        return host.strip("[]")

    @property
    def max_receive_bytes(self) -> int | None:
        """The largest frame this connection may send now: ``sasl.server.max.receive.size`` until its SASL
        login completed (Kafka's bound on what an unauthenticated client can make the broker buffer), else
        None (the listener's own bound)."""
        return self.sasl.max_receive_bytes if self.authenticating else None

    @property
    def authenticating(self) -> bool:
        """A SASL listener's connection whose SASL login has not completed (a client certificate on
        SASL_SSL does not replace it, as in Kafka)."""
        return self.sasl is not None and not self.sasl.complete
