"""The product's Kafka-protocol client against a real Kafka-protocol broker (Tansu, tests/harness/tansu.py).

Produce with keys, headers and timestamps at acks 0, 1 and all with every codec, read back byte-exact in
order with the client's own fetch; ListOffsets; confluent-kafka reads what this client wrote and this
client reads what confluent-kafka wrote; an unknown topic; a broker SIGKILLed mid-run.
"""
from __future__ import annotations

import threading
import time

import pytest

from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.client.kafka.producer import KafkaProducer
from ingest.errors import BrokerUnavailableError, DeliveryFailedError, UnknownTopicError, WrongPartitionError
from ingest.records.builder import SimpleRecord
from ingest.wire.kafka.api_versions import ApiVersionsRequest
from ingest.records.compression import CODECS_BY_NAME

N = 10_000
PARTITIONS = 2
T0 = 1_790_000_000_000


def expected_records(tag: str, n: int = N):
    """Distinct values; a key on two records of three; headers on every other; increasing timestamps."""
    return [(f"{tag}-key-{i % 977}".encode() if i % 3 else None,
             f"{tag}-value-{i:06d}-".encode() + bytes([i % 251]) * (i % 300),
             [("seq", str(i).encode()), ("null", None)] if i % 2 else [],
             T0 + i) for i in range(n)]


def read_partition(fetcher: KafkaFetcher, topic: str, partition: int, offset: int = 0):
    """Every record of the partition from ``offset`` to its high watermark, and the offset after them."""
    out = []
    while True:
        got = fetcher.fetch(topic, partition, offset, max_wait_ms=100)
        for r in got.records():
            out.append((r.offset, r.key if r.key is None else bytes(r.key), bytes(r.value),
                        [(k, v if v is None else bytes(v)) for k, v in r.headers], r.timestamp))
        offset = got.next_offset
        if offset >= got.high_watermark:
            return out, offset


def read_all(fetcher: KafkaFetcher, topic: str, partitions: int, until: int, *, deadline_s: float = 180.0):
    """Every record of every partition, read until ``until`` records were read in all (or the deadline:
    acks 0 gives no sign of when its records are in)."""
    got: dict[int, list] = {p: [] for p in range(partitions)}
    offsets = dict.fromkeys(got, 0)
    deadline = time.monotonic() + deadline_s
    while sum(map(len, got.values())) < until and time.monotonic() < deadline:
        for p in got:
            more, offsets[p] = read_partition(fetcher, topic, p, offsets[p])
            got[p].extend(more)
    return got


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("codec", list(CODECS_BY_NAME))
def test_every_record_reads_back_byte_exact_in_order_per_partition(tansu, acks, codec):
    topic = f"roundtrip-{codec}-{acks}"
    tansu.create_topic(topic, PARTITIONS)
    records = expected_records(topic)
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, acks=acks, compression_type=codec,
                       batch_size=64 * 1024, linger_ms=5) as producer:
        for key, value, headers, ts in records:
            producer.send(topic, value, key, headers=headers, timestamp_ms=ts)
        deliveries = producer.flush()
    assert sum(d.records for d in deliveries) == N
    if acks != "0":
        assert all(d.base_offset >= 0 for d in deliveries)
    with KafkaFetcher(bootstrap_servers=tansu.bootstrap) as fetcher:
        per_partition = read_all(fetcher, topic, PARTITIONS, until=N)
    assert sum(len(v) for v in per_partition.values()) == N
    by_value = {value: (key, headers, ts) for key, value, headers, ts in records}
    sent_order = {value: i for i, (_k, value, _h, _t) in enumerate(records)}
    for p, got in per_partition.items():
        assert [off for off, *_ in got] == list(range(len(got)))            # offsets 0.. without a gap or a repeat
        assert [sent_order[v] for _o, _k, v, _h, _t in got] == sorted(sent_order[v] for _o, _k, v, _h, _t in got)
        for _off, key, value, headers, ts in got:
            assert (key, headers, ts) == by_value[value]
    keyed = {}
    for p, got in per_partition.items():
        for _off, key, *_ in got:
            if key is not None:
                assert keyed.setdefault(key, p) == p                        # one key, one partition


