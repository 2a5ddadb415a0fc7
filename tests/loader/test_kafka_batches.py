"""The batch path of a Kafka-format task (ingest.loader.staging ``kafka_batch``: the values of a whole
record batch through the column decoder, the record columns as whole arrays) against the per-message
path: the same files (rows, schema, order), quarantine, counters and event times.

Input: real record batches from a broker's Kafka listener, written by confluent-kafka with every codec:
product events (nested header, unions, enums) with and without keys and headers, null values,
undecodable values, events of two schemas, event times across an hour boundary; read from offset 0 and
from the middle of a batch; a transaction marker (a control batch, written into the broker's log as a
replica would copy it: the broker has no transactions) between the batches. The per-message path is ``iter_kafka_range(batches=False)`` fed to
``stage_messages``; the batch path is ``batches=True``, with the compiled column decoder and with the
loader's ``decoder=python`` (the generated Python column decoder).
"""
from __future__ import annotations

import io
import random

import pyarrow.parquet as pq
import pytest

from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.events.schemas import CLICK, PAGE_VIEW
from ingest.loader import task as task_mod
from ingest.loader.kafka_fetch import KafkaBatch, iter_kafka_range
from ingest.loader.plan import TaskRange
from ingest.loader.task import Staged, TaskSettings, close_data_files, stage_messages
from ingest.records import compiled_records
from ingest.storage import open_storage
from tests.harness.brokers import broker_cluster, stop_all
from tests.loader.test_staging_chunks import HOUR, T0, _payloads, per_message_calls  # noqa: F401  (fixture)

pytestmark = [pytest.mark.processes,
              pytest.mark.skipif(not compiled_records.available(), reason="ingest.records._crecords is not built")]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
N = 300


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1)
    yield brokers[0]
    stop_all(brokers)


def _produce(bootstrap: str, topic: str, values: list[bytes | None], codec: str) -> None:
    from confluent_kafka import Producer

    rng = random.Random(topic)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": codec, "linger.ms": 50,
                  "batch.num.messages": 100})
    for i, v in enumerate(values):
        key = None if i % 3 == 0 else b"k%d" % (i % 11)
        headers = [("trace", b"t%d" % i), ("none", None)] if rng.random() < 0.2 else None
        p.produce(topic, value=v, key=key, headers=headers, partition=0, timestamp=T0 + i)
    assert p.flush(30) == 0


