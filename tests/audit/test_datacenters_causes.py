"""Every cause of loss produced for real on the datacenters topology, counted tier by tier by the real audit.

dc1 and dc2 (one broker each, unreplicated 0.7 topics, 1 partition, 1120-byte segments: one batch of 10
page views each), the offline cluster (one broker), two ``ingest mirror`` processes, the real loader on
Spark reading the offline cluster, the real audit (``run_audit``) over its destination. Producers are
EventProducers on a FakeClock, so every event time (header.time, the windows) is chosen by the test; the
mirrors count by header.time as well. Windows of 10 minutes, in the hour two hours ago:

======  ==========  =========================================================  =====================================
window  topic       what happens                                               expected (producers/source/target/wh)
======  ==========  =========================================================  =====================================
A       dc-crash    10 flushed + mirrored; 3 acknowledged, unflushed, lost in  23/20/20/20 DATA_LOSS,
                    a machine crash of dc1's broker; 10 more after restart     lost_before_source 3
B       dc-crash    mirrors stopped; 30 deleted by dc1's retention; 10 kept    40/10/10/10 RETENTION_LOSS,
                                                                               source_retention 30
C       dc-target   10 mirrored and loaded; 20 mirrored then deleted by the    40/40/40/20 RETENTION_LOSS,
                    offline cluster's retention before the next load; 10 kept  target_retention 20
D       dc-kill     60 per datacenter while a mirror is SIGKILLed twice        120/120/120/120 COMPLETE
E       dc-lag      20 mirrored; the loader of dc-lag stopped (blacklisted)    20/20/20/0 lost_at_loader 20, then
                                                                               20/20/20/20 COMPLETE once it loads
======  ==========  =========================================================  =====================================

A and B are the issue's proof of exact attribution: adjacent windows of one partition and one producer
session, the crash-lost tail (seqs 10-12) lies below the seqs the retention gap can hold (after the
post-crash batch, seq 22, before seq 53), so exactly 3 are DATA_LOSS and exactly 30 RETENTION_LOSS.

A machine crash is SIGKILL plus cutting the unflushed bytes (tests/harness/datacenters.lose_unflushed_tail);
retention runs the broker's own Log.delete_segments on a stopped broker (retention_below), as
tests/audit/test_audit_e2e.py does.
"""
from __future__ import annotations

import time

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.client.producer import Producer
from ingest.clock import FakeClock
from ingest.errors import IngestError
from ingest.events.event_producer import EventProducer
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import load_schema
from ingest.events.serde import EventDeserializer
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import run_load
from tests.harness.datacenters import datacenters, lose_unflushed_tail, retention_below  # noqa: F401 (fixture)

