"""The loader on replicated topics: plans against leaders, loads up to the high watermark,
and a leader SIGKILLed during a load neither loses nor duplicates anything; a replicated 0.7 topic
deleted between two loads is not planned by the second and its committed state stays as it was.

Real ZooKeeper, three real broker processes, a real schema registry and the shared
SparkSession. A replicated partition is named by its home broker (its first
replica) in the loader's state, so its committed offset survives the failover.
"""
from __future__ import annotations

import collections
import json
from dataclasses import asdict

import pytest

from ingest.errors import IngestError
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.plan import PartitionSnapshot, TaskRange, build_plan
from ingest.loader.records import OffsetRecord
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.replication_topics import (
    create_replicated_topic,
    leader_process,
    metadata_of,
    produce_acked,
    wait_for_leaders,
)
from tests.harness.wait import wait_until

REPLICATION = {"min.insync.replicas": 2}


# --- planning (no brokers) ------------------------------------------------------------------

def _snap(latest, replicated=True):
    return PartitionSnapshot("rt", 0, 0, "127.0.0.1", 9, "127.0.0.1:9,127.0.0.1:10" if replicated else "", earliest=0, latest=latest)


def test_a_lagging_high_watermark_defers_a_replicated_partition_but_fails_a_legacy_one():
    committed = {("rt", 0, 0): OffsetRecord("rt", 0, 0, 500, None)}
    plan = build_plan(run_id="r", base_seq=1, snapshots=[_snap(400)], committed=committed)
    (p,) = plan.partitions
    assert (p.start, p.end, p.tasks, p.deferred_bytes) == (500, 500, (), 0)  # offset kept, nothing loaded
    with pytest.raises(IngestError, match="beyond the broker's latest offset 400"):
        build_plan(run_id="r", base_seq=1, snapshots=[_snap(400, replicated=False)], committed=committed)


def test_tasks_of_a_replicated_partition_carry_the_brokers_to_find_the_leader():
    plan = build_plan(run_id="r", base_seq=1, snapshots=[_snap(300)], committed={})
    (task,) = plan.tasks
    assert task.replicated and task.metadata_brokers == "127.0.0.1:9,127.0.0.1:10"
    assert TaskRange(**json.loads(json.dumps(asdict(task)))) == task  # as the Spark data source ships it


# --- with brokers -----------------------------------------------------------------------------

def encoded_events(registry_url, topic, n, *, seed=1):
    """``n`` page views for ``topic`` as framed Avro payloads, in batches of up to 50, and their
    (session, seq) ids."""
    from ingest.events.envelope import HeaderFactory, ProducerIdentity
    from ingest.events.loadgen import EventGenerator
    from ingest.events.registry_client import RegistryClient
    from ingest.events.schemas import load_schema, schema_for_topic
    from ingest.events.serde import EventSerializer, subject_for_topic

    ser = EventSerializer(RegistryClient(registry_url), subject_for_topic(topic), load_schema(schema_for_topic(topic)))
    headers = HeaderFactory(ProducerIdentity.new("replication-test"))
    gen = EventGenerator(seed=seed)
    batches, ids = [], []
    for i in range(0, n, 50):
        batch = []
        for record in gen.batch(min(50, n - i)):
            h = headers.next()
            batch.append(ser.serialize({**record, "header": h}))
            ids.append((h["session"], h["seq"]))
        batches.append(batch)
    return batches, ids


def produce_events(md, registry_url, topic, partition, n, *, seed=1):
    """``n`` page views to ``topic``-``partition`` with acks=-1; returns their (session, seq) ids."""
    batches, ids = encoded_events(registry_url, topic, n, seed=seed)
    for batch in batches:
        produce_acked(md, topic, partition, batch)
    return ids


def produce_legacy_events(broker, registry_url, topic, n, *, seed=1):
    """``n`` page views to partition 0 of the Kafka 0.7 topic ``topic`` of ``broker`` (PRODUCE_ACK); their ids."""
    from ingest.wire.errors import ErrorCode
    from tests.harness.wire import WireClient

    batches, ids = encoded_events(registry_url, topic, n, seed=seed)
    with WireClient(broker.host, broker.port) as c:
        for batch in batches:
            assert c.produce_ack(topic, batch).error == ErrorCode.NONE
    return ids


def config_for(dest, zk_connect, registry_url, topic, **overrides):
    raw = {"destination": str(dest), "zk.connect": zk_connect, "registry.url": registry_url, "format": "avro",
           "topics": topic, "fetch.size": 4096, "socket.timeout.ms": 60_000}
    raw.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LOADER_CONFIG.parse(raw, source="test")


def _cluster(broker_factory, zk, zk_connect, topic, assignment):
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=REPLICATION)
    create_replicated_topic(zk, topic, assignment)
    md = metadata_of(brokers)
    wait_for_leaders(md, topic, len(assignment), isr=3)
    return brokers, md


