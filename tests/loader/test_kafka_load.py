"""The hourly load of Kafka-format topics, end to end with real processes: a confluent-kafka producer
with ``AvroSerializer`` against the product's registry -> a broker's Kafka listener -> real
``spark-submit jobs/load.py`` runs -> Parquet and Avro rows equal to what was produced (event fields,
record keys, headers, timestamps, partitions and offsets), exactly once, also across driver SIGKILLs
before and after the commit point and failing task attempts; every compression codec the client writes.

Two topics: ``kclicks``, whose events carry the product's header (bucketed by ``header.time``), and
``kplain``, a schema of any producer without it (bucketed by the record's timestamp).
"""
from __future__ import annotations

import collections
import io
import json
import subprocess
import time

import fastavro
import pytest

from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.spark import SHORT_JVM_OPTS
from tests.loader.helpers import REPO, read_rows, spark_env, spark_submit

pytestmark = pytest.mark.processes

PARTITIONS = 2
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
T0 = (int(time.time() * 1000) // 3_600_000 - 3) * 3_600_000 + 1_800_000   # half past, three hours ago

HEADER = {"type": "record", "name": "EventHeader", "namespace": "ingest.events",
          "fields": [{"name": "time", "type": "long"}, {"name": "server", "type": "string"},
                     {"name": "service", "type": "string"}, {"name": "session", "type": "string"},
                     {"name": "seq", "type": "long"}]}
CLICK = {"type": "record", "name": "Click", "namespace": "shop.events",
         "fields": [{"name": "header", "type": HEADER}, {"name": "page", "type": "string"},
                    {"name": "referrer", "type": ["null", "string"], "default": None},
                    {"name": "price", "type": "double"}]}
PLAIN = {"type": "record", "name": "Order", "namespace": "shop.orders",
         "fields": [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "long"},
                    {"name": "tags", "type": {"type": "array", "items": "string"}}]}


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    """One broker without ZooKeeper: its Kafka listener serves broker-local Kafka-format topics."""
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=PARTITIONS)
    yield brokers[0]
    stop_all(brokers)


def _click(tag: str, i: int) -> dict:
    return {"header": {"time": T0 + i * 7_000, "server": "web-1", "service": "shop", "session": tag, "seq": i},
            "page": f"/p/{tag}/{i}", "referrer": None if i % 3 else f"/r/{i}", "price": i / 4}


def _plain(tag: str, i: int) -> dict:
    return {"order_id": f"{tag}-{i}", "amount": i * 100, "tags": [f"t{j}" for j in range(i % 4)]}


