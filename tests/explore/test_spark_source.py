"""``spark.read.format("ingest")`` on the session SparkSession (local[2]) against real brokers and a real registry.

Every test compares whole collected rows with what was produced (records, partition,
broker id, byte offset, event time), so a wrong cut, a lost or duplicated message or a
mis-decoded field fails it.
"""
from __future__ import annotations

import json

import pytest

from tests.explore.conftest import GZIP, OLD, REPL, STEPS, VIEWS
from tests.explore.helpers import T0, as_compared, expected_row, key


def expected(cluster, topic, keep=lambda s: True):
    rows = []
    for s in cluster.sent[topic]:
        if keep(s):
            bid, _, p = s.partition.rpartition("-")
            rows.append(expected_row(s, topic, int(p), int(bid) if bid else None))
    return sorted(rows, key=key)


def test_the_whole_topic_decoded_exactly_one_spark_partition_per_topic_partition(read, cluster):
    df = read(VIEWS, df=True)
    assert df.columns == ["header", "member_id", "page_key", "url", "referrer", "user_agent", "ip", "locale",
                          "response_ms", "is_guest", "campaign", "topic", "partition", "broker_id", "offset",
                          "event_time"]
    types = dict(df.dtypes)
    assert (types["header"], types["member_id"], types["referrer"], types["response_ms"], types["is_guest"],
            types["campaign"], types["partition"], types["broker_id"], types["offset"], types["event_time"]) == (
        "struct<time:bigint,server:string,service:string,session:string,seq:bigint>", "bigint", "string", "int",
        "boolean", "string", "int", "int", "bigint", "timestamp")
    assert df.rdd.getNumPartitions() == 4
    rows = sorted((as_compared(x) for x in df.collect()), key=key)
    assert len(rows) == 32
    assert rows == expected(cluster, VIEWS)  # v1 events resolved into v2 (campaign null), v2 ones keep theirs
    assert sum(r["campaign"] is None for r in rows) == 16


def test_json_offsets_per_partition_with_zookeeper_discovery(read, cluster):
    by = {}
    for s in cluster.sent[VIEWS]:
        by.setdefault(s.partition, []).append(s.offset)
    start = {"0-0": by["0-0"][2], "0-1": -2, "1-0": by["1-0"][7], "1-1": by["1-1"][1]}
    end = {"0-0": by["0-0"][5], "0-1": by["0-1"][3], "1-0": -1, "1-1": by["1-1"][1]}
    rows = read(VIEWS, **{"zk.connect": cluster.zk_connect, "startingOffsets": json.dumps({VIEWS: start}),
                          "endingOffsets": json.dumps({VIEWS: end})})
    lo = {n: (by[n][0] if v == -2 else v) for n, v in start.items()}
    hi = {n: (float("inf") if v == -1 else v) for n, v in end.items()}
    want = expected(cluster, VIEWS, lambda s: lo[s.partition] <= s.offset < hi[s.partition])
    assert [(r["broker_id"], r["partition"], r["offset"]) for r in rows] == \
           [(r["broker_id"], r["partition"], r["offset"]) for r in want]
    assert rows == want
    assert len(rows) == 3 + 3 + 1 + 0


def _cut(times, start, end):
    """Indexes [i, j) the source reads: from the first time >= start to before the next time >= end after it."""
    i = next((k for k, x in enumerate(times) if x >= start), len(times))
    j = next((k for k in range(i, len(times)) if times[k] >= end), len(times))
    return i, j


def test_timestamps_cut_each_partition_at_its_first_message_at_or_after_them(read, cluster):
    start, end = T0 + 9000, T0 + 18000
    rows = read(VIEWS, startingTimestamp=str(start), endingTimestamp=str(end))
    want = []
    for (bid, p), steps in STEPS.items():
        i, j = _cut([T0 + s * 1000 for s in steps], start, end)
        want += [s for s in cluster.sent[VIEWS] if s.partition == f"{bid}-{p}"][i:j]
    assert sorted((r["broker_id"], r["partition"], r["offset"]) for r in rows) == sorted(
        (int(s.partition[0]), int(s.partition[2]), s.offset) for s in want)
    # by hand: 0-0 from 9 to the end (9 3 11 7 15); 0-1 from 10 (10 12 14 16); 1-0 from 20, which is >= 18:
    # nothing; 1-1 from 30, >= 18: nothing. Times before the start inside the range are kept (3, 7).
    assert [r["event_time"] - T0 for r in rows] == [9000, 3000, 11000, 7000, 15000, 10000, 12000, 14000, 16000]


def test_timestamps_per_partition_and_the_strategy_for_a_partition_with_no_match(read, cluster):
    late = T0 + 100_000
    per = {"0-0": T0 + 15000, "0-1": late, "1-0": T0, "1-1": T0 + 37000}
    opts = {"startingOffsetsByTimestamp": json.dumps({VIEWS: per})}
    with pytest.raises(Exception) as err:
        read(VIEWS, **opts)
    assert "partition 0-1: no message in" in str(err.value) and f"starting timestamp {late}" in str(err.value)
    rows = read(VIEWS, startingOffsetsByTimestampStrategy="latest",
                endingOffsetsByTimestamp=json.dumps({VIEWS: {"0-0": late, "0-1": late, "1-0": T0 + 3000,
                                                             "1-1": late}}), **opts)
    # 0-0 from 15 (its last); 0-1 nothing (strategy latest); 1-0 from its first (3), which is >= 3: nothing;
    # 1-1 from 37 (its last)
    assert [(r["broker_id"], r["partition"], r["event_time"]) for r in rows] == [(0, 0, T0 + 15000), (1, 1, T0 + 37000)]


