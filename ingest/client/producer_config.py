"""Configuration keys of the producer and the high-level consumer (Kafka 0.7 names).

``PRODUCER_CONFIG`` is read by :class:`ingest.client.producer.Producer`,
``CONSUMER_CONFIG`` by :class:`ingest.client.consumer_group.ConsumerConnector`.
Sample files: ``conf/producer.properties``, ``conf/consumer.properties``;
the meaning of each key is in ``docs/clients.md``.
"""
from __future__ import annotations

from ingest.config import Bool, Choice, ConfigDef, Int, Key, Str

CODEC_NAMES = {"none": 0, "gzip": 1, "snappy": 2, "0": 0, "1": 1, "2": 2}

_DISCOVERY_KEYS = (
    Key("broker.list", Str(), None,
        "static brokers 'id:host:port,...' (used when zk.connect is not set)"),
    Key("zk.connect", Str(), None,
        "ZooKeeper connect string 'host:port[,host:port][/chroot]'; brokers found under /brokers"),
    Key("zk.connectiontimeout.ms", Int(100, 600_000), 6000,
        "how long to wait for the first ZooKeeper connection"),
    Key("zk.sessiontimeout.ms", Int(1000, 600_000), 6000,
        "ZooKeeper session timeout; a client that stops heart-beating this long loses its ephemeral nodes"),
    Key("socket.timeout.ms", Int(100, 3_600_000), 30_000,
        "socket read/write timeout for one broker request"),
)

PRODUCER_CONFIG = ConfigDef(
    "producer",
    _DISCOVERY_KEYS + (
        Key("producer.type", Choice(("sync", "async")), "sync",
            "sync: send() returns once the broker acknowledged; async: send() enqueues, a sender thread batches"),
        Key("batch.size", Int(1, 1_000_000), 200,
            "async: messages per request (per topic-partition) before the batch is sent"),
        Key("queue.time", Int(1, 3_600_000), 5000,
            "async: ms a queued message waits at most before its batch is sent"),
        Key("queue.size", Int(1, 100_000_000), 10_000,
            "async: bound of the in-memory queue (messages)"),
        Key("queue.full.policy", Choice(("block", "drop")), "block",
            "async, queue full: 'block' waits up to queue.enqueue.timeout.ms then raises "
            "ProducerQueueFullError; 'drop' drops the messages, counts them and reports them failed"),
        Key("queue.enqueue.timeout.ms", Int(-1, 3_600_000), -1,
            "policy 'block': ms to wait for queue space (-1 = forever, 0 = fail at once)"),
        Key("compression.codec", Choice(tuple(CODEC_NAMES)), "none",
            "compress each batch as one wrapper message: none, gzip or snappy (or 0/1/2)"),
        Key("request.required.acks", Int(0, 1), 1,
            "1: every batch is a PRODUCE_ACK answered with its first offset; 0: fire-and-forget PRODUCE"),
        Key("partitioner.class", Str(), None,
            "'module:Class' with partition(key, num_partitions) -> int; default stable crc32 hash"),
        Key("message.send.max.retries", Int(0, 100), 3,
            "times a failed batch is re-sent (to another live partition when the broker is down)"),
        Key("retry.backoff.ms", Int(0, 600_000), 100,
            "first back-off before a retry; doubles per attempt"),
        Key("reconnect.backoff.max.ms", Int(1, 3_600_000), 5000,
            "a broker that failed is avoided for an exponentially growing time up to this"),
        Key("topic.metadata.refresh.interval.ms", Int(100, 86_400_000), 60_000,
            "how often partition counts are re-read from the brokers (METADATA)"),
        Key("max.message.size", Int(1, 1 << 30), 1_000_000,
            "largest payload accepted by send(); bigger raises MessageTooLargeError"),
    ),
)

CONSUMER_CONFIG = ConfigDef(
    "consumer",
    _DISCOVERY_KEYS + (
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


def codec_number(name: str) -> int:
    """``compression.codec`` value to the wire codec number."""
    return CODEC_NAMES[name]
