"""Who is on one connection of a Kafka listener: the listener, its security protocol, the client, the principal.

One :class:`Session` per connection, made by the dispatcher when the connection is accepted (for
TLS: once the handshake is done, with the client's certificate) and passed with every request of
that connection. Principals are Kafka's strings: ``User:ANONYMOUS`` on PLAINTEXT and on SSL without a
client certificate, ``User:<subject DN, RFC 2253>`` with one (Kafka's default principal builder).

Concurrency: a session belongs to its connection's network thread; requests served on another
thread (the coordination thread) only read it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingest.wire.tls import ANONYMOUS


@dataclass(slots=True)
class Session:
    """One connection's identity (see the module docstring)."""

    listener: str
    security_protocol: str
    client: str               # host:port of the peer
    principal: str = ANONYMOUS
    authenticated: bool = False   # a client certificate (or, later, SASL) proved the principal

    @property
    def client_host(self) -> str:
        """The peer's address without its port (what Kafka's ACLs call the host)."""
        host = self.client.rpartition(":")[0] or self.client
        return host.strip("[]")
