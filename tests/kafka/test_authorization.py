"""Kafka's ACLs on real brokers with a real ZooKeeper, through raw requests and real clients.

Until connections authenticate, every client is ``User:ANONYMOUS``; the principal the ACLs name is
:data:`PRINCIPAL` (with SASL these tests name the client's user instead, and the clients get their SASL
settings from :func:`client_config`). What is proven:

- once ``authorizer.class.name`` is set, nothing is allowed without an ACL (Produce, Fetch, Metadata,
  DescribeCluster, groups), and each denial is counted in ``ingest_broker_authorization_denials``;
- a principal allowed Write on ``page-views`` can produce there (confluent-kafka, kafka-python), cannot
  write ``clicks`` nor read ``page-views``, and each library reports the authorization error it reports
  against Kafka;
- prefixed patterns, the literal ``*``, Deny winning over Allow, ``super.users``,
  ``allow.everyone.if.no.acl.found``;
- ``ingest acls add`` on a 3-broker cluster takes effect on every broker without a restart, and
  ``ingest acls remove`` withdraws it again;
- groups need their ACLs (kafka-python's GroupAuthorizationFailedError), the admin requests theirs
  (CreateTopics: Create, DeleteTopics: Delete, CreatePartitions: Alter, DescribeConfigs: DescribeConfigs
  or the cluster's), and AdminClients manage ACLs (CreateAcls/DescribeAcls/DeleteAcls) only with Alter
  on the cluster.
"""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ingest import znodes
from ingest.records.builder import SimpleRecord, build_batch
from ingest.wire.errors import KafkaErrorCode as K
from ingest.wire.kafka.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from ingest.wire.kafka.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from ingest.wire.kafka.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from ingest.wire.kafka.produce import PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.metrics import metrics_url, scrape
from tests.harness.wait import wait_until
from tests.kafka import authz

pytestmark = pytest.mark.processes

PRINCIPAL = "User:ANONYMOUS"
PRODUCE_V, FETCH_V, METADATA_V = 9, 11, 9


def client_config() -> dict:
    """What a client needs to be :data:`PRINCIPAL` (nothing while every connection is ANONYMOUS)."""
    return {}


def _broker(broker_factory, zk_connect, zk, topics=("page-views", "clicks"), **overrides):
    for t in topics:
        zk.retry(zk.create, znodes.topic_dir(t), znodes.assignment_value({0: [0]}, znodes.KAFKA_FORMAT),
                 makepath=True)
    cfg = {"authorizer.class.name": authz.AUTHORIZER, "metrics.port": 0, "auto.create.topics.enable": False,
           "log.default.flush.scheduler.interval.ms": 100, **overrides}
    broker = broker_factory(1, zk_connect, overrides=cfg)[0]
    for t in topics:
        r.wait_for_state(zk, t, 0, lambda s: s.leader == broker.broker_id, 60, f"{t} led")
    return broker


NOT_LED = (K.LEADER_NOT_AVAILABLE, K.NOT_LEADER_OR_FOLLOWER)


def _led(call, timeout: float = 30.0) -> int:
    """``call()``'s error code, asked again while the broker does not lead the partition yet, as a Kafka
    client retries: the controller writes the leader to ZooKeeper before the broker has taken it up."""
    deadline = time.monotonic() + timeout
    while True:
        code = call()
        if code not in NOT_LED or time.monotonic() > deadline:
            return code
        time.sleep(0.1)


def _produce(broker, topic: str, source: str = authz.OTHER_HOST) -> int:
    batch = bytes(build_batch([SimpleRecord(b"v", b"k", (), int(time.time() * 1000))]))
    req = ProduceRequest(None, 1, 10_000, (TopicProduceData(topic, (PartitionProduceData(0, batch),)),))
    return _led(lambda: authz.call(broker.kafka_port, req, PRODUCE_V, ProduceResponse, source)
                .responses[0].partition_responses[0].error_code)


def _fetch(broker, topic: str) -> int:
    req = FetchRequest(max_wait_ms=0, min_bytes=0, topics=(FetchTopic(topic, (FetchPartition(0, fetch_offset=0),)),))
    return _led(lambda: authz.call(broker.kafka_port, req, FETCH_V, FetchResponse).responses[0].partitions[0].error_code)


def _metadata(broker, topics=None) -> dict[str, int]:
    req = MetadataRequest(None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics), False)
    return {t.name: t.error_code for t in authz.call(broker.kafka_port, req, METADATA_V, MetadataResponse).topics}


def _describe_cluster(broker) -> int:
    return authz.call(broker.kafka_port, DescribeClusterRequest(False), 0, DescribeClusterResponse).error_code


