"""The admin API through kafka-python's KafkaAdminClient and confluent-kafka's AdminClient (default settings).

Real ZooKeeper and three real broker processes. What is proven, for each client:

- a topic created with partitions, replication factor and configs is in ZooKeeper (its assignment with
  ``"format":"kafka"``, ``/config/topics/[topic]``), in Metadata with a leader per partition, and in the
  log directories of exactly its replicas; validate-only creates nothing;
- DescribeConfigs shows the topic's own values as DYNAMIC_TOPIC_CONFIG and the others as the brokers';
  IncrementalAlterConfigs and AlterConfigs change ``/config/topics`` and every replica applies it (a
  ``segment.bytes`` made small rolls segments on the leader and the followers);
- CreatePartitions appends partitions (ZooKeeper, Metadata, the replicas' directories);
- DeleteTopics: the topic leaves Metadata at once, its directories go from every replica, and it leaves
  ZooKeeper (assignment, states, configs, the marker); the name can be created again, empty;
- errors come as Kafka answers them, with messages that name the bad value: TOPIC_ALREADY_EXISTS,
  INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG,
  UNKNOWN_TOPIC_OR_PARTITION, POLICY_VIOLATION;
- DescribeCluster lists the three brokers and the controller.

``test_a_broker_down_during_a_delete_...``: a replica's broker is SIGKILLed, the topic deleted, the
deletion waits in ZooKeeper; when the broker returns it deletes its copy and the topic is gone.
"""
from __future__ import annotations

import pytest
from kazoo.exceptions import NoNodeError

from ingest import znodes
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until

pytestmark = pytest.mark.processes

CLIENTS = ("kafka-python", "confluent-kafka")


def _bootstrap(brokers) -> str:
    return ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers)


def _dirs(brokers, topic: str) -> dict[int, set[int]]:
    """broker id -> the partitions of ``topic`` it has a log directory of."""
    out = {}
    for b in brokers:
        found = set()
        if b.log_dir.exists():
            for d in b.log_dir.iterdir():
                name, _, p = d.name.rpartition("-")
                if name == topic and p.isdigit():
                    found.add(int(p))
        out[b.broker_id] = found
    return out


def _expected_dirs(assignment, brokers) -> dict[int, set[int]]:
    return {b.broker_id: {p for p, reps in assignment.items() if b.broker_id in reps} for b in brokers}


def _assignment(zk, topic: str):
    if zk.retry(zk.exists, znodes.topic_dir(topic)) is None:
        return None
    data, _ = zk.retry(zk.get, znodes.topic_dir(topic))
    assert znodes.parse_topic_format(data) == znodes.KAFKA_FORMAT
    return znodes.parse_assignment(data)


def _zk_config(zk, topic: str):
    if zk.retry(zk.exists, znodes.topic_config_path(topic)) is None:
        return None
    return znodes.parse_topic_config(zk.retry(zk.get, znodes.topic_config_path(topic))[0])


def _gone_from_zookeeper(zk, topic: str) -> bool:
    return all(zk.retry(zk.exists, path) is None for path in (
        znodes.topic_dir(topic), znodes.topic_config_path(topic), znodes.delete_topic_path(topic),
        znodes.partition_states_dir(topic)))


def _produce(bootstrap: str, topic: str, n: int, size: int = 200) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=b"%06d" % i + b"x" * (size - 6), partition=i % 2)
        if i % 10 == 9:
            assert p.flush(60) == 0, "not every message was delivered"   # batches of 10: 2 KB each
    assert p.flush(60) == 0, "not every message was delivered"


# --- the two clients behind one small interface: (topic -> error code, message) ------------------

