"""Broker-tier audit counts with a real broker process: what a leader appends from confluent-kafka producers
is counted per record-timestamp window and published as monitoring events to ``audit-broker``; counts not
yet published survive a SIGKILL (recounted from the log); AppendAt copies are not counted.
"""
from __future__ import annotations

import io
import json
import time

import fastavro
import pytest

from ingest.broker.kafka.tier_counts import batch_windows
from ingest.records.batch import iter_batches
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.compression import GZIP
from tests.harness.brokers import broker_cluster, stop_all

pytestmark = pytest.mark.processes

WINDOW = 600_000
T0 = (int(time.time() * 1000) // WINDOW - 6) * WINDOW   # six windows ago, on an edge
COUNTS = "audit-broker"


def _counting(tmp_path_factory, registry_url, **kw):
    return broker_cluster(tmp_path_factory, n=1, num_partitions=2, audit_counts_enable="true",
                          schema_registry_url=registry_url, **kw)[0]


def _produce(bootstrap: str, topic: str, stamps: list[int], *, partition: int | None = None,
             codec: str = "none") -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "compression.type": codec})
    for i, ts in enumerate(stamps):
        kw = {} if partition is None else {"partition": partition}
        p.produce(topic, value=b"v%d" % i, timestamp=ts, **kw)
    assert p.flush(60) == 0


def _events(log_dir) -> list[dict]:
    """Every monitoring event in the counts topic's logs (read from the files, framing checked)."""
    schema = fastavro.parse_schema(json.loads(open("conf/schemas/monitoring_event.avsc").read()))
    out = []
    for seg in sorted(log_dir.glob(f"{COUNTS}-*/*.log")):
        from ingest.records.record import iter_records
        data = seg.read_bytes()
        for pos, _h in iter_batches(data):
            for rec in iter_records(data, pos):
                v = bytes(rec.value)
                assert v[0] == 0
                out.append(fastavro.schemaless_reader(io.BytesIO(v[5:]), schema))
    return out


def _totals(events: list[dict]) -> dict[tuple[str, int], int]:
    """Per (topic, window): the audit's rule (latest revision per session and window, sessions summed)."""
    latest: dict[tuple, dict] = {}
    for e in events:
        k = (e["producer_session_id"], e["topic"], e["window_start_ms"])
        if k not in latest or (e["revision"], e["emitted_at_ms"]) > (latest[k]["revision"], latest[k]["emitted_at_ms"]):
            latest[k] = e
    out: dict[tuple[str, int], int] = {}
    for (_s, t, ws), e in latest.items():
        out[(t, ws)] = out.get((t, ws), 0) + e["count_acked"]
    return out


def test_batch_windows_fast_path_and_the_timestamp_walk():
    """One window: the record count from the header; straddling windows: each record's timestamp, also
    in a compressed batch; LogAppendTime: the append time."""
    same = build_batch([SimpleRecord(b"x", None, (), T0 + i) for i in range(5)])
    assert batch_windows(same, 0, next(iter_batches(same))[1], WINDOW) == {T0: 5}
    stamps = [T0 + WINDOW - 2, T0 + WINDOW - 1, T0 + WINDOW, T0 + 3 * WINDOW + 5, 0]
    for codec in (0, GZIP):
        b = build_batch([SimpleRecord(b"x" * 50, b"k", (("h", b"v"),), ts) for ts in stamps], codec=codec)
        assert batch_windows(b, 0, next(iter_batches(b))[1], WINDOW) == {T0: 2, T0 + WINDOW: 1,
                                                                         T0 + 3 * WINDOW: 1, 0: 1}
    b = build_batch([SimpleRecord(b"x", None, (), ts) for ts in stamps])
    assert batch_windows(b, 0, next(iter_batches(b))[1], WINDOW, append_time=T0 + 7) == {T0: 5}