@pytest.mark.slow
def test_a_task_reading_its_range_goes_on_at_the_same_offset_after_the_leader_is_killed(
        broker_factory, zk, zk_connect, registry_url, tmp_path):
    from ingest.events.registry_client import RegistryClient
    from ingest.events.serde import EventDeserializer
    from ingest.loader import discover
    from ingest.loader.job import task_settings
    from ingest.client.partition_reader import open_consumer
    from ingest.loader.task import read_range

    topic = "rl-task"
    brokers, md = _cluster(broker_factory, zk, zk_connect, topic, {0: [1, 2, 0]})
    ids = produce_events(md, registry_url, topic, 0, 400)
    cfg = config_for(tmp_path / "out", zk_connect, registry_url, topic)
    (snap,) = [s for s in discover.discover(cfg) if s.topic == topic]
    leader = leader_process(brokers, md, topic, 0)
    assert (snap.broker_id, snap.partition, snap.earliest) == (1, 0, 0)  # named by its home broker
    assert (snap.host, snap.port) == (leader.host, leader.port) and snap.replicated
    assert snap.latest > 0
    (task,) = build_plan(run_id="r", base_seq=0, snapshots=[snap], committed={}).tasks
    settings = task_settings(cfg, "r")
    decode = EventDeserializer(RegistryClient(registry_url)).deserialize
    got = []
    consumer = open_consumer(task, settings.fetch)
    try:
        for item in read_range(consumer, task, settings):
            if not got:
                leader.kill()  # after the first fetch: the rest comes from the new leader
            h = decode(item.payload, topic=topic, offset=item.offset)["header"]
            got.append((h["session"], h["seq"]))
    finally:
        consumer.close()
    assert got == ids  # every message of the range once, in order, across the failover

    def replanned():  # same name and end; the new leader's high watermark catches up within moments
        again = [s for s in discover.discover(cfg) if s.topic == topic]
        return again[0] if again and again[0].latest == snap.latest else None

    again = wait_until(replanned, 30, "the new leader's high watermark back at the planned end")
    assert again.broker_id == 1 and again.port != leader.port


def committed_ids(dest, topic) -> collections.Counter:
    from ingest.loader.state import LoaderState
    from ingest.storage import open_storage
    from tests.loader.helpers import read_rows

    state = LoaderState.load(open_storage(str(dest)))
    return collections.Counter((r["header"]["session"], r["header"]["seq"]) for r in read_rows(state, topic))


@pytest.mark.slow
def test_an_hourly_load_across_a_leader_failover_commits_every_message_exactly_once(
        spark, broker_factory, zk, zk_connect, registry_url, tmp_path):
    from ingest.loader import discover
    from ingest.loader.job import run_load

    topic = "rl-hourly"
    brokers, md = _cluster(broker_factory, zk, zk_connect, topic, {0: [0, 1, 2], 1: [1, 2, 0]})
    ids = produce_events(md, registry_url, topic, 0, 600) + produce_events(md, registry_url, topic, 1, 400, seed=2)
    dest = tmp_path / "out"
    cfg = config_for(dest, zk_connect, registry_url, topic)
    snapshots = discover.discover(cfg)  # planned against leader 0 of partition 0 ...
    victim = leader_process(brokers, md, topic, 0)
    assert {(s.host, s.port) for s in snapshots if s.partition == 0} == {(victim.host, victim.port)}
    victim.kill()                       # ... which dies before the tasks fetch: they find the new leader
    try:
        result = run_load(cfg, spark, snapshots=snapshots)
    except IngestError:  # a task outwaited its budget: the run commits nothing; the next one re-plans
        wait_for_leaders(md, topic, 2, exclude=(victim.broker_id,))
        result = run_load(cfg, spark)
    assert result.status == "committed"
    got = committed_ids(dest, topic)
    assert set(got) == set(ids) and max(got.values()) == 1
    keys = {r.key for r in result.plan.partitions}
    assert keys == {(topic, 0, 0), (topic, 1, 1)}  # home-broker names, whatever the leaders are now
    # more data on the new leaders, the old one back as a follower: the next hourly run loads just that
    more = produce_events(md, registry_url, topic, 0, 200, seed=3)
    victim.start()
    r2 = run_load(cfg, spark)
    assert r2.status == "committed" and r2.record["totals"]["messages"] == 200
    got = committed_ids(dest, topic)
    assert set(got) == set(ids) | set(more) and max(got.values()) == 1
    assert run_load(cfg, spark).status == "nothing-to-do"


