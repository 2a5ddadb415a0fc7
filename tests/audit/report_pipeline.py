"""One real destination for the report tests: a 21-minute hole and a loss, loaded by the real loader.

Real broker process, real registry, real EventProducers (1-minute monitoring
windows, FakeClock so event times are exact), a FaultProxy that swallows one
fire-and-forget PRODUCE request, the real loader on the session's Spark. The
brokers and the registry are stopped before the destination is handed out: the
audits read only the destination. Built once per session (tests/audit/conftest.py)
and shared by test_nothing_judged.py and test_report_browser.py.

Timeline (minutes after ``start``, an hour edge two hours ago; windows of 1 minute):

=======  ==========================================================================
minute   what
=======  ==========================================================================
0, 1, 2  ``rep-pv``: 10 events each (producer 1)
1        ``rep-lossy``: 3 batches of 5 with acks=0; the proxy swallows the 2nd: acked
         15, loaded 10 (DATA_LOSS, missing 5)
3 - 23   nothing at all: both producers closed at 02:59 (the 21-minute hole)
24, 25   ``rep-pv``: 7 and 8 events (producer 2, a new session)
=======  ==========================================================================
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ingest.client.producer import Producer
from ingest.client.simple_consumer import SimpleConsumer
from ingest.clock import FakeClock
from ingest.events.event_producer import EventProducer
from ingest.events.registry_client import RegistryClient
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import run_load
from tests.audit.proxy import FaultProxy
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.registry import RegistryProcess

MINUTE = 60_000
HOUR = 3_600_000
HOLE = range(3, 24)  # the minutes with no event at all: 21 windows
PV = {0: 10, 1: 10, 2: 10, 24: 7, 25: 8}  # rep-pv events per minute
LOSSY_ACKED, LOSSY_LOADED = 15, 10  # rep-lossy, minute 1
END_MINUTE = 26  # the data's windows end here


@dataclass
class Built:
    dest: Path
    start_ms: int
    lost_ids: list[str] = field(default_factory=list)

    def minute(self, n: int) -> int:
        return self.start_ms + n * MINUTE


def page(i: int) -> dict:
    return {"member_id": 1000 + i, "page_key": "home", "url": "/feed", "referrer": None, "user_agent": "ua",
            "ip": "10.0.0.1", "locale": "en_US", "response_ms": 7, "is_guest": False}


def _wait(cond, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _held(port: int, topic: str) -> int:
    consumer = SimpleConsumer("127.0.0.1", port)
    try:
        return sum(1 for _ in consumer.iter_range(topic, 0, consumer.earliest_offset(topic, 0),
                                                  consumer.latest_offset(topic, 0)))
    except Exception:  # noqa: BLE001 - the topic does not exist yet
        return 0
    finally:
        consumer.close()


def build(spark, tmp_path_factory) -> Built:
    start = (int(time.time() * 1000) // HOUR) * HOUR - 2 * HOUR
    tmp = tmp_path_factory.mktemp("report-pipeline")
    registry = RegistryProcess(tmp / "registry").start()
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1)
    broker = brokers[0]
    proxy = FaultProxy(broker.port)
    clock = FakeClock(start + 1000)
    direct = f"{broker.broker_id}:127.0.0.1:{broker.port}"
    producers: list[EventProducer] = []

    def producer(**data) -> EventProducer:
        cfg = {"broker.list": direct, "producer.type": "sync", "batch.size": 1000, **data}
        mon = Producer({"broker.list": direct}, clock=clock)
        ep = EventProducer(cfg, RegistryClient(registry.url), clock=clock, background=False, monitoring_producer=mon,
                           monitoring_window_ms=MINUTE, monitoring_grace_ms=1000, monitoring_interval_ms=86_400_000)
        producers.append(ep)
        return ep

    built = Built(tmp / "dest", start)
    try:
        first = producer()
        lossy = producer(**{"broker.list": f"0:{proxy.address}", "request.required.acks": 0})
        for m in (0, 1, 2):
            clock.set(built.minute(m) + 1000)
            first.send("rep-pv", [page(i) for i in range(PV[m])])
            if m == 1:
                lossy.send("rep-lossy", [page(i) for i in range(5)])
                _wait(lambda: _held(broker.port, "rep-lossy") == 5, "5 lossy events on the broker")
                proxy.drop_produce = True
                built.lost_ids = [f"{h['session']}:{h['seq']}" for h in lossy.send("rep-lossy", [page(i) for i in range(5)])]
                _wait(lambda: proxy.dropped_frames == 1, "the proxy to swallow one PRODUCE")
                proxy.drop_produce = False
                lossy.send("rep-lossy", [page(i) for i in range(5)])
                _wait(lambda: _held(broker.port, "rep-lossy") == 10, "10 lossy events on the broker")
        clock.set(built.minute(2) + 59_000)
        first.close(timeout_s=5)
        lossy.close(timeout_s=5)
        second = producer()
        for m in (24, 25):
            clock.set(built.minute(m) + 1000)
            second.send("rep-pv", [page(i) for i in range(PV[m])])
        clock.set(built.minute(25) + 59_000)
        second.close(timeout_s=5)
        cfg = LOADER_CONFIG.parse({"destination": str(built.dest), "brokers": f"127.0.0.1:{broker.port}",
                                   "registry.url": registry.url, "format": "parquet"})
        assert run_load(cfg, spark).status == "committed"
    finally:
        for ep in producers:
            try:
                ep.close(timeout_s=1)
            except Exception:  # noqa: BLE001 - already closed or the broker is gone
                pass
        proxy.close()
        stop_all(brokers)
        registry.stop()
    return built
