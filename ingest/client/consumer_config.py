"""Configuration keys of the high-level consumer (Kafka 0.7 names).

``CONSUMER_CONFIG`` is read by :class:`ingest.client.consumer_group.ConsumerConnector`
(and the console consumer); the discovery keys it shares with the producer are
in :mod:`ingest.client.discovery`. Sample file: ``conf/consumer.properties``;
the meaning of each key is in ``docs/clients.md``.
"""
from __future__ import annotations

from ingest.client.discovery import DISCOVERY_KEYS
from ingest.config import Bool, Choice, ConfigDef, Int, Key, Str

CONSUMER_CONFIG = ConfigDef(
    "consumer",
    DISCOVERY_KEYS + (
        Key("groupid", Str(pattern=r"[A-Za-z0-9._-]{1,200}"), None,
            "consumer group; offsets and ownership live under /consumers/[groupid]"),
        Key("consumer.id", Str(pattern=r"[A-Za-z0-9._-]{1,200}"), None,
            "id of this consumer in its group (default host-pid-random)"),
        Key("fetch.size", Int(64, 1 << 30), 300 * 1024,
            "bytes asked per partition per fetch"),
        Key("max.fetch.size", Int(64, (1 << 31) - 1), 64 * 1024 * 1024,
            "ceiling to which the fetch size grows to read one large message"),
        Key("backoff.increment.ms", Int(1, 60_000), 200,
            "fetcher sleep when a fetch returned nothing (grows to 10x)"),
        Key("queuedchunks.max", Int(1, 10_000), 10,
            "fetched chunks buffered per stream"),
        Key("autocommit.enable", Bool(), True,
            "commit consumed offsets to ZooKeeper every autocommit.interval.ms"),
        Key("autocommit.interval.ms", Int(10, 86_400_000), 10_000,
            "period of the automatic offset commit"),
        Key("autooffset.reset", Choice(("smallest", "largest")), "smallest",
            "where a partition without a committed (or with an out-of-range) offset starts"),
        Key("rebalance.retries.max", Int(1, 1000), 20,
            "rebalance attempts before the consumer gives up (CoordinationError)"),
        Key("rebalance.backoff.ms", Int(1, 600_000), 250,
            "back-off after an ownership conflict before retrying the rebalance"),
        Key("consumer.timeout.ms", Int(-1, 86_400_000), -1,
            "a stream raises ConsumerTimeoutError when no message came for this long (-1 = wait forever)"),
    ),
)