def produce(bootstrap: str, registry_url: str, topic: str, schema: dict, make, tag: str, n: int) -> list[dict]:
    """``n`` events through confluent-kafka's AvroSerializer (registering ``<topic>-value`` in the
    product's registry), spread over every codec, with keys (every 5th none), headers and explicit
    timestamps; returns the rows a load must write for them."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
    ctx = SerializationContext(topic, MessageField.VALUE)
    expected = []
    per_codec = -(-n // len(CODECS))
    for c, codec in enumerate(CODECS):
        errors: list = []
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": codec, "linger.ms": 5})
        for i in range(c * per_codec, min(n, (c + 1) * per_codec)):
            value = make(tag, i)
            key = None if i % 5 == 0 else f"{tag}-k{i}".encode()
            headers = [("codec", codec.encode()), ("i", str(i).encode())] + ([("empty", None)] if i % 2 else [])
            ts = T0 + i * 7_000 + 11
            row = {**value, "_key": key, "_timestamp": ts, "_headers": [{"key": k, "value": v} for k, v in headers]}

            def done(err, msg, row=row):
                if err:
                    errors.append(err)
                else:
                    row.update(_partition=msg.partition(), _offset=msg.offset())

            p.produce(topic, value=serializer(value, ctx), key=key, headers=headers, partition=i % PARTITIONS,
                      timestamp=ts, on_delivery=done)
            p.poll(0)
            expected.append(row)
        assert p.flush(60) == 0 and not errors, errors[:3]
    assert all("_offset" in row for row in expected)
    return expected


def _conf(tmp_path, dest, kafka_broker, registry_url, fmt: str):
    conf = tmp_path / f"loader-{fmt}.properties"
    conf.write_text(f"destination={dest}\nbootstrap.servers=127.0.0.1:{kafka_broker.kafka_port}\n"
                    f"registry.url={registry_url}\ntopics=k(clicks|plain)-{fmt}\nformat={fmt}\n"
                    "max.quarantine.ratio=0\n")
    return conf


def _submit(conf, faults: str = ""):
    env = spark_env()
    if faults:
        env["INGEST_FAULTS"] = faults
    return subprocess.run([spark_submit(), "--master", "local[2,4]", "--conf", "spark.ui.enabled=false",
                           "--driver-java-options", SHORT_JVM_OPTS, str(REPO / "jobs" / "load.py"), "--config",
                           str(conf)], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=900)  # a hang guard only


def _tail(r) -> str:
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if " INFO " not in ln or "ingest" in ln]
    return "\n".join(lines[-60:])


def _killed_at(r, point: str) -> bool:
    return r.returncode != 0 and f"fault injection: SIGKILL at {point}" in (r.stdout + r.stderr)


def _canon(rows) -> list[str]:
    """Rows as sortable canonical strings (a multiset: duplicates stay)."""
    def norm(v):
        if isinstance(v, (bytes, bytearray)):
            return "b:" + bytes(v).hex()
        if isinstance(v, dict):
            return {k: norm(x) for k, x in sorted(v.items())}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v
    return sorted(json.dumps(norm(r), sort_keys=True) for r in rows)


def _offsets(dest) -> dict:
    st = LoaderState.load(open_storage(str(dest)))
    return {k: o.offset for k, o in st.offsets.items()}


def test_avro_serializer_events_load_into_parquet_exactly_once_across_sigkills(kafka_broker, registry_url, tmp_path):
    bootstrap = f"127.0.0.1:{kafka_broker.kafka_port}"
    dest = tmp_path / "out"
    conf = _conf(tmp_path, dest, kafka_broker, registry_url, "parquet")
    clicks, plain = "kclicks-parquet", "kplain-parquet"
    want = {clicks: produce(bootstrap, registry_url, clicks, CLICK, _click, "a", 300),
            plain: produce(bootstrap, registry_url, plain, PLAIN, _plain, "a", 100)}

    # killed once every task ran (each failed its first attempt), before the commit point: nothing visible
    r = _submit(conf, "fail-first-attempt,before-manifest")
    assert _killed_at(r, "before-manifest"), _tail(r)
    assert LoaderState.load(open_storage(str(dest))).seq == 0

    # killed right after the commit point: the state is the new one
    r = _submit(conf, "fail-first-attempt,after-manifest")
    assert _killed_at(r, "after-manifest"), _tail(r)
    assert _offsets(dest) == {(t, 0, p): n // PARTITIONS for t, n in ((clicks, 300), (plain, 100))
                              for p in range(PARTITIONS)}   # logical offsets: next offset = last + 1

    want[clicks] += produce(bootstrap, registry_url, clicks, CLICK, _click, "b", 200)
    r = _submit(conf)
    assert r.returncode == 0 and "COMMITTED" in r.stdout, _tail(r)
    st = LoaderState.load(open_storage(str(dest)))
    for topic, rows in want.items():
        assert _canon(read_rows(st, topic)) == _canon(rows), topic   # every row once, values equal
    assert {k: o.offset for k, o in st.offsets.items()} == {
        (t, 0, p): n // PARTITIONS for t, n in ((clicks, 500), (plain, 100)) for p in range(PARTITIONS)}
    assert not st.files(kind="quarantine") and not st.lost_ranges()
    # event hours: header.time for the product's events, the record timestamp for the others
    hours = {(f.topic, f.dt, f.hour) for f in st.files()}
    from ingest.loader.layout import hour_bucket
    assert hours == {(clicks, *hour_bucket(row["header"]["time"])) for row in want[clicks]} \
        | {(plain, *hour_bucket(row["_timestamp"])) for row in want[plain]}

    # nothing new: nothing to do, nothing changes
    r = _submit(conf)
    assert r.returncode == 0, _tail(r)
    assert LoaderState.load(open_storage(str(dest))).seq == st.seq


def test_both_decoders_load_the_produced_rows_exactly(kafka_broker, registry_url, tmp_path):
    """decoder=compiled (Kafka-format batches through the compiled column decoder) and decoder=python (the
    generated Python one) load the same rows: every produced record once, values equal, exact offsets."""
    bootstrap = f"127.0.0.1:{kafka_broker.kafka_port}"
    clicks, plain = "kclicks-decoders", "kplain-decoders"
    want = {clicks: produce(bootstrap, registry_url, clicks, CLICK, _click, "d", 400),
            plain: produce(bootstrap, registry_url, plain, PLAIN, _plain, "d", 100)}
    got = {}
    for decoder in ("compiled", "python"):
        dest = tmp_path / f"out-{decoder}"
        conf = tmp_path / f"loader-{decoder}.properties"
        conf.write_text(f"destination={dest}\nbootstrap.servers={bootstrap}\nregistry.url={registry_url}\n"
                        f"topics=k(clicks|plain)-decoders\nformat=parquet\nmax.quarantine.ratio=0\n"
                        f"decoder={decoder}\n")
        r = _submit(conf)
        assert r.returncode == 0 and "COMMITTED" in r.stdout, _tail(r)
        st = LoaderState.load(open_storage(str(dest)))
        got[decoder] = {topic: _canon(read_rows(st, topic)) for topic in want}
        for topic, rows in want.items():
            assert got[decoder][topic] == _canon(rows), (decoder, topic)
        assert _offsets(dest) == {(t, 0, p): n // PARTITIONS for t, n in ((clicks, 400), (plain, 100))
                                  for p in range(PARTITIONS)}
        assert not st.files(kind="quarantine")
    assert got["compiled"] == got["python"]


def test_avro_output_holds_the_producers_bodies_and_the_record_columns(kafka_broker, registry_url, tmp_path):
    bootstrap = f"127.0.0.1:{kafka_broker.kafka_port}"
    dest = tmp_path / "out"
    conf = _conf(tmp_path, dest, kafka_broker, registry_url, "avro")
    want = {"kclicks-avro": produce(bootstrap, registry_url, "kclicks-avro", CLICK, _click, "c", 150),
            "kplain-avro": produce(bootstrap, registry_url, "kplain-avro", PLAIN, _plain, "c", 60)}
    r = _submit(conf)
    assert r.returncode == 0 and "COMMITTED" in r.stdout, _tail(r)
    st = LoaderState.load(open_storage(str(dest)))
    for topic, rows in want.items():
        assert _canon(read_rows(st, topic)) == _canon(rows), topic
        for f in st.files(topic):
            schema = fastavro.reader(io.BytesIO(st.storage.read_bytes(st.full_path(f)))).writer_schema
            assert [x["name"] for x in schema["fields"]][-5:] == ["_key", "_headers", "_timestamp", "_partition",
                                                                  "_offset"]
    assert collections.Counter(f.topic for f in st.files(kind="quarantine")) == {}


SEGMENT = 4096
KEEP = 3 * SEGMENT


def _produce_one_batch_each(bootstrap: str, registry_url: str, topic: str, first: int, n: int) -> None:
    """``n`` clicks to partition 0, each flushed alone: one record batch per record (~150 bytes), so that
    the small segments roll and retention deletes whole ones."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(CLICK))
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(first, first + n):
        p.produce(topic, value=serializer(_click("r", i), ctx), key=b"k%d" % i, partition=0, timestamp=T0 + i)
        assert p.flush(30) == 0


