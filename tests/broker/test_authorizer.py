"""The ACL decision (Kafka's ``AclAuthorizer`` rules), the ZooKeeper store in Kafka's layout, the watched
cache, and the replica-identity rule, against a real ZooKeeper."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from ingest.broker.authorizer import zk_store
from ingest.broker.authorizer.acl import (Acl, AclEntry, Operation, PatternType, Permission, ResourcePattern,
                                          ResourceType, decide)
from ingest.broker.authorizer.authorizer import Authorizer
from ingest.broker.authorizer.cache import AclCache
from ingest.broker.kafka import authorization
from ingest.broker.kafka.dispatcher import RequestContext
from ingest.broker.kafka.session import Session
from tests.harness.wait import wait_until

A, D = Permission.ALLOW, Permission.DENY
ALICE = "User:alice"


def e(op: Operation, perm=A, principal=ALICE, host="*") -> AclEntry:
    return AclEntry(principal, host, op, perm)


def test_deny_wins_and_describe_is_implied_as_kafka_decides():
    assert decide([e(Operation.WRITE)], ALICE, "10.0.0.1", Operation.WRITE, False)
    assert not decide([e(Operation.WRITE)], ALICE, "10.0.0.1", Operation.READ, False)
    assert decide([e(Operation.WRITE)], ALICE, "10.0.0.1", Operation.DESCRIBE, False)        # implied
    assert decide([e(Operation.ALTER_CONFIGS)], ALICE, "h", Operation.DESCRIBE_CONFIGS, False)
    assert not decide([e(Operation.DESCRIBE)], ALICE, "h", Operation.READ, False)            # not the reverse
    assert not decide([e(Operation.ALL), e(Operation.WRITE, D)], ALICE, "h", Operation.WRITE, False)
    assert not decide([e(Operation.WRITE), e(Operation.ALL, D, "User:*")], ALICE, "h", Operation.WRITE, False)
    assert decide([e(Operation.WRITE), e(Operation.WRITE, D, host="10.0.0.9")], ALICE, "10.0.0.1", Operation.WRITE,
                  False)
    assert not decide([e(Operation.WRITE, host="10.0.0.9")], ALICE, "10.0.0.1", Operation.WRITE, False)
    assert not decide([e(Operation.WRITE)], "User:bob", "h", Operation.WRITE, False)
    assert decide([], ALICE, "h", Operation.WRITE, True) and not decide([], ALICE, "h", Operation.WRITE, False)


def test_bad_acls_are_refused_naming_the_value():
    with pytest.raises(ValueError, match="alice"):
        AclEntry("alice", "*", Operation.READ, A)
    with pytest.raises(ValueError, match="kafka-cluster"):
        ResourcePattern(ResourceType.CLUSTER, "mine")
    with pytest.raises(ValueError, match="Read.*Group|Group"):
        Acl(ResourcePattern(ResourceType.GROUP, "g"), e(Operation.WRITE))
    with pytest.raises(ValueError, match="Frobnicate"):
        Operation.parse("Frobnicate")
    assert Operation.parse("cluster_action") is Operation.CLUSTER_ACTION


@pytest.mark.processes
def test_the_store_writes_kafkas_layout_and_every_cache_follows_changes(zk):
    topic = ResourcePattern(ResourceType.TOPIC, "page-views")
    prefix = ResourcePattern(ResourceType.TOPIC, "page-", PatternType.PREFIXED)
    zk_store.change(zk, topic, add={e(Operation.WRITE)})
    zk_store.change(zk, topic, add={e(Operation.WRITE, D, "User:bob")})
    zk_store.change(zk, topic, remove={e(Operation.WRITE, D, "User:bob")})     # adds and removes keep the others
    data, _ = zk.get("/kafka-acl/Topic/page-views")
    assert json.loads(data) == {"version": 1, "acls": [{"principal": ALICE, "permissionType": "Allow",
                                                        "operation": "Write", "host": "*"}]}
    assert [zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")] == \
        [b"Topic:page-views"] * 3
    cache = AclCache(zk).start()
    try:
        assert cache.entries(ResourceType.TOPIC, "page-views") == [e(Operation.WRITE)]
        zk_store.change(zk, prefix, add={e(Operation.READ)})
        assert json.loads(zk.get("/kafka-acl-extended/prefixed/Topic/page-")[0])["acls"][0]["operation"] == "Read"
        wait_until(lambda: len(cache.entries(ResourceType.TOPIC, "page-views")) == 2, 30, "the prefixed ACL cached")
        assert cache.entries(ResourceType.TOPIC, "page-clicks") == [e(Operation.READ)]
        assert cache.entries(ResourceType.TOPIC, "clicks") == []
        zk_store.change(zk, topic, remove_all=True)
        assert zk.exists("/kafka-acl/Topic/page-views") is None       # an empty pattern's znode is deleted
        wait_until(lambda: cache.entries(ResourceType.TOPIC, "page-views") == [e(Operation.READ)], 30,
                   "the removal cached")
    finally:
        cache.close()


@pytest.mark.processes
def test_a_replica_id_is_accepted_only_from_that_brokers_registered_principal(zk):
    zk_store.change(zk, ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"),
                    add={e(Operation.CLUSTER_ACTION, principal="User:broker-1"), e(Operation.CLUSTER_ACTION)})
    cache = AclCache(zk).start()
    authorizer = Authorizer(cache, frozenset(), False)
    apis = SimpleNamespace(authorizer=authorizer, registered_principal={1: "User:broker-1"}.get)
    try:
        def ctx(principal):
            return RequestContext("PLAINTEXT", "10.0.0.7:5000", 1, 11, 1, "c",
                                  Session("PLAINTEXT", "PLAINTEXT", "10.0.0.7:5000", principal, True))

        assert authorization.replica(apis, ctx("User:broker-1"), 1)
        assert not authorization.replica(apis, ctx(ALICE), 1)          # allowed ClusterAction, not broker 1
        assert not authorization.replica(apis, ctx("User:broker-1"), 2)  # no broker 2 registered
        assert not authorization.replica(apis, ctx("User:bob"), 1)     # no ClusterAction at all
        assert authorizer.denials() == {("Fetch", "Replica", "ClusterAction"): 2,
                                        ("Fetch", "Cluster", "ClusterAction"): 1}
    finally:
        cache.close()


def _acls(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ingest.cli", "acls", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.processes
def test_the_acls_command_adds_lists_removes_and_names_bad_values(zk, zk_connect):
    out = _acls("add", "--zookeeper", zk_connect, "--allow-principal", ALICE, "--producer", "--topic", "page-",
                "--resource-pattern-type", "prefixed")
    assert out.returncode == 0, out.stderr
    assert "name=page-, patternType=PREFIXED" in out.stdout and "operation=CREATE" in out.stdout
    stored = zk_store.read_all(zk)
    assert {(p.type.value, p.name, p.pattern.value, e.operation.value) for p, es in stored.items() for e in es} \
        == {("Topic", "page-", "Prefixed", op) for op in ("Write", "Describe", "Create")}
    listed = _acls("list", "--zookeeper", zk_connect, "--topic", "page-views", "--resource-pattern-type", "match")
    assert "name=page-," in listed.stdout and "operation=WRITE" in listed.stdout
    assert _acls("list", "--zookeeper", zk_connect, "--topic", "clicks", "--resource-pattern-type",
                 "match").stdout == ""
    removed = _acls("remove", "--zookeeper", zk_connect, "--topic", "page-", "--resource-pattern-type", "prefixed")
    assert removed.returncode == 0 and zk.exists("/kafka-acl-extended/prefixed/Topic/page-") is None
    for args, message in ((("--allow-principal", "alice", "--operation", "Read", "--topic", "t"), "TYPE:NAME"),
                          (("--allow-principal", ALICE, "--operation", "Frob", "--topic", "t"), "'Frob' is not"),
                          (("--allow-principal", ALICE, "--operation", "Write", "--group", "g"), "does not apply"),
                          (("--allow-principal", ALICE, "--operation", "Read"), "needs a resource")):
        bad = _acls("add", "--zookeeper", zk_connect, *args)
        assert bad.returncode != 0 and message in bad.stderr, (args, bad.stderr)
