"""End to end: real broker process, real registry, real EventProducers with monitoring, the real loader on Spark,
the audit in-process and through spark-submit jobs/audit.py. Every scenario asserts exact counts and statuses.

One pipeline, one topic per scenario (starting Spark, brokers and loads once keeps the suite fast):

============  ===================================================================================
topic         scenario
============  ===================================================================================
e2e-clean     20 events in window A: COMPLETE
e2e-restart   producer session 1 sends 6, closes; session 2 sends 4 in the same window: COMPLETE, 2 producers
e2e-dropped   acks=0 producer; a proxy swallows the 2nd of 3 PRODUCE requests (lost before the broker):
              DATA_LOSS, missing = exactly the 5 swallowed ids
e2e-dups      a proxy swallows one PRODUCE_ACK after the append; the producer retries (at-least-once):
              DUPLICATES, 16 rows / 8 distinct
e2e-late      10 events, audited; 3 late events of the same window arrive later: revision 10 -> 13, COMPLETE
e2e-monlost   the monitoring path is down and the 1-event buffer overflows: report_seq 1 is lost:
              MONITORING_GAP, never COMPLETE
e2e-retain    loaded batch (A); the next batch (B) deleted by retention before the 2nd load
              (fail.on.data.loss=false); batch C loaded: A COMPLETE, B RETENTION_LOSS, C COMPLETE
e2e-oldest    the oldest segment (B) deleted before the topic's first load: B RETENTION_LOSS, C COMPLETE
e2e-idle      traffic in A and C, none in B: B COMPLETE by heartbeat
============  ===================================================================================

Retention is applied by stopping the broker and running the broker's own ``Log.delete_segments`` on
its log directory (what the retention thread does once segments are old enough), then restarting it:
the retention thread's shortest period is one minute, too slow for a test.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingest.audit import history
from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.audit.reconcile import EXIT_DATA_LOSS
from ingest.audit.report_reader import read_report
from ingest.broker.log_config import LOG_CONFIG
from ingest.broker.log_manager import LogManager
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
from tests.harness import reaper
from tests.harness.spark import SHORT_JVM_OPTS

REPO = Path(__file__).resolve().parents[2]
W = 600_000
HOUR = 3_600_000
A = (int(time.time() * 1000) // HOUR) * HOUR - 2 * HOUR  # windows A, B, C: the first three of an hour
B, C = A + W, A + 2 * W
AUDIT_GRACE = 2_000


def page(i: int) -> dict:
    """A page view of fixed size (so retention's bytes -> messages estimate is exact)."""
    return {"member_id": 1000 + i, "page_key": "home", "url": "/feed", "referrer": None, "user_agent": "ua",
            "ip": "10.0.0.1", "locale": "en_US", "response_ms": 7, "is_guest": False}


def pages(n: int) -> list[dict]:
    return [page(i) for i in range(n)]


class Pipeline:
    def __init__(self, tmp: Path, broker, registry_url: str) -> None:
        self.tmp = tmp
        self.broker = broker
        self.direct = f"{broker.broker_id}:127.0.0.1:{broker.port}"
        self.registry = RegistryClient(registry_url)
        self.registry_url = registry_url
        self.clock = FakeClock(A + 1000)
        self.dest = tmp / "dest"
        self.producers: list[EventProducer] = []

    def producer(self, *, data: dict | None = None, monitoring_producer: Producer | None = None, **kw) -> EventProducer:
        cfg = {"broker.list": self.direct, "producer.type": "sync", "batch.size": 1000, **(data or {})}
        mon = monitoring_producer or Producer({"broker.list": self.direct}, clock=self.clock)
        ep = EventProducer(cfg, self.registry, clock=self.clock, background=False, monitoring_producer=mon,
                           monitoring_window_ms=W, monitoring_grace_ms=1000, monitoring_interval_ms=86_400_000, **kw)
        self.producers.append(ep)
        return ep

    def poll_all(self) -> None:
        for ep in self.producers:
            if not ep._closed:
                ep.poll()

    def load(self, fmt: str):
        cfg = LOADER_CONFIG.parse({"destination": str(self.dest), "brokers": f"127.0.0.1:{self.broker.port}",
                                   "registry.url": self.registry_url, "format": fmt, "fail.on.data.loss": "false"})
        return run_load(cfg, self.spark)

    def audit_config(self, **kw):
        return AUDIT_CONFIG.parse({"destination": str(self.dest), "grace.ms": AUDIT_GRACE, "window.lookback": 0,
                                   "report.by.producer": "true", **kw})

    def audit(self, now: int):
        return run_audit(self.spark, self.audit_config(), clock=FakeClock(now), from_ms=A, to_ms=C + W)


def wait_for_messages(port: int, topic: str, n: int, timeout_s: float = 20.0) -> None:
    """Fire-and-forget sends: wait until the broker holds ``n`` messages of ``topic``."""
    consumer = SimpleConsumer("127.0.0.1", port)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            end = consumer.latest_offset(topic, 0)
            got = sum(1 for _ in consumer.iter_range(topic, 0, consumer.earliest_offset(topic, 0), end))
            if got >= n or time.monotonic() > deadline:
                assert got == n, f"{topic}: broker holds {got} messages, expected {n}"
                return
            time.sleep(0.05)
    finally:
        consumer.close()


def wait_until(cond, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def delete_oldest_segments(log_dir: Path, topic: str, keep: int) -> int:
    """Retention on a stopped broker's log: delete all but the newest ``keep`` segments of ``topic``-0."""
    lm = LogManager(LOG_CONFIG.parse({"log.dir": str(log_dir), "log.file.size": 1024}))
    lm.startup()
    try:
        lg = lm.get_log(topic, 0)
        cut = lg.segment_bases()[-keep]
        n, _ = lg.delete_segments(lambda seg: seg.base_offset < cut)
        return n
    finally:
        lm.shutdown()


_T = [time.monotonic()]


def mark(label: str) -> None:
    """Progress of the long scenario in the test log (where the time goes)."""
    now = time.monotonic()
    logging.getLogger(__name__).info("e2e step %s: %.1f s", label, now - _T[0])
    _T[0] = now


def by_window(run, topic: str) -> dict[int, dict]:
    return {r["window_start_ms"]: r for r in run.rows if r["topic"] == topic and r["row_type"] == "window"}


def counts(r: dict) -> tuple:
    return (r["status"], r["produced_acked"], r["loaded_rows"], r["loaded_distinct"], r["duplicates"], r["missing"])


@pytest.mark.slow
def test_audit_end_to_end_scenarios(spark, tmp_path_factory, tmp_path):
    registry = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1, log_file_size=1024)
    broker = brokers[0]
    drop_proxy = FaultProxy(broker.port)
    mon_proxy = FaultProxy(broker.port)
    p = Pipeline(tmp_path, broker, registry.url)
    p.spark = spark
    mark("start")
    submit = None
    try:
        # --- window A ---------------------------------------------------------------------------
        clean = p.producer()
        clean.send("e2e-clean", pages(20))
        first = p.producer()
        first.send("e2e-restart", pages(6))
        first.close()
        second = p.producer()  # the restarted producer: a new session in the same window
        second.send("e2e-restart", pages(4))
        dropped = p.producer(data={"broker.list": f"0:{drop_proxy.address}", "request.required.acks": 0})
        dropped.send("e2e-dropped", pages(5))
        wait_for_messages(broker.port, "e2e-dropped", 5)  # fire-and-forget: wait until it is on the broker
        drop_proxy.drop_produce = True
        lost_headers = dropped.send("e2e-dropped", pages(5))
        wait_until(lambda: drop_proxy.dropped_frames == 1)
        drop_proxy.drop_produce = False
        dropped.send("e2e-dropped", pages(5))
        wait_for_messages(broker.port, "e2e-dropped", 10)
        assert drop_proxy.dropped_frames == 1
        dups = p.producer(data={"broker.list": f"0:{drop_proxy.address}", "socket.timeout.ms": 1000,
                                "message.send.max.retries": 3, "retry.backoff.ms": 200})
        drop_proxy.drop_acks = 1
        dups.send("e2e-dups", pages(8))
        assert drop_proxy.dropped_acks == 1
        late = p.producer()
        late.send("e2e-late", pages(10))
        mon_producer = Producer({"broker.list": f"0:{mon_proxy.address}", "message.send.max.retries": 0,
                                 "socket.timeout.ms": 1000}, clock=p.clock)
        monlost = p.producer(monitoring_producer=mon_producer, monitoring_buffer_size=1)
        mon_proxy.set_refuse(True)
        monlost.send("e2e-monlost", pages(5))
        retain = p.producer()
        retain.send("e2e-retain", pages(10))
        idle = p.producer()
        idle.send("e2e-idle", pages(5))

        mark('window A sends')
        p.clock.set(B + 5000)
        p.poll_all()  # window A closed: its monitoring events go out (monlost's cannot)
        assert p.load("parquet").status == "committed"
        mark('load 1')
        audit1 = p.audit(now=B + 5000)
        assert counts(by_window(audit1, "e2e-late")[A]) == ("COMPLETE", 10, 10, 10, 0, 0)

        mark('audit 1')
        # --- window B -------------------------------------------------------------------------------
        monlost.send("e2e-monlost", pages(5))
        retain.send("e2e-retain", pages(10))          # will be deleted by retention before it is loaded
        oldest = p.producer()
        oldest.send("e2e-oldest", pages(10))          # will be deleted before the topic's first load
        late.send("e2e-late", pages(3), time_ms=A + 500)  # late events of window A

        p.clock.set(C + 5000)
        p.poll_all()  # B closed: monlost's B report overflows its 1-event buffer, dropping A's (report_seq 1)
        mon_proxy.set_refuse(False)
        p.clock.advance(15_000)
        monlost.poll()
        assert monlost.stats()["monitoring_dropped"] == 1

        # --- window C -------------------------------------------------------------------------------
        monlost.send("e2e-monlost", pages(5))
        retain.send("e2e-retain", pages(10))
        oldest.send("e2e-oldest", pages(10))
        idle.send("e2e-idle", pages(5))
        for ep in p.producers:
            ep.close(timeout_s=5)

        mark('windows B, C and closes')
        broker.stop()
        assert delete_oldest_segments(broker.log_dir, "e2e-retain", keep=1) >= 1
        assert delete_oldest_segments(broker.log_dir, "e2e-oldest", keep=1) == 1
        broker.start()
        mark('retention + broker restart')
        second_load = p.load("parquet")
        assert second_load.status == "committed"
        lost_topics = sorted(r["topic"] for r in second_load.record["lost_ranges"])
        assert lost_topics == ["e2e-oldest", "e2e-retain"]

        mark('load 2')
        # --- the same audit through spark-submit jobs/audit.py, overlapping the in-process audit ----
        # (history.enabled=false: the revisions asserted below are the in-process runs')
        conf = tmp_path / "audit.properties"
        conf.write_text(f"destination={p.dest}\ngrace.ms={AUDIT_GRACE}\nwindow.lookback=0\nhistory.enabled=false\n")
        report = tmp_path / "report" / "audit.jsonl"
        py = sys.executable
        env = dict(os.environ, PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py,
                   PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        submit = subprocess.Popen(
            [str(Path(py).parent / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
             "--driver-java-options", SHORT_JVM_OPTS,  # a short run: C1 JIT (tests/harness/spark.py)
             str(REPO / "jobs" / "audit.py"), "--config", str(conf), "--from", str(A), "--to", str(C + W),
             "--report", str(report)],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        reaper.watch(submit)  # stopped even if pytest itself is killed
        run = p.audit(now=C + W + 60_000)
        mark('audit 2')
        rows = {t: by_window(run, t) for t in {r["topic"] for r in run.rows}}
        assert "audit-monitoring" not in rows
        assert counts(rows["e2e-clean"][A]) == ("COMPLETE", 20, 20, 20, 0, 0)
        restart = rows["e2e-restart"][A]
        assert counts(restart) == ("COMPLETE", 10, 10, 10, 0, 0) and restart["producers_reported"] == 2
        assert restart["sessions"] == sorted([first.session, second.session])
        drop = rows["e2e-dropped"][A]
        assert counts(drop) == ("DATA_LOSS", 15, 10, 10, 0, 5) and drop["completeness"] == round(10 / 15, 6)
        assert drop["missing_id_sample"] == [f"{h['session']}:{h['seq']}" for h in lost_headers]
        assert drop["causes"] == {"unexplained_loss": 5}
        dup = rows["e2e-dups"][A]
        assert counts(dup) == ("DUPLICATES", 8, 16, 8, 8, 0) and dup["causes"] == {"duplicates": 8}
        assert counts(rows["e2e-late"][A]) == ("COMPLETE", 13, 13, 13, 0, 0)
        revisions = [(r["status"], r["loaded_distinct"]) for r in history.read_history(str(p.dest)).to_pylist()
                     if r["topic"] == "e2e-late" and r["row_type"] == "window" and r["window_start_ms"] == A]
        assert revisions == [("COMPLETE", 10), ("COMPLETE", 13)]
        ml = rows["e2e-monlost"]
        assert ml[A]["status"] == "MONITORING_GAP" and ml[A]["missing_report_seqs"] == [f"{monlost.session}:1"]
        assert (ml[A]["produced_acked"], ml[A]["loaded_distinct"]) == (0, 5)
        assert all(r["status"] != "COMPLETE" for r in ml.values() if r["missing_report_seqs"])
        ret = rows["e2e-retain"]
        assert counts(ret[A]) == ("COMPLETE", 10, 10, 10, 0, 0)
        assert counts(ret[B]) == ("RETENTION_LOSS", 10, 0, 0, 0, 10) and ret[B]["retention_lost"] == 10
        assert ret[B]["causes"] == {"retention": 10} and len(ret[B]["missing_id_sample"]) == 10
        assert counts(ret[C]) == ("COMPLETE", 10, 10, 10, 0, 0)
        old = rows["e2e-oldest"]
        assert counts(old[B]) == ("RETENTION_LOSS", 10, 0, 0, 0, 10) and old[B]["causes"] == {"retention": 10}
        assert counts(old[C]) == ("COMPLETE", 10, 10, 10, 0, 0)
        idle_rows = rows["e2e-idle"]
        assert counts(idle_rows[B]) == ("COMPLETE", 0, 0, 0, 0, 0) and idle_rows[B]["heartbeat"] is True
        assert counts(idle_rows[A])[0] == counts(idle_rows[C])[0] == "COMPLETE"
        assert run.exit_code == EXIT_DATA_LOSS

        stdout, stderr = submit.communicate(timeout=900)  # a hang guard only: a loaded machine is slow
        mark("spark-submit (overlapping audit 2)")
        assert submit.returncode == EXIT_DATA_LOSS, stderr[-3000:]
        assert "DATA LOSS" in stdout
        submitted = {(r["topic"], r["window_start_ms"]): r["status"] for r in read_report(report)
                     if r["row_type"] == "window"}
        in_process = {(r["topic"], r["window_start_ms"]): r["status"] for r in run.rows if r["row_type"] == "window"}
        assert submitted == in_process
        html = report.with_suffix(".html").read_text()
        assert "e2e-dropped" in html and "RETENTION_LOSS" in html
        # self-contained: viewable offline, nothing fetched from anywhere
        assert not any(s in html for s in ("http://", "https://", "<script", "<link", "src=", "url(")), "external ref"
        assert json.loads(report.read_text().splitlines()[0])["threshold"] == 0.999
    finally:
        if submit is not None and submit.poll() is None:
            submit.kill()  # our own child, by its handle
            submit.wait()
        for ep in p.producers:
            try:
                ep.close(timeout_s=1)
            except Exception:
                pass
        drop_proxy.close()
        mon_proxy.close()
        stop_all(brokers)
        registry.stop()