def test_log_start_past_the_committed_offset_is_an_exact_retention_loss(registry_url, tmp_path_factory, tmp_path):
    """Real retention on a Kafka-format topic after a load: the next load fails on the loss (exit 3, nothing
    committed), and with fail.on.data.loss=false commits the lost range [committed, log start) with its
    exact record count (cause retention) and every retained record once."""
    from ingest.client.kafka.fetcher import KafkaFetcher

    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1, log_segment_bytes=SEGMENT,
                             log_retention_bytes=KEEP, log_retention_check_interval_ms=200)
    bootstrap = f"127.0.0.1:{brokers[0].kafka_port}"
    topic = "kgone-parquet"
    dest = tmp_path / "out"
    conf = tmp_path / "loader.properties"
    conf.write_text(f"destination={dest}\nbootstrap.servers={bootstrap}\nregistry.url={registry_url}\n"
                    f"topics={topic}\nformat=parquet\n")
    try:
        _produce_one_batch_each(bootstrap, registry_url, topic, 0, 40)
        r = _submit(conf)
        assert r.returncode == 0 and "COMMITTED" in r.stdout, _tail(r)
        assert _offsets(dest) == {(topic, 0, 0): 40}
        _produce_one_batch_each(bootstrap, registry_url, topic, 40, 400)
        with KafkaFetcher(bootstrap_servers=bootstrap) as f:
            deadline = time.monotonic() + 120
            while (earliest := f.earliest(topic, 0)) <= 40:   # retention runs every 200 ms
                assert time.monotonic() < deadline, "retention did not delete the loaded and unloaded segments"
                time.sleep(0.2)
            assert f.latest(topic, 0) == 440

        r = _submit(conf)
        assert r.returncode == 3 and "deleted from the brokers before it was loaded" in r.stderr + r.stdout, _tail(r)
        assert _offsets(dest) == {(topic, 0, 0): 40}

        with open(conf, "a") as fo:
            fo.write("fail.on.data.loss=false\n")
        r = _submit(conf)
        assert r.returncode == 0 and "COMMITTED" in r.stdout, _tail(r)
        st = LoaderState.load(open_storage(str(dest)))
        (lost,) = st.lost_ranges()
        start = lost.end_offset   # the log start the run saw (>= the one seen above)
        assert (lost.start_offset, lost.estimated_messages, lost.messages_exact, lost.cause) == \
            (40, start - 40, True, "retention")
        seqs = collections.Counter(row["header"]["seq"] for row in read_rows(st, topic))
        assert seqs == collections.Counter(range(40)) + collections.Counter(range(start, 440))
        assert _offsets(dest) == {(topic, 0, 0): 440}
    finally:
        stop_all(brokers)


