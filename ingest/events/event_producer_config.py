"""Configuration keys of the event producer (header identity, monitoring events).

These sit next to the producer's own keys (``ingest.client.producer_config``)
in ``conf/producer-events.properties``; :func:`split_config` separates the two.
"""
from __future__ import annotations

from typing import Any, Mapping

from ingest.config import Bool, ConfigDef, Int, Key, Str
from ingest.registry_client_config import REGISTRY_CLIENT_KEYS

TOPIC_PATTERN = r"[A-Za-z0-9.-][A-Za-z0-9._-]{0,248}"  # never starts with '_': '_' paths are hidden from Hadoop

EVENTS_CONFIG = ConfigDef(
    "events",
    (
        Key("schema.registry.url", Str(pattern=r"https?://.+"), None,
            "schema registry base URL, e.g. http://127.0.0.1:8081"),
        *REGISTRY_CLIENT_KEYS,
        Key("service.name", Str(nonempty=True), "ingest-producer",
            "header.service of every event and the 'service' of monitoring events"),
        Key("server.name", Str(), None,
            "header.server (default: this host's name)"),
        Key("monitoring.enable", Bool(), True,
            "publish monitoring events (the producer half of the audit)"),
        Key("audit.topic", Str(pattern=TOPIC_PATTERN), "audit-monitoring",
            "topic of the monitoring events; must not start with '_' (hidden from Hadoop readers)"),
        Key("monitoring.window.ms", Int(1000, 86_400_000), 600_000,
            "event-time window of the counts: [start, start + window)"),
        Key("monitoring.grace.ms", Int(0, 86_400_000), 60_000,
            "a window is reported final this long after it ends (late sends still settle)"),
        Key("monitoring.interval.ms", Int(100, 86_400_000), 60_000,
            "an open window with traffic is reported (not final) at most this often"),
        Key("monitoring.buffer.size", Int(1, 10_000_000), 10_000,
            "monitoring events held for retry while the broker is unreachable; oldest dropped beyond"),
        Key("monitoring.retry.backoff.ms", Int(1, 600_000), 200,
            "first back-off after a failed monitoring publish; doubles up to 10 s"),
        Key("monitoring.tick.ms", Int(10, 60_000), 200,
            "how often the reporter thread looks for due windows"),
        Key("monitoring.heartbeats", Bool(), True,
            "report windows without traffic (zero counts, heartbeat=true) for every topic sent to"),
    ),
)


def split_config(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(event keys, producer keys) of a mixed mapping (e.g. one properties file)."""
    names = {k.name for k in EVENTS_CONFIG.keys}
    events = {k: v for k, v in raw.items() if k in names}
    producer = {k: v for k, v in raw.items() if k not in names}
    return events, producer
