"""``format("ingest")`` on Kafka-format topics, with real processes: a confluent-kafka producer with
``AvroSerializer`` against the product's registry -> a broker's Kafka listener -> a real Spark read
through ``bootstrap.servers``.

Rows equal what was produced (event fields, record keys, headers and timestamps), every compression
codec, each with its logical offset; exactly the asked range by JSON offsets, by timestamps (ListOffsets,
the broker's time index) and in pieces of ``maxRecordsPerPartition``; a batch really damaged on the
broker's disk fails the read or, with ``failOnDataLoss=false``, is skipped; bad options are named.

Two topics: ``kx-clicks`` (events with the product's header: ``event_time`` is ``header.time``) and
``kx-plain`` (a schema of any producer, without it: ``event_time`` is the record's timestamp).
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.harness.brokers import broker_cluster, broker_factory, stop_all  # noqa: F401  (fixture)

pytestmark = pytest.mark.processes

PARTITIONS = 2
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
T0 = 1_700_000_000_000
CLICKS, PLAIN, DAMAGED = "kx-clicks", "kx-plain", "kx-damaged"

HEADER = {"type": "record", "name": "EventHeader", "namespace": "ingest.events",
          "fields": [{"name": "time", "type": "long"}, {"name": "server", "type": "string"},
                     {"name": "service", "type": "string"}, {"name": "session", "type": "string"},
                     {"name": "seq", "type": "long"}]}
CLICK = {"type": "record", "name": "Click", "namespace": "shop.events",
         "fields": [{"name": "header", "type": HEADER}, {"name": "page", "type": "string"},
                    {"name": "referrer", "type": ["null", "string"], "default": None},
                    {"name": "price", "type": "double"}]}
ORDER = {"type": "record", "name": "Order", "namespace": "shop.orders",
         "fields": [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "long"},
                    {"name": "tags", "type": {"type": "array", "items": "string"}}]}


def _click(i: int) -> dict:
    # event times out of step with the record timestamps: which one a column or an option uses shows
    return {"header": {"time": T0 + 3_600_000 + i * 1000, "server": "web-1", "service": "shop", "session": "s",
                       "seq": i},
            "page": f"/p/{i}", "referrer": None if i % 3 else f"/r/{i}", "price": i / 4}


def _order(i: int) -> dict:
    return {"order_id": f"o-{i}", "amount": i * 100, "tags": [f"t{j}" for j in range(i % 4)]}


def produce(bootstrap: str, registry_url: str, topic: str, schema: dict, make, n: int) -> list[dict]:
    """``n`` events through confluent-kafka's AvroSerializer, spread over every codec (one producer each),
    keys (every 5th none), headers (a null value on odd ones) and timestamps ``T0 + i * 7000``; the
    rows a read must give back, each with the partition and offset the broker acknowledged."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
    ctx = SerializationContext(topic, MessageField.VALUE)
    rows: list[dict] = []
    per_codec = -(-n // len(CODECS))
    for c, codec in enumerate(CODECS):
        acked: dict[int, tuple[int, int]] = {}
        errors: list = []
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": codec, "linger.ms": 5})
        mine = range(c * per_codec, min(n, (c + 1) * per_codec))
        for i in mine:
            key = None if i % 5 == 0 else f"k{i}".encode()
            headers = [("codec", codec.encode()), ("i", str(i).encode())] + ([("empty", None)] if i % 2 else [])
            ts = T0 + i * 7_000
            value = make(i)

            def done(err, msg, i=i):
                if err:
                    errors.append(err)
                else:
                    acked[i] = (msg.partition(), msg.offset())

            p.produce(topic, value=serializer(value, ctx), key=key, headers=headers, partition=i % PARTITIONS,
                      timestamp=ts, on_delivery=done)
            p.poll(0)
            event_ms = value["header"]["time"] if "header" in value else ts
            rows.append({**value, "_key": key, "_headers": [{"key": k, "value": v} for k, v in headers],
                         "_timestamp": ts, "topic": topic, "partition": None, "broker_id": None, "offset": None,
                         "event_time": event_ms, "i": i})
        assert p.flush(60) == 0 and not errors, errors[:3]
        for row in rows:
            if row["i"] in acked and row["offset"] is None:
                row["partition"], row["offset"] = acked[row["i"]]
    assert all(r["offset"] is not None for r in rows)
    return rows


@pytest.fixture(scope="module")
def kafka(tmp_path_factory, registry_url):
    """One broker without ZooKeeper (broker-local Kafka-format topics, two partitions each) and the
    events produced to it: ``(broker, {topic: rows})``."""
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=PARTITIONS)
    try:
        bootstrap = f"127.0.0.1:{brokers[0].kafka_port}"
        sent = {CLICKS: produce(bootstrap, registry_url, CLICKS, CLICK, _click, 100),
                PLAIN: produce(bootstrap, registry_url, PLAIN, ORDER, _order, 40)}
        yield brokers[0], sent
    finally:
        stop_all(brokers)


