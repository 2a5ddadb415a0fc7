"""ZooKeeper authentication and znode ACLs (``zookeeper.set.acl``) and the migration tool ``ingest zk-acls``.

Real ZooKeeper, real broker processes, real clients (confluent-kafka on the Kafka listener, a kazoo
client without credentials as the attacker).
"""
from __future__ import annotations

import itertools

import pytest

from ingest import znodes
from ingest.cli import main
from ingest.errors import ConfigError
from ingest.zk_security import ZkSecurity
from tests.harness import replicated as r
from tests.harness import zk_secure
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.kafka.clients import confluent_consume, confluent_produce, messages

pytestmark = pytest.mark.processes

PARTITIONS = 2


def _kafka_topic(brokers, topic: str) -> None:
    """Created by the brokers themselves (CreateTopics on the Kafka listener): the controller writes it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, replication_factor=len(brokers))],
                                  operation_timeout=30)
    futures[topic].result(60)


def _bootstrap(brokers) -> str:
    return ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers)


_rounds = itertools.count()


def _serves(brokers, zk, topic: str, tag: str) -> None:
    """Every partition of ``topic`` has all replicas in sync; a produce with acks=all reads back whole."""
    ids = {b.broker_id for b in brokers}
    for p in range(PARTITIONS):
        r.wait_for_state(zk, topic, p, lambda s: s.leader in ids and set(s.isr) == ids, 60, f"{ids} in sync")
    t0 = 1_700_000_000_000 + next(_rounds) * 1_000_000   # each round read back from its own first timestamp
    msgs = messages(tag, 20, PARTITIONS, t0)
    confluent_produce(_bootstrap(brokers), topic, msgs, "all", None)
    got = confluent_consume(_bootstrap(brokers), topic, PARTITIONS, len(msgs), from_ts=t0)
    assert sorted(v for records in got.values() for _o, _k, v, _h, _t in records) == sorted(m.value for m in msgs)


def _assert_cluster_state_protected(zk_connect: str, topic: str) -> None:
    """An unauthenticated client reads what is world-readable and can change none of it."""
    with zk_secure.anonymous(zk_connect) as anon:
        assert anon.get_children(znodes.BROKER_IDS)                      # discovery still works
        assert anon.get(znodes.CONTROLLER)[0]
        state = znodes.partition_state_path(topic, 0)
        assert anon.get(state)[0]
        zk_secure.assert_no_auth(lambda: anon.create(znodes.broker_path(99), b"evil:127.0.0.1:1"))
        zk_secure.assert_no_auth(lambda: anon.delete(znodes.broker_path(0)))
        zk_secure.assert_no_auth(lambda: anon.set(znodes.CONTROLLER, b'{"version":1,"brokerid":99}'))
        zk_secure.assert_no_auth(lambda: anon.delete(znodes.CONTROLLER))
        zk_secure.assert_no_auth(lambda: anon.set(znodes.CONTROLLER_EPOCH, b"999"))
        zk_secure.assert_no_auth(lambda: anon.set(state, b'{"leader":99,"isr":[99]}'))
        zk_secure.assert_no_auth(lambda: anon.delete(state))
        zk_secure.assert_no_auth(lambda: anon.create(znodes.partition_state_path(topic, 7), b"{}"))
        zk_secure.assert_no_auth(lambda: anon.set(znodes.topic_dir(topic), b"{}"))
        zk_secure.assert_no_auth(lambda: anon.create(znodes.topic_dir("planted"), b"{}"))
        zk_secure.assert_no_auth(lambda: anon.create(znodes.CONFIG_TOPICS + "/planted", b"{}"))
        zk_secure.assert_no_auth(lambda: anon.create("/planted", b""))       # beside /brokers, in the chroot
        for root in znodes.KAFKA_ACL_ROOTS:
            zk_secure.assert_no_auth(lambda root=root: anon.create(root + "/Topic/x", b"{}"))
            zk_secure.assert_no_auth(lambda root=root: anon.get(root))
            zk_secure.assert_no_auth(lambda root=root: anon.delete(root + "/Topic"))
        zk_secure.assert_no_auth(lambda: anon.get(znodes.CONFIG_USERS + "/alice"))
        zk_secure.assert_no_auth(lambda: anon.get_children(znodes.CONFIG_USERS))
        zk_secure.assert_no_auth(lambda: anon.set(znodes.CONFIG_USERS + "/alice", b"{}"))
        # the 0.7 consumers' own state stays theirs
        anon.create(znodes.CONSUMERS + "/g/ids/anon", b"{}", makepath=True, ephemeral=True)


def _sensitive_nodes(zk_connect: str) -> None:
    """What the authorizer and the SCRAM credentials write, written the way the product writes."""
    with zk_secure.product(zk_connect) as zk:
        zk.retry(zk.create, znodes.CONFIG_USERS + "/alice", b'{"version":1,"config":{}}', makepath=True)
        for root in znodes.KAFKA_ACL_ROOTS:
            zk.retry(zk.ensure_path, root + "/Topic")


def test_a_secured_cluster_serves_and_an_unauthenticated_client_cannot_change_it(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=2, zk_connect=zk_connect, overrides=r.replication_overrides(**zk_secure.SECURE))
    _kafka_topic(brokers, "orders")
    _serves(brokers, zk, "orders", "secured")
    _sensitive_nodes(zk_connect)
    _assert_cluster_state_protected(zk_connect, "orders")
    with zk_secure.product(zk_connect) as product:
        assert product.retry(product.get, znodes.CONFIG_USERS + "/alice")[0]   # the product reads what it wrote
    # a broker that restarts re-registers and is elected again under the secured nodes
    brokers[0].stop()
    brokers[0].start()
    _serves(brokers, zk, "orders", "after-restart")


def test_the_migration_tool_secures_a_running_cluster_after_the_rolling_restarts(broker_factory, zk_connect, zk,
                                                                                 tmp_path, capsys):
    brokers = broker_factory(n=2, zk_connect=zk_connect, overrides=r.replication_overrides())
    _kafka_topic(brokers, "clicks")
    _serves(brokers, zk, "clicks", "open")
    cred = tmp_path / "zk.properties"
    cred.write_text(f"zk.connect={zk_connect}\nzookeeper.digest.username={zk_secure.USERNAME}\n"
                    f"zookeeper.digest.password={zk_secure.PASSWORD}\n")
    assert main(["zk-acls", "check", "--config", str(cred)]) == 1        # an open tree is reported
    with zk_secure.anonymous(zk_connect) as anon:
        anon.set(znodes.CONTROLLER_EPOCH, anon.get(znodes.CONTROLLER_EPOCH)[0])   # anyone may change it today
    # 1) every broker restarts with the credentials, 2) then with zookeeper.set.acl=true
    for step in (zk_secure.CREDENTIALS, zk_secure.SECURE):
        for b in brokers:
            b.stop()
            b.overrides.update(step)
            b.start()
            _serves(brokers, zk, "clicks", f"rolling-{b.broker_id}-{len(step)}")
    # 3) the tool sets the ACLs of what was created before; a rerun changes nothing and succeeds
    assert main(["zk-acls", "secure", "--config", str(cred)]) == 0
    assert main(["zk-acls", "secure", "--config", str(cred)]) == 0
    capsys.readouterr()
    assert main(["zk-acls", "check", "--config", str(cred)]) == 0, capsys.readouterr().out
    _sensitive_nodes(zk_connect)
    _assert_cluster_state_protected(zk_connect, "clicks")
    _serves(brokers, zk, "clicks", "secured")
    brokers[1].stop()
    brokers[1].start()
    _serves(brokers, zk, "clicks", "secured-restart")
    # and back (Kafka's order): a rolling restart with zookeeper.set.acl=false, then the tool opens the tree
    for b in brokers:
        b.stop()
        b.overrides["zookeeper.set.acl"] = False
        b.start()
        _serves(brokers, zk, "clicks", f"unsecuring-{b.broker_id}")
    assert main(["zk-acls", "unsecure", "--config", str(cred)]) == 0
    with zk_secure.anonymous(zk_connect) as anon:
        anon.set(znodes.CONTROLLER_EPOCH, anon.get(znodes.CONTROLLER_EPOCH)[0])
        assert anon.get(znodes.CONFIG_USERS + "/alice")[0]
    _serves(brokers, zk, "clicks", "unsecured")


def test_the_migration_tool_without_the_identity_is_refused_with_the_keys_to_set(zk_connect, capsys):
    assert main(["zk-acls", "secure", "--zk-connect", zk_connect]) == 2
    err = capsys.readouterr().err
    assert "zookeeper.digest.username" in err and "zookeeper.digest.password" in err
    # a chroot with nothing of the product in it (a typo) is said, exit 1
    assert main(["zk-acls", "secure", "--zk-connect", zk_connect, "--set", "zookeeper.digest.username=u",
                 "--set", "zookeeper.digest.password=p"]) == 1
    assert "is the chroot right?" in capsys.readouterr().err


def test_the_policy_gives_each_node_its_own_acl(zk_connect):
    """Parents made by ``makepath``/``ensure_path`` and nodes made in a transaction get their own path's ACL."""
    from kazoo.security import READ_ACL_UNSAFE

    with zk_secure.product(zk_connect) as zk:
        zk.create(znodes.CONFIG_USERS + "/bob", b"{}", makepath=True)
        t = zk.transaction()
        t.create(znodes.CONTROLLER, b"{}")
        t.commit()
        zk.ensure_path(znodes.CONSUMERS + "/g/offsets")
        world_read = READ_ACL_UNSAFE[0]
        assert world_read in zk.get_acls(znodes.CONFIG)[0]                      # /config is readable...
        assert world_read not in zk.get_acls(znodes.CONFIG_USERS)[0]            # ...its users are not
        assert zk.get_acls(znodes.CONFIG_USERS + "/bob")[0] == zk.get_acls(znodes.CONFIG_USERS)[0]
        assert world_read in zk.get_acls(znodes.CONTROLLER)[0]
        assert len(zk.get_acls(znodes.CONTROLLER)[0]) == 2
        assert zk.get_acls(znodes.CONSUMERS + "/g/offsets")[0][0].id.scheme == "world"
        assert zk.get_acls(znodes.CONSUMERS + "/g/offsets")[0][0].acl_list == ["ALL"]


