"""Where a read of ``format("ingest")`` starts and ends in each partition: offsets, keywords, timestamps.

A 0.7 topic's offsets are byte offsets of the partition log (Kafka 0.7's), so a JSON
offset must be a message boundary (the first fetch fails otherwise, naming it). A
Kafka-format topic's offsets are record numbers (0, 1, 2, ...; Kafka's): any offset
between earliest and latest is a valid start. Spark's Kafka source rules, followed here:

- ``startingOffsets``: ``earliest`` (default) or JSON ``{"topic":{"<p>":offset}}``
  with ``-2`` for earliest. ``latest`` / ``-1`` is refused, as Spark refuses it for
  a batch query.
- ``endingOffsets`` (exclusive): ``latest`` (default) or JSON with ``-1`` for
  latest; ``earliest`` / ``-2`` is refused.
- JSON must name every partition of the topic (Spark: "you must specify all
  TopicPartitions"), and only this topic.
- ``startingTimestamp`` beats ``startingOffsetsByTimestamp`` beats ``startingOffsets``;
  the same for the ending ones.

Partition names in JSON: a replicated topic's partitions are ``"0"``, ``"1"``, ...
(global numbers, as in Spark); a Kafka 0.7 topic's partitions live on one broker
each and are named as in ZooKeeper's ``/brokers/topics/<topic>``:
``"<broker id>-<partition>"``.

**Kafka-format topics**: timestamps are the records' own (ms; CreateTime as the
producer set it, or LogAppendTime), as in Spark's Kafka source, and are turned into
offsets when the read is planned, by ListOffsets (the broker's time index:
``offsetsForTimes``, exact): the start is the first record whose timestamp is at or
after the starting one (none: strategy ``error`` fails the read naming the
partition, ``latest`` reads nothing from it); the end (exclusive) the first record
at or after the ending one, or latest. The range is then an offset range like any
other.

**0.7 topics**: timestamps are event times (``header.time``, ms; Kafka 0.7 messages
carry no timestamp of their own). Kafka's ``offsetsForTimes`` rule, "the earliest offset
whose timestamp is at or after the given one", applied in log order:

- start: the first message of the partition, from its earliest offset, whose event
  time is at or after the starting timestamp. None: ``startingOffsetsByTimestampStrategy``
  ``error`` (default, as Spark) fails the read naming the partition; ``latest``
  reads nothing from that partition.
- end (exclusive): the first message, from the start on, whose event time is at
  or after the ending timestamp; none: the latest offset (as Spark).

0.7 has no time index, so a 0.7 topic's timestamp bound is resolved while the partition is
read: the messages before the start are fetched and decoded, then dropped.
Event times are not sorted in a log, so rows inside the range may be older than
the starting timestamp (and messages outside it newer): filter on ``event_time``
for an exact time window.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ingest.errors import ConfigError, OffsetOutOfRangeError
from ingest.loader.plan import PartitionSnapshot

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1


def partition_name(part: PartitionSnapshot) -> str:
    """A partition's name in JSON options: ``"3"`` for a replicated topic's, ``"<broker id>-3"`` for a Kafka 0.7 topic's."""
    return str(part.partition) if part.replicated else f"{part.broker_id}-{part.partition}"


@dataclass(frozen=True, slots=True)
class ReadRange:
    """What one Spark input partition reads: ``[start, end)`` of ``part``, cut by event times when set."""

    part: PartitionSnapshot
    start: int
    end: int
    start_time: int | None = None
    end_time: int | None = None


def _per_partition(text: str, option: str, topic: str, names: Sequence[str]) -> dict[str, int]:
    """The ``{"<partition>": int}`` of ``topic`` in a JSON option, naming every partition."""
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{option}: {text!r} is not JSON ({exc}); allowed is "
                          f'{{"{topic}":{{"<partition>":<number>,...}}}}') from exc
    if not isinstance(value, dict) or set(value) != {topic} or not isinstance(value[topic], dict):
        raise ConfigError(f"{option}: {text!r} must be a JSON object with the one key {topic!r} (the topic read) "
                          f'mapping partition names to numbers, e.g. {{"{topic}":{{"{names[0] if names else 0}":0}}}}')
    out: dict[str, int] = {}
    for name, number in value[topic].items():
        if isinstance(number, bool) or not isinstance(number, int):
            raise ConfigError(f"{option}: partition {name!r} has {number!r}; allowed is an integer")
        out[name] = number
    unknown = sorted(set(out) - set(names))
    missing = [n for n in names if n not in out]
    if unknown or missing:
        raise ConfigError(f"{option} must name every partition of {topic!r} and only those "
                          f"(Spark's rule): partitions are {', '.join(names)}"
                          + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                          + (f"; missing: {', '.join(missing)}" if missing else ""))
    return out