def test_closing_an_acks_0_producer_waits_until_the_broker_read_its_last_batches(tansu):
    # The broker is stopped while the last 100 records are sent and the producer closed: a close that only
    # wrote them to the socket returns at once, and Tansu, resumed, drops them with the ended connection.
    topic = "acks0-close"
    tansu.create_topic(topic, PARTITIONS)
    records = expected_records(topic, 2_000)
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, acks="0", compression_type="lz4")
    for key, value, headers, ts in records[:-100]:
        producer.send(topic, value, key, headers=headers, timestamp_ms=ts)
    producer.flush()
    with tansu.paused(1.0):
        for key, value, headers, ts in records[-100:]:
            producer.send(topic, value, key, headers=headers, timestamp_ms=ts)
        producer.close()
    with KafkaFetcher(bootstrap_servers=tansu.bootstrap) as fetcher:
        got = read_all(fetcher, topic, PARTITIONS, until=len(records), deadline_s=20)
    assert sorted(v for rows in got.values() for _o, _k, v, _h, _t in rows) == sorted(v for _k, v, _h, _t in records)


def test_answers_to_acks_0_produce_do_not_put_the_connection_out_of_step(tansu):
    # Tansu answers acks-0 Produce (Kafka does not): the next request on the connection must get its own answer.
    tansu.create_topic("acks0-answered", 1)
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, acks="0") as producer:
        for i in range(5):
            producer.send("acks0-answered", b"v%d" % i)
            producer.flush()
        leader = producer.cluster.partitions("acks0-answered", time.monotonic() + 10)[0].leader
        conn = producer.cluster.connection(leader)
        answer = conn.call(ApiVersionsRequest("test", "1"), conn.version(ApiVersionsRequest.API_KEY))
    assert answer.error_code == 0 and answer.api_keys


def test_produce_returns_the_base_offsets_the_broker_assigned_and_fetch_resumes_anywhere(tansu):
    tansu.create_topic("offsets", 1)
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, acks="all") as producer:
        first = producer.produce("offsets", 0, [b"a%d" % i for i in range(100)])
        second = producer.produce("offsets", 0, [b"b%d" % i for i in range(50)])
    assert (first.base_offset, first.records, second.base_offset, second.records) == (0, 100, 100, 50)
    with KafkaFetcher(bootstrap_servers=tansu.bootstrap) as fetcher:
        got = fetcher.fetch("offsets", 0, 120)
        assert got.high_watermark == 150 and got.next_offset == 150 and got.record_count == 30
        assert [bytes(r.value) for r in got.records()] == [b"b%d" % i for i in range(20, 50)]
        small = fetcher.fetch("offsets", 0, 0, partition_max_bytes=1)
        assert small.batches[0][1].base_offset == 0 and small.record_count >= 100  # the first batch comes whole
        end = fetcher.fetch("offsets", 0, 150, max_wait_ms=50)
        assert end.batches == [] and end.next_offset == 150


def test_list_offsets_earliest_latest_and_by_timestamp(tansu):
    tansu.create_topic("times", 1)
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, acks="1") as producer:
        producer.produce("times", 0, [SimpleRecord(b"v%d" % i, None, (), T0 + 1000 * i) for i in range(10)])
    with KafkaFetcher(bootstrap_servers=tansu.bootstrap) as fetcher:
        assert fetcher.earliest("times", 0) == 0
        if tansu.EXACT_LATEST:
            assert fetcher.latest("times", 0) == 10
        else:
            assert 0 < fetcher.latest("times", 0) <= 10
        assert fetcher.fetch("times", 0, 0).high_watermark == 10
        by_time = fetcher.offset_for_time("times", 0, T0 + 4500)
        if tansu.EXACT_TIME_LOOKUP:
            assert by_time == 5 and fetcher.offset_for_time("times", 0, T0 + 10 ** 7) is None
        else:
            assert by_time is not None and 0 <= by_time <= 5                  # an offset at or before the answer
        with pytest.raises(ValueError, match="special times"):
            fetcher.offset_for_time("times", 0, -1)


