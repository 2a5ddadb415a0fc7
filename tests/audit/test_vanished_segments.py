"""Segments gone without a retention record are DATA_LOSS; real retention after a crash is exact.

One real broker (size-based retention, checked every 200 ms, recorded in ``deleted-segments``), the
real registry, EventProducers with monitoring on a FakeClock (so the test chooses every event time
and window), the real loader on Spark, the real audit. Two topics, one partition each, in windows A
and B (10 minutes each, two hours ago):

=========  ===========================================================================================
window A   producer session s2 sends 10 per topic (flushed), then an acknowledged tail of 3 per topic
           that a machine crash of the broker loses (SIGKILL + cutting the unflushed bytes); s2 ends
           after the restart (its monitoring events count the tail, and no later seq of s2 exists).
           Session s1 sends 10 per topic before the crash and 10 after it. Load 1.
window B   s1 sends 250 messages to ``vs-ret``: the broker's own retention deletes the segments from
           the committed offset on (recorded). s1 sends 60 to ``vs-hand``, below the retention size;
           then the broker is stopped, the old ``vs-hand`` segments are deleted by hand (no record),
           and the broker is started again. Load 2 (fail.on.data.loss=false), audit.
=========  ===========================================================================================

Expected (and what the code before this test did):

- ``vs-ret``: the lost range has cause ``retention`` and the exact count D; window A is DATA_LOSS
  with exactly the 3 crash-lost messages unexplained; window B is RETENTION_LOSS with exactly D.
  (Before: the gap's time span overlaps A and s2 is open above, so the earliest window took 3 of the
  gap's D: A RETENTION_LOSS, B DATA_LOSS.)
- ``vs-hand``: the lost range has cause ``missing_segments`` and an estimated count; every window
  with missing messages is DATA_LOSS, nothing is called retention, and the gap explains no more than
  its estimate. (Before: cause ``retention``, both windows RETENTION_LOSS.)
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.client.producer import Producer
from ingest.client.simple_consumer import SimpleConsumer
from ingest.clock import FakeClock
from ingest.events.event_producer import EventProducer
from ingest.events.registry_client import RegistryClient
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.datacenters import lose_unflushed_tail
from tests.loader.helpers import committed_ids

W = 600_000
HOUR = 3_600_000
A = (int(time.time() * 1000) // HOUR) * HOUR - 2 * HOUR
B, C = A + W, A + 2 * W
RET, HAND = "vs-ret", "vs-hand"
SEGMENT = 4096
KEEP = 4 * SEGMENT  # page views are ~113 bytes: vs-hand (90) stays below it, vs-ret (280) does not
TAIL = 3


def page(i: int) -> dict:
    return {"member_id": 1000 + i, "page_key": "home", "url": "/feed", "referrer": None, "user_agent": "ua",
            "ip": "10.0.0.1", "locale": "en_US", "response_ms": 7, "is_guest": False}


def pages(n: int) -> list[dict]:
    return [page(i) for i in range(n)]


class Producers:
    """EventProducers on one FakeClock, sync, monitoring to the same broker, reporting only when polled."""

    def __init__(self, broker, registry_url: str) -> None:
        self.direct = f"{broker.broker_id}:127.0.0.1:{broker.port}"
        self.registry = RegistryClient(registry_url)
        self.clock = FakeClock(A + 1000)
        self.all: list[EventProducer] = []

    def new(self) -> EventProducer:
        mon = Producer({"broker.list": self.direct}, clock=self.clock)
        ep = EventProducer({"broker.list": self.direct, "producer.type": "sync", "batch.size": 1000}, self.registry,
                           clock=self.clock, background=False, monitoring_producer=mon, monitoring_window_ms=W,
                           monitoring_grace_ms=1000, monitoring_interval_ms=86_400_000)
        self.all.append(ep)
        return ep

    def send(self, ep: EventProducer, topic: str, n: int, per_send: int = 10) -> list[tuple[str, int]]:
        ids = []
        for i in range(0, n, per_send):
            ids += [(h["session"], h["seq"]) for h in ep.send(topic, pages(min(per_send, n - i)))]
        return ids

    def close_all(self) -> None:
        for ep in self.all:
            try:
                ep.close(timeout_s=2)
            except Exception:  # noqa: BLE001 - cleanup only
                pass


def visible_end(broker, topic: str) -> int:
    with SimpleConsumer(broker.host, broker.port) as c:
        return c.latest_offset(topic, 0)


def segments(broker, topic: str) -> list[Path]:
    return sorted((broker.log_dir / f"{topic}-0").glob("*.kafka"))


def wait_for_retention(broker, topic: str, above: int, timeout_s: float = 240.0) -> int:
    """The earliest offset once the retention thread moved the log start above ``above`` and has no
    more to delete (what is left minus KEEP is smaller than the oldest segment)."""
    deadline = time.monotonic() + timeout_s
    while True:
        sizes = [p.stat().st_size for p in segments(broker, topic)]
        with SimpleConsumer(broker.host, broker.port) as c:
            earliest = c.earliest_offset(topic, 0)
        if earliest > above and sum(sizes) - KEEP < sizes[0]:
            return earliest
        assert time.monotonic() < deadline, f"retention did not finish within {timeout_s} s: {earliest}, {sizes}"
        time.sleep(0.3)


def delete_by_hand(broker, topic: str, keep: int) -> int:
    """Delete all but the newest ``keep`` segment files of a stopped broker, as an operator (or a disk
    fault) would: no record. Returns the new log start."""
    files = segments(broker, topic)
    for p in files[:-keep]:
        p.unlink()
    return int(files[-keep].stem)


def by_window(run, topic: str) -> dict[int, dict]:
    return {r["window_start_ms"]: r for r in run.rows if r["topic"] == topic and r["row_type"] == "window"}


@pytest.mark.slow
def test_vanished_segments_are_data_loss_and_recorded_retention_after_a_crash_is_exact(
        spark, registry_url, tmp_path_factory, tmp_path):
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1, log_file_size=SEGMENT,
                             log_retention_size=KEEP, log_retention_check_interval_ms=200, log_flush_interval=10,
                             overrides={"topic.flush.intervals.ms": f"{RET}:3600000,{HAND}:3600000"})
    broker = brokers[0]
    ps = Producers(broker, registry_url)
    dest = tmp_path / "dest"
    load_cfg = LOADER_CONFIG.parse({"destination": str(dest), "brokers": f"127.0.0.1:{broker.port}",
                                    "registry.url": registry_url, "format": "parquet",
                                    "fail.on.data.loss": "false"})
    try:
        # --- window A: s2's acknowledged tail is lost in a machine crash; s2 ends after it --------------
        s1, s2 = ps.new(), ps.new()
        for t in (RET, HAND):
            ps.send(s1, t, 10)
            ps.send(s2, t, 10)
        flushed = {t: visible_end(broker, t) for t in (RET, HAND)}
        tail = {t: ps.send(s2, t, TAIL) for t in (RET, HAND)}  # acknowledged, not yet flushed
        assert {t: visible_end(broker, t) for t in (RET, HAND)} == flushed
        for t in (RET, HAND):   # SIGKILL (once), then the page cache's unflushed bytes are gone
            assert lose_unflushed_tail(broker, t, 0, flushed[t]) > 0
        broker.start()
        s2.close(timeout_s=10)                 # its monitoring counts 13 per topic, 3 of them lost
        ps.clock.set(A + 2000)
        for t in (RET, HAND):
            ps.send(s1, t, 10)
        ps.clock.set(B + 5000)
        s1.poll()                              # window A's final counts
        assert run_load(load_cfg, spark).status == "committed"
        st = LoaderState.load(open_storage(str(dest)))
        committed = {t: st.offsets[(t, 0, 0)].offset for t in (RET, HAND)}

        # --- window B: real retention on vs-ret; vs-hand's old segments deleted by hand -----------------
        ps.clock.set(B + 1000)
        later = {HAND: ps.send(s1, HAND, 60), RET: ps.send(s1, RET, 250)}
        assert sum(p.stat().st_size for p in segments(broker, HAND)) < KEEP  # retention never touches it
        earliest_ret = wait_for_retention(broker, RET, committed[RET])
        ps.clock.set(C + 5000)
        s1.close(timeout_s=10)
        broker.stop()
        earliest_hand = delete_by_hand(broker, HAND, keep=1)
        assert earliest_hand > committed[HAND]
        broker.start()

        assert run_load(load_cfg, spark).status == "committed"
        st = LoaderState.load(open_storage(str(dest)))
        lost = {r.topic: r for r in st.lost_ranges()}
        assert sorted(lost) == [HAND, RET]
        missing = {}
        for t, earliest in ((RET, earliest_ret), (HAND, earliest_hand)):
            ids = committed_ids(dest, t)
            missing[t] = [i for i in later[t] if i not in ids]
            assert missing[t] and len(missing[t]) < len(later[t]), t   # some deleted, some survived
            assert not set(tail[t]) & set(ids)
            assert (lost[t].start_offset, lost[t].end_offset) == (committed[t], earliest), t
        r, h = lost[RET], lost[HAND]
        assert (r.cause, r.messages_exact, r.estimated_messages) == ("retention", True, len(missing[RET]))
        assert (h.cause, h.messages_exact) == ("missing_segments", False)

        run = run_audit(spark, AUDIT_CONFIG.parse({"destination": str(dest), "grace.ms": 2000,
                                                  "window.lookback": 0}),
                        clock=FakeClock(C + W + 60_000), from_ms=A, to_ms=C + W)
        ret, hand = by_window(run, RET), by_window(run, HAND)

        # real retention after a crash: each loss with its exact count, in its own window
        assert (ret[A]["status"], ret[A]["missing"], ret[A]["causes"]) == ("DATA_LOSS", TAIL, {"unexplained_loss": TAIL})
        assert (ret[B]["status"], ret[B]["missing"], ret[B]["causes"], ret[B]["retention_lost"]) == \
            ("RETENTION_LOSS", len(missing[RET]), {"retention": len(missing[RET])}, len(missing[RET]))

        # segments gone without a record: DATA_LOSS, never retention, at most the estimate
        assert (hand[A]["missing"], hand[B]["missing"]) == (TAIL, len(missing[HAND]))
        for row in (hand[A], hand[B]):
            assert row["status"] == "DATA_LOSS" and row["retention_lost"] == 0, row
            assert "retention" not in row["causes"] and sum(row["causes"].values()) == row["missing"], row
        assert 0 < sum(row["causes"].get("missing_segments", 0) for row in hand.values()) <= h.estimated_messages
        assert run.exit_code == 3
    finally:
        if broker.running:  # producers of a stopped broker would retry their monitoring reports
            ps.close_all()
        stop_all(brokers)
