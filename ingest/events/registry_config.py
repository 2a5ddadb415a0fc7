"""The schema registry's config keys: ``ingest registry start --config FILE --set key=value``.

The store and default compatibility are command-line options (``--store``/``--zk``,
``--compatibility``); the listening address is ``--host``/``--port``, or Confluent's
``listeners`` key (``https://...`` for TLS). The keys here are the server's limits (Kafka's
names for the same ideas), the metrics endpoint shared with the broker and the mirror, and
security under Confluent's registry names: TLS (``ssl.*``, PEM files as the broker's keys),
HTTP basic authentication (``authentication.*``) and the write roles
(docs/security.md, "Schema registry and secrets").
"""
from __future__ import annotations

from ingest.config import Choice, ConfigDef, Int, Key, Str, StrList
from ingest.metrics.keys import METRICS_KEYS
from ingest.zk_security import ZK_SECURITY_KEYS

SERVER_KEYS = (
    Key("num.io.threads", Int(1, 256), 8,
        "worker threads that run requests; a request is handed to one only once it has arrived whole"),
    Key("max.connections", Int(1, 1_000_000), 16_384,
        "open client connections; past it a new connection is answered 503 (error_code 50302) and closed. "
        "Lowered at start to what the descriptor limit allows (logged)"),
    Key("connections.max.idle.ms", Int(1000, 86_400_000), 30_000,
        "a connection without a byte in either direction for this long is closed, also in the middle of a "
        "request (the request read timeout); Confluent's idle.timeout.ms default"),
)

SECURITY_KEYS = (
    Key("listeners", Str(pattern=r"(https?://[^/\s]*:[0-9]+)?"), "",
        "Confluent's listener: one http://HOST:PORT or https://HOST:PORT (then without --host/--port); "
        "https serves TLS with ssl.keystore.location"),
    Key("ssl.keystore.type", Choice(("PEM",)), "PEM", "format of ssl.keystore.location (PEM only)"),
    Key("ssl.keystore.location", Str(), "",
        "PEM file with the server's certificate chain and its private key (needed by an https listener)"),
    Key("ssl.key.password", Str(), "", "password of the private key in ssl.keystore.location, if it is encrypted"),
    Key("ssl.truststore.type", Choice(("PEM",)), "PEM", "format of ssl.truststore.location (PEM only)"),
    Key("ssl.truststore.location", Str(), "",
        "PEM bundle of the CAs that sign client certificates (ssl.client.authentication)"),
    Key("ssl.client.authentication", Choice(("NONE", "REQUESTED", "REQUIRED")), "NONE",
        "client certificates: not asked (NONE), checked when sent (REQUESTED), or required (REQUIRED)"),
    Key("authentication.method", Choice(("NONE", "BASIC")), "NONE",
        "BASIC: every request needs HTTP basic credentials of a user of authentication.users.file (else 401)"),
    Key("authentication.realm", Str(nonempty=True), "SchemaRegistry-Props",
        "the realm the 401 answer's WWW-Authenticate header names"),
    Key("authentication.roles", StrList(), ("*",),
        "roles let in: a user needs one of them (* any role; a user without an allowed role gets 401)"),
    Key("authentication.users.file", Str(), "",
        "users file, lines 'user: PBKDF2-SHA256:<iterations>:<salt>:<hash>,role,...' (`ingest registry passwd` "
        "writes them; cleartext is refused)"),
    Key("authorization.write.roles", StrList(), ("admin",),
        "roles that may change the registry (register, delete, config, mode); other users only read (403)"),
)

REGISTRY_CONFIG = ConfigDef("registry", SERVER_KEYS + SECURITY_KEYS + METRICS_KEYS + ZK_SECURITY_KEYS)
"""Every key ``ingest registry start`` accepts in ``--config`` / ``--set``."""

REGISTRY_DEFAULTS = REGISTRY_CONFIG.parse({}, source="defaults")
"""Every key at its default (an in-process server without a config)."""
