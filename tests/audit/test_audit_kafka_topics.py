"""The audit on Kafka-format topics: EventProducers that know only the brokers' Kafka listeners publish their
events and their monitoring events to Kafka-format topics (the data topics and the audit topic are new, so
they take ``topic.format.default``, kafka); the real loader (``bootstrap.servers``) loads both on Spark and
the audit reconciles them exactly: two producer sessions, two windows, two topics, every window COMPLETE
with the counts the producers reported acknowledged. (The audit's verdicts themselves do not depend on
the kind of topic: tests/audit/test_audit_e2e.py proves each of them on 0.7 topics.)"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.clock import FakeClock
from ingest.events.event_producer import EventProducer
from ingest.events.registry_client import RegistryClient
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import run_load
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.registry import RegistryProcess

W = 600_000
HOUR = 3_600_000
A = (int(time.time() * 1000) // HOUR) * HOUR - 2 * HOUR
B = A + W


def pages(n: int) -> list[dict]:
    return [{"member_id": 1000 + i, "page_key": "home", "url": "/feed", "referrer": None, "user_agent": "ua",
             "ip": "10.0.0.1", "locale": "en_US", "response_ms": 7, "is_guest": False} for i in range(n)]


def _windows(run, topic: str) -> dict[int, dict]:
    return {r["window_start_ms"]: r for r in run.rows if r["topic"] == topic and r["row_type"] == "window"}


@pytest.mark.slow
def test_the_audit_reconciles_kafka_topics(spark, tmp_path_factory, tmp_path: Path):
    registry = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1)
    broker = brokers[0]
    bootstrap = f"127.0.0.1:{broker.kafka_port}"
    try:
        clock = FakeClock(A + 1000)
        producers = [EventProducer({"bootstrap.servers": bootstrap, "producer.type": "sync"},
                                   RegistryClient(registry.url), clock=clock, background=False,
                                   monitoring_window_ms=W, monitoring_grace_ms=1000,
                                   monitoring_interval_ms=86_400_000) for _ in range(2)]
        first, second = producers
        first.send("k-clean", pages(20))
        second.send("k-clean", pages(7))
        first.send("k-other", pages(12))
        clock.set(B + 5000)
        first.send("k-clean", pages(4))
        for ep in producers:
            ep.poll()
            assert ep.producer.routes.kind("k-clean") == "kafka"
            stats = ep.close(timeout_s=30)
            assert stats["failed"] == 0 and stats["monitoring_pending"] == 0, stats
        with KafkaFetcher({"bootstrap.servers": bootstrap}) as kafka:   # the audit topic is Kafka-format too
            assert kafka.latest("audit-monitoring", 0) >= 2

        dest = tmp_path / "dest"
        load_config = LOADER_CONFIG.parse({"destination": str(dest), "bootstrap.servers": bootstrap,
                                           "registry.url": registry.url, "format": "parquet"})
        assert run_load(load_config, spark).status == "committed"
        audit_config = AUDIT_CONFIG.parse({"destination": str(dest), "grace.ms": 2000, "window.lookback": 0})
        run = run_audit(spark, audit_config, clock=FakeClock(B + W + 60_000), from_ms=A, to_ms=B + W)
        clean = _windows(run, "k-clean")
        assert (clean[A]["status"], clean[A]["produced_acked"], clean[A]["loaded_distinct"]) == ("COMPLETE", 27, 27)
        assert clean[A]["producers_reported"] == 2
        assert (clean[B]["status"], clean[B]["produced_acked"], clean[B]["loaded_distinct"]) == ("COMPLETE", 4, 4)
        other = _windows(run, "k-other")
        assert (other[A]["status"], other[A]["loaded_distinct"], other[A]["missing"]) == ("COMPLETE", 12, 0)
    finally:
        stop_all(brokers)
        registry.stop()
