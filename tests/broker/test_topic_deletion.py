"""Which topics may be marked for deletion (ingest/broker/topic_deletion.py), without ZooKeeper: the reads are a
dict of znode data. Both callers (DeleteTopics: Kafka-format only; `ingest topics delete`: both kinds) get the
same answers, and each refusal goes out on the Kafka listener with Kafka's code."""
from __future__ import annotations

import json

import pytest
from kazoo.exceptions import NodeExistsError

from ingest import znodes
from ingest.broker import topic_deletion
from ingest.broker.topic_kind import TopicKind
from ingest.errors import (InvalidTopicError, ReassignmentInProgressError, UnknownTopicError, UnreplicatedTopicError,
                           WrongTopicKindError)
from ingest.wire.errors import KAFKA, KafkaErrorCode

KAFKA_ONLY = (TopicKind.KAFKA,)


def _nodes() -> dict[str, bytes]:
    moving = {"version": 1, "partitions": {"0": [1, 2]}, "format": "kafka", "adding_replicas": {"0": [2]},
              "removing_replicas": {"0": [0]}}
    return {
        znodes.topic_dir("k"): znodes.assignment_value({0: [0, 1]}, znodes.KAFKA_FORMAT),
        znodes.topic_dir("r07"): znodes.assignment_value({0: [0, 1]}),
        znodes.topic_dir("legacy"): b"",
        znodes.topic_dir("moving"): json.dumps(moving).encode(),
        znodes.topic_dir("planned"): znodes.assignment_value({0: [0, 1], 1: [1, 0]}),
        znodes.REASSIGN_PARTITIONS: b'{"version":1,"partitions":[{"topic":"planned","partition":1,"replicas":[2,1]}]}',
        znodes.topic_dir("marked"): znodes.assignment_value({0: [0]}),
        znodes.delete_topic_path("marked"): b"",
    }


def test_kinds_and_the_mark():
    nodes = _nodes()
    assert topic_deletion.check("k", nodes.get) is TopicKind.KAFKA
    assert topic_deletion.check("r07", nodes.get) is TopicKind.V07
    assert topic_deletion.check("k", nodes.get, kinds=KAFKA_ONLY) is TopicKind.KAFKA
    assert topic_deletion.check("marked", nodes.get) is None
    # an unreadable /admin/reassign_partitions moves nothing (the controller drops it): it holds nothing back
    assert topic_deletion.check("planned", {**nodes, znodes.REASSIGN_PARTITIONS: b"{not json"}.get) is TopicKind.V07
    created = []
    assert topic_deletion.mark("k", created.append) is True and created == [znodes.delete_topic_path("k")]

    def exists(path):
        raise NodeExistsError()
    assert topic_deletion.mark("k", exists) is False


@pytest.mark.parametrize("topic,kinds,local,error,words,code", [
    ("nope", None, None, UnknownTopicError, ["'nope' does not exist"], KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ("r07", KAFKA_ONLY, None, WrongTopicKindError, ["Kafka 0.7 topic", "ingest topics delete"],
     KafkaErrorCode.INVALID_TOPIC_EXCEPTION),
    ("legacy", KAFKA_ONLY, None, WrongTopicKindError, ["Kafka 0.7 topic"], KafkaErrorCode.INVALID_TOPIC_EXCEPTION),
    ("local07", KAFKA_ONLY, TopicKind.V07, WrongTopicKindError, ["Kafka 0.7 topic"],
     KafkaErrorCode.INVALID_TOPIC_EXCEPTION),
    ("legacy", None, None, UnreplicatedTopicError, ["unreplicated 0.7 topic", "brokers [3]", "log.dir/legacy-*"],
     None),
    ("k", (TopicKind.V07,), None, WrongTopicKindError, ["Kafka-format topic"], KafkaErrorCode.INVALID_TOPIC_EXCEPTION),
    ("__consumer_offsets", KAFKA_ONLY, None, InvalidTopicError, ["kafka internal topic"],
     KafkaErrorCode.INVALID_TOPIC_EXCEPTION),
    ("moving", KAFKA_ONLY, None, ReassignmentInProgressError, ["partition(s) [0] being reassigned"],
     KafkaErrorCode.REASSIGNMENT_IN_PROGRESS),
    ("planned", None, None, ReassignmentInProgressError, ["partition(s) [1] being reassigned"],
     KafkaErrorCode.REASSIGNMENT_IN_PROGRESS),
    ("a/b", None, None, InvalidTopicError, ["a/b"], KafkaErrorCode.INVALID_TOPIC_EXCEPTION),
], ids=["unknown", "replicated-07-on-kafka", "unreplicated-on-kafka", "local-07-on-kafka", "unreplicated",
        "kafka-when-07-only", "internal", "moving", "requested-move", "bad-name"])
def test_refusals_name_the_topic_and_go_out_with_kafkas_code(topic, kinds, local, error, words, code):
    kw = {} if kinds is None else {"kinds": kinds}
    with pytest.raises(error) as exc:
        topic_deletion.check(topic, _nodes().get, local_kind=local, unreplicated_brokers=lambda: [3], **kw)
    assert all(w in str(exc.value).replace("broker(s)", "brokers") for w in words), str(exc.value)
    if code is not None:
        assert KAFKA.code(exc.value) == code