def test_a_replicated_topic_names_partitions_by_number_and_has_no_broker_id(read, cluster):
    rows = read(REPL, endingOffsets=json.dumps({REPL: {"0": -1, "1": -1}}))
    assert rows == expected(cluster, REPL)
    assert len(rows) == 10 and {r["broker_id"] for r in rows} == {None}
    with pytest.raises(Exception) as err:
        read(REPL, startingOffsets=json.dumps({REPL: {"0-0": -2, "1": -2}}))
    assert "must name every partition of 'sx-repl' and only those" in str(err.value)
    assert "partitions are 0, 1; unknown: 0-0; missing: 0" in str(err.value)


def test_a_compressed_set_is_decompressed_and_its_messages_share_the_wrapper_offset(read, cluster):
    rows = read(GZIP)
    assert rows == expected(cluster, GZIP)
    offsets = [r["offset"] for r in rows]
    assert len(rows) == 7 and len(set(offsets)) == 3
    assert [offsets.count(o) for o in sorted(set(offsets))] == [3, 1, 3]
    # a JSON start at the second wrapper reads it whole
    second = sorted(set(offsets))[2]
    rows = read(GZIP, startingOffsets=json.dumps({GZIP: {"0-0": second, "0-1": -2}}))  # 0-1 is empty
    assert [r["header"]["time"] for r in rows] == [T0 + 3000, T0 + 4000, T0 + 5000]


def test_max_bytes_per_partition_cuts_each_range_at_its_segment_start(read, cluster):
    df = read(VIEWS, df=True, maxBytesPerPartition="1024")
    assert df.rdd.getNumPartitions() == 8  # each 0.7 partition: two segments (one per produced batch)
    assert sorted((as_compared(x) for x in df.collect()), key=key) == expected(cluster, VIEWS)


def test_messages_in_kafka_0_7_s_own_formats_are_read_like_ours(read, cluster):
    rows = read(OLD)
    assert rows == expected(cluster, OLD)
    assert [r["header"]["time"] - T0 for r in rows] == [0, 1000, 2000, 3000, 4000, 5000, 6000]
    assert {(r["broker_id"], r["partition"]) for r in rows} == {(1, 1)}
    assert len({r["offset"] for r in rows}) == 5  # magic 0 x2, magic 1 x2, one wrapper of 3


def test_a_middle_segment_cut_short_fails_the_query_or_with_fail_on_data_loss_false_is_skipped(
        spark, cluster, tmp_path):
    """A sealed segment cut short while its broker was stopped (a broker of its own: the package cluster
    stays intact). By default the query fails naming the damaged range (Spark's Kafka source's
    ``failOnDataLoss``); with ``failOnDataLoss=false`` every intact message is read, the messages in
    the segments after the cut included. On the code before, the option did not exist, and the fetch
    after the damaged tail answered STORAGE_ERROR."""
    from pyspark.errors import PythonException

    from ingest.explore import register
    from ingest.broker.segment import parse_segment_name
    from tests.explore.helpers import as_compared, events, send
    from tests.harness.brokers import BrokerProcess
    from tests.harness.wire import WireClient

    topic = "sx-cut"
    b = BrokerProcess(7, tmp_path / "broker", overrides={"num.partitions": 1, "log.file.size": 1500})
    b.start()
    try:
        sent = []
        with WireClient(b.host, b.port) as w:
            for i in range(20):  # one message per set: several segments
                sent += send(w, topic, 0, "7-0", events(cluster.registry_url, topic, [T0 + i * 1000], seed=i, v2=True))
        b.stop()
        d = b.log_dir / f"{topic}-0"
        bases = sorted(x for x in (parse_segment_name(f.name) for f in d.iterdir()) if x is not None)
        assert len(bases) >= 3
        victim = max((s for s in sent if s.offset < bases[1]), key=lambda s: s.offset)
        with open(d / f"{bases[0]:020d}.kafka", "r+b") as f:
            f.truncate(victim.offset - bases[0] + 20)
        b.start()

        register(spark)

        def load(**options):
            r = (spark.read.format("ingest").option("topic", topic).option("registry.url", cluster.registry_url)
                 .option("brokers", f"{b.host}:{b.port}"))
            for k, v in options.items():
                r = r.option(k, v)
            return sorted((as_compared(x) for x in r.load().collect()), key=key)

        with pytest.raises(PythonException, match=f"damaged at offsets {victim.offset}..{bases[1]}"):
            load()
        rows = load(failOnDataLoss="false")
        assert [r["offset"] for r in rows] == [s.offset for s in sent if s is not victim]
        assert rows == sorted((expected_row(s, topic, 0, 7) for s in sent if s is not victim), key=key)
    finally:
        b.stop()
