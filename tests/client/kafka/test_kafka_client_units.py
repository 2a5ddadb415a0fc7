"""The Kafka-protocol client without a broker: settings, the partitioner, batches as built, back-off.

Pure: no process is started (clients connect lazily).
"""
from __future__ import annotations

import pytest

from ingest.client.kafka.cluster import Backoff
from ingest.client.kafka.config import KAFKA_CONSUMER_CONFIG, KAFKA_PRODUCER_CONFIG
from ingest.client.kafka.fetcher import FetchedBatches, KafkaFetcher
from ingest.client.kafka.partitioner import StickyPartitions, murmur2, partition_for_key
from ingest.client.kafka.producer import KafkaProducer
from ingest.errors import ConfigError, RecordTooLargeError
from ingest.records.batch import iter_batches
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.compression import CODECS_BY_NAME
from ingest.records.record import iter_records
from ingest.records.validation import check_batches, validate_produced


@pytest.mark.parametrize("settings, key, bad, allowed", [
    ({"acks": "2"}, "acks", "2", "one of all, -1, 0, 1"),
    ({"acks": "true"}, "acks", "true", "one of all, -1, 0, 1"),
    ({"compression.type": "brotli"}, "compression.type", "brotli", "one of none, gzip, snappy, lz4, zstd"),
    ({"linger.ms": "-1"}, "linger.ms", "-1", "an integer in [0, 2147483647]"),
    ({"batch.size": "16k"}, "batch.size", "16k", "an integer in [0, 2147483647]"),
    ({"retries": "-3"}, "retries", "-3", "an integer in [0, 2147483647]"),
    ({"request.timeout.ms": "0"}, "request.timeout.ms", "0", "an integer in [1, 2147483647]"),
    ({"bootstrap.servers": "localhost"}, "bootstrap.servers", "localhost", "host:port"),
    ({"bootstrap.servers": "h:99999"}, "bootstrap.servers", "h:99999", "port 1-65535"),
    ({"client.id": "a b"}, "client.id", "a b", "a string matching"),
])
def test_a_bad_producer_setting_names_the_key_the_value_and_what_is_allowed(settings, key, bad, allowed):
    with pytest.raises(ConfigError) as err:
        KafkaProducer({"bootstrap.servers": "127.0.0.1:1", **settings})
    message = str(err.value)
    assert f"'{key}'" in message and repr(bad) in message and allowed in message


@pytest.mark.parametrize("settings, key, bad, allowed", [
    ({"fetch.max.wait.ms": "-5"}, "fetch.max.wait.ms", "-5", "an integer in [0, 2147483647]"),
    ({"fetch.min.bytes": "x"}, "fetch.min.bytes", "x", "an integer"),
    ({"max.partition.fetch.bytes": "1.5"}, "max.partition.fetch.bytes", "1.5", "an integer"),
    ({"check.crcs": "maybe"}, "check.crcs", "maybe", "true or false"),
])
def test_a_bad_consumer_setting_names_the_key_the_value_and_what_is_allowed(settings, key, bad, allowed):
    with pytest.raises(ConfigError) as err:
        KafkaFetcher({"bootstrap.servers": "127.0.0.1:1", **settings})
    message = str(err.value)
    assert f"'{key}'" in message and repr(bad) in message and allowed in message


def test_missing_bootstrap_servers_and_keys_of_the_other_client_are_refused():
    with pytest.raises(ConfigError, match="missing required .*'bootstrap.servers'"):
        KafkaProducer()
    with pytest.raises(ConfigError, match="unknown kafka producer config key 'fetch.min.bytes'"):
        KafkaProducer(bootstrap_servers="h:1", fetch_min_bytes=1)
    with pytest.raises(ConfigError, match="unknown kafka consumer config key 'acks'"):
        KafkaFetcher(bootstrap_servers="h:1", acks="all")
    with pytest.raises(ConfigError, match="did you mean linger.ms"):
        KafkaProducer({"bootstrap.servers": "h:1", "linger.ms.x": 1})


