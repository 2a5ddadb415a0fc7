"""Partitioner, broker list parsing and client config validation (no network)."""
from __future__ import annotations

import os
import subprocess
import sys
import zlib

import pytest

from ingest.client.discovery import BrokerAddress, parse_broker_list, parse_broker_znode
from ingest.client.partitioner import DefaultPartitioner, load_partitioner, stable_hash
from ingest.client.consumer_config import CONSUMER_CONFIG
from ingest.client.producer_config import PRODUCER_CONFIG
from ingest.errors import ConfigError


def test_stable_hash_is_crc32_of_key_bytes():
    assert stable_hash("user-42") == zlib.crc32(b"user-42")
    assert stable_hash(b"\x00\xff") == zlib.crc32(b"\x00\xff")


@pytest.mark.processes
def test_stable_hash_is_the_same_in_processes_with_different_hash_seeds():
    code = "from ingest.client.partitioner import DefaultPartitioner as P; print(P().partition('abc', 12))"
    outs = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout.strip())
    assert outs == {str(zlib.crc32(b"abc") % 12)}


def test_random_partition_without_key_covers_all_partitions():
    p = DefaultPartitioner(seed=1)
    assert {p.partition(None, 4) for _ in range(200)} == {0, 1, 2, 3}


def test_partitioner_rejects_zero_partitions():
    with pytest.raises(ValueError):
        DefaultPartitioner().partition("k", 0)


def test_custom_partitioner_is_loaded_from_module_class():
    p = load_partitioner("tests.client.test_client_units:AlwaysLast")
    assert p.partition("k", 5) == 4


def test_bad_partitioner_class_names_the_value():
    with pytest.raises(ConfigError, match="nope"):
        load_partitioner("nope")
    with pytest.raises(ConfigError, match="no_such_module"):
        load_partitioner("no_such_module:X")


class AlwaysLast:
    def partition(self, key, num_partitions):
        return num_partitions - 1


def test_broker_list_parsing():
    assert parse_broker_list("1:h:9093, 0:127.0.0.1:9092") == [
        BrokerAddress(0, "127.0.0.1", 9092), BrokerAddress(1, "h", 9093)]


@pytest.mark.parametrize("bad", ["", "h:9092", "x:h:9092", "0:h:port", "0::9092", "0:h:70000", "0:h:1,0:h:2"])
def test_bad_broker_list_names_the_entry(bad):
    with pytest.raises(ConfigError) as err:
        parse_broker_list(bad)
    assert "broker.list" in str(err.value)


def test_broker_znode_values():
    assert parse_broker_znode(3, b"127.0.0.1:9092") == BrokerAddress(3, "127.0.0.1", 9092)
    assert parse_broker_znode(3, b"creator-1:h:1") == BrokerAddress(3, "h", 1)
    assert parse_broker_znode(3, b'{"host": "h", "port": 2}') == BrokerAddress(3, "h", 2)


def test_producer_config_rejects_bad_values_with_allowed_range():
    with pytest.raises(ConfigError, match="producer.type.*sync, async"):
        PRODUCER_CONFIG.parse({"producer.type": "fast"})
    with pytest.raises(ConfigError, match="batch.size"):
        PRODUCER_CONFIG.parse({"batch.size": "0"})
    with pytest.raises(ConfigError, match="did you mean queue.time"):
        PRODUCER_CONFIG.parse({"queue.tme": "5"})


def test_consumer_config_defaults_and_reset_choices():
    cfg = CONSUMER_CONFIG.parse({"groupid": "g", "zk.connect": "127.0.0.1:1"})
    assert cfg["autooffset.reset"] == "smallest"
    with pytest.raises(ConfigError, match="smallest, largest"):
        CONSUMER_CONFIG.parse({"autooffset.reset": "earliest"})


def test_sample_properties_files_load():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert PRODUCER_CONFIG.load(root / "conf/producer.properties")["producer.type"] in ("sync", "async")
    assert CONSUMER_CONFIG.load(root / "conf/consumer.properties")["groupid"]
