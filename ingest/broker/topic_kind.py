"""The two kinds of topic a broker holds: 0.7 topics and Kafka-format topics, and how to tell them apart.

A *0.7 topic* has byte offsets, ``<base>.kafka`` segments and 0.7 message sets (every topic before
the Kafka protocol); a *Kafka topic* has record offsets, ``<base>.log`` + ``.index`` + ``.timeindex``
segments and record batches v2 (:mod:`ingest.broker.kafka_log`). Never both: a local log's kind is
its files, a cluster topic's kind is recorded with its assignment in ZooKeeper (``"format":"kafka"``,
:mod:`ingest.znodes`). The 0.7 port serves only 0.7 topics and the Kafka listener only Kafka topics
(docs/kafka-protocol.md, D2).
"""
from __future__ import annotations

import enum
import os
from pathlib import Path

from ingest.broker.kafka_segment import SUFFIX as KAFKA_SUFFIX
from ingest.broker.segment import SUFFIX as V07_SUFFIX
from ingest.errors import StorageError, WrongTopicKindError


class TopicKind(enum.Enum):
    V07 = "0.7"
    KAFKA = "kafka"


def kind_of_dir(path: Path) -> TopicKind:
    """The kind of the partition log in ``path``, by its segment files; a directory without any is a
    0.7 log (what a crash between creating the directory and its first segment leaves, as before).

    Raises:
        StorageError: the directory holds segments of both kinds.
    """
    kinds = set()
    for entry in os.scandir(path):
        if entry.name.endswith(KAFKA_SUFFIX):
            kinds.add(TopicKind.KAFKA)
        elif entry.name.endswith(V07_SUFFIX):
            kinds.add(TopicKind.V07)
    if len(kinds) > 1:
        raise StorageError(f"{path} holds both 0.7 segments (*{V07_SUFFIX}) and Kafka-format segments "
                           f"(*{KAFKA_SUFFIX}); a partition log is one or the other: move one kind away")
    return kinds.pop() if kinds else TopicKind.V07


def wrong_kind(topic: str, kind: TopicKind) -> WrongTopicKindError:
    """The error for a request that reached the port of the other kind than ``topic``'s ``kind``."""
    if kind is TopicKind.KAFKA:
        return WrongTopicKindError(f"topic {topic!r} is a Kafka-format topic: Kafka clients read and write it "
                                   "through the broker's Kafka listener (advertised.listeners), not the 0.7 port")
    return WrongTopicKindError(f"topic {topic!r} is a Kafka 0.7 topic: 0.7 clients read and write it through the "
                               "broker's 0.7 port ('port'); the Kafka listener serves Kafka-format topics only")
