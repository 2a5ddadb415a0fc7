"""Offset forms and option checks of ``format("ingest")`` without Spark: exact ranges and exact messages.

``plan_ranges`` is given partitions as discovery reports them (a Kafka 0.7 topic on
two brokers, 2 partitions each), so every rule of ingest/explore/offsets.py is
checked here in milliseconds; tests/explore/test_spark_source.py checks the same
forms end to end.
"""
from __future__ import annotations

import json

import pytest

from ingest.errors import ConfigError, OffsetOutOfRangeError, SchemaError
from ingest.explore.avro_types import record_type
from ingest.explore.offsets import ReadRange, partition_name, plan_ranges
from ingest.loader.plan import PartitionSnapshot
from ingest.explore.source_config import parse_options
from ingest.explore.split import split_range

T = "views"
PARTS = [PartitionSnapshot(T, b, p, "h", 9000 + b, earliest=100 * p, latest=1000 + 100 * p)
         for b in (0, 1) for p in (0, 1)]
REPLICATED = [PartitionSnapshot(T, 0, p, "h", 9000, "h:9000,h:9001", earliest=0, latest=500) for p in (0, 1)]


def plan(parts=PARTS, **options):
    return plan_ranges(parse_options({"topic": T, "brokers": "h:1", "registry.url": "http://r", **options}), parts)


def spans(ranges):
    return [(partition_name(r.part), r.start, r.end, r.start_time, r.end_time) for r in ranges]


def js(**per):
    return json.dumps({T: {k.replace("_", "-").lstrip("p"): v for k, v in per.items()}})


def test_defaults_are_earliest_to_latest_and_partitions_are_named_as_in_zookeeper():
    assert spans(plan()) == [("0-0", 0, 1000, None, None), ("0-1", 100, 1100, None, None),
                             ("1-0", 0, 1000, None, None), ("1-1", 100, 1100, None, None)]
    assert spans(plan(REPLICATED)) == [("0", 0, 500, None, None), ("1", 0, 500, None, None)]
    assert spans(plan(startingoffsets="EARLIEST", endingoffsets=" Latest ")) == spans(plan())  # keywords: any case


def test_json_offsets_with_minus_two_and_minus_one():
    r = plan(startingOffsets=js(p0_0=10, p0_1=-2, p1_0=1000, p1_1=150),
             endingOffsets=js(p0_0=20, p0_1=-1, p1_0=-1, p1_1=150))
    assert spans(r) == [("0-0", 10, 20, None, None), ("0-1", 100, 1100, None, None),
                        ("1-0", 1000, 1000, None, None), ("1-1", 150, 150, None, None)]
    assert spans(plan(REPLICATED, startingOffsets=json.dumps({T: {"0": 7, "1": -2}}))) == [
        ("0", 7, 500, None, None), ("1", 0, 500, None, None)]


def test_timestamps_take_precedence_and_read_from_earliest():
    r = plan(startingTimestamp="5000", startingOffsetsByTimestamp=js(p0_0=1, p0_1=1, p1_0=1, p1_1=1),
             startingOffsets=js(p0_0=10, p0_1=-2, p1_0=-2, p1_1=-2), endingOffsets=js(p0_0=20, p0_1=-1, p1_0=-1, p1_1=-1))
    assert spans(r)[0] == ("0-0", 0, 20, 5000, None)
    r = plan(startingOffsetsByTimestamp=js(p0_0=1, p0_1=2, p1_0=3, p1_1=4), endingTimestamp="9000",
             endingOffsetsByTimestamp=js(p0_0=1, p0_1=1, p1_0=1, p1_1=1))
    assert spans(r) == [("0-0", 0, 1000, 1, 9000), ("0-1", 100, 1100, 2, 9000), ("1-0", 0, 1000, 3, 9000),
                        ("1-1", 100, 1100, 4, 9000)]
    assert isinstance(r[0], ReadRange)