def _eventually(fn, expected, what: str, timeout: float = 30.0):
    """ACL changes reach a broker through a ZooKeeper watch: wait for ``fn()`` to become ``expected``."""
    return wait_until(lambda: fn() == expected, timeout, what)


def test_with_the_authorizer_on_nothing_is_allowed_without_an_acl(broker_factory, zk_connect, zk):
    broker = _broker(broker_factory, zk_connect, zk)
    assert _produce(broker, "page-views") == K.TOPIC_AUTHORIZATION_FAILED
    assert _fetch(broker, "page-views") == K.TOPIC_AUTHORIZATION_FAILED
    assert _metadata(broker) == {}                                    # every topic is filtered out
    assert _metadata(broker, ["page-views"]) == {"page-views": K.TOPIC_AUTHORIZATION_FAILED}
    resp = authz.call(broker.kafka_port, DescribeClusterRequest(False), 0, DescribeClusterResponse)
    assert resp.error_code == K.CLUSTER_AUTHORIZATION_FAILED
    samples = scrape(metrics_url(broker.output))
    denied = {dict(labels)["request"]: v for (name, labels), v in samples.items()
              if name == "ingest_broker_authorization_denials_total"}
    assert denied.get("Produce") == 1 and denied.get("Fetch") == 1 and denied.get("DescribeCluster") == 1, denied
    assert "denied operation Write on Topic:page-views" in broker.output()


def test_a_principal_allowed_write_on_page_views_cannot_read_it_or_write_clicks(broker_factory, zk_connect, zk):
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    authz.allow(zk, PRINCIPAL, "Write", "Topic", "page-views")
    authz.allow(zk, PRINCIPAL, "Read", "Group", "g")   # its consumer group: the topic is what it may not read
    broker = _broker(broker_factory, zk_connect, zk)
    bootstrap = f"127.0.0.1:{broker.kafka_port}"
    reports = {}
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "message.timeout.ms": 15_000,
                  **client_config()})
    for topic in ("page-views", "clicks"):
        p.produce(topic, b"v", partition=0, on_delivery=lambda err, msg, t=topic: reports.__setitem__(t, err))
    p.flush(30)
    assert reports["page-views"] is None
    assert reports["clicks"] is not None and reports["clicks"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, \
        reports["clicks"]
    del p   # (librdkafka's handle: no close)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False, **client_config()})
    try:
        c.assign([TopicPartition("page-views", 0, 0)])
        errors = []
        deadline = time.monotonic() + 30
        while not errors and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is not None, "read a record of a topic the principal may only write"
                errors.append(m.error().code())
        assert errors == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    finally:
        c.close()

    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    kp = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=15_000, **client_config())
    try:
        kp.send("page-views", b"v", partition=0).get(timeout=30)
        with pytest.raises(TopicAuthorizationFailedError):
            kp.send("clicks", b"v", partition=0).get(timeout=30)
    finally:
        kp.close(timeout=5)


def test_prefixed_and_wildcard_patterns_and_deny_wins_over_allow(broker_factory, zk_connect, zk):
    broker = _broker(broker_factory, zk_connect, zk, topics=("page-views", "pages", "clicks", "clicks-eu"))
    authz.allow(zk, PRINCIPAL, "Write", "Topic", "page-", prefixed=True)
    _eventually(lambda: _produce(broker, "page-views"), 0, "a prefixed Allow taking effect")
    assert _produce(broker, "pages") == K.TOPIC_AUTHORIZATION_FAILED     # not under the prefix
    authz.allow(zk, "User:*", "All", "Topic", "*")                       # everyone, everything, every topic
    _eventually(lambda: _produce(broker, "clicks"), 0, "a literal '*' Allow taking effect")
    authz.allow(zk, PRINCIPAL, "Write", "Topic", "clicks", prefixed=True, deny=True)
    _eventually(lambda: _produce(broker, "clicks-eu"), K.TOPIC_AUTHORIZATION_FAILED, "a prefixed Deny winning")
    assert _produce(broker, "clicks") == K.TOPIC_AUTHORIZATION_FAILED
    assert _produce(broker, "pages") == 0
    authz.allow(zk, PRINCIPAL, "Write", "Topic", "pages", host=authz.OTHER_HOST, deny=True)
    _eventually(lambda: _produce(broker, "pages"), K.TOPIC_AUTHORIZATION_FAILED, "a Deny for one host")
    assert _produce(broker, "pages", source=authz.BROKER_HOST) == 0    # the same principal from another host


