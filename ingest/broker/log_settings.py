"""One topic's log settings from the broker's keys: the 0.7 names and Kafka's names of the same settings.

Both kinds of log read the same keys. Where this product's 0.7 name and Kafka's name differ, the
Kafka name wins when it is set, for both kinds of log; a per-topic map wins over both for its topics:

=========================  ==========================================  ======================================
setting                    0.7 name (default source)                   Kafka's name (wins when set)
=========================  ==========================================  ======================================
segment size               ``log.file.size``                           ``log.segment.bytes``
segment age                ``log.roll.hours``                          ``log.roll.ms``
flush by count             ``log.flush.interval``                      ``log.flush.interval.messages``
flush by time              ``log.default.flush.interval.ms``           ``log.flush.interval.ms``
                           (``topic.flush.intervals.ms`` per topic)
retention by time          ``log.retention.hours``                     ``log.retention.ms``, then
                           (``topic.log.retention.hours`` per topic)   ``log.retention.minutes``
retention by size          ``log.retention.size``                      ``log.retention.bytes``
index spacing              ``log.index.interval.bytes`` (the same name)
=========================  ==========================================  ======================================

Kafka-format logs only: ``message.max.bytes`` (the largest record batch; a 0.7 log's
``max.message.size`` bounds one message's payload, another quantity), ``log.message.timestamp.type``
and ``log.message.timestamp.before/after.max.ms``.
"""
from __future__ import annotations

from ingest.broker.groups.offsets_topic import OFFSETS_TOPIC
from ingest.broker.kafka_log_settings import KafkaLogSettings
from ingest.broker.log import LogSettings
from ingest.records.batch import CREATE_TIME, LOG_APPEND_TIME

_HOUR_MS = 3_600_000
_NO_LIMIT_MS = 1 << 62
_INT64_MAX = 2 ** 63 - 1


def _pick(config, kafka_key: str, ours: int) -> int:
    return config[kafka_key] if config.is_set(kafka_key) else ours


def segment_bytes(config) -> int:
    return _pick(config, "log.segment.bytes", config["log.file.size"])


def segment_ms(config) -> int:
    return _pick(config, "log.roll.ms", config["log.roll.hours"] * _HOUR_MS)


def flush_messages(config) -> int:
    return _pick(config, "log.flush.interval.messages", config["log.flush.interval"])


def flush_ms(config, topic: str) -> int:
    per_topic = config["topic.flush.intervals.ms"].get(topic)
    if per_topic is not None:
        return per_topic
    return _pick(config, "log.flush.interval.ms", config["log.default.flush.interval.ms"])


def flush_scheduler_ms(config) -> int:
    return _pick(config, "log.flush.scheduler.interval.ms", config["log.default.flush.scheduler.interval.ms"])


def default_flush_ms(config) -> int:
    """The broker-wide flush interval (what :func:`flush_ms` gives a topic without its own)."""
    return _pick(config, "log.flush.interval.ms", config["log.default.flush.interval.ms"])


def retention_ms(config, topic: str) -> int:
    """Retention by time in ms; -1: no limit (``log.retention.ms=-1``)."""
    per_topic = config["topic.log.retention.hours"].get(topic)
    if per_topic is not None:
        return per_topic * _HOUR_MS
    if config.is_set("log.retention.ms"):
        return config["log.retention.ms"]
    if config.is_set("log.retention.minutes"):
        return config["log.retention.minutes"] * 60_000
    return config["log.retention.hours"] * _HOUR_MS


def retention_bytes(config) -> int:
    return _pick(config, "log.retention.bytes", config["log.retention.size"])


def settings_07(config, topic: str) -> LogSettings:
    """A 0.7 log's settings for ``topic``."""
    keep_ms = retention_ms(config, topic)
    return LogSettings(
        file_size=segment_bytes(config),
        roll_ms=segment_ms(config),
        flush_interval_messages=flush_messages(config),
        flush_interval_ms=flush_ms(config, topic),
        max_message_size=config["max.message.size"],
        index_interval=config["log.index.interval.bytes"],
        retention_ms=_NO_LIMIT_MS if keep_ms < 0 else keep_ms,
        retention_size=retention_bytes(config),
    )


def settings_kafka(config, topic: str) -> KafkaLogSettings:
    """A Kafka-format log's settings for ``topic``."""
    before, after = config["log.message.timestamp.before.max.ms"], config["log.message.timestamp.after.max.ms"]
    return KafkaLogSettings(
        segment_bytes=segment_bytes(config),
        segment_ms=segment_ms(config),
        index_interval_bytes=config["log.index.interval.bytes"],
        flush_messages=flush_messages(config),
        flush_ms=flush_ms(config, topic),
        # __consumer_offsets is kept whole: without compaction, deleting its old segments would lose the
        # offsets of groups that stopped committing (docs/kafka-protocol.md, "Where committed offsets live")
        retention_ms=-1 if topic == OFFSETS_TOPIC else retention_ms(config, topic),
        retention_bytes=-1 if topic == OFFSETS_TOPIC else retention_bytes(config),
        max_message_bytes=config["message.max.bytes"],
        timestamp_type=LOG_APPEND_TIME if config["log.message.timestamp.type"] == "LogAppendTime" else CREATE_TIME,
        timestamp_before_max_ms=None if before >= _INT64_MAX else before,
        timestamp_after_max_ms=None if after >= _INT64_MAX else after,
        producer_id_expiration_ms=config["producer.id.expiration.ms"],
    )