@pytest.mark.parametrize("options, error, text", [
    ({"startingOffsets": "latest"}, ConfigError,
     "startingOffsets: 'latest' is not allowed for a batch read (as in Spark's Kafka source); allowed is earliest "
     "or JSON per partition"),
    ({"endingOffsets": "earliest"}, ConfigError,
     "endingOffsets: 'earliest' is not allowed for a batch read (as in Spark's Kafka source); allowed is latest or "
     "JSON per partition"),
    ({"startingOffsets": "first"}, ConfigError, "startingOffsets: 'first'; allowed is earliest or JSON per partition "
                                                'like {"views":{"0-0":0}}'),
    ({"startingOffsets": '{"views":'}, ConfigError, "startingOffsets: '{\"views\":' is not JSON"),
    ({"startingOffsets": json.dumps({"other": {"0-0": 1}})}, ConfigError,
     "startingOffsets: '{\"other\": {\"0-0\": 1}}' must be a JSON object with the one key 'views' (the topic read)"),
    ({"startingOffsets": js(p0_0=1, p0_1=1, p1_0=1)}, ConfigError,
     "startingOffsets must name every partition of 'views' and only those (Spark's rule): partitions are 0-0, 0-1, "
     "1-0, 1-1; missing: 1-1"),
    ({"startingOffsets": js(p0_0=1, p0_1=1, p1_0=1, p1_1=1, p7_0=1)}, ConfigError, "; unknown: 7-0"),
    ({"startingOffsets": js(p0_0="x", p0_1=1, p1_0=1, p1_1=1)}, ConfigError,
     "startingOffsets: partition '0-0' has 'x'; allowed is an integer"),
    ({"startingOffsets": js(p0_0=-1, p0_1=1, p1_0=1, p1_1=1)}, ConfigError,
     "startingOffsets: -1 for partition 0-0 of 'views'; allowed is an offset >= 0 or -2 (earliest) (a batch query "
     "cannot start at latest)"),
    ({"endingOffsets": js(p0_0=-2, p0_1=-1, p1_0=-1, p1_1=-1)}, ConfigError,
     "endingOffsets: -2 for partition 0-0 of 'views'; allowed is an offset >= 0 or -1 (latest) (a batch query "
     "cannot end at earliest)"),
    ({"endingOffsets": js(p0_0=5000, p0_1=-1, p1_0=-1, p1_1=-1)}, OffsetOutOfRangeError,
     "endingOffsets: offset 5000 of partition 0-0 of 'views' is outside the log's [0, 1000] (earliest, latest)"),
    ({"startingOffsets": js(p0_0=-2, p0_1=50, p1_0=-2, p1_1=-2)}, OffsetOutOfRangeError,
     "startingOffsets: offset 50 of partition 0-1 of 'views' is outside the log's [100, 1100]"),
    ({"startingOffsets": js(p0_0=30, p0_1=-2, p1_0=-2, p1_1=-2), "endingOffsets": js(p0_0=20, p0_1=-1, p1_0=-1, p1_1=-1)},
     ConfigError, "partition 0-0 of 'views': starting offset 30 is after the ending offset 20; allowed is start <= end"),
    ({"startingOffsetsByTimestamp": js(p0_0=-5, p0_1=1, p1_0=1, p1_1=1)}, ConfigError,
     "startingOffsetsByTimestamp: -5 for partition 0-0; allowed is an event time in ms >= 0"),
    ({"startingTimestamp": "yesterday"}, ConfigError,
     "invalid value 'yesterday' for 'startingTimestamp': allowed is an integer in [0, +inf]"),
    ({"startingOffsetsByTimestampStrategy": "skip"}, ConfigError,
     "invalid value 'skip' for 'startingOffsetsByTimestampStrategy': allowed is one of error, latest"),
    ({"brokers": ""}, ConfigError, "needs the option brokers (host:port,...), zk.connect, or bootstrap.servers"),
    ({"startingoffset": "earliest"}, ConfigError,
     "unknown spark source config key 'startingoffset'; did you mean startingOffsets"),
    ({"path": "/x"}, ConfigError, "unknown spark source config key 'path'"),
])
def test_a_bad_option_names_the_value_and_what_is_allowed(options, error, text):
    with pytest.raises(error) as err:
        plan(**options)
    assert text in str(err.value)


def test_an_event_schema_becomes_spark_columns_as_from_avro_types_them():
    schema = {"type": "record", "name": "E", "namespace": "n", "fields": [
        {"name": "a", "type": {"type": "enum", "name": "Color", "symbols": ["R", "G"]}},
        {"name": "b", "type": ["null", "Color"]},
        {"name": "c", "type": {"type": "array", "items": "long"}},
        {"name": "d", "type": {"type": "map", "values": ["null", "double"]}},
        {"name": "e", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "f", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "g", "type": {"type": "record", "name": "In", "fields": [{"name": "x", "type": "int"}]}},
        {"name": "h", "type": {"type": "fixed", "name": "F4", "size": 4}},
    ]}
    struct, convert = record_type(schema)
    assert struct.simpleString() == ("struct<a:string,b:string,c:array<bigint>,d:map<string,double>,e:timestamp,"
                                     "f:decimal(9,2),g:struct<x:int>,h:binary>")
    assert [f.nullable for f in struct.fields] == [False, True, False, False, False, False, False, False]
    row = convert({"a": "R", "b": None, "c": [1], "d": {"k": None}, "e": 5, "f": 1, "g": {"x": 3}, "h": b"abcd"})
    assert row == ("R", None, [1], {"k": None}, 5, 1, (3,), b"abcd")
    with pytest.raises(SchemaError, match=r"field u: union \['int', 'string'\] is not supported"):
        record_type({"type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]})
    with pytest.raises(SchemaError, match="field r.next: recursive type"):
        record_type({"type": "record", "name": "L", "fields": [
            {"name": "r", "type": {"type": "record", "name": "N", "fields": [{"name": "next", "type": "N"}]}}]})


def test_the_options_table_of_docs_spark_source_is_the_code_s():
    from pathlib import Path

    from ingest.explore.source_config import SOURCE_CONFIG

    doc = (Path(__file__).resolve().parents[2] / "docs" / "spark-source.md").read_text()
    assert SOURCE_CONFIG.markdown_table() in doc


def test_a_range_is_cut_at_segment_starts_into_pieces_of_at_most_max_bytes_where_possible():
    r = ReadRange(PARTS[0], 0, 3500)
    cut = [(x.start, x.end) for x in split_range(r, [0, 1000, 2000, 3000, 4000], 1500)]
    assert cut == [(0, 1000), (1000, 2000), (2000, 3500)]
    assert [(x.start, x.end) for x in split_range(r, [0, 3000], 1500)] == [(0, 3000), (3000, 3500)]  # one big segment
    assert [(x.start, x.end) for x in split_range(r, [0, 1000], 4000)] == [(0, 3500)]
    timed = ReadRange(PARTS[0], 0, 3500, start_time=5)
    assert split_range(timed, [0, 1000, 2000], 1500) == [timed]  # a timestamp bound needs the whole partition