@pytest.fixture(scope="module")
def kread(spark, kafka, registry_url):
    """``kread(topic, df=False, **options)`` -> rows as comparable dicts sorted by partition and offset."""
    from ingest.explore import register

    register(spark)
    broker, _ = kafka

    def run(topic, *, df=False, **options):
        r = (spark.read.format("ingest").option("topic", topic).option("registry.url", registry_url)
             .option("bootstrap.servers", f"127.0.0.1:{broker.kafka_port}"))
        for k, v in options.items():
            r = r.option(k, v)
        frame = r.load()
        return frame if df else sorted((_compared(x) for x in frame.collect()), key=_key)

    return run


def _compared(row) -> dict:
    def norm(v):
        if isinstance(v, bytearray):
            return bytes(v)
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dt.datetime):
            return round(v.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
        return v

    return norm(row.asDict(recursive=True))


def _key(d: dict) -> tuple:
    return d["partition"], d["offset"]


def _expected(kafka, topic: str, keep=lambda r: True) -> list[dict]:
    rows = [{k: v for k, v in r.items() if k != "i"} for r in kafka[1][topic] if keep(r)]
    return sorted(rows, key=_key)


def test_every_record_decoded_with_its_key_headers_timestamp_and_offset_every_codec(kread, kafka):
    df = kread(CLICKS, df=True)
    assert df.columns == ["header", "page", "referrer", "price", "_key", "_headers", "_timestamp", "topic",
                          "partition", "broker_id", "offset", "event_time"]
    types = dict(df.dtypes)
    assert (types["_key"], types["_headers"], types["_timestamp"], types["offset"], types["event_time"]) == (
        "binary", "array<struct<key:string,value:binary>>", "bigint", "bigint", "timestamp")
    assert df.rdd.getNumPartitions() == PARTITIONS
    rows = sorted((_compared(x) for x in df.collect()), key=_key)
    assert rows == _expected(kafka, CLICKS)
    assert {r["offset"] for r in rows if r["partition"] == 0} == set(range(50))   # logical offsets
    # an event without the product's header: event_time is the record's timestamp
    assert kread(PLAIN) == _expected(kafka, PLAIN)


def test_json_offsets_read_exactly_the_asked_range_also_in_pieces(kread, kafka):
    asked = {CLICKS: {"0": 7, "1": -2}}
    until = {CLICKS: {"0": 31, "1": 13}}
    want = _expected(kafka, CLICKS, lambda r: (7 <= r["offset"] < 31) if r["partition"] == 0 else r["offset"] < 13)
    assert kread(CLICKS, startingOffsets=json.dumps(asked), endingOffsets=json.dumps(until)) == want
    df = kread(CLICKS, df=True, startingOffsets=json.dumps(asked), endingOffsets=json.dumps(until),
               maxRecordsPerPartition="5")
    assert df.rdd.getNumPartitions() == 5 + 3   # 24 offsets in pieces of at most 5, then 13
    assert sorted((_compared(x) for x in df.collect()), key=_key) == want


def test_timestamps_are_the_records_own_through_list_offsets(kread, kafka):
    """Record timestamps are ``T0 + i * 7000`` (i even: partition 0, odd: 1): the start is the first record
    at or after the starting time, the end the first at or after the ending one (exclusive), exactly."""
    start, end = T0 + 20 * 7_000, T0 + 61 * 7_000 - 1      # records 20..60: i = 20 and 60 included
    want = _expected(kafka, CLICKS, lambda r: start <= r["_timestamp"] < end)
    assert [r["_timestamp"] for r in want][:1] == [start] and len(want) == 41
    assert kread(CLICKS, startingTimestamp=str(start), endingTimestamp=str(end)) == want
    # a schema without the product's header has no event time, but its records have timestamps
    assert kread(PLAIN, startingTimestamp=str(T0 + 35 * 7_000 - 500)) == \
        _expected(kafka, PLAIN, lambda r: r["_timestamp"] >= T0 + 35 * 7_000)
    per = json.dumps({CLICKS: {"0": T0 + 98 * 7_000, "1": T0 + 10**9}})   # partition 1: no record that late
    with pytest.raises(Exception) as err:
        kread(CLICKS, startingOffsetsByTimestamp=per)
    assert (f"kx-clicks partition 1: no record has a timestamp at or after the starting timestamp {T0 + 10**9} "
            "(ListOffsets by time); set startingOffsetsByTimestampStrategy=latest") in str(err.value)
    assert kread(CLICKS, startingOffsetsByTimestamp=per, startingOffsetsByTimestampStrategy="latest") == \
        _expected(kafka, CLICKS, lambda r: r["partition"] == 0 and r["_timestamp"] >= T0 + 98 * 7_000)


def test_bad_options_are_named(kread, kafka, spark, registry_url):
    broker, _ = kafka
    cases = [  # (topic, options, text the error must contain)
        (CLICKS, {"bootstrap.servers": "127.0.0.1"}, "bootstrap.servers: '127.0.0.1' is not host:port (port 1-65535)"),
        (CLICKS, {"maxRecordsPerPartition": "0"}, "maxRecordsPerPartition"),
        (CLICKS, {"endingOffsets": json.dumps({CLICKS: {"0": 51, "1": -1}})},
         "endingOffsets: offset 51 of partition 0 of 'kx-clicks' is outside the log's [0, 50] (earliest, latest)"),
        (CLICKS, {"startingOffsets": json.dumps({CLICKS: {"0": 3}})},
         "startingOffsets must name every partition of 'kx-clicks' and only those (Spark's rule): partitions are "
         "0, 1; missing: 1"),
        ("kx-none", {}, "topic 'kx-none' is on no broker of 127.0.0.1:"),
    ]
    from ingest.events.registry_client import RegistryClient

    RegistryClient(registry_url).register("kx-none-value", ORDER)   # a schema, but no such topic
    for topic, options, text in cases:
        with pytest.raises(Exception) as err:
            kread(topic, **options)
        assert text in str(err.value), (options, str(err.value)[:3000])


def _flip_a_byte_of_batch(log_dir, topic: str, index: int) -> tuple[int, int]:
    """Flip the last byte of the ``index``-th record batch of partition 0's segment (inside its records,
    which the CRC-32C covers); the batch's offsets."""
    from ingest.records.batch import iter_batches

    (seg,) = sorted((log_dir / f"{topic}-0").glob("*.log"))
    data = seg.read_bytes()
    pos, h = list(iter_batches(data))[index]
    with open(seg, "r+b") as f:
        f.seek(pos + h.size - 1)
        f.write(bytes([data[pos + h.size - 1] ^ 0x01]))
    return h.base_offset, h.next_offset


def test_a_damaged_batch_fails_the_read_or_is_skipped_with_fail_on_data_loss_false(kread, kafka, registry_url):
    broker, _ = kafka
    sent = produce(f"127.0.0.1:{broker.kafka_port}", registry_url, DAMAGED, CLICK, _click, 30)
    lo, hi = _flip_a_byte_of_batch(broker.log_dir, DAMAGED, 2)   # the snappy producer's batch of partition 0
    with pytest.raises(Exception) as err:
        kread(DAMAGED)
    assert f"kx-damaged partition 0: record batch at offsets {lo}..{hi} is damaged" in str(err.value)
    assert kread(DAMAGED, failOnDataLoss="false") == sorted(
        ({k: v for k, v in r.items() if k != "i"} for r in sent
         if not (r["partition"] == 0 and lo <= r["offset"] < hi)), key=_key)


def test_a_replicated_kafka_topic_is_read_from_each_partitions_leader(spark, registry_url, broker_factory,
                                                                       zk_connect, zk):
    """Two brokers with ZooKeeper, a Kafka topic of two partitions led by different brokers (replication
    factor 2): ``bootstrap.servers`` names one broker, and the read finds both partitions through Metadata
    and reads each from its leader, up to the high watermark."""
    from ingest import znodes
    from ingest.explore import register
    from tests.harness import replicated as r

    brokers = broker_factory(2, zk_connect, overrides=r.replication_overrides(min_isr=2))
    topic = "kx-repl"
    zk.retry(zk.create, znodes.topic_dir(topic), znodes.assignment_value({0: [0, 1], 1: [1, 0]}, znodes.KAFKA_FORMAT),
             makepath=True)
    for p, leader in ((0, 0), (1, 1)):
        r.wait_for_state(zk, topic, p, lambda s, leader=leader: s.leader == leader and set(s.isr) == {0, 1}, 120,
                         f"partition {p} led by broker {leader} with both in sync")
    sent = produce(",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers), registry_url, topic, CLICK, _click, 20)
    register(spark)
    rows = (spark.read.format("ingest").option("topic", topic).option("registry.url", registry_url)
            .option("bootstrap.servers", f"127.0.0.1:{brokers[0].kafka_port}").load().collect())
    assert sorted((_compared(x) for x in rows), key=_key) == sorted(
        ({k: v for k, v in s.items() if k != "i"} for s in sent), key=_key)


def test_a_topic_of_both_kinds_in_one_read_is_refused_naming_both(registry_url, broker_factory):
    """A 0.7 topic on one broker (``brokers``) and a Kafka-format topic of the same name on another's
    listener (``bootstrap.servers``): a read takes one kind, and says where each is."""
    from ingest.errors import ConfigError
    from ingest.explore.partitions import topic_partitions
    from ingest.explore.source_config import parse_options
    from tests.explore.helpers import events, send
    from tests.harness.wire import WireClient

    old, new = broker_factory(2)
    topic = "kx-both"
    from confluent_kafka import Producer

    batch = events(registry_url, topic, [T0, T0 + 1])
    with WireClient(old.host, old.port) as w:
        send(w, topic, 0, "0-0", batch[:1])
    p = Producer({"bootstrap.servers": f"127.0.0.1:{new.kafka_port}"})
    p.produce(topic, value=batch[1][0], partition=0)
    assert p.flush(30) == 0
    cfg = parse_options({"topic": topic, "registry.url": registry_url, "brokers": f"{old.host}:{old.port}",
                         "bootstrap.servers": f"127.0.0.1:{new.kafka_port}"})
    with pytest.raises(ConfigError) as err:
        topic_partitions(cfg)
    assert (f"topic 'kx-both' is a Kafka-format topic at 127.0.0.1:{new.kafka_port} (bootstrap.servers) and a 0.7 "
            f"topic at {old.host}:{old.port}; a read takes one kind") in str(err.value)
