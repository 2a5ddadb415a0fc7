"""Broker-tier counts end to end with real processes: a topic fed only by confluent-kafka producers
(AvroSerializer against the real registry, a schema without the product's header, no monitoring events)
-> a real broker counting what it appends -> the loader (Spark) -> the audit on the shared Spark session:
COMPLETE from the brokers' counts, with Parquet and with Avro output. Then acknowledged data is removed
from one tier: 17 rows are cut out of a committed Parquet file, and the audit reports exactly those 17
missing at the warehouse tier (DATA_LOSS), in the windows they belonged to.
"""
from __future__ import annotations

import json
import time

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.clock import FakeClock
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import broker_cluster, stop_all

pytestmark = pytest.mark.processes

W = 600_000
T0 = (int(time.time() * 1000) // 3_600_000 - 3) * 3_600_000   # three hours ago, on an hour
TOPIC = "orders-bt"
ORDER = {"type": "record", "name": "Order", "namespace": "shop.orders",
         "fields": [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "long"}]}
PER_WINDOW = (120, 75, 0, 200)   # records per window from T0; one window empty


def _produce(bootstrap: str, registry_url: str) -> int:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(ORDER))
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 10, "compression.type": "lz4"})
    n = 0
    for w, count in enumerate(PER_WINDOW):
        for i in range(count):
            ts = T0 + w * W + i * (W // max(count, 1))
            p.produce(TOPIC, value=ser({"order_id": f"o{w}-{i}", "amount": i}, ctx), partition=n % 2, timestamp=ts)
            n += 1
    assert p.flush(60) == 0
    return n


def _audit(spark, dest):
    cfg = AUDIT_CONFIG.parse({"destination": str(dest), "grace.ms": 0, "window.lookback": 6, "history.enabled": "false"})
    return run_audit(spark, cfg, clock=FakeClock(T0 + 6 * W), from_ms=T0, to_ms=T0 + 6 * W)


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_a_confluent_kafka_topic_is_judged_from_broker_counts_and_cut_rows_are_exact_loss(
        spark, registry_url, tmp_path_factory, tmp_path, fmt):
    broker = broker_cluster(tmp_path_factory, n=1, num_partitions=2, audit_counts_enable="true",
                            schema_registry_url=registry_url, audit_counts_interval_ms=200)[0]
    bootstrap = f"127.0.0.1:{broker.kafka_port}"
    dest = tmp_path / "dest"
    try:
        _produce(bootstrap, registry_url)
        broker.stop()      # its last publication; then serve again for the load
        broker.restart()
        cfg = LOADER_CONFIG.parse({"destination": str(dest), "bootstrap.servers": bootstrap,
                                   "registry.url": registry_url, "format": fmt})
        assert run_load(cfg, spark).status == "committed"
    finally:
        stop_all([broker])

    run = _audit(spark, dest)
    rows = {r["window_start_ms"]: r for r in run.rows if r["topic"] == TOPIC}
    want = {T0 + w * W: n for w, n in enumerate(PER_WINDOW) if n}
    assert {ws: (r["status"], r["tiers"]["broker"], r["loaded_distinct"]) for ws, r in rows.items()} == \
        {ws: ("COMPLETE", n, n) for ws, n in want.items()}
    assert all(r["tiers"]["producers"] is None and r["produced_acked"] == 0 for r in rows.values())
    assert run.exit_code == 0 and "audit-broker" not in run.inputs["topics"]
    if fmt == "avro":
        return   # the Avro files are read by the audit's own data source: counted the same; the cut is Parquet's

    # remove acknowledged data from the warehouse tier: 17 rows cut out of one committed file
    import pyarrow.parquet as pq   # deferred like the tests' other Parquet reads

    st = LoaderState.load(open_storage(str(dest)))
    victim = dest / next(f for f in st.files(TOPIC) if f.rows > 40).path
    table = pq.read_table(victim)
    cut = table.slice(0, 17).column("_timestamp").to_pylist()
    pq.write_table(table.slice(17), victim)
    expect = {}
    for ts in cut:
        expect[ts - ts % W] = expect.get(ts - ts % W, 0) + 1
    run = _audit(spark, dest)
    rows = {r["window_start_ms"]: r for r in run.rows if r["topic"] == TOPIC}
    lost = {ws: r["missing"] for ws, r in rows.items() if r["missing"]}
    assert lost == expect and sum(lost.values()) == 17
    for ws in lost:
        r = rows[ws]
        assert (r["status"], r["loss_tier"], r["causes"]) == ("DATA_LOSS", "warehouse", {"unexplained_loss": lost[ws]})
        assert r["tiers"]["broker"] - r["tiers"]["warehouse"] == lost[ws]
    assert run.exit_code == 3
