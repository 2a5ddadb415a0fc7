"""A Kafka topic's configs: the topic-level names this broker knows, their checks, and their effect on a log.

A Kafka topic's configs that differ from the brokers' defaults live in ZooKeeper at
``/config/topics/[topic]`` (Kafka's node and value, :mod:`ingest.znodes`), written by CreateTopics,
AlterConfigs and IncrementalAlterConfigs and watched by every broker, which applies them to its logs of
the topic (:func:`apply`). A name without an override falls back to the broker's own setting (its
*synonym*, Kafka's broker-level name, from ``server.properties``), then to the default.

==================================  =======================================  ===========================
topic config                        broker synonym                           values
==================================  =======================================  ===========================
``retention.ms``                    ``log.retention.ms`` (``.minutes``,      -1 (no limit) or >= 0
                                    ``.hours``)
``retention.bytes``                 ``log.retention.bytes``                  -1 (no limit) or >= 0
``segment.bytes``                   ``log.segment.bytes``                    >= 14
``segment.ms``                      ``log.roll.ms`` (``log.roll.hours``)     >= 1
``min.insync.replicas``             ``min.insync.replicas``                  >= 1
``max.message.bytes``               ``message.max.bytes``                    >= 0
``message.timestamp.type``          ``log.message.timestamp.type``           CreateTime, LogAppendTime
``message.timestamp.before.max.ms`` ``log.message.timestamp.before.max.ms``  >= 0
``message.timestamp.after.max.ms``  ``log.message.timestamp.after.max.ms``   >= 0
``flush.messages``                  ``log.flush.interval.messages``          >= 1
``flush.ms``                        ``log.flush.interval.ms``                >= 0
``index.interval.bytes``            ``log.index.interval.bytes``             >= 0
``cleanup.policy``                  ``log.cleanup.policy``                   delete (compaction of Kafka
                                                                             topics is not implemented)
``leader.replication.throttled.``   (none: a topic-level config only)        ``*``, or a list of
``replicas``, ``follower.``...                                               ``partition:broker``; empty
==================================  =======================================  ===========================

The two throttled-replicas lists name the replicas whose replication traffic the leader's and the follower's
replication throttle hold to their broker's rate (:mod:`ingest.broker.replication_quota`); they have no
broker synonym, and their default is the empty list.

Any other name is refused (Kafka: "Unknown topic config name"), as is a value outside its range, with
:class:`~ingest.errors.InvalidConfigError` naming the config, the value and what is allowed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping

from ingest.broker import log_settings
from ingest.broker import replication_quota as rq
from ingest.broker.kafka_log_settings import NEVER, KafkaLogSettings
from ingest.errors import InvalidConfigError
from ingest.records.batch import CREATE_TIME, LOG_APPEND_TIME

LONG, INT, STRING, LIST = "long", "int", "string", "list"

_TIMESTAMP_TYPES = {"CreateTime": CREATE_TIME, "LogAppendTime": LOG_APPEND_TIME}


@dataclass(frozen=True)
class TopicConfig:
    """One topic-level config: its name, broker synonym, type, lowest value (numbers) or allowed values,
    the :class:`KafkaLogSettings` field it sets (None: not a log setting), and one line of documentation."""

    name: str
    synonym: str
    type: str
    doc: str
    minimum: int | None = None
    allowed: tuple[str, ...] = ()
    field: str | None = None
    no_limit: int | None = None     # a value below ``minimum`` that is allowed: -1 "no limit"
    default: str | None = None      # the value without override when there is no broker synonym


CONFIGS: dict[str, TopicConfig] = {c.name: c for c in (
    TopicConfig("cleanup.policy", "log.cleanup.policy", LIST, "what happens to old segments: delete",
                allowed=("delete",)),
    TopicConfig("flush.messages", "log.flush.interval.messages", LONG,
                "fsync after this many messages", 1, field="flush_messages"),
    TopicConfig("flush.ms", "log.flush.interval.ms", LONG, "fsync at least this often (ms)", 0, field="flush_ms"),
    TopicConfig(rq.FOLLOWER_REPLICAS, "", LIST, "replicas whose copying the follower's replication throttle "
                "holds to follower.replication.throttled.rate: partition:broker,... or *", default=""),
    TopicConfig("index.interval.bytes", "log.index.interval.bytes", INT,
                "bytes of batches between two offset index entries", 0, field="index_interval_bytes"),
    TopicConfig(rq.LEADER_REPLICAS, "", LIST, "replicas whose fetches the leader's replication throttle "
                "holds to leader.replication.throttled.rate: partition:broker,... or *", default=""),
    TopicConfig("max.message.bytes", "message.max.bytes", INT, "the largest record batch a producer may send", 0,
                field="max_message_bytes"),
    TopicConfig("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms", LONG,
                "how far a CreateTime timestamp may lie after the broker's clock", 0,
                field="timestamp_after_max_ms"),
    TopicConfig("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms", LONG,
                "how far a CreateTime timestamp may lie before the broker's clock", 0,
                field="timestamp_before_max_ms"),
    TopicConfig("message.timestamp.type", "log.message.timestamp.type", STRING,
                "which timestamp the log keeps: the producer's or the append time",
                allowed=tuple(_TIMESTAMP_TYPES), field="timestamp_type"),
    TopicConfig("min.insync.replicas", "min.insync.replicas", INT,
                "in-sync replicas an acks=all write needs", 1),
    TopicConfig("retention.bytes", "log.retention.bytes", LONG,
                "keep at most this many bytes per partition (-1: no limit)", 0, field="retention_bytes", no_limit=-1),
    TopicConfig("retention.ms", "log.retention.ms", LONG,
                "keep segments at most this long (-1: no limit)", 0, field="retention_ms", no_limit=-1),
    TopicConfig("segment.bytes", "log.segment.bytes", INT, "a segment's size before a new one is rolled", 14,
                field="segment_bytes"),
    TopicConfig("segment.ms", "log.roll.ms", LONG, "a segment's age before a new one is rolled", 1,
                field="segment_ms"),
)}
"""Every topic config this broker knows, by name."""

_INT32_MAX, _INT64_MAX = 2 ** 31 - 1, 2 ** 63 - 1


def check(name: str, value: str | None) -> str:
    """``value`` of config ``name`` in its canonical text.

    Raises:
        InvalidConfigError: an unknown name, a missing value, or one outside what is allowed.
    """
    cfg = CONFIGS.get(name)
    if cfg is None:
        raise InvalidConfigError(f"Unknown topic config name: {name} (known: {', '.join(sorted(CONFIGS))})")
    if value is None:
        raise InvalidConfigError(f"Null value not supported for topic config {name}")
    text = value.strip()
    if name in (rq.LEADER_REPLICAS, rq.FOLLOWER_REPLICAS):
        return rq.check_replicas(name, text)
    if cfg.type in (LONG, INT):
        top = _INT64_MAX if cfg.type == LONG else _INT32_MAX
        try:
            number = int(text)
        except ValueError:
            raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: not a number "
                                     f"(a {cfg.type} of at least {cfg.minimum})") from None
        if not (cfg.minimum <= number <= top or number == cfg.no_limit):
            also = f" or {cfg.no_limit} (no limit)" if cfg.no_limit is not None else ""
            raise InvalidConfigError(f"Invalid value {number} for configuration {name}: it must be "
                                     f"{cfg.minimum}..{top}{also}")
        return str(number)
    words = [w.strip() for w in text.split(",")] if cfg.type == LIST else [text]
    bad = [w for w in words if w not in cfg.allowed]
    if bad or not text:
        why = " (compaction of Kafka topics is not implemented)" if name == "cleanup.policy" else ""
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: allowed "
                                 f"{', '.join(cfg.allowed)}{why}")
    return ",".join(words)


def check_all(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Every config checked (:func:`check`); returns them canonical. Raises InvalidConfigError on the first bad one."""
    return {name: check(name, value) for name, value in configs.items()}


