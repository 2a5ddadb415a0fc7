"""The broker-tier audit counts' keys (docs/audit.md, "Broker-tier counts"; Confluent's ``schema.registry.url``)."""
from __future__ import annotations

from ingest.config import Bool, Int, Key, Str
from ingest.registry_client_config import REGISTRY_CLIENT_KEYS

NAME_PATTERN = r"[A-Za-z0-9._-]{1,249}"
TIER_COUNT_KEYS = (
    Key("audit.counts.enable", Bool(), False,
        "count, per topic and record-timestamp window, the records this broker appends as leader from producers"
        " (Kafka listener), and publish the counts as monitoring events (docs/audit.md, 'Broker-tier counts')"),
    Key("audit.counts.topic", Str(pattern=NAME_PATTERN), "audit-broker",
        "Kafka-format topic of this cluster the broker-tier counts are published to (never counted itself)"),
    Key("audit.counts.window.ms", Int(1000, 86_400_000), 600_000,
        "record-timestamp window of the broker-tier counts (the audit's window.ms must be a multiple)"),
    Key("audit.counts.interval.ms", Int(100, 3_600_000), 60_000,
        "how often the broker-tier counts are published"),
    Key("audit.counts.publish.timeout.ms", Int(100, 600_000), 30_000,
        "how long one publication waits for the counts topic's in-sync replicas"),
    Key("schema.registry.url", Str(), "",
        "schema registry the broker registers the monitoring event schema with (needed by audit.counts.enable)"),
    *REGISTRY_CLIENT_KEYS,  # its credentials (a user with a write role) and CA
)
