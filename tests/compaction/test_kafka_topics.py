"""Compaction and replay of hours loaded from Kafka-format topics, with real processes: confluent-kafka
(``AvroSerializer`` against the product's registry) -> a broker's Kafka listener -> three loads on the
session's Spark -> compaction -> a replay by time into the compacted hour -> compaction again.

Two topics, one closed hour each, Parquet and Avro:

* ``kc-clicks``: events with the product's header. A producer's retry is the same event twice in the
  log, at two offsets: compaction keeps the first, by ``(header.session, header.seq)``.
* ``kc-plain``: a schema of any producer, without the header. Its rows are told apart by their
  record's position, ``(_partition, _offset)``: two records with equal values at two offsets are both
  kept (nothing says they are one event).

Every row keeps its record columns through compaction and the replay's rewrite; after the replay
every produced record is in the warehouse exactly once.
"""
from __future__ import annotations

import collections
import json
import time

import pytest

from ingest.clock import FakeClock
from ingest.compaction.config import COMPACTION_CONFIG
from ingest.compaction.runner import run as run_compaction
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import broker_cluster, stop_all
from tests.loader.helpers import read_rows

pytestmark = pytest.mark.processes

PARTITIONS = 2
HOUR = 3_600_000
H = (int(time.time() * 1000) // HOUR - 3) * HOUR   # a closed hour
CLICKS, PLAIN = "kc-clicks", "kc-plain"
HEADER = {"type": "record", "name": "EventHeader", "namespace": "ingest.events",
          "fields": [{"name": "time", "type": "long"}, {"name": "server", "type": "string"},
                     {"name": "service", "type": "string"}, {"name": "session", "type": "string"},
                     {"name": "seq", "type": "long"}]}
CLICK = {"type": "record", "name": "Click", "namespace": "shop.events",
         "fields": [{"name": "header", "type": HEADER}, {"name": "page", "type": "string"}]}
ORDER = {"type": "record", "name": "Order", "namespace": "shop.orders",
         "fields": [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "long"}]}


def _event(topic: str, i: int) -> dict:
    if topic == CLICKS:
        return {"header": {"time": H + i * 60_000, "server": "web-1", "service": "shop", "session": "s", "seq": i},
                "page": f"/p/{i}"}
    return {"order_id": f"o-{i}", "amount": i}


class Producer:
    """confluent-kafka with AvroSerializer; remembers every acknowledged record as the row a load writes."""

    def __init__(self, bootstrap: str, registry_url: str) -> None:
        from confluent_kafka import Producer as KafkaProducer
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer

        registry = SchemaRegistryClient({"url": registry_url})
        self.serializers = {CLICKS: AvroSerializer(registry, json.dumps(CLICK)),
                            PLAIN: AvroSerializer(registry, json.dumps(ORDER))}
        self.p = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                "compression.type": "lz4"})
        self.rows: dict[str, list[dict]] = {CLICKS: [], PLAIN: []}

    def send(self, topic: str, i: int) -> int:
        """Event ``i`` to partition ``i % 2``, record timestamp ``H + i * 60 s``; returns the timestamp."""
        from confluent_kafka.serialization import MessageField, SerializationContext

        value, ts = _event(topic, i), H + i * 60_000
        row = {**value, "_key": b"k%d" % i, "_headers": [{"key": "i", "value": str(i).encode()}], "_timestamp": ts}
        errors: list = []

        def done(err, msg):
            if err:
                errors.append(err)
            else:
                row.update(_partition=msg.partition(), _offset=msg.offset())

        data = self.serializers[topic](value, SerializationContext(topic, MessageField.VALUE))
        self.p.produce(topic, value=data, key=b"k%d" % i, headers=[("i", str(i).encode())], partition=i % PARTITIONS,
                       timestamp=ts, on_delivery=done)
        assert self.p.flush(30) == 0 and not errors, errors
        self.rows[topic].append(row)
        return ts


def _canon(rows) -> collections.Counter:
    def norm(v):
        if isinstance(v, (bytes, bytearray)):
            return "b:" + bytes(v).hex()
        if isinstance(v, dict):
            return {k: norm(x) for k, x in sorted(v.items())}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v
    return collections.Counter(json.dumps(norm(r), sort_keys=True) for r in rows)


