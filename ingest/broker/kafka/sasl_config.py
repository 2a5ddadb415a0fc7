"""The SASL keys of a broker (Kafka's names; docs/security.md, "SASL").

``sasl.enabled.mechanisms``: what a SASL listener offers (Kafka's default is GSSAPI, which this
broker does not implement: here every implemented mechanism). The broker's own credentials, for the
connections its followers open to the inter-broker listener when that listener uses SASL, are plain
keys instead of Kafka's JAAS file (``listener.name.<l>.<mechanism>.sasl.jaas.config``): this
product has no JAAS, and a username and password are all a PLAIN or SCRAM login needs; the password
can come from a file or an environment variable like any secret of the config.
"""
from __future__ import annotations

from typing import Any

from ingest.broker.kafka.sasl import parse_mechanisms
from ingest.broker.listeners import parse_protocol_map
from ingest.broker.kafka.session import SASL_PROTOCOLS
from ingest.config import Int, Key, KeyType, Str
from ingest.errors import ConfigError
from ingest.wire.kafka.connection import SaslLogin


class Mechanisms(KeyType):
    """A comma-separated list of implemented SASL mechanisms."""

    allowed = "comma-separated SASL mechanisms out of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"

    def parse(self, raw: Any) -> tuple[str, ...]:
        return parse_mechanisms(",".join(raw) if isinstance(raw, (list, tuple)) else str(raw))


class Mechanism(KeyType):
    allowed = "one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"

    def parse(self, raw: Any) -> str:
        out = parse_mechanisms(str(raw))
        if len(out) != 1:
            raise ValueError(str(raw))
        return out[0]


SASL_KEYS = (
    Key("sasl.enabled.mechanisms", Mechanisms(), ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        "SASL mechanisms a SASL_PLAINTEXT or SASL_SSL listener offers (credentials: /config/users in ZooKeeper,"
        " managed with `ingest users`)"),
    Key("connection.failed.authentication.delay.ms", Int(0, 60_000), 100,
        "how long the answer to a failed authentication (and the close after it) is held back, as Kafka does: a"
        " client cannot try passwords in a tight loop"),
    Key("sasl.server.max.receive.size", Int(1024, 2**31 - 1), 524_288,
        "the largest request frame a connection of a SASL listener may send before it authenticated (larger:"
        " the connection is closed, as Kafka does)"),
    Key("sasl.mechanism.inter.broker.protocol", Mechanism(), "SCRAM-SHA-512",
        "the mechanism this broker's followers log in with when the inter-broker listener uses SASL"),
    Key("inter.broker.sasl.username", Str(), "",
        "the user this broker's followers log in as when the inter-broker listener uses SASL (created first"
        " with `ingest users add`)"),
    Key("inter.broker.sasl.password", Str(), "",
        "that user's password (Kafka keeps both in JAAS; here plain keys: docs/security.md, 'SASL')"),
)


def sasl_listeners(config) -> list[str]:
    """The names of the listeners whose security protocol is SASL_PLAINTEXT or SASL_SSL."""
    protocols = parse_protocol_map(config["listener.security.protocol.map"])
    names = [u.split("://", 1)[0] for u in config["listeners"]]
    return [n for n in names if protocols.get(n) in SASL_PROTOCOLS]


def check_sasl_keys(config, inter_broker: str | None) -> None:
    """Refuse a SASL listener without ZooKeeper (the users live there), and a SASL inter-broker listener
    without the broker's own credentials.

    Raises:
        ConfigError: naming the keys and what to set.
    """
    sasl = sasl_listeners(config)
    if not sasl:
        return
    if not config["enable.zookeeper"]:
        raise ConfigError(f"listeners {sasl} use SASL, whose users live in ZooKeeper (/config/users): set "
                          "enable.zookeeper=true and zk.connect, or map those listeners to PLAINTEXT in "
                          "listener.security.protocol.map")
    if inter_broker in sasl and not (config["inter.broker.sasl.username"] and config["inter.broker.sasl.password"]):
        raise ConfigError(f"inter.broker.listener.name={inter_broker} uses SASL: set inter.broker.sasl.username and "
                          "inter.broker.sasl.password (a user made with `ingest users add`), which this broker's "
                          "followers log in with")


def inter_broker_login(config, inter_broker: str | None) -> SaslLogin | None:
    """What this broker's followers log in with on the inter-broker listener, or None when it has no SASL."""
    if inter_broker is None or inter_broker not in sasl_listeners(config):
        return None
    return SaslLogin(config["sasl.mechanism.inter.broker.protocol"], config["inter.broker.sasl.username"],
                     config["inter.broker.sasl.password"])