def test_set_acl_without_an_identity_is_a_config_error_naming_the_keys():
    with pytest.raises(ConfigError, match="zookeeper.set.acl=true needs .*zookeeper.digest.username"):
        ZkSecurity.from_config({"zookeeper.set.acl": True})
    with pytest.raises(ConfigError, match="zookeeper.digest.password is not set"):
        ZkSecurity.from_config({"zookeeper.digest.username": "ingest"})
    with pytest.raises(ConfigError, match="contains ':'"):
        ZkSecurity("a:b", "pw")
    assert "pw" not in repr(ZkSecurity("ingest", "pw", True))


def test_clients_without_the_identity_are_refused_with_the_keys_to_set(broker_factory, zk_connect, tmp_path,
                                                                        capsys):
    from tests.harness.brokers import BrokerProcess, BrokerStartError

    brokers = broker_factory(n=1, zk_connect=zk_connect, overrides=zk_secure.SECURE)
    # the topics tool: without the broker's config it has no identity, with it the topic is written
    assert main(["topics", "create", "--zookeeper", zk_connect, "--topic", "views", "--partitions", "1"]) == 2
    err = capsys.readouterr().err
    assert "secured (zookeeper.set.acl)" in err and "zookeeper.digest.username" in err, err
    assert main(["topics", "create", "--config", str(brokers[0].config_path), "--topic", "views",
                 "--partitions", "1"]) == 0
    # a broker without the identity (or with another one) cannot join, and says why
    for overrides in ({}, {"zookeeper.digest.username": "intruder", "zookeeper.digest.password": "guess"}):
        stranger = BrokerProcess(50 + len(overrides), tmp_path / f"stranger{len(overrides)}", zk_connect=zk_connect,
                                 overrides=overrides)
        try:
            with pytest.raises(BrokerStartError, match="refused the change: the cluster's nodes are secured"):
                stranger.start()
        finally:
            stranger.kill()
    with zk_secure.anonymous(zk_connect) as anon:
        assert anon.get_children(znodes.BROKER_IDS) == ["0"]
    # any command refused by ZooKeeper says what to give it, in one line
    mirror = tmp_path / "mirror.properties"
    mirror.write_text(f"sources=dc1\nsource.dc1.zk.connect={zk_connect}\ntarget.zk.connect={zk_connect}\n")
    capsys.readouterr()
    assert main(["mirror", "--config", str(mirror)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ingest mirror: error: ZooKeeper refused a change") and "zookeeper.digest" in err[-1]


def test_the_registry_store_secures_its_nodes(zk_connect):
    from ingest.events.registry_store import ZooKeeperStore

    store = ZooKeeperStore(zk_connect, security=ZkSecurity(zk_secure.USERNAME, zk_secure.PASSWORD, set_acl=True))
    try:
        with store.write_lock():
            schema_id = store.add_schema('"string"')
    finally:
        store.close()
    with zk_secure.anonymous(zk_connect) as anon:
        assert anon.get(znodes.registry_id_path(schema_id))[0] == b'"string"'
        zk_secure.assert_no_auth(lambda: anon.set(znodes.registry_id_path(schema_id), b'"int"'))
        zk_secure.assert_no_auth(lambda: anon.create(znodes.registry_dir("subjects") + "/planted", b""))


def test_the_walk_reports_progress_skips_what_is_not_the_products_and_checks_clean(zk_connect, monkeypatch):
    from ingest.broker import zk_acls

    monkeypatch.setattr(zk_acls, "BATCH", 50)
    monkeypatch.setattr(zk_acls, "PROGRESS_EVERY", 200)
    with zk_secure.product(zk_connect, set_acl=False) as zk:      # an open tree, as before the migration
        zk.ensure_path(znodes.BROKER_TOPICS)
        zk.ensure_path("/other-tenant")
        results = [zk.create_async(f"{znodes.BROKER_TOPICS}/t{i}", b"") for i in range(600)]
        for res in results:
            res.get(timeout=30)
        secure = ZkSecurity(zk_secure.USERNAME, zk_secure.PASSWORD, set_acl=True)
        assert len(zk_acls.check(zk, secure.acl_for)) == 603     # /, /brokers, /brokers/topics and the 600
        seen: list[int] = []
        assert zk_acls.apply(zk, secure.acl_for, progress=seen.append) == 603
        assert seen == [200, 400, 600]
        assert zk_acls.check(zk, secure.acl_for) == []
        assert zk.get_acls("/other-tenant")[0][0].id.scheme == "world"     # not the product's: left alone


def test_a_mirror_with_the_identity_copies_between_secured_clusters_and_its_checkpoints_are_protected(
        zookeeper, broker_factory, tmp_path):
    from ingest.mirror.mirror_maker import MirrorMaker
    from tests.mirror.mirror_setup import TargetCluster, chroot, produce, wait_mirrored

    dc1_zk, target_zk = chroot(zookeeper, "dc1"), chroot(zookeeper, "target")
    (dc1,) = broker_factory(1, zk_connect=dc1_zk, overrides=zk_secure.SECURE)
    broker_factory(1, zk_connect=target_zk, overrides=zk_secure.SECURE)
    sent = produce(dc1, "clicks", 0, [f"c{i}".encode() * 10 for i in range(20)])
    props = {"sources": "dc1", "source.dc1.zk.connect": dc1_zk, "target.zk.connect": target_zk,
             "mirror.id": "m-secure", "mirror.group": "secure", "checkpoint.interval.ms": 100,
             "topic.refresh.ms": 500, **zk_secure.SECURE}
    target = TargetCluster(target_zk)
    try:
        mirror = MirrorMaker(props).start()
        try:
            wait_mirrored(target, {("clicks", 0): sent})
        finally:
            mirror.stop()
    finally:
        target.close()
    with zk_secure.anonymous(target_zk) as anon:
        group = znodes.mirror_group_path("secure")
        assert anon.get_children(group)
        zk_secure.assert_no_auth(lambda: anon.create(group + "/planted", b""))
        zk_secure.assert_no_auth(lambda: anon.delete(group + "/" + sorted(anon.get_children(group))[0]))


def test_a_new_session_after_expiry_authenticates_again(zk_connect):
    """kazoo sends the credentials again on every new session: a broker that lost its session re-registers."""
    from tests.harness.zookeeper import expire_session

    with zk_secure.product(zk_connect) as zk:
        zk.create(znodes.broker_path(1), b"a", ephemeral=True, makepath=True)
        expire_session(zk, zk_connect)
        zk.retry(zk.create, znodes.broker_path(1), b"b", ephemeral=True)     # under the secured /brokers/ids
        assert zk.retry(zk.get, znodes.broker_path(1))[0] == b"b"
