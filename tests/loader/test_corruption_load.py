"""A flipped byte on the broker's disk: the load commits every intact message once and records the damage;
the audit names it CORRUPTION_LOSS with the exact missing count.

Real registry, real broker process, real EventProducers with monitoring, the real loader on Spark and the
audit in-process. Bytes are flipped in the stopped broker's sealed segment files, then the broker is restarted.
"""
from __future__ import annotations

import collections
import time

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.counts import LoadedCount
from ingest.audit.job import run_audit
from ingest.audit.monitoring_events import WindowMonitoring
from ingest.audit.reconcile import EXIT_DATA_LOSS, AuditParams, build_rows
from ingest.broker.segment import parse_segment_name
from ingest.client.producer import Producer
from ingest.client.simple_consumer import SimpleConsumer
from ingest.clock import FakeClock
from ingest.events.event_producer import EventProducer
from ingest.events.registry_client import RegistryClient
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import run_load
from ingest.loader.runrecord import summary_text
from ingest.lost_ranges import CORRUPTION, LostRange
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import BrokerProcess
from tests.harness.registry import RegistryProcess
from tests.loader.helpers import committed_ids

W = 600_000
HOUR = 3_600_000
A = (int(time.time() * 1000) // HOUR) * HOUR - 2 * HOUR  # windows A and B: the first two of an hour
B = A + W
TOPIC = "pv-corrupt"


def page(i: int) -> dict:
    return {"member_id": 1000 + i, "page_key": "home", "url": "/feed", "referrer": None, "user_agent": "ua",
            "ip": "10.0.0.1", "locale": "en_US", "response_ms": 7, "is_guest": False}


def flip(path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x5A
    path.write_bytes(bytes(data))


def segment_of(log_dir, offset: int):
    """(path, base) of the segment file holding ``offset``."""
    bases = sorted(b for b in (parse_segment_name(p.name) for p in log_dir.iterdir()) if b is not None)
    base = max(b for b in bases if b <= offset)
    return log_dir / f"{base:020d}.kafka", base, bases


@pytest.mark.parametrize("fmt", ["parquet"])
def test_a_load_across_flipped_bytes_commits_the_rest_once_and_the_audit_says_corruption_loss(
        spark, tmp_path_factory, tmp_path, fmt):
    registry = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    broker = BrokerProcess(0, tmp_path / "broker", overrides={"num.partitions": 1, "log.file.size": 2048,
                                                              "log.flush.interval": 1})
    broker.start()
    try:
        clock = FakeClock(A + 1000)
        direct = f"0:127.0.0.1:{broker.port}"
        mon = Producer({"broker.list": direct}, clock=clock)
        ep = EventProducer({"broker.list": direct, "producer.type": "sync", "batch.size": 1},
                           RegistryClient(registry.url), clock=clock, background=False, monitoring_producer=mon,
                           monitoring_window_ms=W, monitoring_grace_ms=1000, monitoring_interval_ms=86_400_000)
        ids = []
        for i in range(30):  # window A: one message each
            ids += [(h["session"], h["seq"]) for h in ep.send(TOPIC, [page(i)])]
        clock.set(B + 1000)
        for i in range(10):  # window B
            ids += [(h["session"], h["seq"]) for h in ep.send(TOPIC, [page(100 + i)])]
        clock.set(B + W + 5000)
        ep.poll()  # both windows closed: their monitoring events go out
        ep.close()

        # Two messages of window A are damaged, in sealed segments (the newest segment's recovery path
        # is tested with a real broker in tests/broker/test_corruption.py).
        with SimpleConsumer(broker.host, broker.port) as c:
            end = c.latest_offset(TOPIC, 0)
            msgs = list(c.iter_range(TOPIC, 0, 0, end))
        assert len(msgs) == 40
        log_dir = broker.log_dir / f"{TOPIC}-0"
        broker.stop()
        victims = [msgs[5], msgs[20]]
        for v, where in zip(victims, (30, 7)):  # inside the payload; inside the CRC
            path, base, bases = segment_of(log_dir, v.offset)
            assert base != bases[-1]
            flip(path, v.offset - base + where)
        for f in log_dir.glob("*.index"):
            f.unlink()
        broker.start()

        lost_ids = {tuple(ids[msgs.index(v)]) for v in victims}

        cfg = LOADER_CONFIG.parse({"destination": str(tmp_path / "dest"), "brokers": f"127.0.0.1:{broker.port}",
                                   "registry.url": registry.url, "format": fmt})
        result = run_load(cfg, spark)
        assert result.status == "committed"
        # Every intact message exactly once, none of the damaged ones.
        got = committed_ids(tmp_path / "dest", TOPIC)
        assert got == collections.Counter({i: 1 for i in ids if i not in lost_ids})
        state = LoaderState.load(open_storage(str(tmp_path / "dest")))
        ranges = sorted((r.start_offset, r.end_offset, r.cause) for r in state.lost_ranges(TOPIC))
        assert ranges == sorted((v.offset, v.next_offset, CORRUPTION) for v in victims)
        assert summary_text(result.record).count("LOST (corruption)") == 2

        audit_cfg = AUDIT_CONFIG.parse({"destination": str(tmp_path / "dest"), "grace.ms": 2000,
                                        "window.lookback": 0})
        run = run_audit(spark, audit_cfg, clock=FakeClock(B + W + 60_000), from_ms=A, to_ms=B + W)
        rows = {r["window_start_ms"]: r for r in run.rows if r["topic"] == TOPIC and r["row_type"] == "window"}
        a, b = rows[A], rows[B]
        assert (a["status"], a["produced_acked"], a["loaded_distinct"], a["missing"], a["causes"]) == \
            ("CORRUPTION_LOSS", 30, 28, 2, {"corruption": 2})
        assert (b["status"], b["missing"]) == ("COMPLETE", 0)
        assert run.exit_code == EXIT_DATA_LOSS
    finally:
        broker.stop()
        registry.stop()


def params() -> AuditParams:
    return AuditParams(window_ms=W, grace_ms=0, threshold=0.999, now_ms=A + 10 * W, lo_ms=A, hi_ms=A + 6 * W,
                       plausible_hi_ms=A + 100 * W)


def lost(start: int, end: int, n: int, after: int | None, before: int | None, cause: str) -> LostRange:
    return LostRange("pv", 0, 0, start, end, (end - start), n, after, before, "r", 0, cause)


def test_corruption_and_retention_ranges_explain_their_own_windows():
    mon = {("pv", A + k * W): WindowMonitoring("pv", A + k * W, A + (k + 1) * W, None) for k in range(3)}
    for wm in mon.values():
        wm.acked = 10
    loaded = [LoadedCount("pv", A, "h", 10, 10), LoadedCount("pv", A + W, "h", 9, 9),
              LoadedCount("pv", A + 2 * W, "h", 7, 7)]
    rows = build_rows(params(), mon, loaded, lost_ranges=[
        lost(100, 200, 1, A + W + 5, A + W + 9, CORRUPTION),              # window 1: one damaged message
        lost(500, 800, 3, A + 2 * W + 1, A + 2 * W + 50, "retention"),   # window 2: three deleted
    ])
    by = {r["window_start_ms"]: r for r in rows}
    assert by[A]["status"] == "COMPLETE"
    assert (by[A + W]["status"], by[A + W]["missing"], by[A + W]["causes"]) == ("CORRUPTION_LOSS", 1, {"corruption": 1})
    assert (by[A + 2 * W]["status"], by[A + 2 * W]["retention_lost"]) == ("RETENTION_LOSS", 3)


def test_a_lost_range_written_before_causes_existed_reads_as_retention():
    rec = lost(0, 10, 1, None, None, "retention").to_json()
    del rec["cause"]
    assert LostRange.from_json(rec).cause == "retention"


def test_a_load_across_a_middle_segment_cut_short_commits_every_intact_message(spark, tmp_path_factory, tmp_path):
    """A sealed segment file cut short inside its last message while the broker is stopped: the load
    commits every other message once (the messages after the cut, in later segments, included) and
    records the cut message as a corruption range up to the next segment's base, with the exact count 1.
    On the code before, the fetch after the damaged tail answered STORAGE_ERROR and the run failed."""
    registry = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    broker = BrokerProcess(0, tmp_path / "broker", overrides={"num.partitions": 1, "log.file.size": 2048,
                                                              "log.flush.interval": 1})
    broker.start()
    try:
        clock = FakeClock(A + 1000)
        ep = EventProducer({"broker.list": f"0:127.0.0.1:{broker.port}", "producer.type": "sync", "batch.size": 1},
                           RegistryClient(registry.url), clock=clock, background=False,
                           monitoring_interval_ms=86_400_000)
        ids = []
        for i in range(40):
            ids += [(h["session"], h["seq"]) for h in ep.send(TOPIC, [page(i)])]
        ep.close()
        with SimpleConsumer(broker.host, broker.port) as c:
            msgs = list(c.iter_range(TOPIC, 0, 0, c.latest_offset(TOPIC, 0)))
        assert len(msgs) == 40
        log_dir = broker.log_dir / f"{TOPIC}-0"
        broker.stop()
        bases = sorted(b for b in (parse_segment_name(p.name) for p in log_dir.iterdir()) if b is not None)
        assert len(bases) >= 3
        victim = max(m for m in msgs if m.next_offset == bases[1])  # the last message of the first sealed segment
        path = log_dir / f"{bases[0]:020d}.kafka"
        with open(path, "r+b") as f:
            f.truncate(victim.offset - bases[0] + 20)  # inside the victim: its header is left, its payload cut
        broker.start()

        cfg = LOADER_CONFIG.parse({"destination": str(tmp_path / "dest"), "brokers": f"127.0.0.1:{broker.port}",
                                   "registry.url": registry.url, "format": "parquet"})
        result = run_load(cfg, spark)
        assert result.status == "committed"
        lost_id = tuple(ids[msgs.index(victim)])
        assert committed_ids(tmp_path / "dest", TOPIC) == collections.Counter({i: 1 for i in ids if i != lost_id})
        state = LoaderState.load(open_storage(str(tmp_path / "dest")))
        ranges = [(r.start_offset, r.end_offset, r.cause, r.estimated_messages, r.messages_exact)
                  for r in state.lost_ranges(TOPIC)]
        assert ranges == [(victim.offset, bases[1], CORRUPTION, 1, True)]
        assert " 1 messages" in summary_text(result.record)  # exact: no "~"
    finally:
        broker.stop()
        registry.stop()
