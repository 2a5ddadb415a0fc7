"""The log keys (Kafka 0.7 names): ``LOG_CONFIG``; the server extends it.

Per-topic maps (``topic.partition.count.map``, ``topic.flush.intervals.ms``,
``topic.log.retention.hours``) are ``topic:int,topic:int``; their topic names
are validated when a :class:`~ingest.broker.log_manager.LogManager` is built.
"""
from __future__ import annotations

from ingest.config import Bool, Choice, Config, ConfigDef, Int, IntMap, Key, Str
from ingest.errors import ConfigError, InvalidTopicError
from ingest.broker.topics import validate_topic

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

LOG_CONFIG = ConfigDef(
    "log",
    (
        Key("log.dir", Str(nonempty=True), "/tmp/ingest-logs", "directory holding one sub-directory per topic-partition"),
        Key("num.partitions", Int(1, 100_000), 1, "partitions of a topic created on first use"),
        Key("topic.partition.count.map", IntMap(1, 100_000), {}, "per-topic partition counts, topic:count,..."),
        Key("auto.create.topics.enable", Bool(), True,
            "create a topic on its first produce; if false, only topics on disk or in topic.partition.count.map "
            "take produces (others get TOPIC_CREATION_REFUSED)"),
        Key("max.topics", Int(1, 1_000_000), 10_000,
            "most topics this broker holds; creating one more is refused with TOPIC_CREATION_REFUSED"),
        Key("max.broker.partitions", Int(1, 10_000_000), 10_000,
            "most partition logs this broker holds; creating one more is refused with TOPIC_CREATION_REFUSED"),
        Key("log.max.open.files", Int(-1, 1_000_000), -1,
            "most segment files held open at once, least recently used idle ones closed first "
            "(-1: a quarter of the process's descriptor limit, 16 to 10000)"),
        Key("log.file.size", Int(64, _INT32_MAX), 1024 * 1024 * 1024, "roll to a new segment before it exceeds this many bytes"),
        Key("log.roll.hours", Int(1, 100_000), 24 * 7, "roll to a new segment when the active one is this old"),
        Key("log.flush.interval", Int(1, _INT32_MAX), 500, "fsync after this many appended messages"),
        Key("log.default.flush.interval.ms", Int(1, _INT32_MAX), 3000, "fsync a log with unflushed messages at least this often"),
        Key("topic.flush.intervals.ms", IntMap(1, _INT32_MAX), {}, "per-topic flush intervals, topic:ms,..."),
        Key("log.default.flush.scheduler.interval.ms", Int(1, _INT32_MAX), 3000,
            "longest time between two checks of the flusher (it wakes at the smallest flush interval "
            "when that is shorter, not below 10 ms)"),
        Key("log.retention.hours", Int(1, 1_000_000), 24 * 7, "delete segments last modified longer ago than this"),
        Key("topic.log.retention.hours", IntMap(1, 1_000_000), {}, "per-topic retention hours, topic:hours,..."),
        Key("log.retention.size", Int(-1, _INT64_MAX), -1, "keep at most this many bytes per partition log (-1: no limit)"),
        Key("log.cleanup.interval.mins", Int(1, 1_000_000), 10, "how often retention runs"),
        Key("log.retention.check.interval.ms", Int(10, _INT32_MAX), 600_000,
            "how often retention runs, in ms (Kafka 0.8's name); when set it overrides "
            "log.cleanup.interval.mins"),
        Key("max.message.size", Int(1, _INT32_MAX - 10), 1_000_000, "largest payload of one (outer) message, in bytes"),
        Key("log.index.interval.bytes", Int(16, 64 * 1024 * 1024), 4096,
            "bytes between two entries of a segment's index (0.7 logs: the sparse position index; Kafka-format"
            " logs: the offset and time indexes)"),
        # Kafka's names of the same settings: when given, each wins over the 0.7 name beside it, for both
        # kinds of log (docs/log-format.md, "Settings")
        Key("log.segment.bytes", Int(64, _INT32_MAX), 1024 * 1024 * 1024, "Kafka's name of log.file.size; wins when set"),
        Key("log.roll.ms", Int(1, _INT64_MAX), 24 * 7 * 3_600_000, "Kafka's name of log.roll.hours, in ms; wins when set"),
        Key("log.flush.interval.messages", Int(1, _INT64_MAX), 500, "Kafka's name of log.flush.interval; wins when set"),
        Key("log.flush.interval.ms", Int(1, _INT64_MAX), 3000,
            "Kafka's name of log.default.flush.interval.ms; wins when set (topic.flush.intervals.ms still wins for"
            " its topics)"),
        Key("log.flush.scheduler.interval.ms", Int(1, _INT32_MAX), 3000,
            "Kafka's name of log.default.flush.scheduler.interval.ms; wins when set"),
        Key("log.retention.ms", Int(-1, _INT64_MAX), 24 * 7 * 3_600_000,
            "Kafka's name of log.retention.hours, in ms (-1: no time limit); wins over log.retention.minutes and"
            " log.retention.hours when set (topic.log.retention.hours still wins for its topics)"),
        Key("log.retention.minutes", Int(1, _INT32_MAX), 24 * 7 * 60,
            "log.retention.hours in minutes (Kafka's key); wins over log.retention.hours when set"),
        Key("log.retention.bytes", Int(-1, _INT64_MAX), -1, "Kafka's name of log.retention.size; wins when set"),
        # Kafka-format topics only (a record batch, not a 0.7 message)
        Key("message.max.bytes", Int(64, _INT32_MAX - 12), 1048588,
            "largest record batch of a Kafka-format topic, in bytes (Kafka's default; 0.7 topics: max.message.size)"),
        Key("log.message.timestamp.type", Choice(("CreateTime", "LogAppendTime")), "CreateTime",
            "the timestamps of a Kafka-format topic's records: the producer's (CreateTime) or the broker's append"
            " time (LogAppendTime)"),
        Key("log.message.timestamp.before.max.ms", Int(0, _INT64_MAX), _INT64_MAX,
            "a Kafka-format batch whose timestamp is more than this before the broker's clock is refused"
            " (INVALID_TIMESTAMP)"),
        Key("log.message.timestamp.after.max.ms", Int(0, _INT64_MAX), _INT64_MAX,
            "a Kafka-format batch whose timestamp is more than this after the broker's clock is refused"
            " (INVALID_TIMESTAMP)"),
        Key("producer.id.expiration.ms", Int(1, _INT32_MAX), 86_400_000,
            "an idempotent producer id's state (its epoch and last five batches, which catch its retried"
            " batches) is dropped from a partition this long after its last batch's timestamp"),
    ),
)


def check_topic_maps(config: Config) -> None:
    """Validate the topic names used as keys of the per-topic maps.

    Raises:
        ConfigError: naming the key and the bad topic name.
    """
    for key in ("topic.partition.count.map", "topic.flush.intervals.ms", "topic.log.retention.hours"):
        if key not in config:
            continue
        for topic in config[key]:
            try:
                validate_topic(topic)
            except InvalidTopicError as exc:
                raise ConfigError(f"invalid topic in '{key}': {exc}") from exc
