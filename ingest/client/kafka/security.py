"""A Kafka client's security settings (TLS, SASL) as one small value, and the listener that matches them.

The pipelines' readers and writers (the loader's discovery and Spark tasks, the Spark source, the mirror's
two ends, the producer's Kafka path) build their Kafka clients from their own configuration; each takes
the same nine keys under librdkafka's names (:data:`SECURITY_KEY_NAMES`, declared once in
:mod:`ingest.client.kafka.config`), a component with more than one cluster under a prefix per cluster
(the mirror's ``source.<name>.`` and ``target.``). :class:`ClientSecurity` carries them (frozen and
picklable: Spark tasks carry it; its repr and :meth:`to_json` hide the passwords).

A broker registers every listener in ``/brokers/endpoints/<id>`` with its security protocol
(``listener_security_protocol_map``); a client that finds the brokers in ZooKeeper takes, of each broker,
the listener whose protocol is its own ``security.protocol`` (:func:`matching_listener`), as a Kafka
client is given the bootstrap address of the listener it speaks to.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from ingest import znodes
from ingest.client.kafka.config import COMMON_KEYS
from ingest.config import Key
from ingest.config_providers import redact
from ingest.wire.kafka.connection import SaslLogin
from ingest.wire.tls import client_context

SECURITY_KEY_NAMES = ("security.protocol", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
                      "ssl.key.password", "ssl.endpoint.identification.algorithm", "sasl.mechanism",
                      "sasl.username", "sasl.password")
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def security_keys(prefix: str = "", whose: str = "") -> tuple[Key, ...]:
    """The client security keys (the Kafka client's own, :data:`SECURITY_KEY_NAMES`) named ``prefix + name``;
    ``whose`` ("the target's") prefixes each doc."""
    by_name = {k.name: k for k in COMMON_KEYS}
    lead = f"{whose}: " if whose else ""
    return tuple(replace(by_name[n], name=prefix + n, doc=lead + by_name[n].doc) for n in SECURITY_KEY_NAMES)


def _defaults() -> dict[str, Any]:
    return {k.name: k.default for k in security_keys()}


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """The security settings of a Kafka client (module docstring); the default is PLAINTEXT."""

    protocol: str = "PLAINTEXT"
    ssl_ca_location: str = ""
    ssl_certificate_location: str = ""
    ssl_key_location: str = ""
    ssl_key_password: str = field(default="", repr=False)
    ssl_endpoint_identification_algorithm: str = "https"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], prefix: str = "") -> "ClientSecurity":
        """From ``config``'s keys ``prefix + name`` (a key it does not have keeps the Kafka client's default)."""
        defaults = _defaults()
        values = {n: config.get(prefix + n, defaults[n]) for n in SECURITY_KEY_NAMES}
        return cls(*(("" if v is None else str(v)) for v in values.values()))

    def client_keys(self) -> dict[str, str]:
        """The settings as the product's Kafka client takes them (``security.protocol``, ``ssl.*``, ``sasl.*``)."""
        return dict(zip(SECURITY_KEY_NAMES, (getattr(self, f.name) for f in fields(self))))

    def ssl_context(self):
        """The TLS context of a connection of ours to a listener of this protocol (SSL, SASL_SSL), or None."""
        if self.protocol not in ("SSL", "SASL_SSL"):
            return None
        return client_context(ca_location=self.ssl_ca_location or None,
                              certificate_location=self.ssl_certificate_location or None,
                              key_location=self.ssl_key_location or None, key_password=self.ssl_key_password or None,
                              check_hostname=self.ssl_endpoint_identification_algorithm == "https")

    def sasl_login(self) -> SaslLogin | None:
        """The SASL login of a connection of ours to a listener of this protocol (SASL_*), or None."""
        if not self.protocol.startswith("SASL_"):
            return None
        return SaslLogin(self.sasl_mechanism, self.sasl_username, self.sasl_password)

    def to_json(self) -> dict[str, str]:
        """:meth:`client_keys` with the passwords hidden: what a run record or a log line may show."""
        return redact(self.client_keys())


def listener_protocols(data: bytes) -> dict[str, tuple[str, int, str]]:
    """``{listener name: (host, port, security protocol)}`` of a ``/brokers/endpoints/<id>`` value; a listener
    missing from ``listener_security_protocol_map`` has the protocol of its name, as Kafka's default map
    (ValueError if malformed)."""
    endpoints = znodes.parse_broker_endpoints(data)
    try:
        mapping = json.loads(data.decode("utf-8")).get("listener_security_protocol_map") or {}
    except (AttributeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a broker endpoints node: {data[:200]!r}") from exc
    return {name: (host, port, str(mapping.get(name, name if name in PROTOCOLS else "PLAINTEXT")))
            for name, (host, port) in endpoints.items()}


def matching_listener(data: bytes, protocol: str | None) -> tuple[str, int] | None:
    """``(host, port)`` of the first listener of a ``/brokers/endpoints/<id>`` value whose security protocol is
    ``protocol`` (None: the first listener, whatever its protocol); None when the broker has none."""
    for host, port, proto in listener_protocols(data).values():
        if protocol is None or proto == protocol:
            return host, port
    return None