def test_super_users_are_allowed_everything_without_an_acl(broker_factory, zk_connect, zk):
    broker = _broker(broker_factory, zk_connect, zk, **{"super.users": f"User:admin;{PRINCIPAL}"})
    assert _produce(broker, "page-views") == 0 and _fetch(broker, "page-views") == 0
    assert set(_metadata(broker)) == {"page-views", "clicks"}


def test_allow_everyone_if_no_acl_found_opens_only_resources_without_acls(broker_factory, zk_connect, zk):
    broker = _broker(broker_factory, zk_connect, zk, **{"allow.everyone.if.no.acl.found": True})
    assert _produce(broker, "page-views") == 0
    authz.allow(zk, "User:someone-else", "Read", "Topic", "page-views")
    _eventually(lambda: _produce(broker, "page-views"), K.TOPIC_AUTHORIZATION_FAILED,
                "a topic with an ACL no longer open to everyone")
    assert _produce(broker, "clicks") == 0


def _cli(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "ingest.cli", "acls", *args], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_an_acl_added_with_the_cli_takes_effect_on_every_broker_without_a_restart(broker_factory, zk_connect, zk):
    authz.brokers_acl(zk)   # the brokers replicate among themselves
    brokers = broker_factory(3, zk_connect, overrides=r.replication_overrides(
        **{"authorizer.class.name": authz.AUTHORIZER}))
    zk.retry(zk.create, znodes.topic_dir("orders"),
             znodes.assignment_value({0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1]}, znodes.KAFKA_FORMAT), makepath=True)
    leaders = {p: r.wait_for_state(zk, "orders", p, lambda s, p=p: s.leader == p, 120, f"orders-{p} led by {p}").leader
               for p in range(3)}
    assert sorted(leaders.values()) == [0, 1, 2]

    def produce_everywhere() -> list[int]:
        out = []
        for p, leader in leaders.items():
            b = r.by_id(brokers, leader)
            batch = bytes(build_batch([SimpleRecord(b"v", b"k", (), int(time.time() * 1000))]))
            req = ProduceRequest(None, 1, 10_000, (TopicProduceData("orders", (PartitionProduceData(p, batch),)),))
            out.append(authz.call(b.kafka_port, req, PRODUCE_V, ProduceResponse)
                       .responses[0].partition_responses[0].error_code)
        return out

    assert produce_everywhere() == [K.TOPIC_AUTHORIZATION_FAILED] * 3
    shown = _cli("add", "--zk-connect", zk_connect, "--allow-principal", PRINCIPAL, "--allow-host", authz.OTHER_HOST,
                 "--operation", "Write", "--topic", "orders")
    assert f"(principal={PRINCIPAL}, host={authz.OTHER_HOST}, operation=WRITE, permissionType=ALLOW)" in shown
    _eventually(produce_everywhere, [0, 0, 0], "the ACL in force on all three brokers")
    listed = _cli("list", "--zk-connect", zk_connect, "--topic", "orders")
    assert "operation=WRITE" in listed and "name=orders" in listed
    _cli("remove", "--zk-connect", zk_connect, "--allow-principal", PRINCIPAL, "--allow-host", authz.OTHER_HOST,
         "--operation", "Write", "--topic", "orders")
    _eventually(produce_everywhere, [K.TOPIC_AUTHORIZATION_FAILED] * 3, "the ACL withdrawn on all three brokers")