W = 600_000
HOUR = 3_600_000
A = (int(time.time() * 1000) // HOUR) * HOUR - 2 * HOUR
B, C, D, E = A + W, A + 2 * W, A + 3 * W, A + 4 * W
SRC = {"num.partitions": 1, "log.file.size": 512, "log.flush.interval": 10,
       "topic.flush.intervals.ms": "dc-crash:3600000"}  # dc-crash: flushed every 10 messages, never by time
OFFLINE = {"num.partitions": 1, "log.file.size": 512}
MIRROR = {"monitoring.window.ms": W, "monitoring.interval.ms": 500, "checkpoint.interval.ms": 200,
          "topic.refresh.ms": 500, "zk.sessiontimeout.ms": 2000}
TOPICS = ("dc-crash", "dc-target", "dc-kill", "dc-lag")


def page(i: int) -> dict:
    """A page view of fixed size (every message of a session the same size while its seq < 64)."""
    return {"member_id": 1000 + i, "page_key": "home", "url": "/feed", "referrer": None, "user_agent": "ua",
            "ip": "10.0.0.1", "locale": "en_US", "response_ms": 7, "is_guest": False}


def pages(n: int) -> list[dict]:
    return [page(i) for i in range(n)]


def wait_until(cond, what: str, timeout_s: float = 120.0) -> None:
    """Until ``cond()``; an IngestError (a leader being elected after a restart) counts as "not yet"."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if cond():
                return
        except IngestError:
            pass
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.1)


class Scenario:
    def __init__(self, dc, spark, tmp_path) -> None:
        self.dc = dc
        self.spark = spark
        self.dest = tmp_path / "warehouse"
        self.clock = FakeClock(A + 1000)
        self.registry = RegistryClient(dc.registry.url)
        self.producers: dict[str, EventProducer] = {}

    def producer(self, cluster: str) -> EventProducer:
        if cluster not in self.producers:
            brokers = self.dc.clusters[cluster].broker_list
            ep = EventProducer({"broker.list": brokers, "producer.type": "sync", "batch.size": 1000,
                                "request.required.acks": 1}, self.registry, clock=self.clock, background=False,
                               monitoring_producer=Producer({"broker.list": brokers}, clock=self.clock),
                               monitoring_window_ms=W, monitoring_grace_ms=1000,
                               monitoring_interval_ms=86_400_000, service_name=f"frontend-{cluster}")
            for t in TOPICS:
                ep.register_topic(t, load_schema("page_view"))
            self.producers[cluster] = ep
        return self.producers[cluster]

    def send(self, cluster: str, topic: str, n: int, at_ms: int) -> list[dict]:
        self.clock.set(at_ms)
        return self.producer(cluster).send(topic, pages(n))

    def offline_count(self, topic: str) -> int:
        return len(self.dc.offline.messages(topic))

    def wait_mirrored(self, topic: str, n: int) -> None:
        wait_until(lambda: self.offline_count(topic) == n, f"{n} messages of {topic} in the offline cluster")

    def close_producers(self) -> None:
        self.clock.set(E + W + 5000)  # every window closed: the final monitoring events go out
        for ep in self.producers.values():
            ep.poll()
            ep.close(timeout_s=10)

    def mirror_acked(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, window) -> (read, acked) from the mirrors' newest revisions in the offline audit-mirror."""
        de = EventDeserializer(self.registry)
        latest: dict[tuple[str, int, str], dict] = {}
        for payload in self.dc.offline.messages("audit-mirror"):
            ev = de.deserialize(payload, topic="audit-mirror")
            key = (ev["topic"], ev["window_start_ms"], ev["producer_session_id"])
            if key not in latest or ev["revision"] > latest[key]["revision"]:
                latest[key] = ev
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for (topic, window, _), ev in latest.items():
            read, acked = out.get((topic, window), (0, 0))
            out[(topic, window)] = (read + ev["count_attempted"], acked + ev["count_acked"])
        return out

    def load(self, **kw):
        cfg = LOADER_CONFIG.parse({"destination": str(self.dest), "zk.connect": self.dc.offline.zk_connect,
                                   "registry.url": self.dc.registry.url, "format": "parquet",
                                   "fail.on.data.loss": "false", **kw})
        result = run_load(cfg, self.spark)
        assert result.status == "committed", result
        return result

    def audit(self) -> dict[tuple[str, int], dict]:
        cfg = AUDIT_CONFIG.parse({"destination": str(self.dest), "grace.ms": 2000, "window.lookback": 0,
                                  "topics": "|".join(TOPICS)})
        run = run_audit(self.spark, cfg, clock=FakeClock(E + W + 120_000), from_ms=A, to_ms=E + W,
                        run_id=f"a{time.monotonic_ns()}")
        return {(r["topic"], r["window_start_ms"]): r for r in run.rows if r["row_type"] == "window"}


def tiers(row: dict) -> tuple:
    t = row["tiers"]
    return (t["producers"], t["source"], t["target"], t["warehouse"], row["status"])


@pytest.mark.slow
def test_every_cause_tier_by_tier_with_exact_counts(datacenters, spark, tmp_path):
    dc = datacenters(brokers_per_dc=1, offline_brokers=1, dc_overrides=SRC, offline_overrides=OFFLINE)
    s = Scenario(dc, spark, tmp_path)
    dc1 = dc.clusters["dc1"]
    dc.start_mirror("m1", **MIRROR)
    dc.start_mirror("m2", **MIRROR)

    # --- A: an acknowledged tail lost in dc1's machine crash ---------------------------------------------
    s.send("dc1", "dc-crash", 10, A + 1000)                       # seqs 0-9: flushed (10 messages)
    s.wait_mirrored("dc-crash", 10)
    ((broker, partition, _, flushed_end),) = dc1.partitions("dc-crash")
    tail = s.send("dc1", "dc-crash", 3, A + 2000)                 # seqs 10-12: acknowledged, not flushed
    assert s.producers["dc1"].stats()["acked"] == 13
    assert lose_unflushed_tail(broker, "dc-crash", partition, flushed_end) == 3 * (flushed_end // 10)
    broker.start()
    s.send("dc1", "dc-crash", 10, A + 3000)                       # seqs 13-22 after the restart
    s.wait_mirrored("dc-crash", 20)

    # --- B: dc1's retention deletes 30 messages the stopped mirrors had not copied -------------------------
    for m in dc.mirrors:
        m.stop()
    for k in range(3):
        s.send("dc1", "dc-crash", 10, B + 1000 + k)               # seqs 23-52: deleted below
    ((_, _, _, cut),) = dc1.partitions("dc-crash")
    s.send("dc1", "dc-crash", 10, B + 2000)                       # seqs 53-62: kept
    segments, _ = retention_below(broker, "dc-crash", partition, cut)
    assert segments == 5                                          # A's two (already mirrored) and B's three
    broker.start()
    for m in dc.mirrors:
        m.start()
    s.wait_mirrored("dc-crash", 30)

    # --- C: the offline cluster's retention deletes 20 mirrored messages before they are loaded -----------
    s.send("dc2", "dc-target", 10, C + 1000)
    s.wait_mirrored("dc-target", 10)
    s.load()                                                      # loads dc-target's first 10 (and the rest)
    for k in range(2):
        s.send("dc2", "dc-target", 10, C + 2000 + k)
        s.wait_mirrored("dc-target", 20 + 10 * k)                 # one target segment per batch
    # the target topic has spare partitions (docs/mirroring.md); dc2's partition is copied to one of them
    ((off_broker, target_partition, _, target_cut),) = [p for p in dc.offline.partitions("dc-target") if p[3] > 0]
    s.send("dc2", "dc-target", 10, C + 3000)
    s.wait_mirrored("dc-target", 40)
    segments, _ = retention_below(off_broker, "dc-target", target_partition, target_cut)
    assert segments == 3                                          # the loaded batch and the two unloaded ones
    off_broker.start()
    s.wait_mirrored("dc-target", 10)

    # --- D: a mirror SIGKILLed twice while both datacenters publish ----------------------------------------
    for k in range(6):
        s.send("dc1", "dc-kill", 10, D + 1000 + k)
        s.send("dc2", "dc-kill", 10, D + 1000 + k)
        if k in (1, 3):
            dc.mirrors[0].kill()
            dc.mirrors[0].start()
    s.wait_mirrored("dc-kill", 120)
    assert sorted(s.dc.offline.messages("dc-kill")) == sorted(
        dc1.messages("dc-kill") + dc.clusters["dc2"].messages("dc-kill"))  # byte-identical, once each

    # --- E: mirrored, but the loader of dc-lag is stopped --------------------------------------------------
    s.send("dc2", "dc-lag", 20, E + 1000)
    s.wait_mirrored("dc-lag", 20)
    s.close_producers()
    expected_counts = {("dc-crash", A): (20, 20), ("dc-crash", B): (10, 10), ("dc-target", C): (40, 40),
                       ("dc-kill", D): (120, 120), ("dc-lag", E): (20, 20)}
    wait_until(lambda: all(s.mirror_acked().get(k) == v for k, v in expected_counts.items()),
               "the mirrors' counts of every window in the offline audit-mirror")
    wait_until(lambda: s.offline_count("audit-monitoring") == sum(
        len(dc.clusters[c].messages("audit-monitoring")) for c in ("dc1", "dc2")), "monitoring events mirrored")

    s.load(**{"topics.blacklist": "dc-lag"})
    rows = s.audit()
    assert tiers(rows[("dc-crash", A)]) == (23, 20, 20, 20, "DATA_LOSS")
    assert rows[("dc-crash", A)]["causes"] == {"lost_before_source": 3}
    assert rows[("dc-crash", A)]["loss_tier"] == "source"
    assert sorted(rows[("dc-crash", A)]["missing_id_sample"]) == sorted(f"{h['session']}:{h['seq']}" for h in tail)
    assert tiers(rows[("dc-crash", B)]) == (40, 10, 10, 10, "RETENTION_LOSS")
    assert rows[("dc-crash", B)]["causes"] == {"source_retention": 30}
    assert tiers(rows[("dc-target", C)]) == (40, 40, 40, 20, "RETENTION_LOSS")
    assert rows[("dc-target", C)]["causes"] == {"target_retention": 20}
    assert rows[("dc-target", C)]["loss_tier"] == "warehouse"
    assert tiers(rows[("dc-kill", D)]) == (120, 120, 120, 120, "COMPLETE")
    assert rows[("dc-kill", D)]["loaded_rows"] == 120                # no duplicate anywhere
    lag = rows[("dc-lag", E)]
    assert (lag["tiers"]["producers"], lag["tiers"]["target"], lag["tiers"]["warehouse"]) == (20, 20, 0)
    assert lag["causes"] == {"lost_at_loader": 20} and lag["loss_tier"] == "warehouse"

    s.load()                                                      # the loader of dc-lag catches up
    rows = s.audit()
    assert tiers(rows[("dc-lag", E)]) == (20, 20, 20, 20, "COMPLETE")
    assert tiers(rows[("dc-crash", A)]) == (23, 20, 20, 20, "DATA_LOSS")
    assert tiers(rows[("dc-crash", B)]) == (40, 10, 10, 10, "RETENTION_LOSS")