def test_appends_are_counted_per_record_window_and_published(tmp_path_factory, registry_url):
    broker = _counting(tmp_path_factory, registry_url, audit_counts_interval_ms=200)
    bootstrap = f"127.0.0.1:{broker.kafka_port}"
    try:
        stamps = [T0 + i * 1_000 for i in range(300)] + [T0 + WINDOW + i for i in range(120)]
        _produce(bootstrap, "tc-a", stamps)
        _produce(bootstrap, "tc-b", [T0 + WINDOW - 1, T0 + WINDOW, T0 + 2 * WINDOW], partition=1, codec="gzip")
        want = {("tc-a", T0): 300, ("tc-a", T0 + WINDOW): 120, ("tc-b", T0): 1, ("tc-b", T0 + WINDOW): 1,
                ("tc-b", T0 + 2 * WINDOW): 1}
        deadline = time.monotonic() + 60
        while _totals(_events(broker.log_dir)) != want:
            assert time.monotonic() < deadline, _totals(_events(broker.log_dir))
            time.sleep(0.2)
        events = _events(broker.log_dir)
        assert {e["topic"] for e in events} == {"tc-a", "tc-b"}     # the counts topic is not counted
        assert all(e["producer_session_id"].startswith("broker:0:") and e["count_failed"] == 0 for e in events)
    finally:
        stop_all([broker])


def test_counts_not_yet_published_survive_a_sigkill(tmp_path_factory, registry_url):
    """Publication once an hour: the counts exist only in memory when the broker is SIGKILLed. The restarted
    broker recounts its own appends from the log; a clean stop publishes them: exact totals, nothing twice
    (a second kill after publishing and a restart add nothing)."""
    broker = _counting(tmp_path_factory, registry_url, audit_counts_interval_ms=3_600_000)
    bootstrap = f"127.0.0.1:{broker.kafka_port}"
    try:
        _produce(bootstrap, "tc-kill", [T0 + i * 3_000 for i in range(400)])
        broker.kill()
        assert _events(broker.log_dir) == []
        broker.restart()
        _produce(bootstrap, "tc-kill", [T0 + WINDOW + i for i in range(50)])
        broker.stop()                  # SIGTERM: the last publication
        want = {("tc-kill", T0): 200, ("tc-kill", T0 + WINDOW): 250}
        assert _totals(_events(broker.log_dir)) == want
        broker.restart()
        broker.kill()
        broker.restart()
        broker.stop()
        assert _totals(_events(broker.log_dir)) == want
    finally:
        stop_all([broker])


def test_the_broker_registers_its_counts_schema_with_the_credentials_of_its_config(tmp_path_factory, monkeypatch):
    """A registry with HTTPS and basic auth: the broker's publisher uses basic.auth.user.info (from the
    environment, so server.properties holds only the reference) and the CA."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from tests.harness.registry import secured_registry

    reg, ca = secured_registry(tmp_path_factory.mktemp("sec-registry"), {"broker": ("broker-pw", ("admin",))})
    reg.start()
    monkeypatch.setenv("TC_REGISTRY_USER_INFO", "broker:broker-pw")  # the broker process inherits it
    broker = None
    try:
        broker = _counting(tmp_path_factory, reg.url, audit_counts_interval_ms=200,
                           basic_auth_credentials_source="USER_INFO", basic_auth_user_info="${env:TC_REGISTRY_USER_INFO}",
                           schema_registry_ssl_ca_location=ca.cert)
        _produce(f"127.0.0.1:{broker.kafka_port}", "tc-sec", [T0 + 5, T0 + 6])
        deadline = time.monotonic() + 60
        while _totals(_events(broker.log_dir)) != {("tc-sec", T0): 2}:
            assert time.monotonic() < deadline, _totals(_events(broker.log_dir))
            time.sleep(0.2)
        sr = SchemaRegistryClient({"url": reg.url, "ssl.ca.location": str(ca.cert),
                                   "basic.auth.user.info": "broker:broker-pw"})
        assert f"{COUNTS}-value" in sr.get_subjects()
        assert "broker-pw" not in broker.output_path.read_text() + broker.config_path.read_text()
    finally:
        if broker is not None:
            stop_all([broker])
        reg.stop()