class KafkaPythonAdmin:
    def __init__(self, bootstrap: str) -> None:
        from kafka.admin import KafkaAdminClient

        self.c = KafkaAdminClient(bootstrap_servers=bootstrap)

    def create(self, name, partitions=-1, rf=-1, configs=None, assignments=None, validate_only=False):
        spec = {"num_partitions": partitions, "replication_factor": rf, "configs": configs or {}}
        if assignments:
            spec["assignments"] = assignments
        res = self.c.create_topics({name: spec}, validate_only=validate_only, raise_errors=False)
        t = res["topics"][0]
        return t["error_code"], t["error_message"]

    def delete(self, name):
        t = self.c.delete_topics([name], raise_errors=False)["topics"][0]
        return t["error_code"], t.get("error_message")

    def partitions(self, name, count, assignments=None):
        spec = {name: count if assignments is None else {"count": count, "assignments": assignments}}
        t = self.c.create_partitions(spec, raise_errors=False).results[0]
        return t.error_code, t.error_message

    def configs(self, name) -> dict[str, tuple[str, int]]:
        from kafka.admin import ConfigResource, ConfigResourceType

        res = self.c.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all")
        entries = res["topic"][name]
        sources = {"DYNAMIC_TOPIC_CONFIG": 1, "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5}
        return {k: (v["value"], sources.get(v["config_source"], v["config_source"])) for k, v in entries.items()}

    def set_configs(self, name, configs, incremental):
        from kafka.admin import ConfigResource, ConfigResourceType

        res = self.c.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs)],
                                   incremental=incremental, raise_on_unknown=False)
        outcome = res["topic"][name]
        return (0, None) if outcome is None or getattr(outcome, "errno", 0) == 0 else (outcome.errno, str(outcome))

    def cluster(self):
        d = self.c.describe_cluster()
        return sorted(b["node_id"] if "node_id" in b else b["broker_id"] for b in d["brokers"]), d["controller_id"]

    def close(self):
        self.c.close()


class ConfluentAdmin:
    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.c = AdminClient({"bootstrap.servers": bootstrap})

    @staticmethod
    def _result(future):
        from confluent_kafka import KafkaException

        try:
            future.result(60)
            return 0, None
        except KafkaException as exc:
            err = exc.args[0]
            return err.code(), err.str()

    def create(self, name, partitions=-1, rf=-1, configs=None, assignments=None, validate_only=False):
        from confluent_kafka.admin import NewTopic

        if assignments:
            t = NewTopic(name, num_partitions=len(assignments),   # librdkafka wants the count with an assignment
                         replica_assignment=[assignments[p] for p in sorted(assignments)], config=configs or {})
        else:
            t = NewTopic(name, num_partitions=partitions, replication_factor=rf, config=configs or {})
        return self._result(self.c.create_topics([t], validate_only=validate_only)[name])

    def delete(self, name):
        return self._result(self.c.delete_topics([name])[name])

    def partitions(self, name, count, assignments=None):
        from confluent_kafka.admin import NewPartitions

        new = NewPartitions(name, count) if assignments is None else NewPartitions(name, count, assignments)
        return self._result(self.c.create_partitions([new])[name])

    def configs(self, name) -> dict[str, tuple[str, int]]:
        from confluent_kafka.admin import ConfigResource

        res = ConfigResource(ConfigResource.Type.TOPIC, name)
        entries = self.c.describe_configs([res])[res].result(60)
        return {k: (e.value, int(e.source)) for k, e in entries.items()}

    def set_configs(self, name, configs, incremental):
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        if incremental:
            entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
            res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
            return self._result(self.c.incremental_alter_configs([res])[res])
        res = ConfigResource(ConfigResource.Type.TOPIC, name, set_config=configs)
        return self._result(self.c.alter_configs([res])[res])

    def cluster(self):
        d = self.c.describe_cluster().result(60)
        return sorted(n.id for n in d.nodes), d.controller.id

    def close(self):
        pass


ADMINS = {"kafka-python": KafkaPythonAdmin, "confluent-kafka": ConfluentAdmin}
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5

# Kafka's error codes
UNKNOWN_TOPIC_OR_PARTITION, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR = 3, 36, 37, 38
INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, POLICY_VIOLATION = 39, 40, 44