@pytest.mark.slow
def test_a_load_right_after_a_broker_is_killed_loads_every_partition_with_a_leader_and_reports_the_rest(
        spark, broker_factory, zk, zk_connect, registry_url, tmp_path):
    """Broker 2 is SIGKILLed and the hourly load starts at once, while ZooKeeper still lists it (its session
    lasts 10 s). It follows both partitions of the replicated topic (each keeps its live leader) and alone
    holds a Kafka 0.7 topic. The load commits every new message of the replicated topic and reports broker 2
    as left out; its 0.7 partition keeps its committed offset and the run after its restart loads the rest."""
    from ingest.loader.job import run_load
    from ingest.loader.runrecord import summary_text

    topic, legacy = "rl-kill", "rl-kill-07"
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides={**REPLICATION, "zk.sessiontimeout.ms": 10_000})
    create_replicated_topic(zk, topic, {0: [0, 1, 2], 1: [1, 0, 2]})   # broker 2 leads nothing
    md = metadata_of(brokers)
    wait_for_leaders(md, topic, 2, isr=3)
    ids = produce_events(md, registry_url, topic, 0, 300) + produce_events(md, registry_url, topic, 1, 200, seed=2)
    legacy_ids = produce_legacy_events(brokers[2], registry_url, legacy, 100, seed=3)
    dest = tmp_path / "out"
    cfg = config_for(dest, zk_connect, registry_url, "rl-kill.*")
    assert run_load(cfg, spark).status == "committed"
    more = produce_events(md, registry_url, topic, 0, 100, seed=4) + produce_events(md, registry_url, topic, 1, 50,
                                                                                     seed=5)
    more_legacy = produce_legacy_events(brokers[2], registry_url, legacy, 50, seed=6)
    victim = brokers[2]
    committed_legacy = {k: o.offset for k, o in _committed(dest).items() if k[0] == legacy}
    victim.kill()

    result = run_load(cfg, spark)   # at once: broker 2 is still registered in ZooKeeper
    assert result.status == "committed"
    got = committed_ids(dest, topic)
    assert set(got) == set(ids) | set(more) and max(got.values()) == 1
    assert {r.key for r in result.plan.partitions} == {(topic, 0, 0), (topic, 1, 1)}
    (left,) = result.record["left_out"]
    assert (left["broker_id"], left["broker"]) == (2, f"{victim.host}:{victim.port}"), left
    assert left["partitions"] == [[legacy, 2, 0]]     # its committed Kafka 0.7 partition waits
    assert "LEFT OUT: broker 2" in summary_text(result.record)
    assert {k: o.offset for k, o in _committed(dest).items() if k[0] == legacy} == committed_legacy

    victim.start()
    again = run_load(cfg, spark)
    assert again.status == "committed"
    got = committed_ids(dest, legacy)
    assert set(got) == set(legacy_ids) | set(more_legacy) and max(got.values()) == 1
    assert not again.record["left_out"]


def _committed(dest):
    from ingest.loader.state import LoaderState
    from ingest.storage import open_storage

    return LoaderState.load(open_storage(str(dest))).offsets


@pytest.mark.slow
def test_a_deleted_replicated_07_topic_is_not_planned_and_its_committed_state_is_kept(
        spark, broker_factory, zk, zk_connect, registry_url, tmp_path):
    """Load a replicated 0.7 topic and a second one, delete the first (`ingest topics delete`), load again: the
    second run commits the other topic's new messages, plans nothing of the deleted one, reports no lost range
    and no broker left out, and leaves the deleted topic's committed offsets and loaded rows as they were
    (docs/operations.md, "The load and the audit after a delete")."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from ingest.loader.job import run_load

    topic, kept = "rldel", "rlkept"
    brokers, md = _cluster(broker_factory, zk, zk_connect, topic, {0: [0, 1, 2], 1: [1, 2, 0]})
    create_replicated_topic(zk, kept, {0: [2, 0, 1]})
    wait_for_leaders(md, kept, 1, isr=3)
    ids = produce_events(md, registry_url, topic, 0, 150) + produce_events(md, registry_url, topic, 1, 100, seed=2)
    kept_ids = produce_events(md, registry_url, kept, 0, 100, seed=3)
    dest = tmp_path / "out"
    cfg = config_for(dest, zk_connect, registry_url, "rl(del|kept)")
    first = run_load(cfg, spark)
    assert first.status == "committed" and {k[0] for k in (p.key for p in first.plan.partitions)} == {topic, kept}
    committed_before = {k: o for k, o in _committed(dest).items() if k[0] == topic}
    assert sorted(committed_before) == [(topic, 0, 0), (topic, 1, 1)]
    rows_before = committed_ids(dest, topic)
    assert set(rows_before) == set(ids)

    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-m", "ingest.cli", "topics", "delete", "--zookeeper", zk_connect,
                          "--topic", topic, "--wait", "60"], cwd=repo, capture_output=True, text=True, timeout=120,
                         env=env)
    assert res.returncode == 0, res.stderr
    more = produce_events(md, registry_url, kept, 0, 50, seed=4)

    second = run_load(cfg, spark)
    assert second.status == "committed"
    assert {p.key for p in second.plan.partitions} == {(kept, 2, 0)}, "nothing of the deleted topic is planned"
    assert second.record["totals"]["messages"] == 50
    assert not second.record["lost_ranges"] and not second.record["left_out"]
    assert {k: o for k, o in _committed(dest).items() if k[0] == topic} == committed_before
    assert committed_ids(dest, topic) == rows_before
    got = committed_ids(dest, kept)
    assert set(got) == set(kept_ids) | set(more) and max(got.values()) == 1
