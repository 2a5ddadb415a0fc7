"""The APIs and versions the Kafka listener implements, as it advertises them in ApiVersions (KIP-35).

Exactly what is implemented, one contiguous range per API (docs/kafka-protocol.md, "The version
table", D9): a client picks the highest version both sides know, so a range that claimed more would be
a misdecoded request. Private APIs (D6, keys from 10000) are never listed here.
"""
from __future__ import annotations

from ingest.wire.kafka.api_versions import ApiVersion
from ingest.wire.kafka.port07 import TYPE_OF_KEY

ADVERTISED: dict[int, tuple[int, int]] = {
    0: (0, 10),    # Produce
    1: (0, 12),    # Fetch
    2: (0, 7),     # ListOffsets
    3: (0, 9),     # Metadata
    8: (0, 9),     # OffsetCommit
    9: (0, 9),     # OffsetFetch
    10: (0, 2),    # FindCoordinator
    11: (0, 9),    # JoinGroup
    12: (0, 4),    # Heartbeat
    13: (0, 5),    # LeaveGroup
    14: (0, 5),    # SyncGroup
    15: (0, 6),    # DescribeGroups
    16: (0, 5),    # ListGroups
    17: (0, 1),    # SaslHandshake (advertised on every listener, as Kafka does)
    18: (0, 4),    # ApiVersions
    22: (0, 4),    # InitProducerId
    23: (0, 4),    # OffsetForLeaderEpoch
    19: (0, 6),    # CreateTopics (v7: topic ids)
    20: (0, 5),    # DeleteTopics (v6: topic ids)
    32: (0, 4),    # DescribeConfigs
    33: (0, 2),    # AlterConfigs
    36: (0, 2),    # SaslAuthenticate
    37: (0, 3),    # CreatePartitions
    44: (0, 1),    # IncrementalAlterConfigs
    60: (0, 2),    # DescribeCluster
    29: (0, 3),    # DescribeAcls
    30: (0, 3),    # CreateAcls
    31: (0, 3),    # DeleteAcls
}
"""api key -> (min, max) version served."""

PRIVATE: dict[int, tuple[int, int]] = {
    10000: (0, 0),   # AppendAt (the mirror's conditional append, offsets kept)
    10001: (0, 0),   # ReplicaFetch07: a follower's fetch of a 0.7-format replicated topic (REPLICA_FETCH)
    10002: (0, 0),   # AppendAt07 (the 0.7 port's APPEND_AT)
    10003: (0, 0),   # DeletedSegments07 (the 0.7 port's DELETED_SEGMENTS)
    10004: (0, 0),   # ReplicaFetches07: a follower's fetch of many 0.7-format partitions (REPLICA_FETCHES)
}
"""The private APIs (keys from 10000, D6): served, never advertised (no Kafka client sends them)."""

PORT07_KEYS = frozenset(TYPE_OF_KEY)
"""The private keys that carry the 0.7 port's broker-only requests (:mod:`ingest.wire.kafka.port07`)."""

SERVED: dict[int, tuple[int, int]] = {**ADVERTISED, **PRIVATE}
"""Every api key the listener answers, and its versions."""

API_VERSIONS_KEY = 18

ADVERTISED_KEYS: tuple[ApiVersion, ...] = tuple(ApiVersion(k, lo, hi) for k, (lo, hi) in sorted(ADVERTISED.items()))


def supports(api_key: int, version: int) -> bool:
    served = SERVED.get(api_key)
    return served is not None and served[0] <= version <= served[1]