def _controller(zk) -> int | None:
    try:
        data, _ = zk.retry(zk.get, znodes.CONTROLLER)
    except NoNodeError:
        return None
    return znodes.parse_controller(data)


def _cluster(broker_factory, zk_connect):
    return broker_factory(3, zk_connect, overrides=r.replication_overrides(min_isr=1, **{"num.partitions": 2}))


def _leaders_everywhere(admin_bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> None:
    from confluent_kafka.admin import AdminClient

    c = AdminClient({"bootstrap.servers": admin_bootstrap})

    def ready():
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        return md is not None and md.error is None and len(md.partitions) == partitions and \
            all(p.leader >= 0 for p in md.partitions.values())
    wait_until(ready, timeout, f"{topic}: {partitions} partitions with leaders in Metadata")


def _listed(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


@pytest.mark.parametrize("client", CLIENTS)
def test_topics_created_described_altered_grown_and_deleted(broker_factory, zk_connect, zk, client):
    brokers = _cluster(broker_factory, zk_connect)
    bootstrap = _bootstrap(brokers)
    admin = ADMINS[client](bootstrap)
    topic = f"admin-{client}"
    try:
        # validate-only: checked, nothing written
        assert admin.create(topic, 2, 2, {"retention.ms": "3600000"}, validate_only=True) == (0, None)
        assert _assignment(zk, topic) is None and _zk_config(zk, topic) is None

        assert admin.create(topic, 2, 2, {"retention.ms": "3600000", "max.message.bytes": "500000"}) == (0, None)
        assignment = _assignment(zk, topic)
        assert sorted(assignment) == [0, 1] and all(len(reps) == 2 for reps in assignment.values())
        assert _zk_config(zk, topic) == {"retention.ms": "3600000", "max.message.bytes": "500000"}
        _leaders_everywhere(bootstrap, topic, 2)
        wait_until(lambda: _dirs(brokers, topic) == _expected_dirs(assignment, brokers), 60,
                   "a log directory on exactly each replica")

        configs = admin.configs(topic)
        assert configs["retention.ms"] == ("3600000", DYNAMIC_TOPIC_CONFIG)
        assert configs["max.message.bytes"] == ("500000", DYNAMIC_TOPIC_CONFIG)
        assert configs["min.insync.replicas"] == ("1", STATIC_BROKER_CONFIG)
        assert configs["cleanup.policy"] == ("delete", DEFAULT_CONFIG)

        # incremental: one config set, the others kept; every replica rolls at the new segment size
        assert admin.set_configs(topic, {"segment.bytes": "2048"}, incremental=True) == (0, None)
        wait_until(lambda: _zk_config(zk, topic) == {"retention.ms": "3600000", "max.message.bytes": "500000",
                                                     "segment.bytes": "2048"}, 30, "the incremental change")
        wait_until(lambda: admin.configs(topic)["segment.bytes"] == ("2048", DYNAMIC_TOPIC_CONFIG), 30,
                   "segment.bytes described as the topic's own")
        _produce(bootstrap, topic, 100)

        def segments():
            return {b.broker_id: {p: len(list((b.log_dir / f"{topic}-{p}").glob("*.log")))
                                  for p in _expected_dirs(assignment, brokers)[b.broker_id]} for b in brokers}
        wait_until(lambda: all(n >= 3 for per in segments().values() for n in per.values()), 60,
                   f"several segments of 2048 bytes on the leader and the follower of each partition: {segments()}")

        # AlterConfigs replaces the whole set (kafka-python sends the topic's other own configs along, as it
        # documents, so that they are kept)
        assert admin.set_configs(topic, {"retention.bytes": "1000000"}, incremental=False) == (0, None)
        replaced = {"retention.bytes": "1000000"} if client == "confluent-kafka" else \
            {"retention.ms": "3600000", "max.message.bytes": "500000", "segment.bytes": "2048",
             "retention.bytes": "1000000"}
        wait_until(lambda: _zk_config(zk, topic) == replaced, 30, "the replaced set")
        kept = DYNAMIC_TOPIC_CONFIG if "retention.ms" in replaced else STATIC_BROKER_CONFIG
        wait_until(lambda: admin.configs(topic)["retention.ms"][1] in (kept, kept if kept == 1 else DEFAULT_CONFIG),
                   30, "retention.ms as the replaced set has it")

        # partitions: 2 -> 4
        assert admin.partitions(topic, 4) == (0, None)
        assignment = _assignment(zk, topic)
        assert sorted(assignment) == [0, 1, 2, 3] and all(len(reps) == 2 for reps in assignment.values())
        _leaders_everywhere(bootstrap, topic, 4)
        wait_until(lambda: _dirs(brokers, topic) == _expected_dirs(assignment, brokers), 60,
                   "the new partitions' directories on their replicas")

        _errors_as_kafka_answers_them(admin, topic)

        ids, controller = admin.cluster()
        assert ids == [0, 1, 2] and controller in ids

        # delete: gone from Metadata, from every replica's disk, from ZooKeeper
        assert admin.delete(topic) == (0, None)
        wait_until(lambda: not _listed(bootstrap, topic), 30, "the topic gone from Metadata")
        wait_until(lambda: all(not ps for ps in _dirs(brokers, topic).values()), 60,
                   "the topic's directories gone on every broker")
        wait_until(lambda: _gone_from_zookeeper(zk, topic), 60, "the topic gone from ZooKeeper")
        code, message = admin.delete(topic)
        assert code == UNKNOWN_TOPIC_OR_PARTITION and (topic in message or message.startswith("Broker: "))

        # the name is free again: a new, empty topic
        assert admin.create(topic, 1, 3) == (0, None)
        _leaders_everywhere(bootstrap, topic, 1)
        assert _zk_config(zk, topic) == {}
        wait_until(lambda: _dirs(brokers, topic) == {0: {0}, 1: {0}, 2: {0}}, 60, "the new topic on every broker")
        for b in brokers:
            assert [f.stat().st_size for f in (b.log_dir / f"{topic}-0").glob("*.log")] == [0]
    finally:
        admin.close()


def _errors_as_kafka_answers_them(admin, topic: str) -> None:
    code, message = admin.create(topic, 1, 1)
    assert code == TOPIC_ALREADY_EXISTS and topic in message
    code, message = admin.create("admin-zero", 0, 1)
    assert code == INVALID_PARTITIONS and "0" in message
    code, message = admin.create("admin-rf", 1, 4)
    assert code == INVALID_REPLICATION_FACTOR and "4" in message and "3" in message
    code, message = admin.create("admin-assign", assignments={0: [0, 7]})
    assert code == INVALID_REPLICA_ASSIGNMENT and "7" in message
    code, message = admin.create("admin-bogus", 1, 1, {"retention.hours.please": "1"})
    assert code == INVALID_CONFIG and "retention.hours.please" in message
    code, message = admin.create("admin-bad-value", 1, 1, {"retention.ms": "soon"})
    assert code == INVALID_CONFIG and "soon" in message
    code, message = admin.create("admin-compact", 1, 1, {"cleanup.policy": "compact"})
    assert code == INVALID_CONFIG and "compact" in message
    code, message = admin.create("admin-policy", 1, 2, {"min.insync.replicas": "3"})
    assert code == POLICY_VIOLATION and "min.insync.replicas=3" in message
    code, message = admin.delete("admin-never")
    # librdkafka speaks DeleteTopics v4 and below, which carry no message: it says "Broker: ..." itself
    assert code == UNKNOWN_TOPIC_OR_PARTITION and ("admin-never" in message or message.startswith("Broker: "))
    code, message = admin.partitions(topic, 3)
    assert code == INVALID_PARTITIONS and "4" in message and "3" in message
    code, message = admin.partitions("admin-never", 3)
    assert code == UNKNOWN_TOPIC_OR_PARTITION


def test_a_broker_down_during_a_delete_deletes_its_copy_when_it_returns(broker_factory, zk_connect, zk):
    brokers = _cluster(broker_factory, zk_connect)
    bootstrap = _bootstrap(brokers)
    admin = KafkaPythonAdmin(bootstrap)
    topic = "admin-down"
    try:
        assert admin.create(topic, 2, 3) == (0, None)
        _leaders_everywhere(bootstrap, topic, 2)
        _produce(bootstrap, topic, 50)
        wait_until(lambda: _dirs(brokers, topic) == {0: {0, 1}, 1: {0, 1}, 2: {0, 1}}, 60, "every replica")
        down = brokers[2]
        down.kill()
        alive = [b for b in brokers if b is not down]
        # until its ZooKeeper session ends, Metadata still lists the killed broker (maybe as the controller,
        # whom kafka-python's admin client asks first), as Kafka's would
        wait_until(lambda: zk.retry(zk.exists, znodes.broker_path(down.broker_id)) is None
                   and _controller(zk) not in (None, down.broker_id), 60, "the killed broker's session ended")
        admin.close()
        admin = KafkaPythonAdmin(_bootstrap(alive))
        assert admin.delete(topic) == (0, None)
        wait_until(lambda: not _listed(_bootstrap(alive), topic), 30, "the topic gone from Metadata")
        wait_until(lambda: all(not _dirs(alive, topic)[b.broker_id] for b in alive), 60,
                   "the directories gone on the live brokers")
        assert _dirs([down], topic)[down.broker_id] == {0, 1}, "the down broker's copy is untouched"
        assert zk.retry(zk.exists, znodes.delete_topic_path(topic)) is not None, "the deletion waits for it"
        assert _assignment(zk, topic) is not None
        down.restart()
        wait_until(lambda: not _dirs([down], topic)[down.broker_id], 60,
                   "the returning broker deleted its copy")
        wait_until(lambda: _gone_from_zookeeper(zk, topic), 60, "the topic gone from ZooKeeper")
    finally:
        admin.close()


def test_the_broker_that_answers_a_delete_no_longer_lists_the_topic(broker_factory, zk_connect, zk):
    """Kafka's ZooKeeper-mode broker answers DeleteTopics once its own metadata no longer has the topic, so a
    client that lists topics on the same broker right after the answer does not see it (kafkajs's
    ``deleteTopics`` then ``listTopics`` does this). Each broker in turn answers one delete."""
    from ingest.wire.kafka.connection import KafkaConnection
    from ingest.wire.kafka.delete_topics import DeleteTopicsRequest
    from ingest.wire.kafka.metadata import MetadataRequest, MetadataRequestTopic

    brokers = _cluster(broker_factory, zk_connect)
    bootstrap = _bootstrap(brokers)
    admin = KafkaPythonAdmin(bootstrap)
    try:
        for b in brokers:
            topic = f"admin-gone-{b.broker_id}"
            assert admin.create(topic, 2, 3) == (0, None)
            _leaders_everywhere(bootstrap, topic, 2)
            conn = KafkaConnection("127.0.0.1", b.kafka_port)
            try:
                answer = conn.call(DeleteTopicsRequest(topic_names=(topic,), timeout_ms=30_000), 4)
                assert [(t.name, t.error_code) for t in answer.responses] == [(topic, 0)]
                listed = conn.call(MetadataRequest(topics=None), 4)
                named = conn.call(MetadataRequest(topics=(MetadataRequestTopic(topic),),
                                                  allow_auto_topic_creation=False), 4)
            finally:
                conn.close()
            assert topic not in [t.name for t in listed.topics], f"broker {b.broker_id} still lists {topic}"
            assert [(t.name, t.error_code) for t in named.topics] == [(topic, UNKNOWN_TOPIC_OR_PARTITION)]
    finally:
        admin.close()