def _offset(part: PartitionSnapshot, value: int, option: str, *, ending: bool) -> int:
    if value == EARLIEST and not ending:
        return part.earliest
    if value == LATEST and ending:
        return part.latest
    name = partition_name(part)
    if value < 0:
        allowed = "-1 (latest)" if ending else "-2 (earliest)"
        raise ConfigError(f"{option}: {value} for partition {name} of {part.topic!r}; allowed is an offset "
                          f">= 0 or {allowed} (a batch query cannot {'end at earliest' if ending else 'start at latest'})")
    if not part.earliest <= value <= part.latest:
        raise OffsetOutOfRangeError(f"{option}: offset {value} of partition {name} of {part.topic!r} is outside "
                                    f"the log's [{part.earliest}, {part.latest}] (earliest, latest)")
    return value


def _times(cfg, option_all: str, option_json: str, parts: Sequence[PartitionSnapshot]) -> dict[str, int] | None:
    if cfg[option_all] is not None:
        return {partition_name(p): cfg[option_all] for p in parts}
    text = cfg[option_json]
    if text is None:
        return None
    times = _per_partition(text, option_json, cfg["topic"], [partition_name(p) for p in parts])
    for name, t in times.items():
        if t < 0:
            raise ConfigError(f"{option_json}: {t} for partition {name}; allowed is an event time in ms >= 0")
    return times


def _offsets(cfg, option: str, parts: Sequence[PartitionSnapshot], *, ending: bool) -> dict[str, int]:
    text = cfg[option].strip()
    keyword = text.lower()
    good, bad = ("latest", "earliest") if ending else ("earliest", "latest")
    if keyword == good:
        return {partition_name(p): (p.latest if ending else p.earliest) for p in parts}
    if keyword == bad:
        raise ConfigError(f"{option}: {text!r} is not allowed for a batch read (as in Spark's Kafka source); "
                          f"allowed is {good} or JSON per partition")
    if not text.startswith("{"):
        raise ConfigError(f"{option}: {text!r}; allowed is {good} or JSON per partition "
                          f'like {{"{cfg["topic"]}":{{"{partition_name(parts[0]) if parts else 0}":0}}}}')
    given = _per_partition(text, option, cfg["topic"], [partition_name(p) for p in parts])
    return {partition_name(p): _offset(p, given[partition_name(p)], option, ending=ending) for p in parts}


OffsetForTime = Callable[[PartitionSnapshot, int], "int | None"]
"""``(partition, ms)`` -> the first offset whose record timestamp is at or after ``ms``, None when no
record is (ListOffsets by time; :func:`ingest.explore.partitions.offset_for_time`)."""


def _kafka_start(cfg, p: PartitionSnapshot, t: int, offset_for_time: OffsetForTime) -> int:
    found = offset_for_time(p, t)
    if found is None:
        if cfg["startingOffsetsByTimestampStrategy"] == "latest":
            return p.latest
        raise OffsetOutOfRangeError(
            f"{p.topic} partition {partition_name(p)}: no record has a timestamp at or after the starting "
            f"timestamp {t} (ListOffsets by time); set startingOffsetsByTimestampStrategy=latest to read nothing "
            f"from such a partition")
    return min(max(found, p.earliest), p.latest)


def plan_ranges(cfg, parts: Sequence[PartitionSnapshot],
                offset_for_time: OffsetForTime | None = None) -> list[ReadRange]:
    """One :class:`ReadRange` per partition of the topic, in partition-name order.

    A Kafka-format partition's timestamps become offsets here, through ``offset_for_time``
    (required when a Kafka-format partition has a timestamp bound); a 0.7 partition's stay
    on the range (cut while it is read).

    Raises:
        ConfigError: a bad keyword, JSON, partition set or value, or a start after the end.
        OffsetOutOfRangeError: a JSON offset outside the log's ``[earliest, latest]``; a Kafka-format
            partition without a record at or after its starting timestamp (strategy ``error``).
    """
    start_times = _times(cfg, "startingTimestamp", "startingOffsetsByTimestamp", parts)
    end_times = _times(cfg, "endingTimestamp", "endingOffsetsByTimestamp", parts)
    starts = ({partition_name(p): p.earliest for p in parts} if start_times is not None
              else _offsets(cfg, "startingOffsets", parts, ending=False))
    ends = ({partition_name(p): p.latest for p in parts} if end_times is not None
            else _offsets(cfg, "endingOffsets", parts, ending=True))
    out = []
    for p in parts:
        name = partition_name(p)
        start, end = starts[name], ends[name]
        start_time = None if start_times is None else start_times[name]
        end_time = None if end_times is None else end_times[name]
        if p.kafka and (start_time is not None or end_time is not None):
            if offset_for_time is None:
                raise ValueError("plan_ranges: a Kafka-format partition's timestamps need offset_for_time")
            if start_time is not None:
                start = _kafka_start(cfg, p, start_time, offset_for_time)
            if end_time is not None:
                found = offset_for_time(p, end_time)
                end = p.latest if found is None else min(max(found, p.earliest), p.latest)
            start_time = end_time = None   # exact offsets now: the read cuts nothing by time
        if start > end:
            raise ConfigError(f"partition {name} of {p.topic!r}: starting offset {start} is after the ending "
                              f"offset {end}; allowed is start <= end")
        out.append(ReadRange(p, start, end, start_time, end_time))
    return out
