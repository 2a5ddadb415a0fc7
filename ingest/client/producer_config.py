"""Configuration keys of the producer (Kafka 0.7 names).

Kafka-format topics (docs/kafka-protocol.md D5): ``bootstrap.servers`` (Kafka's key) names the Kafka
listeners and
``topic.format.default`` the kind a new topic gets.

The replication keys are Kafka 0.8's: ``request.required.acks`` takes -1 (every
in-sync replica), 0 or 1, ``request.timeout.ms`` is how long an acks=-1 leader may
wait.

``PRODUCER_CONFIG`` is read by :class:`ingest.client.producer.Producer`; the
consumer's keys are in :mod:`ingest.client.consumer_config`, the discovery keys
both share in :mod:`ingest.client.discovery`. Sample file:
``conf/producer.properties``; the meaning of each key is in ``docs/clients.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ingest.client.discovery import DISCOVERY_KEYS
from ingest.client.kafka.config import HostPorts
from ingest.client.kafka.security import security_keys
from ingest.config import Choice, ConfigDef, Int, Key, KeyType, Str

ACKS_LEVELS = (-1, 0, 1)
"""``request.required.acks`` values (Kafka 0.8): 0 none, 1 the leader appended, -1 every in-sync replica has it."""


@dataclass(frozen=True)
class IntChoice(KeyType):
    """One of a fixed set of integers (``request.required.acks``: exactly -1, 0 or 1)."""

    choices: tuple[int, ...] = ()

    @property
    def allowed(self) -> str:  # type: ignore[override]
        return "one of " + ", ".join(str(c) for c in self.choices)

    def parse(self, raw: Any) -> int:
        if isinstance(raw, bool):
            raise ValueError("booleans are not integers")
        value = raw if isinstance(raw, int) else int(str(raw).strip())
        if value not in self.choices:
            raise ValueError(f"{value} is not one of {self.choices}")
        return value

# compression.codec value -> wire codec number (the inverse direction of
# ingest.records.message.CODEC_NAMES, which names a wire codec number)
CODEC_BY_NAME = {"none": 0, "gzip": 1, "snappy": 2, "0": 0, "1": 1, "2": 2}

# message.format value -> magic byte of the messages the producer writes
# (ingest.records.message: magic 2 CRC over attributes + payload; magic 1 Kafka 0.7's, CRC over the payload;
# magic 0 the pre-0.7 message without attributes, the only one some 0.7-era readers such as brod parse)
MAGIC_BY_FORMAT = {"ingest": 2, "0.7": 1, "0.6": 0}

TOPIC_FORMATS = ("kafka", "0.7")
"""``topic.format.default`` values: the two kinds of topic (docs/kafka-protocol.md D2)."""

PRODUCER_CONFIG = ConfigDef(
    "producer",
    DISCOVERY_KEYS + (
        Key("bootstrap.servers", HostPorts(), None,
            "Kafka listeners host:port,... (Kafka's key) for Kafka-format topics; default: with zk.connect, the "
            "listeners the brokers registered under /brokers/endpoints (of each broker the one whose protocol is "
            "security.protocol); neither: every topic is a 0.7 topic"),
        *security_keys(whose="the Kafka listeners (Kafka-format topics; the 0.7 port has no security)"),
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
        Key("message.format", Choice(tuple(MAGIC_BY_FORMAT)), "ingest",
            "'ingest': magic 2, CRC over the attributes byte and the payload (a flipped codec bit is caught); "
            "'0.7': magic 1 with the CRC over the payload only, what Kafka 0.7's producer writes: use it for "
            "topics that Kafka 0.7 consumers read (they cannot read magic 2); '0.6': magic 0, no attributes byte "
            "(CRC over the payload, never compressed), for readers that parse only magic 0 (e.g. brod)"),
        Key("request.required.acks", IntChoice(ACKS_LEVELS), 1,
            "1: a batch is acknowledged once the (leader) broker appended it, answered with its first "
            "offset; -1: once every in-sync replica has it (a replicated topic; PRODUCE_ACKS); "
            "0: fire-and-forget PRODUCE, no offsets"),
        Key("request.timeout.ms", Int(1, 300_000), 10_000,
            "acks=-1: how long the leader may wait for the in-sync replicas before it answers "
            "REQUEST_TIMED_OUT (sent in the request, at most the broker's cap of 300000; the socket timeout is "
            "stretched to cover it)"),
        Key("partitioner.class", Str(), None,
            "'module:Class' with partition(key, num_partitions) -> int; default stable crc32 hash"),
        Key("message.send.max.retries", Int(0, 100), 3,
            "times a failed batch is re-sent (unreplicated topic: to another live partition when the "
            "broker is down; replicated topic: to the same partition's new leader)"),
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
            "how often partition counts (METADATA) and replicated topics' leaders (TOPIC_METADATA) "
            "are re-read from the brokers; a leader error re-reads at once"),
        Key("max.message.size", Int(1, 1 << 30), 1_000_000,
            "largest payload accepted by send(); bigger raises MessageTooLargeError"),
        Key("topic.format.default", Choice(TOPIC_FORMATS), "kafka",
            "the kind of a topic neither the Kafka listeners nor the 0.7 brokers know yet, created by its "
            "first message: 'kafka' (through the Kafka listeners: bootstrap.servers or ZooKeeper's "
            "/brokers/endpoints; with neither, 0.7) or '0.7'"),
    ),
)

def codec_number(name: str) -> int:
    """``compression.codec`` value to the wire codec number."""
    return CODEC_BY_NAME[name]


def format_magic(name: str) -> int:
    """``message.format`` value to the magic byte of the messages written."""
    return MAGIC_BY_FORMAT[name]
