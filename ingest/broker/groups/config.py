"""The group coordinator's keys (Kafka's names and defaults; docs/kafka-protocol.md, "Consumer groups")."""
from __future__ import annotations

from ingest.config import Int, Key

GROUP_KEYS = (
    Key("offsets.topic.num.partitions", Int(1, 1000), 50,
        "partitions of __consumer_offsets, fixed when it is created: a group lives in partition"
        " abs(hashCode(group id)) % this, and that partition's leader coordinates it"),
    Key("offsets.topic.replication.factor", Int(1, 100), 3,
        "replication factor of __consumer_offsets when it is created (capped by the live brokers then)"),
    Key("offsets.commit.timeout.ms", Int(1, 600_000), 5000,
        "how long an offset commit waits for the in-sync replicas of its __consumer_offsets partition"
        " before it is answered REQUEST_TIMED_OUT"),
    Key("offset.metadata.max.bytes", Int(0, 1024 * 1024), 4096,
        "largest metadata string of a committed offset (OFFSET_METADATA_TOO_LARGE above)"),
    Key("group.min.session.timeout.ms", Int(1, 2**31 - 1), 6000,
        "smallest session.timeout.ms a member may ask for (INVALID_SESSION_TIMEOUT below)"),
    Key("group.max.session.timeout.ms", Int(1, 2**31 - 1), 1_800_000,
        "largest session.timeout.ms a member may ask for (INVALID_SESSION_TIMEOUT above)"),
    Key("group.initial.rebalance.delay.ms", Int(0, 600_000), 3000,
        "how long the first rebalance of an empty group waits for more members (each new member extends"
        " it, up to the rebalance timeout)"),
    Key("group.max.size", Int(1, 2**31 - 1), 1000,
        "most members of one group (GROUP_MAX_SIZE_REACHED beyond): bounds a coordinator's memory"),
)
