"""The znode layout lives in ingest/znodes.py only, and ZooKeeper code calls ZooKeeper through client.retry."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from ingest import znodes

INGEST = Path(__file__).resolve().parents[1] / "ingest"
ZK_ROOTS = (znodes.BROKER_IDS.rsplit("/", 1)[0], znodes.CONSUMERS, znodes.SCHEMA_REGISTRY)
ZK_MODULES = sorted([*INGEST.glob("client/*.py"), INGEST / "broker" / "zk_registry.py",
                     INGEST / "events" / "registry_store.py", INGEST / "loader" / "discover.py"])
KAZOO_CALLS = {"get", "get_children", "create", "set", "delete", "exists", "ensure_path"}
KAZOO_NAMES = {"zk", "_zk", "client", "_client"}


def test_paths_and_values_round_trip():
    assert znodes.partition_name(3, 12) == "3-12"
    assert znodes.parse_partition_name("3-12") == (3, 12)
    with pytest.raises(ValueError):
        znodes.parse_partition_name("312")
    assert znodes.parse_broker_value(znodes.broker_value("h", 9092)) == ("h", 9092)
    assert znodes.parse_broker_value(b"creator-1:h:9092") == ("h", 9092)        # Kafka 0.7's form
    assert znodes.parse_broker_value(b'{"host": "h", "port": 9092}') == ("h", 9092)
    assert znodes.parse_partition_count(znodes.partition_count_value(4)) == 4
    assert znodes.offset_path("g", "t", 1, 2) == "/consumers/g/offsets/t/1-2"
    assert znodes.owner_path("g", "t", 1, 2) == "/consumers/g/owners/t/1-2"
    assert znodes.consumer_path("g", "c") == "/consumers/g/ids/c"
    assert znodes.topic_path("t", 5) == "/brokers/topics/t/5"
    assert znodes.broker_path(5) == "/brokers/ids/5"
    assert znodes.registry_id_from_path(znodes.registry_id_path(42)) == 42
    assert znodes.registry_id_path(1) == "/schema-registry/ids/id-0000000000"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_no_module_but_znodes_spells_a_znode_path():
    offenders = []
    for path in sorted(INGEST.rglob("*.py")):
        if path.name == "znodes.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            text = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                text = node.value
            elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
                text = str(node.values[0].value)
            if text is not None and text.startswith(ZK_ROOTS):
                offenders.append(f"{path.relative_to(INGEST.parent)}:{node.lineno}: {text!r}")
    assert not offenders, "znode paths are built by ingest.znodes:\n" + "\n".join(offenders)


def _receiver_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def test_zookeeper_calls_go_through_client_retry():
    direct = []
    for path in ZK_MODULES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in KAZOO_CALLS and _receiver_name(node.func.value) in KAZOO_NAMES):
                direct.append(f"{path.relative_to(INGEST.parent)}:{node.lineno}: {ast.unparse(node.func)}(...)")
    assert not direct, "call ZooKeeper as client.retry(client.<op>, ...):\n" + "\n".join(direct)


def test_a_kafka_topic_is_recorded_in_its_assignment_and_a_07_one_reads_unchanged():
    plain = znodes.assignment_value({0: [1, 2], 1: [2, 1]})
    assert plain == b'{"version":1,"partitions":{"0":[1,2],"1":[2,1]}}'   # what earlier versions wrote
    kafka = znodes.assignment_value({0: [1, 2], 1: [2, 1]}, znodes.KAFKA_FORMAT)
    assert znodes.parse_assignment(kafka) == znodes.parse_assignment(plain) == {0: (1, 2), 1: (2, 1)}
    assert znodes.parse_topic_format(kafka) == "kafka"
    assert znodes.parse_topic_format(plain) is None and znodes.parse_topic_format(b"") is None
    with pytest.raises(ValueError, match="unknown topic format 'avro'"):
        znodes.parse_topic_format(b'{"version":1,"partitions":{"0":[1]},"format":"avro"}')
    with pytest.raises(ValueError, match="'0.8'"):
        znodes.assignment_value({0: [1]}, "0.8")


def test_broker_endpoints_and_cluster_id_in_kafkas_shapes():
    value = znodes.broker_endpoints_value([("PLAINTEXT", "h1", 29092), ("INTERNAL", "10.0.0.1", 29093)],
                                          {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "PLAINTEXT"}, registered_ms=5)
    obj = json.loads(value)
    assert obj == {"version": 5, "host": "h1", "port": 29092,
                   "endpoints": ["PLAINTEXT://h1:29092", "INTERNAL://10.0.0.1:29093"],
                   "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "PLAINTEXT"},
                   "timestamp": "5"}
    assert znodes.parse_broker_endpoints(value) == {"PLAINTEXT": ("h1", 29092), "INTERNAL": ("10.0.0.1", 29093)}
    assert znodes.broker_endpoints_path(3) == "/brokers/endpoints/3"
    with pytest.raises(ValueError):
        znodes.parse_broker_endpoints(b'{"endpoints":["nohost"]}')
    assert znodes.parse_cluster_id(znodes.cluster_id_value("abc")) == "abc"
    assert json.loads(znodes.cluster_id_value("abc")) == {"version": "1", "id": "abc"}
    with pytest.raises(ValueError):
        znodes.parse_cluster_id(b'{"version":"1"}')
