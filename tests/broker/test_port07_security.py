"""The 0.7 port on a broker with security configured: broker-only requests refused, start-up refused beyond
loopback unless allowed, and the port turned off with ``port=-1`` (docs/security.md, "The 0.7 port")."""
from __future__ import annotations

import socket

import pytest

from ingest import znodes
from ingest.broker.broker import BrokerServer
from ingest.broker.kafka.versions import PORT07_KEYS
from ingest.broker.server_config import SERVER_CONFIG
from ingest.errors import ConfigError
from ingest.wire import protocol as p
from ingest.wire.errors import ErrorCode
from ingest.wire.kafka.api_versions import ApiVersionsRequest
from ingest.wire.kafka.connection import KafkaConnection
from ingest.wire.kafka.port07_connection import Port07OverKafka
from tests.harness.brokers import RawClient
from tests.kafka import authz

pytestmark = pytest.mark.processes

AUTHORIZER = {"authorizer.class.name": authz.AUTHORIZER, "enable.zookeeper": "true"}


def _config(log_dir, **extra):
    raw = {"brokerid": 7, "port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": str(log_dir)}
    raw.update(extra)
    return SERVER_CONFIG.parse(raw)


def _broker_only(port: int) -> dict[str, int]:
    """The 0.7 port's answer (its error code) to each request a broker sends another."""
    fetch = p.ReplicaFetchRequest(1, 0, 0, p.FetchRequest("orders", 0, 0, 1 << 20))
    fetches = p.ReplicaFetchesRequest(1, 0, 1, 1 << 20, (p.ReplicaPartitionFetch("orders", 0, 0, 0, 1 << 20),))
    append = p.AppendAtRequest("orders", 0, -1, 1, 1000, b"")
    deleted = p.DeletedSegmentsRequest("orders", 0, 0, 100)
    out = {}
    with RawClient("127.0.0.1", port) as c:
        out["REPLICA_FETCH"] = p.ReplicaFetchResponse.decode(c.request(fetch)).error
        answer = p.ReplicaFetchesResponse.decode(c.request(fetches))
        out["REPLICA_FETCHES"] = answer.error or (answer.partitions[0].error if answer.partitions else -1)
        out["APPEND_AT"] = p.ProduceAckResponse.decode(c.request(append)).error
        out["DELETED_SEGMENTS"] = p.DeletedSegmentsResponse.decode(c.request(deleted)).error
    return out


def test_a_secured_broker_refuses_to_start_with_its_07_port_beyond_loopback(tmp_path, zk_connect):
    cfg = _config(tmp_path / "logs", hostname="0.0.0.0", **AUTHORIZER, **{"zk.connect": zk_connect})
    with pytest.raises(ConfigError, match=r"hostname='0.0.0.0'.*allow.insecure.v07.listener=true"):
        BrokerServer(cfg).start()


def test_allowed_beyond_loopback_it_starts_and_refuses_the_broker_only_requests_on_the_07_port(tmp_path, zk_connect):
    cfg = _config(tmp_path / "logs", hostname="0.0.0.0", **AUTHORIZER,
                  **{"zk.connect": zk_connect, "allow.insecure.v07.listener": "true"})
    broker = BrokerServer(cfg).start()
    try:
        codes = _broker_only(broker.port)
        assert (codes["REPLICA_FETCH"], codes["REPLICA_FETCHES"], codes["APPEND_AT"]) == \
            (ErrorCode.CLUSTER_AUTHORIZATION_FAILED,) * 3, codes
        assert codes["DELETED_SEGMENTS"] == ErrorCode.NONE, codes   # a read, as OFFSETS: still served
        # carried by the Kafka listener: refused too, to a principal without ClusterAction (no ACL at all)
        conn = Port07OverKafka("127.0.0.1", broker.kafka.listeners.bind[0].port, client_id="t")
        try:
            resp = conn.request(p.ReplicaFetchRequest(1, 0, 0, p.FetchRequest("orders", 0, 0, 1024)).encode(),
                                p.ReplicaFetchResponse)
            many = conn.request(p.ReplicaFetchesRequest(1, 0, 1, 1024, (
                p.ReplicaPartitionFetch("orders", 0, 0, 0, 1024),)).encode(), p.ReplicaFetchesResponse)
        finally:
            conn.close()
        assert resp.error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert (many.error, many.partitions) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ())
    finally:
        broker.stop()


def test_without_security_the_07_port_still_serves_the_broker_only_requests(tmp_path):
    broker = BrokerServer(_config(tmp_path / "logs")).start()
    try:
        codes = _broker_only(broker.port)
    finally:
        broker.stop()
    assert ErrorCode.CLUSTER_AUTHORIZATION_FAILED not in codes.values(), codes
    assert codes["REPLICA_FETCH"] == ErrorCode.NOT_LEADER_FOR_PARTITION   # no replication without ZooKeeper
    assert codes["REPLICA_FETCHES"] == ErrorCode.NOT_LEADER_FOR_PARTITION


def test_port_minus_one_turns_the_07_port_off_and_the_kafka_listener_serves(tmp_path):
    broker = BrokerServer(_config(tmp_path / "logs", port=-1)).start()
    try:
        assert broker.network is None and broker.port == -1
        kafka_port = broker.kafka.listeners.bind[0].port
        conn = KafkaConnection("127.0.0.1", kafka_port, client_id="t")
        try:
            assert conn.call(ApiVersionsRequest("t", "1"), 3).error_code == 0
        finally:
            conn.close()
    finally:
        broker.stop()
    with pytest.raises(ConfigError, match="port=-1.*listeners is empty"):
        BrokerServer(_config(tmp_path / "logs2", port=-1, listeners="")).start()
    with pytest.raises(ConfigError, match=r"'port'.*\[-1, 65535\]"):
        _config(tmp_path / "logs3", port=-2)


def test_loopback_needs_no_consent(tmp_path, zk_connect):
    broker = BrokerServer(_config(tmp_path / "logs", **AUTHORIZER, **{"zk.connect": zk_connect})).start()
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5):
            pass
    finally:
        broker.stop()


@pytest.mark.parametrize("extra, carried", [
    ({}, False),                                      # unsecured: followers and the mirror use the 0.7 port
    ({"authorizer.class.name": authz.AUTHORIZER}, True),   # refuses them on its 0.7 port
    ({"port": -1}, True),                             # has no 0.7 port
], ids=["unsecured", "authorizer", "no-07-port"])
def test_a_broker_registers_the_07_private_keys_only_when_its_07_port_does_not_take_them(tmp_path, zk, zk_connect,
                                                                                       extra, carried):
    """The registration decides where other brokers and the mirror send REPLICA_FETCH, APPEND_AT and
    DELETED_SEGMENTS (docs/replication.md): an unsecured broker keeps taking them on its 0.7 port."""
    broker = BrokerServer(_config(tmp_path / "logs", **{"enable.zookeeper": "true", "zk.connect": zk_connect,
                                                       **extra})).start()
    try:
        data, _ = zk.get(znodes.broker_endpoints_path(7))
    finally:
        broker.stop()
    keys = znodes.parse_private_apis(data)
    assert 10000 in keys   # AppendAt: Kafka topics' mirror path, whatever the 0.7 port does
    assert keys & PORT07_KEYS == (PORT07_KEYS if carried else set()), keys
