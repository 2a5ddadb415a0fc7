"""Configuration keys of the producer (Kafka 0.7 names).

``PRODUCER_CONFIG`` is read by :class:`ingest.client.producer.Producer`; the
consumer's keys are in :mod:`ingest.client.consumer_config`, the discovery keys
both share in :mod:`ingest.client.discovery`. Sample file:
``conf/producer.properties``; the meaning of each key is in ``docs/clients.md``.
"""
from __future__ import annotations

from ingest.client.discovery import DISCOVERY_KEYS
from ingest.config import Choice, ConfigDef, Int, Key, Str

# compression.codec value -> wire codec number (the inverse direction of
# ingest.broker.message.CODEC_NAMES, which names a wire codec number)
CODEC_BY_NAME = {"none": 0, "gzip": 1, "snappy": 2, "0": 0, "1": 1, "2": 2}

PRODUCER_CONFIG = ConfigDef(
    "producer",
    DISCOVERY_KEYS + (
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
        Key("compression.codec", Choice(tuple(CODEC_BY_NAME)), "none",
            "compress each batch as one wrapper message: none, gzip or snappy (or 0/1/2)"),
        Key("request.required.acks", Int(0, 1), 1,
            "1: every batch is a PRODUCE_ACK answered with its first offset; 0: fire-and-forget PRODUCE"),
        Key("partitioner.class", Str(), None,
            "'module:Class' with partition(key, num_partitions) -> int; default stable crc32 hash"),
        Key("message.send.max.retries", Int(0, 100), 3,
            "times a failed batch is re-sent (to another live partition when the broker is down)"),
        Key("retry.backoff.ms", Int(0, 600_000), 100,
            "first back-off before a retry; doubles per attempt up to retry.backoff.max.ms"),
        Key("retry.backoff.max.ms", Int(0, 600_000), 1000,
            "cap of the doubling back-off between retries"),
        Key("delivery.timeout.ms", Int(0, 86_400_000), 30_000,
            "time budget of one batch: retries, and the wait for a broker while none is "
            "registered (brokers re-registering after a ZooKeeper outage), end when it runs out; "
            "keep it above zk.sessiontimeout.ms plus a broker's re-registration"),
        Key("reconnect.backoff.max.ms", Int(1, 3_600_000), 5000,
            "a broker that failed is avoided for an exponentially growing time up to this"),
        Key("topic.metadata.refresh.interval.ms", Int(100, 86_400_000), 60_000,
            "how often partition counts are re-read from the brokers (METADATA)"),
        Key("max.message.size", Int(1, 1 << 30), 1_000_000,
            "largest payload accepted by send(); bigger raises MessageTooLargeError"),
    ),
)

def codec_number(name: str) -> int:
    """``compression.codec`` value to the wire codec number."""
    return CODEC_BY_NAME[name]
