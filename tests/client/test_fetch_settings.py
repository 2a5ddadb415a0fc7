"""Fetch settings and partitions on a broker: one value and one type for every reader.

Pure: no process is started (consumers connect lazily).
"""
from __future__ import annotations

from dataclasses import asdict

from ingest.client.consumer_config import CONSUMER_CONFIG
from ingest.client.fetch_settings import DEFAULT_FETCH, FetchSettings
from ingest.client.leader_consumer import LeaderConsumer
from ingest.client.partition_reader import BrokerPartition, open_consumer
from ingest.client.simple_consumer import SimpleConsumer
from ingest.explore.source_config import SOURCE_CONFIG
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.plan import PartitionSnapshot, TaskRange
from ingest.loader.task import TaskSettings
from ingest.mirror.config import MIRROR_FETCH, MIRROR_LEADER_WAIT_S, fetch_settings

MB = 1024 * 1024


def test_each_reader_takes_its_settings_from_its_own_keys_with_one_set_of_defaults():
    assert DEFAULT_FETCH == FetchSettings(300 * 1024, 64 * MB, 30.0, 30.0)   # Kafka 0.7's fetch.size, socket.timeout.ms
    loader = LOADER_CONFIG.parse({"destination": "/d", "brokers": "h:1", "registry.url": "http://r"}, source="t")
    assert FetchSettings.from_config(loader) == FetchSettings(1 * MB, 64 * MB, 30.0, 30.0)
    tuned = loader.with_overrides({"socket.timeout.ms": "5000", "fetch.size": "2048"})
    assert FetchSettings.from_config(tuned) == FetchSettings(2048, 64 * MB, 5.0, 5.0)   # a failover: one timeout
    group = CONSUMER_CONFIG.parse({"zk.connect": "z:1", "groupid": "g"}, source="t")
    assert FetchSettings.from_config(group).fetch_size == 300 * 1024
    explore = SOURCE_CONFIG.parse({"topic": "t", "brokers": "h:1", "registry.url": "http://r"}, source="t")
    assert FetchSettings.from_config(explore) == FetchSettings.from_config(loader)
    # the mirror: a failover is reported after a short wait (its copy loop retries anyway)
    assert MIRROR_FETCH == FetchSettings(fetch_size=1 * MB, leader_wait_s=MIRROR_LEADER_WAIT_S)
    assert fetch_settings({"fetch.size": 4096, "socket.timeout.ms": 9000}) == \
        FetchSettings(4096, 64 * MB, 9.0, MIRROR_LEADER_WAIT_S)


def test_consumers_default_to_the_common_settings_and_keywords_override_one_field():
    c = SimpleConsumer("127.0.0.1", 9)
    assert (c.fetch_size, c.max_fetch_size, c.conn.timeout_s) == (300 * 1024, 64 * MB, 30.0)
    s = FetchSettings(1000, 5000, 2.0, 7.0)
    c = SimpleConsumer("127.0.0.1", 9, settings=s, fetch_size=2000)
    assert (c.fetch_size, c.max_fetch_size, c.conn.timeout_s) == (2000, 5000, 2.0)
    lc = LeaderConsumer(None, settings=s)
    assert (lc.fetch_size, lc.max_fetch_size, lc.timeout_s, lc.leader_wait_s) == (1000, 5000, 2.0, 7.0)


def test_the_plan_and_its_tasks_are_partitions_on_a_broker_and_open_the_right_consumer():
    snap = PartitionSnapshot("t", 3, 1, "127.0.0.1", 9, earliest=0, latest=10)
    task = TaskRange("t", 3, 1, "127.0.0.1", 9, "127.0.0.1:9,127.0.0.1:10", task_id=0, start=0, end=10)
    assert isinstance(snap, BrokerPartition) and isinstance(task, BrokerPartition)
    assert snap.key == task.key == ("t", 3, 1) and not snap.replicated and task.replicated
    assert TaskRange(**asdict(task)) == task   # as the ingest_load data source ships it
    settings = FetchSettings(1000, 5000, 2.0, 7.0)
    with open_consumer(snap, settings) as c:
        assert type(c) is SimpleConsumer and (c.host, c.port, c.fetch_size) == ("127.0.0.1", 9, 1000)
    with open_consumer(task, settings) as c:
        assert type(c) is LeaderConsumer and (c.fetch_size, c.leader_wait_s) == (1000, 7.0)


def test_a_components_defaults_are_its_key_tables():
    from ingest.mirror.config import MIRROR_CONFIG

    assert TaskSettings("/d", "r", "parquet", "http://r").fetch == FetchSettings.defaults_of(LOADER_CONFIG) == \
        FetchSettings(1 * MB, 64 * MB, 30.0, 30.0)
    assert MIRROR_FETCH == FetchSettings.defaults_of(MIRROR_CONFIG, leader_wait_s=MIRROR_LEADER_WAIT_S)


def test_task_settings_carry_the_fetch_settings_through_json():
    s = TaskSettings("/d", "r", "parquet", "http://r", fetch=FetchSettings(1000, 5000, 2.0, 7.0))
    assert TaskSettings.from_json(asdict(s)) == s
