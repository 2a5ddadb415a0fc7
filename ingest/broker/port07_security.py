"""What security means for the 0.7 port, whose protocol has no authentication (docs/security.md, "The 0.7 port").

A broker has *security configured* when it runs an authorizer (``authorizer.class.name``) or any Kafka
listener of a protocol other than PLAINTEXT. Such a broker refuses the 0.7 port's broker-only requests
(:data:`ingest.broker.handlers.BROKER_ONLY`: brokers send them over the inter-broker Kafka listener),
and refuses to start with its 0.7 port on an address other than loopback unless
``allow.insecure.v07.listener=true`` says the operator accepts that anyone who reaches the port may read
and write every 0.7 topic. ``port=-1`` turns the 0.7 port off.
"""
from __future__ import annotations

import ipaddress

from ingest.broker.authorizer.config import authorizer_enabled
from ingest.broker.listeners import PLAINTEXT, parse_endpoints, parse_protocol_map
from ingest.config import Bool, Key
from ingest.errors import ConfigError

ALLOW_KEY = "allow.insecure.v07.listener"
NO_PORT = -1
"""``port=-1``: no 0.7 port at all (as ``metrics.port=-1`` turns the metrics endpoint off)."""

PORT07_SECURITY_KEYS = (
    Key(ALLOW_KEY, Bool(), False,
        "let a broker with security configured (an authorizer, or a listener other than PLAINTEXT) serve the"
        " 0.7 port on an address other than loopback; the 0.7 protocol authenticates no one (docs/security.md)"),
)


def security_configured(config) -> bool:
    """An authorizer, or a Kafka listener whose protocol is not PLAINTEXT."""
    if authorizer_enabled(config):
        return True
    protocols = parse_protocol_map(config["listener.security.protocol.map"])
    return any(protocols.get(e.name, PLAINTEXT) != PLAINTEXT for e in parse_endpoints(config["listeners"]))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_port07(config, secured: bool) -> None:
    """Raise ConfigError when a secured broker would open its 0.7 port beyond loopback without consent, or
    when a broker would serve nothing (no 0.7 port and no Kafka listener)."""
    host = config["hostname"]
    if config["port"] == NO_PORT:
        if not config["listeners"]:
            raise ConfigError("port=-1 turns the 0.7 port off and listeners is empty: the broker would serve "
                              "nothing; give a Kafka listener (listeners=PLAINTEXT://host:port) or a 0.7 port")
        return
    if secured and not is_loopback(host) and not config[ALLOW_KEY]:
        raise ConfigError(
            f"hostname={host!r}: this broker has security configured (an authorizer, or a listener other than "
            f"PLAINTEXT), and its 0.7 port ({config['port']}) would be reachable beyond loopback, where the 0.7 "
            f"protocol lets anyone read and write every 0.7 topic; bind it to loopback (hostname=127.0.0.1), or "
            f"set {ALLOW_KEY}=true to accept that (docs/security.md, \"The 0.7 port\")")