def _values(registry_url) -> list[bytes | None]:
    rng = random.Random(30)
    times = [T0 + HOUR - 1_000 + 11 * i for i in range(N)]        # crosses an hour boundary
    good = _payloads(registry_url, PAGE_VIEW, times[:200], 5) + _payloads(registry_url, CLICK, times[200:], 6)
    out: list[bytes | None] = []
    for i, p in enumerate(good):   # spoiled values in the first records only: a batch holding one goes
        r = rng.random() if i < 100 else 1.0           # the per-message way whole, as a 0.7 chunk does
        out.append(None if r < 0.04 else p[:len(p) // 2] if r < 0.1 else p)
    return out


def _stage(bootstrap, topic, registry_url, tmp_path, batches: bool, start: int, decoder: str = "compiled",
           end: int = N):
    tag = f"{topic}-{batches}-{start}-{decoder}"
    task = TaskRange(topic, 0, 0, "127.0.0.1", 9, kind="kafka", task_id=0, start=start, end=end)
    settings = TaskSettings(destination=str(tmp_path / tag), run_id="r", format="parquet", registry_url=registry_url,
                            decoder=decoder)
    storage = open_storage(str(tmp_path / tag))
    with KafkaFetcher(bootstrap_servers=bootstrap) as fetcher:
        items = list(iter_kafka_range(fetcher, topic, 0, start, end, batches=batches))
    staged = stage_messages(items, task, settings, storage, task_mod.new_decoder(settings),
                            Staged(task_mod.stage_dir("r", task, 0)))
    files = close_data_files(staged, task, 0, "parquet", storage)
    out = []
    for f in files:
        table = pq.read_table(io.BytesIO(storage.read_bytes(storage.join(f.staging))))
        out.append((f.dt, f.hour, f.schema_id, f.rows, f.min_time_ms, f.max_time_ms, table.schema, table.to_pylist()))
    quarantine = [(q.offset, q.next_offset, q.reason, q.payload) for q in staged.quarantine]
    return (out, quarantine, staged.messages, staged.last_time_ms), items


@pytest.mark.parametrize("codec", CODECS)
def test_the_batch_path_loads_what_the_per_message_path_loads(kafka_broker, registry_url, tmp_path, codec,
                                                             per_message_calls):
    bootstrap = f"127.0.0.1:{kafka_broker.kafka_port}"
    topic = f"kbatch-{codec}"
    _produce(bootstrap, topic, _values(registry_url), codec)
    for start in (0, 137):                       # 137: inside a batch, whose records before it are skipped
        expected, _ = _stage(bootstrap, topic, registry_url, tmp_path, False, start)
        per_message = per_message_calls[0]
        got, items = _stage(bootstrap, topic, registry_url, tmp_path, True, start)
        assert got == expected
        assert got[2] + len(got[1]) == N - start                    # every record loaded or quarantined
        assert bool(got[1]) == (start == 0)                         # the spoiled values lie before 100
        assert any(type(i) is KafkaBatch for i in items)
        assert per_message_calls[0] - per_message < (N - start) // 2   # most rows took the batch path


@pytest.mark.parametrize("codec", ("none", "lz4"))
def test_the_python_decoder_on_the_batch_path_loads_the_same_rows(kafka_broker, registry_url, tmp_path, codec,
                                                                   per_message_calls, monkeypatch):
    from ingest.loader import cdecode

    bootstrap = f"127.0.0.1:{kafka_broker.kafka_port}"
    topic = f"kbatch-python-{codec}"
    _produce(bootstrap, topic, _values(registry_url), codec)
    for start in (0, 137):
        expected, _ = _stage(bootstrap, topic, registry_url, tmp_path, False, start)   # compiled, per message
        per_message = per_message_calls[0]
        with monkeypatch.context() as m:   # decoder=python: the extension's column decoder is never built
            m.setattr(cdecode, "compiled_columns", None)
            got, items = _stage(bootstrap, topic, registry_url, tmp_path, True, start, decoder="python")
        assert got == expected
        assert got[2] + len(got[1]) == N - start
        assert any(type(i) is KafkaBatch for i in items)
        assert per_message_calls[0] - per_message < (N - start) // 2   # the batch path ran, not only one()


def test_a_control_batch_between_batches_is_skipped_by_both_paths(registry_url, tmp_path_factory, tmp_path,
                                                                  per_message_calls):
    from ingest.broker.kafka_log import KafkaLog
    from ingest.broker.kafka_log_settings import KafkaLogSettings
    from ingest.broker.topics import partition_dir_name
    from ingest.clock import SYSTEM_CLOCK
    from ingest.records.builder import SimpleRecord, build_batch

    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1)
    try:
        broker = brokers[0]
        bootstrap = f"127.0.0.1:{broker.kafka_port}"
        topic = "kbatch-control"
        values = _values(registry_url)
        _produce(bootstrap, topic, values[:150], "none")
        broker.stop()
        log = KafkaLog(broker.log_dir / partition_dir_name(topic, 0), KafkaLogSettings(), SYSTEM_CLOCK)
        marker = build_batch([SimpleRecord(b"\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00\x01", (), T0)],
                             base_offset=log.end_offset, producer_id=7, producer_epoch=0, transactional=True,
                             control=True)   # an abort marker (key: version 0, type 0)
        assert log.end_offset == 150
        log.append(marker, assign_offsets=False)
        log.close()
        broker.start()
        _produce(bootstrap, topic, values[150:], "none")
        end = N + 1                                   # the marker takes offset 150
        expected, _ = _stage(bootstrap, topic, registry_url, tmp_path, False, 0, end=end)
        per_message = per_message_calls[0]
        got, items = _stage(bootstrap, topic, registry_url, tmp_path, True, 0, end=end)
        assert got == expected
        assert got[2] + len(got[1]) == N                            # every record but the marker
        assert 150 not in [q[0] for q in got[1]]                    # the marker is not quarantined either
        assert not [i for i in items if type(i) is KafkaBatch and i.count_before(151) > i.count_before(150)]
        rows = [r for f in got[0] for r in f[7]]
        assert 150 not in {r["_offset"] for r in rows} and max(r["_offset"] for r in rows) == N
    finally:
        stop_all(brokers)
