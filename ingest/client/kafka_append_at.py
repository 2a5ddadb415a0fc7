"""The client side of AppendAt (private Kafka api key 10000): append batches, keeping their offsets, at an expected log end.

The mirror's exactly-once primitive for Kafka topics (docs/kafka-protocol.md, "Private APIs"): the
partition's leader appends the record batches only if its log end equals ``expected_offset``,
atomically with the append; otherwise it answers OFFSET_MISMATCH with its log end and appends
nothing. The batches keep their base offsets (the source's), so the log end after an append is the
last batch's next offset.

:class:`KafkaAppender` finds each partition's leader through Metadata
(:class:`~ingest.client.kafka.cluster.KafkaCluster`, from ``bootstrap.servers``) and retries leader
errors (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION: a target topic
just created) and lost connections with back-off until ``request.timeout.ms`` has passed. A retried
append is safe: if the first one was appended after all, the retry is answered OFFSET_MISMATCH.
AppendAt is never advertised, so it is sent at version 0 without asking ApiVersions for it.

Concurrency: not thread-safe (one appender per copier thread), as the Kafka client's cluster view.
"""
from __future__ import annotations

import logging

from ingest.client.kafka.cluster import Backoff, KafkaCluster, needs_refresh
from ingest.client.kafka.config import KAFKA_CONSUMER_CONFIG, as_config
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.errors import BrokerUnavailableError, IngestError, MalformedResponseError, OffsetMismatchError
from ingest.wire.errors import KafkaErrorCode, kafka_error_for
from ingest.wire.kafka.append_at import QUERY, AppendAtRequest, AppendAtResponse

log = logging.getLogger(__name__)

APPEND_AT_VERSION = 0


class KafkaAppender:
    """AppendAt to partitions of one Kafka-protocol cluster.

    Args:
        config: :data:`~ingest.client.kafka.config.KAFKA_CONSUMER_CONFIG` values (``bootstrap.servers``,
            ``request.timeout.ms``, ``retry.backoff.ms``, ...): a Config or a mapping.
        **overrides: keys with ``_`` for ``.``.
    """

    def __init__(self, config: Config | dict | None = None, *, clock: Clock = SYSTEM_CLOCK, **overrides) -> None:
        cfg = as_config(KAFKA_CONSUMER_CONFIG, config, overrides)
        self.clock = clock
        self.cluster = KafkaCluster(cfg, clock, allow_auto_create=False)
        self.timeout_s = cfg["request.timeout.ms"] / 1000.0
        self.backoff = Backoff(cfg["retry.backoff.ms"], cfg["retry.backoff.max.ms"])

    def close(self) -> None:
        self.cluster.close()

    def log_end(self, topic: str, partition: int) -> int:
        """The leader's log end (the next offset it would write): the query form."""
        return self._call(AppendAtRequest(topic, partition, QUERY, -1, 0, None), 0).log_end_offset

    def append(self, topic: str, partition: int, expected_offset: int, records, *, acks: int = -1,
               timeout_ms: int = 10_000) -> int:
        """Append ``records`` (whole batches v2 keeping their offsets) if the log end is ``expected_offset``;
        returns the new log end.

        Raises:
            OffsetMismatchError: the log end is not ``expected_offset`` (``.log_end``); nothing appended.
            NotEnoughReplicasError / NotEnoughReplicasAfterAppendError / RequestTimedOutError: as the leader
                answered (after the latter two the batches may be stored: the next append finds out).
            CorruptRecordError / InvalidRecordError / RecordTooLargeError / ...: the batches were refused.
            BrokerUnavailableError / NotLeaderForPartitionError / ...: no leader answered in time.
        """
        return self._call(AppendAtRequest(topic, partition, expected_offset, acks, timeout_ms, bytes(records)),
                          timeout_ms / 1000.0).log_end_offset

    def _call(self, request: AppendAtRequest, wait_s: float) -> AppendAtResponse:
        topic, partition = request.topic, request.partition
        what = f"AppendAt to {topic}-{partition} at {request.expected_offset}"
        deadline = self.clock.monotonic() + self.timeout_s
        attempt = 0
        while True:
            attempt += 1
            try:
                info = self.cluster.partition(topic, partition, deadline)
                conn = self.cluster.connection(info.leader)
                answer = conn.call(request, APPEND_AT_VERSION, timeout_s=self.timeout_s + wait_s)
                code = answer.error_code
                if code == KafkaErrorCode.NONE:
                    return answer
                if code == KafkaErrorCode.OFFSET_MISMATCH:
                    raise OffsetMismatchError(f"{what}: the leader's log end is {answer.log_end_offset}; nothing "
                                              "appended", log_end=answer.log_end_offset)
                error = kafka_error_for(code, f"{what} (broker {info.leader})")
                if not needs_refresh(code):
                    raise error
                self.cluster.invalidate(topic)
            except (BrokerUnavailableError, MalformedResponseError) as exc:
                self.cluster.invalidate()
                error = exc
            except OffsetMismatchError:
                raise
            except IngestError as exc:
                if not exc.retriable:
                    raise
                error = exc
            now = self.clock.monotonic()
            if now >= deadline:
                raise error
            log.debug("%s failed (%s); retry %d", what, error, attempt)
            self.clock.sleep(min(self.backoff.delay_s(attempt), deadline - now))