def min_insync_replicas(overrides: Mapping[str, str] | None, broker_default: int) -> int:
    """The topic's ``min.insync.replicas``: its override, else the broker's."""
    value = (overrides or {}).get("min.insync.replicas")
    return broker_default if value is None else int(value)


def _setting(cfg: TopicConfig, text: str):
    if cfg.name == "message.timestamp.type":
        return _TIMESTAMP_TYPES[text]
    number = int(text)
    if cfg.field in ("timestamp_before_max_ms", "timestamp_after_max_ms"):
        return None if number >= _INT64_MAX else number
    return number


def apply(settings: KafkaLogSettings, overrides: Mapping[str, str]) -> KafkaLogSettings:
    """``settings`` (the broker's, for one topic) with the topic's overrides applied; overrides that are not
    log settings (``min.insync.replicas``, ``cleanup.policy``) are ignored here."""
    changes = {}
    for name, text in overrides.items():
        cfg = CONFIGS.get(name)
        if cfg is not None and cfg.field is not None:
            changes[cfg.field] = _setting(cfg, text)
    return dataclasses.replace(settings, **changes) if changes else settings


# --- what DescribeConfigs answers --------------------------------------------------------------

@dataclass(frozen=True)
class Described:
    """One config of a topic as DescribeConfigs answers it: value, where it comes from, its synonyms
    (``(name, value, source)``, most specific first)."""

    name: str
    value: str
    source: str                  # "topic", "broker" (server.properties) or "default"
    synonyms: tuple[tuple[str, str, str], ...]
    type: str
    doc: str


def _broker_value(cfg: TopicConfig, settings: KafkaLogSettings, min_isr: int) -> str:
    if cfg.name == "cleanup.policy":
        return "delete"
    if cfg.name == "min.insync.replicas":
        return str(min_isr)
    value = getattr(settings, cfg.field)
    if cfg.name == "message.timestamp.type":
        return next(k for k, v in _TIMESTAMP_TYPES.items() if v == value)
    return str(NEVER if value is None else value)


def describe(config, topic: str, overrides: Mapping[str, str],
             is_set: Callable[[str], bool] | None = None) -> list[Described]:
    """Every topic config of ``topic`` (sorted by name): the override, or the broker's value from ``config``.

    Args:
        config: the broker's config; ``is_set(key)``: whether ``server.properties`` sets ``key`` (default:
            ``config.is_set``).
    """
    is_set = is_set or config.is_set
    broker = log_settings.settings_kafka(config, topic)
    out = []
    for name, cfg in sorted(CONFIGS.items()):
        if not cfg.synonym:   # a topic-level config only: its override or its default
            value, source = (overrides[name], "topic") if name in overrides else (cfg.default, "default")
            out.append(Described(name, value, source, ((name, value, source),) if source == "topic" else (),
                                 cfg.type, cfg.doc))
            continue
        broker_value = _broker_value(cfg, broker, config["min.insync.replicas"])
        broker_source = "broker" if cfg.synonym in config.keys() and is_set(cfg.synonym) else "default"
        synonyms = [(cfg.synonym, broker_value, broker_source)]
        if name in overrides:
            synonyms.insert(0, (name, overrides[name], "topic"))
            out.append(Described(name, overrides[name], "topic", tuple(synonyms), cfg.type, cfg.doc))
        else:
            out.append(Described(name, broker_value, broker_source, tuple(synonyms), cfg.type, cfg.doc))
    return out