def _produce_values(bootstrap: str, topic: str, values, first_ts: int) -> None:
    """Raw values to partition 0, one record batch each (flushed alone), timestamps first_ts, first_ts + 1, ..."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=0, timestamp=first_ts + i)
        assert p.flush(30) == 0


def _flip_a_byte_of_batch(log_dir, topic: str, index: int) -> tuple[int, int]:
    """Flip the last byte of the ``index``-th record batch of partition 0's segment (inside its records,
    which the CRC-32C covers), through the page cache the broker serves from; the batch's offsets."""
    from ingest.records.batch import iter_batches

    (seg,) = sorted((log_dir / f"{topic}-0").glob("*.log"))
    data = seg.read_bytes()
    pos, h = list(iter_batches(data))[index]
    with open(seg, "r+b") as f:
        f.seek(pos + h.size - 1)
        f.write(bytes([data[pos + h.size - 1] ^ 0x01]))
    return h.base_offset, h.next_offset


def test_undecodable_payloads_and_a_damaged_batch_are_quarantined_and_a_replay_by_time_is_exact(
        kafka_broker, registry_url, tmp_path):
    """Values without the Confluent framing or with an unknown schema id are quarantined one by one; a
    batch whose bytes were really flipped on the broker's disk is quarantined whole (its offsets, its raw
    bytes) and the load goes on after it. ``ingest loader status`` counts the lag in records. A replay by
    time restarts at the first record at or after the time (the time index), and the reload gives every
    row once."""
    import struct

    from ingest.loader.config import LOADER_CONFIG
    from ingest.loader.quarantine import read_quarantine
    from ingest.loader.reset import reset_offsets
    from ingest.loader.status import status

    bootstrap = f"127.0.0.1:{kafka_broker.kafka_port}"
    topic = "kbad-parquet"
    dest = tmp_path / "out"
    conf = tmp_path / "loader.properties"
    conf.write_text(f"destination={dest}\nbootstrap.servers={bootstrap}\nregistry.url={registry_url}\n"
                    f"topics={topic}\nformat=parquet\nmax.quarantine.ratio=0.5\n")
    cfg = LOADER_CONFIG.parse({"destination": str(dest), "bootstrap.servers": bootstrap,
                               "registry.url": registry_url, "topics": topic}, source="test")
    good = produce(bootstrap, registry_url, topic, CLICK, _click, "q", 20)   # offsets 0-9 of each partition
    r = _submit(conf)
    assert r.returncode == 0 and "COMMITTED" in r.stdout, _tail(r)

    raw_ts = T0 + 10**6   # later than every click's timestamp
    _produce_values(bootstrap, topic, [b"not framed", b"\x00" + struct.pack(">i", 987654) + b"\x02x"], raw_ts)
    more = produce(bootstrap, registry_url, topic, CLICK, _click, "q2", 20)  # offsets 12-21 of partition 0
    assert {(s.partition, s.lag_messages, s.lag_bytes) for s in status(cfg)} == {(0, 12, None), (1, 10, None)}
    bad_start, bad_end = _flip_a_byte_of_batch(kafka_broker.log_dir, topic, -1)   # the last batch of partition 0
    damaged = [more[(o - 12) * 2] for o in range(bad_start, bad_end)]   # more[i] went to partition i % 2
    r = _submit(conf)
    assert r.returncode == 0 and "COMMITTED" in r.stdout, _tail(r)
    st = LoaderState.load(open_storage(str(dest)))
    q = sorted(read_quarantine(st, topic), key=lambda m: m.offset)
    assert [(m.partition, m.offset, m.next_offset) for m in q] == [(0, 10, 11), (0, 11, 12), (0, bad_start, bad_end)]
    assert "magic byte 0x6e" in q[0].reason and "unknown schema id" in q[1].reason and "CRC" in q[2].reason, q
    loaded = read_rows(st, topic)
    assert damaged and _canon(loaded) == _canon([row for row in good + more if row not in damaged])
    assert {(s.partition, s.lag_messages) for s in status(cfg)} == {(0, 0), (1, 0)}

    # replay from the first raw value's time: its offset exactly (10, the start of the second load's file
    # of partition 0; a 0.7 topic would go back to the start of the segment holding it, 0)
    reset_offsets(cfg, str(raw_ts), [topic])
    assert _offsets(dest) == {(topic, 0, 0): 10, (topic, 0, 1): 20}
    r = _submit(conf)
    assert r.returncode == 0 and "COMMITTED" in r.stdout, _tail(r)
    st = LoaderState.load(open_storage(str(dest)))
    assert _canon(read_rows(st, topic)) == _canon(loaded)
    assert len(list(read_quarantine(st, topic))) == 3