def test_settings_keep_kafkas_names_and_defaults():
    p = KAFKA_PRODUCER_CONFIG.parse({"bootstrap.servers": "a:1, b:2"})
    assert p["bootstrap.servers"] == (("a", 1), ("b", 2))
    assert (p["acks"], p["linger.ms"], p["batch.size"], p["retries"], p["retry.backoff.ms"]) == (-1, 5, 16384, 2**31 - 1, 100)
    assert p["request.timeout.ms"] == 30000 and p["delivery.timeout.ms"] == 120000 and p["compression.type"] == "none"
    assert [KAFKA_PRODUCER_CONFIG.parse({"bootstrap.servers": "a:1", "acks": a})["acks"]
            for a in ("all", "-1", "0", "1")] == [-1, -1, 0, 1]
    c = KAFKA_CONSUMER_CONFIG.parse({"bootstrap.servers": "a:1"})
    assert (c["fetch.max.wait.ms"], c["fetch.min.bytes"], c["fetch.max.bytes"], c["max.partition.fetch.bytes"]) == \
        (500, 1, 52428800, 1048576)


def test_a_record_larger_than_max_request_size_is_refused_at_send_naming_both():
    producer = KafkaProducer(bootstrap_servers="127.0.0.1:1", max_request_size=1000)
    with pytest.raises(RecordTooLargeError, match="larger than max.request.size 1000"):
        producer.send("t", b"x" * 2000, partition=0)


def test_murmur2_is_kafkas():
    # the values of Kafka's own UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils)
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829, b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}
    for data, expected in cases.items():
        assert murmur2(data) == expected, data
    kafka_python = pytest.importorskip("kafka.partitioner.default")    # kafka-python's copy of Kafka's murmur2
    for i in range(200):
        key = b"key-%d" % i
        assert murmur2(key) & 0xFFFFFFFF == kafka_python.murmur2(key) & 0xFFFFFFFF
        assert partition_for_key(key, 7) == (kafka_python.murmur2(key) & 0x7FFFFFFF) % 7


def test_sticky_partition_moves_on_only_when_its_batch_is_sent():
    sticky = StickyPartitions()
    first = sticky.partition("t", 4)
    assert {sticky.partition("t", 4) for _ in range(50)} == {first}
    sticky.batch_sent("t", (first + 1) % 4, 4)          # another partition's batch: no move
    assert sticky.partition("t", 4) == first
    sticky.batch_sent("t", first, 4)
    assert sticky.partition("t", 4) != first
    assert sticky.partition("one", 1) == 0 and (sticky.batch_sent("one", 0, 1) or sticky.partition("one", 1) == 0)


def test_backoff_doubles_up_to_its_cap():
    b = Backoff(100, 1000)
    assert [b.delay_s(n) for n in (1, 2, 3, 4, 5, 50)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


@pytest.mark.parametrize("codec", list(CODECS_BY_NAME))
def test_batches_as_the_producer_builds_them_pass_the_brokers_validation_and_read_back(codec):
    records = [SimpleRecord(b"value-%d" % i * (i % 5), b"k%d" % i if i % 3 else None,
                            (("h", b"%d" % i), ("n", None)) if i % 2 else (), 1_700_000_000_000 + i)
               for i in range(500)]
    data = build_batch(records, codec=CODECS_BY_NAME[codec], now_ms=1_700_000_000_000)
    assert validate_produced(data).header.records_count == 500
    fetched = FetchedBatches("t", 0, 10, 500, 0, 500, memoryview(bytes(data)), list(iter_batches(data)))
    assert fetched.record_count == 490 and fetched.next_offset == 500
    got = [(r.offset, r.timestamp, r.key and bytes(r.key), bytes(r.value),
            tuple((k, v and bytes(v)) for k, v in r.headers)) for r in fetched.records()]
    assert got == [(i, r.timestamp, r.key, r.value, tuple(r.headers)) for i, r in enumerate(records)][10:]
    assert check_batches(data)[0].records_count == 500 and len(list(iter_records(data))) == 500


def test_idempotence_is_on_by_default_off_by_default_with_acks_1_and_refused_when_set_with_them():
    assert KafkaProducer(bootstrap_servers="127.0.0.1:1").idempotent
    assert not KafkaProducer(bootstrap_servers="127.0.0.1:1", acks="1").idempotent
    assert not KafkaProducer(bootstrap_servers="127.0.0.1:1", retries=0).idempotent
    assert not KafkaProducer(bootstrap_servers="127.0.0.1:1", enable_idempotence="false").idempotent
    with pytest.raises(ConfigError, match="enable.idempotence=true needs acks=all .* but acks is not all"):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", acks="0", enable_idempotence="true")
    with pytest.raises(ConfigError, match="but retries is 0"):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", retries=0, enable_idempotence=True)
