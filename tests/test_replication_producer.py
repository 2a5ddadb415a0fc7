"""The producer on replicated topics (issue 12): acks levels, routing by partition number, failover.

Units (no processes): the ``request.required.acks`` / ``request.timeout.ms`` keys, the
request frame per acks level, routing a key to a replicated partition, the back-off and
the retry accounting of a failover.

Integration (real ZooKeeper, three real broker processes with ``enable.zookeeper=true``;
topics created by writing their assignment znode, :mod:`tests.harness.replication`):
an acks=-1 send to a replication-factor-3 topic, keyed messages on their hashed
partition, a new topic auto-created replicated, and a SIGKILL of a partition's leader
during a sync acks=-1 send loop.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from ingest.broker import protocol
from ingest.client.cluster import ClusterView, replicated_partition
from ingest.client.discovery import StaticDiscovery
from ingest.client.partitioner import DefaultPartitioner, stable_hash
from ingest.client.producer_config import PRODUCER_CONFIG
from ingest.client.send_batch import backoff_s, counts_as_retry, produce_frame
from ingest.errors import (BrokerUnavailableError, ConfigError, LeaderNotAvailableError,
                           NotEnoughReplicasError, NotLeaderForPartitionError, RequestTimedOutError)

# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw, value", [("-1", -1), ("0", 0), ("1", 1), (-1, -1), (" 1 ", 1)])
def test_acks_accepts_exactly_minus_one_zero_and_one(raw, value):
    assert PRODUCER_CONFIG.parse({"request.required.acks": raw})["request.required.acks"] == value


@pytest.mark.parametrize("raw", ["2", "-2", "all", "", "1.0", 5, True])
def test_acks_outside_the_three_levels_is_refused_naming_the_value_and_the_allowed_set(raw):
    with pytest.raises(ConfigError) as exc:
        PRODUCER_CONFIG.parse({"request.required.acks": raw}, source="producer.properties")
    message = str(exc.value)
    assert "\n" not in message
    assert f"invalid value {str(raw)!r} for 'request.required.acks'" in message
    assert message.endswith("allowed is one of -1, 0, 1")


def test_defaults_keep_acks_one_and_add_the_kafka_08_request_timeout():
    cfg = PRODUCER_CONFIG.parse({})
    assert cfg["request.required.acks"] == 1
    assert cfg["request.timeout.ms"] == 10_000
    with pytest.raises(ConfigError, match="'request.timeout.ms'"):
        PRODUCER_CONFIG.parse({"request.timeout.ms": "0"})


def test_console_producer_refuses_acks_2_with_one_line_and_the_config_error_exit_code():
    # docs/operations.md: a product error (ConfigError included) prints one line and exits 2
    r = subprocess.run([sys.executable, "-m", "ingest.cli", "console-producer", "--brokers", "0:127.0.0.1:1",
                        "--topic", "t", "--set", "request.required.acks=2"],
                       input=b"never sent\n", capture_output=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.decode().strip().splitlines()
    assert lines == ["ingest console-producer: error: console-producer: invalid value '2' for "
                     "'request.required.acks': allowed is one of -1, 0, 1"]


def test_acks_all_stretches_the_socket_timeout_over_the_request_timeout():
    def view(**keys):
        cfg = PRODUCER_CONFIG.parse({"broker.list": "0:127.0.0.1:1", "socket.timeout.ms": 3000, **keys})
        discovery = StaticDiscovery(cfg["broker.list"])
        try:
            return ClusterView(cfg, discovery).timeout_s
        finally:
            discovery.close()

    assert view() == 3.0
    assert view(**{"request.required.acks": -1, "request.timeout.ms": 20_000}) == 25.0
    assert view(**{"request.required.acks": -1, "request.timeout.ms": 100}) == 5.1


# --- requests per acks level --------------------------------------------------------------


def test_each_acks_level_sends_its_request_type():
    ms = b"message set bytes"
    zero = protocol.decode_request(produce_frame(0, 500, "t", 2, ms))
    one = protocol.decode_request(produce_frame(1, 500, "t", 2, ms))
    every = protocol.decode_request(produce_frame(-1, 500, "t", 2, ms))
    assert type(zero) is protocol.ProduceRequest and (zero.topic, zero.partition, zero.message_set) == ("t", 2, ms)
    assert type(one) is protocol.ProduceAckRequest and (one.topic, one.partition) == ("t", 2)
    assert type(every) is protocol.ProduceAcksRequest
    assert (every.required_acks, every.timeout_ms, every.topic, every.partition, every.message_set) == (
        -1, 500, "t", 2, ms)


# --- routing ------------------------------------------------------------------------------


def _topic(leaders: list[int], epoch: int = 0) -> protocol.ReplicatedTopic:
    parts = [protocol.PartitionReplicas(p, leader, epoch, (p % 3, (p + 1) % 3, (p + 2) % 3), (leader,))
             for p, leader in enumerate(leaders)]
    parts.reverse()  # the answer's order must not matter
    return protocol.ReplicatedTopic("clicks", 0, tuple(parts))


def test_a_key_maps_to_its_hashed_partition_number_whoever_leads():
    before = _topic([0, 1, 2, 0, 1])
    after = _topic([1, 2, -1, 1, 2], epoch=3)  # leaders moved, one partition without a leader
    partitioner = DefaultPartitioner()
    for i in range(50):
        key = f"user-{i}"
        p = replicated_partition(partitioner, None, before, key)
        assert p == stable_hash(key) % 5
        assert replicated_partition(partitioner, None, after, key) == p


def test_keyless_messages_spread_over_every_partition():
    partitioner = DefaultPartitioner(seed=7)
    seen = {replicated_partition(partitioner, None, _topic([0, 1, 2, 0]), None) for _ in range(200)}
    assert seen == {0, 1, 2, 3}


class _Minus:
    def partition(self, key, num_partitions):
        return -1


def test_a_custom_partitioner_out_of_range_is_refused_for_a_replicated_topic_too():
    with pytest.raises(ConfigError, match=r"'x:Minus' returned -1 for topic 'clicks'; allowed is an int in \[0, 2\]"):
        replicated_partition(_Minus(), "x:Minus", _topic([0, 1, 2]), b"k")


# --- retries -------------------------------------------------------------------------------


def test_backoff_doubles_from_retry_backoff_up_to_its_cap():
    assert [backoff_s(n, 0.1, 1.0) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff_s(10_000, 0.1, 2.0) == 2.0  # no overflow for long waits


def test_one_leaders_failure_costs_one_retry_however_long_the_election_takes():
    leader = (2, 7)
    dead = BrokerUnavailableError("connection refused")
    # the first failure against a leader counts
    assert counts_as_retry(dead, leader, None)
    # the same leader (same epoch) failing the same way again: the same failover, not counted
    for exc in (dead, NotLeaderForPartitionError("x"), LeaderNotAvailableError("x")):
        assert not counts_as_retry(exc, leader, leader)
    # a new leader, or a new epoch of the same broker, failing: counted
    assert counts_as_retry(dead, (1, 8), leader)
    assert counts_as_retry(dead, (2, 8), leader)
    # errors that are no leader change count every time
    for exc in (NotEnoughReplicasError("x"), RequestTimedOutError("x")):
        assert counts_as_retry(exc, leader, leader)
    # unreplicated partitions: every failure counts, as before
    assert counts_as_retry(dead, None, None)
