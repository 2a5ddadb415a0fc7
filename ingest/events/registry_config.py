"""The schema registry's config keys: ``ingest registry start --config FILE --set key=value``.

The listening address, store and default compatibility are command-line options
(``--port``, ``--host``, ``--store``/``--zk``, ``--compatibility``); the keys here are
the server's limits (Kafka's names for the same ideas) and the metrics endpoint shared
with the broker and the mirror.
"""
from __future__ import annotations

from ingest.config import ConfigDef, Int, Key
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

REGISTRY_CONFIG = ConfigDef("registry", SERVER_KEYS + METRICS_KEYS + ZK_SECURITY_KEYS)
"""Every key ``ingest registry start`` accepts in ``--config`` / ``--set``."""

REGISTRY_DEFAULTS = REGISTRY_CONFIG.parse({}, source="defaults")
"""Every key at its default (an in-process server without a config)."""
