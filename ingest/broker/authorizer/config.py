"""The authorizer's broker keys (Kafka's names and defaults) and the broker's own inter-broker principal."""
from __future__ import annotations

from ingest.broker.tls_config import keystore_principal
from ingest.config import Bool, Key, Str
from ingest.errors import ConfigError

ANONYMOUS = "User:ANONYMOUS"

AUTHORIZER_NAMES = frozenset({"kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                              "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "ingest.acls"})
"""Spellings of the built-in ACL authorizer (Kafka's class names, and this product's own)."""

AUTHORIZER_KEYS = (
    Key("authorizer.class.name", Str(), "",
        "the ACL authorizer: empty (default) = no authorization, every request allowed; one of "
        + ", ".join(sorted(AUTHORIZER_NAMES)) + " = Kafka's ACLs, stored in ZooKeeper (needs enable.zookeeper),"
        " denying what no ACL allows"),
    Key("super.users", Str(), "",
        "principals allowed everything whatever the ACLs say, separated by ';' (e.g. User:admin;User:broker)"),
    Key("allow.everyone.if.no.acl.found", Bool(), False,
        "with an authorizer: a resource that has no ACL at all is allowed to everyone (default: denied)"),
)


def authorizer_enabled(config) -> bool:
    """True when ``authorizer.class.name`` names the built-in authorizer.

    Raises:
        ConfigError: another class name, or no ZooKeeper to hold the ACLs.
    """
    name = config["authorizer.class.name"].strip()
    if not name:
        return False
    if name not in AUTHORIZER_NAMES:
        raise ConfigError(f"authorizer.class.name={name!r} is not an authorizer this broker has: use one of "
                          f"{', '.join(sorted(AUTHORIZER_NAMES))} (all the same ACL authorizer), or leave it empty")
    if not config["enable.zookeeper"]:
        raise ConfigError(f"authorizer.class.name={name} keeps its ACLs in ZooKeeper: set enable.zookeeper=true "
                          "and zk.connect, or leave authorizer.class.name empty")
    return True


def super_users(config) -> frozenset[str]:
    """``super.users`` as a set (ConfigError naming a principal that is not TYPE:NAME)."""
    out = set()
    for p in config["super.users"].split(";"):
        p = p.strip()
        if not p:
            continue
        kind, sep, name = p.partition(":")
        if not sep or not kind or not name:
            raise ConfigError(f"super.users: {p!r} is not a principal TYPE:NAME (e.g. User:admin); separate "
                              "principals with ';'")
        out.add(p)
    return frozenset(out)


def inter_broker_principal(config, protocol: str) -> str:
    """The principal this broker is known by when it connects to the other brokers' inter-broker listener
    (``protocol``: that listener's security protocol), as the other brokers will compute it: ANONYMOUS on
    PLAINTEXT, ``User:<inter.broker.sasl.username>`` on SASL, and on SSL the subject of the broker's own
    keystore certificate (``User:CN=...``, RFC 2253) when ``ssl.client.auth`` asks followers for a certificate
    (requested or required; a follower always presents its keystore's), else ANONYMOUS."""
    if protocol.startswith("SASL") and "inter.broker.sasl.username" in config:
        user = config["inter.broker.sasl.username"]
        if user:
            return f"User:{user}"
    if protocol == "SSL" and config.get("ssl.client.auth", "none") != "none":
        return keystore_principal(config)
    return ANONYMOUS
