"""The knobs of one Kafka-format log, under Kafka's topic-level names (broker-level names in comments)."""
from __future__ import annotations

from dataclasses import dataclass

from ingest.records.batch import CREATE_TIME

_HOUR_MS = 3_600_000
NEVER = 2 ** 63 - 1
"""Kafka's Long.MAX_VALUE defaults of ``flush.messages`` and ``flush.ms``: never by count or time."""


@dataclass(frozen=True)
class KafkaLogSettings:
    """The per-log knobs (Kafka's topic-level names in the comments), resolved for one topic."""

    segment_bytes: int = 1024 * 1024 * 1024          # segment.bytes (log.segment.bytes)
    segment_ms: int = 168 * _HOUR_MS                 # segment.ms (log.roll.ms / log.roll.hours)
    index_interval_bytes: int = 4096                 # index.interval.bytes (log.index.interval.bytes)
    flush_messages: int = NEVER                     # flush.messages (log.flush.interval.messages)
    flush_ms: int = NEVER                           # flush.ms (log.flush.interval.ms)
    retention_ms: int = 168 * _HOUR_MS               # retention.ms (log.retention.ms); -1: no limit
    retention_bytes: int = -1                        # retention.bytes (log.retention.bytes); -1: no limit
    max_message_bytes: int = 1048588                 # max.message.bytes (message.max.bytes)
    timestamp_type: int = CREATE_TIME                # message.timestamp.type: CreateTime 0, LogAppendTime 1
    timestamp_before_max_ms: int | None = None       # message.timestamp.before.max.ms (None: no bound)
    timestamp_after_max_ms: int | None = None        # message.timestamp.after.max.ms (None: no bound)
    producer_id_expiration_ms: int = 86_400_000      # (producer.id.expiration.ms, broker-level only)
