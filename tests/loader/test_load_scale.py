"""One hourly load over many partitions, replicated 0.7 and Kafka-format topics mixed, with exact row counts.

Real ZooKeeper, two brokers and a registry (tests/harness/scale_cluster.py), the session's SparkSession:
``INGEST_LOAD_SCALE_TOPICS`` topics of 10 partitions (default 20: 200 partitions, 13.5 s of the test on
a quiet 2-core machine) with
``INGEST_LOAD_SCALE_EVENTS`` events each (default 20). One load commits every row exactly once, every
partition's own count; a second run finds nothing new; the run record opens on its summary (per-topic
lines, slowest and largest partitions) and holds one line per partition, and the printed summary stays a
screen long (bench/bench_load_scale.py measures the same load at 1,000 partitions on local-cluster).
"""
from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from ingest.loader import layout
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import run_load
from ingest.loader.runrecord import SUMMARY_PARTITIONS, SUMMARY_TOPICS, summary_text
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.scale_cluster import PARTITIONS, ScaleCluster, topic_names

pytestmark = [pytest.mark.processes, pytest.mark.slow]  # ZooKeeper, brokers, registry and Spark

TOPICS = int(os.environ.get("INGEST_LOAD_SCALE_TOPICS", "20"))
EVENTS = int(os.environ.get("INGEST_LOAD_SCALE_EVENTS", "20"))


def test_a_load_over_hundreds_of_partitions_commits_each_partitions_rows_once(spark, tmp_path_factory):
    cluster = ScaleCluster(tmp_path_factory.mktemp("scale")).start()
    try:
        topics = topic_names(TOPICS)
        cluster.create_topics(topics)
        sent = cluster.produce(topics, EVENTS)
        dest = tmp_path_factory.mktemp("dest") / "out"
        config = LOADER_CONFIG.parse({"destination": str(dest), "zk.connect": cluster.zk_connect,
                                      "registry.url": cluster.registry.url, "topics": "scale-.*",
                                      "format": "parquet"}, source="test")
        result = run_load(config, spark)
        again = run_load(config, spark)
    finally:
        cluster.close()
    partitions = TOPICS * PARTITIONS
    assert result.status == "committed" and again.status == "nothing-to-do"
    record = result.record
    assert record["totals"]["partitions"] == partitions and not record["left_out"]
    assert record["totals"]["messages"] == sum(sent.values()) == partitions * EVENTS
    assert sorted(p["messages"] for p in record["partitions"]) == [EVENTS] * partitions   # every partition's own

    state = LoaderState.load(open_storage(str(dest)))
    rows = Counter()
    for t in topics:
        for f in state.files(t):
            rows[(f.topic, f.broker_id, f.partition)] += f.rows
    assert len(rows) == partitions and set(rows.values()) == {EVENTS}
    kafka = {k: o.offset for k, o in state.offsets.items() if "-kafka-" in k[0]}
    assert len(kafka) == partitions // 2 and set(kafka.values()) == {EVENTS}   # record offsets: a count

    # the record, as written: the summary first, then one line per partition
    text = open_storage(str(dest)).read_bytes(
        open_storage(str(dest)).join(layout.run_record_path(result.run_id))).decode()
    assert json.loads(text) == json.loads(json.dumps(record))
    lines = text.splitlines()
    assert lines.index(' "partitions": [') > lines.index(' "summary": {') > lines.index(' "status": "committed",')
    assert len(lines) < partitions + TOPICS + 4 * SUMMARY_PARTITIONS + 80
    summ = record["summary"]
    assert [t["topic"] for t in summ["topics"]] == sorted(topics)
    assert all((t["partitions"], t["messages"]) == (PARTITIONS, PARTITIONS * EVENTS) for t in summ["topics"])
    durations = sorted((p["duration_ms"] for p in record["partitions"]), reverse=True)
    assert [p["duration_ms"] for p in summ["slowest"]] == durations[:SUMMARY_PARTITIONS]
    printed = summary_text(record).splitlines()
    assert len(printed) <= 4 + min(TOPICS, SUMMARY_TOPICS) + 3
    assert any(line.startswith("  slowest partitions (ms): ") for line in printed)