def test_confluent_kafka_reads_what_this_client_wrote_and_the_reverse(tansu):
    ck = pytest.importorskip("confluent_kafka")
    tansu.create_topic("interop-ours", 1)
    tansu.create_topic("interop-theirs", 1)
    ours = expected_records("ours", 2000)
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, acks="all", compression_type="lz4") as producer:
        for key, value, headers, ts in ours:
            producer.send("interop-ours", value, key, headers=headers, partition=0, timestamp_ms=ts)
    consumer = ck.Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": "interop", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
    try:
        consumer.assign([ck.TopicPartition("interop-ours", 0, 0)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(ours) and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                got.append((m.key(), m.value(), [(k, v) for k, v in (m.headers() or [])], m.timestamp()[1]))
    finally:
        consumer.close()
    assert got == [(k, v, h, ts) for k, v, h, ts in ours]

    theirs = expected_records("theirs", 2000)
    producer = ck.Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5, "compression.type": "zstd",
                            "acks": "all"})
    for key, value, headers, ts in theirs:
        producer.produce("interop-theirs", value, key, partition=0, headers=headers or None, timestamp=ts)
    assert producer.flush(30) == 0
    with KafkaFetcher(bootstrap_servers=tansu.bootstrap) as fetcher:
        read = read_all(fetcher, "interop-theirs", 1, until=len(theirs))[0]
    assert [(k, v, h, ts) for _o, k, v, h, ts in read] == [(k, v, h, ts) for k, v, h, ts in theirs]


def test_an_unknown_topic_or_partition_is_a_clear_error(tansu):
    tansu.create_topic("known", 2)
    with KafkaFetcher(bootstrap_servers=tansu.bootstrap, request_timeout_ms=1500) as fetcher:
        with pytest.raises(UnknownTopicError, match=r"topic 'no-such-topic' does not exist .*127\.0\.0\.1"):
            fetcher.fetch("no-such-topic", 0, 0)
        with pytest.raises(WrongPartitionError, match="topic 'known' has partitions 0-1; there is no partition 5"):
            fetcher.fetch("known", 5, 0)
    with KafkaProducer(bootstrap_servers=tansu.bootstrap) as producer:
        with pytest.raises(WrongPartitionError, match="no partition 2"):
            producer.send("known", b"x", partition=2)


def test_nothing_listening_at_bootstrap_is_a_clear_error():
    from tests.harness.net import free_port

    address = f"127.0.0.1:{free_port()}"
    with KafkaFetcher(bootstrap_servers=address, request_timeout_ms=1000, retry_backoff_ms=50) as fetcher:
        with pytest.raises(BrokerUnavailableError, match=f"no broker answered Metadata; tried .*{address}"):
            fetcher.fetch("t", 0, 0)


def test_a_broker_killed_mid_run_fails_the_producer_and_the_fetcher_clearly_without_hanging(tansu_own):
    tansu_own.create_topic("doomed", 1)
    timeout_ms = 2000
    producer = KafkaProducer(bootstrap_servers=tansu_own.bootstrap, acks="1", request_timeout_ms=timeout_ms,
                             delivery_timeout_ms=timeout_ms, max_block_ms=timeout_ms, batch_size=4096,
                             retry_backoff_ms=50)
    fetcher = KafkaFetcher(bootstrap_servers=tansu_own.bootstrap, request_timeout_ms=timeout_ms, retry_backoff_ms=50)
    delivered = []
    killed_at: list[float] = []

    def kill_soon():
        while sum(d.records for d in delivered) < 2000:
            time.sleep(0.01)
        tansu_own.kill()
        killed_at.append(time.monotonic())

    killer = threading.Thread(target=kill_soon, daemon=True)
    killer.start()
    try:
        with pytest.raises(DeliveryFailedError) as err:
            for i in range(10 ** 7):
                producer.send("doomed", b"m%d" % i)
                if i % 500 == 499:
                    delivered.extend(producer.flush())
        failure_s = time.monotonic() - killed_at[0]
        assert "were not written" in str(err.value) and "doomed-0" in str(err.value)
        assert err.value.failed and all(isinstance(e, BrokerUnavailableError) for *_x, e in err.value.failed)
        assert sum(d.records for d in delivered) >= 2000                    # what was acknowledged stays reported
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError):
            fetcher.fetch("doomed", 0, 0)
        fetch_failure_s = time.monotonic() - started
    finally:
        killer.join(30)
        fetcher.close()
        producer.cluster.close()
    # no hang: each gave up within its budget (generous bounds for a loaded machine)
    assert failure_s < 30 and fetch_failure_s < 30