def test_admin_clients_create_describe_and_delete_acls(broker_factory, zk_connect, zk):
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)

    from confluent_kafka import KafkaError, KafkaException

    broker = _broker(broker_factory, zk_connect, zk)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}", **client_config()})
    write = AclBinding(ResourceType.TOPIC, "page-", ResourcePatternType.PREFIXED, PRINCIPAL, "*", AclOperation.WRITE,
                       AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:                       # managing ACLs needs Alter on the cluster
        admin.create_acls([write], request_timeout=30)[write].result()
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    authz.allow(zk, PRINCIPAL, "Alter", "Cluster", "kafka-cluster")
    wait_until(lambda: _describe_cluster(broker) == 0, 30, "the Alter ACL cached (Alter implies Describe)")
    assert _produce(broker, "page-views") == K.TOPIC_AUTHORIZATION_FAILED
    for future in admin.create_acls([write], request_timeout=30).values():
        assert future.result() is None
    assert _produce(broker, "page-views") == 0                          # in force on the broker that stored it
    assert zk.exists("/kafka-acl-extended/prefixed/Topic/page-") is not None
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    described = admin.describe_acls(everything, request_timeout=30).result()
    assert write in described and len(described) == 2, described
    topics = AclBindingFilter(ResourceType.TOPIC, "page-views", ResourcePatternType.MATCH, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(topics, request_timeout=30).result() == [write]
    deleted = admin.delete_acls([topics], request_timeout=30)[topics].result()
    assert deleted == [write]
    assert _produce(broker, "page-views") == K.TOPIC_AUTHORIZATION_FAILED
    del admin, refused   # librdkafka's handle (and the traceback holding it) gone before the broker stops

    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern, ResourcePatternFilter)
    from kafka.admin import ResourceType as KResourceType

    kadmin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker.kafka_port}", **client_config())
    try:
        acl = ACL(PRINCIPAL, "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                  ResourcePattern(KResourceType.GROUP, "g", ACLResourcePatternType.LITERAL))
        result = kadmin.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1, result
        found, error = kadmin.describe_acls(ACLFilter(PRINCIPAL, "*", ACLOperation.ANY, ACLPermissionType.ANY,
                                                      ResourcePatternFilter(KResourceType.GROUP, None,
                                                                            ACLResourcePatternType.ANY)))
        assert [(a.resource_pattern.resource_name, a.operation) for a in found] == [("g", ACLOperation.READ)], error
    finally:
        kadmin.close()


def test_a_consumer_allowed_the_topic_but_not_its_group_gets_the_group_error(broker_factory, zk_connect, zk):
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    from ingest.wire.kafka.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

    authz.allow(zk, PRINCIPAL, "Read", "Topic", "page-views")
    authz.allow(zk, PRINCIPAL, "Read", "Group", "loaders-", prefixed=True)
    broker = _broker(broker_factory, zk_connect, zk)
    assert _produce(broker, "page-views") == K.TOPIC_AUTHORIZATION_FAILED          # Read does not imply Write
    assert _fetch(broker, "page-views") == 0
    for group, code in (("loaders-eu", 0), ("other", K.GROUP_AUTHORIZATION_FAILED)):
        resp = authz.call(broker.kafka_port, FindCoordinatorRequest(group, 0), 2,
                          FindCoordinatorResponse)
        assert resp.error_code in ((0, K.COORDINATOR_NOT_AVAILABLE) if code == 0 else (code,)), (group, resp)
    c = KafkaConsumer("page-views", bootstrap_servers=f"127.0.0.1:{broker.kafka_port}", group_id="other",
                      **client_config())
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                c.poll(timeout_ms=1000)
    finally:
        c.close()


def test_admin_requests_need_their_operations(broker_factory, zk_connect, zk):
    from ingest.wire.kafka.create_partitions import (CreatePartitionsRequest, CreatePartitionsResponse,
                                                     CreatePartitionsTopic)
    from ingest.wire.kafka.create_topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
    from ingest.wire.kafka.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
    from ingest.wire.kafka.describe_configs import (BROKER, TOPIC, DescribeConfigsRequest, DescribeConfigsResource,
                                                    DescribeConfigsResponse)

    authz.allow(zk, PRINCIPAL, "Create", "Topic", "new-", prefixed=True)
    authz.allow(zk, PRINCIPAL, "Alter", "Topic", "page-views")
    authz.allow(zk, PRINCIPAL, "AlterConfigs", "Topic", "page-views")   # implies DescribeConfigs
    broker = _broker(broker_factory, zk_connect, zk)
    port = broker.kafka_port

    created = authz.call(port, CreateTopicsRequest((CreatableTopic("new-a", 1, 1), CreatableTopic("other", 1, 1)),
                                                   30_000, True), 5, CreateTopicsResponse)
    assert {t.name: t.error_code for t in created.topics} == {"new-a": 0, "other": K.TOPIC_AUTHORIZATION_FAILED}
    deleted = authz.call(port, DeleteTopicsRequest(("page-views",), 30_000), 4, DeleteTopicsResponse)
    assert [t.error_code for t in deleted.responses] == [K.TOPIC_AUTHORIZATION_FAILED]   # no Delete
    grown = authz.call(port, CreatePartitionsRequest((CreatePartitionsTopic("page-views", 2),
                                                      CreatePartitionsTopic("clicks", 2)), 30_000, True), 2,
                       CreatePartitionsResponse)
    assert {t.name: t.error_code for t in grown.results} == {"page-views": 0, "clicks": K.TOPIC_AUTHORIZATION_FAILED}
    configs = authz.call(port, DescribeConfigsRequest((DescribeConfigsResource(TOPIC, "page-views"),
                                                       DescribeConfigsResource(TOPIC, "clicks"),
                                                       DescribeConfigsResource(BROKER, str(broker.broker_id)))), 4,
                         DescribeConfigsResponse)
    assert [r.error_code for r in configs.results] == [0, K.TOPIC_AUTHORIZATION_FAILED,
                                                       K.CLUSTER_AUTHORIZATION_FAILED]