def _distinct_clicks(rows: list[dict]) -> list[dict]:
    """The first row of each (session, seq), in log order per partition (what compaction keeps)."""
    seen, out = set(), []
    for r in sorted(rows, key=lambda r: (r["_offset"], r["_partition"])):
        if (r["header"]["session"], r["header"]["seq"]) not in seen:
            seen.add((r["header"]["session"], r["header"]["seq"]))
            out.append(r)
    return out


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_compaction_and_a_replay_by_time_keep_record_columns_and_each_record_once(spark, registry_url,
                                                                                  tmp_path_factory, tmp_path, fmt):
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=PARTITIONS)
    try:
        bootstrap = f"127.0.0.1:{brokers[0].kafka_port}"
        dest = tmp_path / "dest"
        conf = LOADER_CONFIG.parse({"destination": str(dest), "bootstrap.servers": bootstrap,
                                    "registry.url": registry_url, "topics": "kc-.*", "format": fmt,
                                    "avro.codec": "deflate"}, source="test")
        p = Producer(bootstrap, registry_url)
        replay_from = None
        for load in range(3):                       # three loads: three files per partition and topic
            for i in range(load * 10, load * 10 + 10):
                ts = p.send(CLICKS, i)
                p.send(PLAIN, i)
                replay_from = ts if load == 1 and i == 15 else replay_from
            if load == 1:                            # a producer's retry: the same event again, a new offset
                for topic in (CLICKS, PLAIN):
                    p.send(topic, 12)
            assert run_load(conf, spark).status == "committed"
        state = LoaderState.load(open_storage(str(dest)))
        for topic in (CLICKS, PLAIN):
            assert _canon(read_rows(state, topic)) == _canon(p.rows[topic])
            assert len({(f.dt, f.hour) for f in state.files(topic)}) == 1 and len(state.files(topic)) == 6

        compaction = COMPACTION_CONFIG.parse({"destination": str(dest), "compaction.require.audit": "false"})
        out = {o["hour"].split("/")[0]: o for o in run_compaction(compaction, topics=[CLICKS, PLAIN],
                                                                    clock=FakeClock(H + 3 * HOUR))}
        assert (out[CLICKS]["action"], out[CLICKS]["rows_in"], out[CLICKS]["rows_out"],
                out[CLICKS]["duplicates"]) == ("compacted", 31, 30, 1), out
        assert (out[PLAIN]["action"], out[PLAIN]["rows_in"], out[PLAIN]["rows_out"],
                out[PLAIN]["duplicates"]) == ("compacted", 31, 31, 0), out
        state = LoaderState.load(open_storage(str(dest)))
        assert all(f.broker_id == -1 for f in state.files())   # every hour is one compacted set now
        # the record columns kept; the event repeated by the producer once per event id (clicks), and
        # every record of the other topic once by its position
        assert _canon(read_rows(state, CLICKS)) == _canon(_distinct_clicks(p.rows[CLICKS]))
        assert _canon(read_rows(state, PLAIN)) == _canon(p.rows[PLAIN])

        # a replay by time into the compacted hour: from the record timestamped replay_from (ListOffsets,
        # exact), snapped back to the start of the committed range holding it
        r = run_load(conf, spark, reset_spec=str(replay_from), reset_topics=[CLICKS, PLAIN])
        assert r.status == "committed" and r.record["totals"]["messages"] > 0
        state = LoaderState.load(open_storage(str(dest)))
        # the reload holds the retried event twice again, as a first load does; the rest once
        assert _canon(read_rows(state, CLICKS)) == _canon(p.rows[CLICKS])
        assert _canon(read_rows(state, PLAIN)) == _canon(p.rows[PLAIN])
        assert {t for t in (CLICKS, PLAIN) for f in state.files(t) if f.sources and ".r-" in f.path} == \
            {CLICKS, PLAIN}   # each compacted file rewritten without the reloaded rows
        out = {o["hour"].split("/")[0]: o for o in run_compaction(compaction, topics=[CLICKS, PLAIN],
                                                                    clock=FakeClock(H + 3 * HOUR))}
        assert (out[CLICKS]["duplicates"], out[PLAIN]["duplicates"], out[PLAIN]["rows_out"]) == (1, 0, 31), out
        state = LoaderState.load(open_storage(str(dest)))
        assert _canon(read_rows(state, CLICKS)) == _canon(_distinct_clicks(p.rows[CLICKS]))
        assert _canon(read_rows(state, PLAIN)) == _canon(p.rows[PLAIN])
    finally:
        stop_all(brokers)
