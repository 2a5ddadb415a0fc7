"""Per-window counting and the monitoring-event buffer, driven by a FakeClock."""
from __future__ import annotations

from ingest.events.envelope import ProducerIdentity
from ingest.events.window_counts import MonitoringCounter, ReportBuffer

W = 60_000  # window
G = 5_000   # grace


def counter(clock, **kw):
    return MonitoringCounter(clock, W, grace_ms=G, interval_ms=kw.pop("interval_ms", 30_000), **kw)


def aligned(clock):
    clock.set(1_700_000_040_000 - 1_700_000_040_000 % W)  # a window start
    return clock.time_ms()


def test_window_closes_after_grace_and_is_final_when_settled(fake_clock):
    t0 = aligned(fake_clock)
    c = counter(fake_clock)
    w = c.attempted("pv", t0 + 10, [0, 1, 2])
    c.settled("pv", w, acked=2, bytes_acked=200)
    assert c.collect() == []  # open window, interval not yet passed
    fake_clock.set(t0 + W + G - 1)
    snaps = c.collect()
    assert [s.is_final for s in snaps] == [False]  # interim: open (grace not over)
    fake_clock.set(t0 + W + G)
    assert c.collect() == []  # closed, but one send in flight and nothing changed: not final yet
    c.settled("pv", w, failed=1)
    (s,) = c.collect()
    assert (s.count_attempted, s.count_acked, s.count_failed, s.bytes_acked, s.is_final) == (3, 2, 1, 200, True)
    assert (s.seq_min, s.seq_max, s.window_start_ms, s.window_end_ms, s.heartbeat) == (0, 2, t0, t0 + W, False)
    assert c.collect() == []  # unchanged: nothing more


def test_sends_across_a_window_boundary_count_in_their_event_time_window(fake_clock):
    t0 = aligned(fake_clock)
    c = counter(fake_clock)
    a = c.attempted("pv", t0 + W - 1, [0])
    b = c.attempted("pv", t0 + W, [1])
    assert (a, b) == (t0, t0 + W)
    c.settled("pv", a, acked=1)
    c.settled("pv", b, acked=1)
    fake_clock.set(t0 + W + G)
    snaps = c.collect()
    first = [s for s in snaps if s.window_start_ms == t0]
    assert len(first) == 1 and first[0].is_final and first[0].count_acked == 1
    # the second window is still open: only an interim report once the interval passed
    assert all(s.window_start_ms == t0 or not s.is_final for s in snaps)
    fake_clock.set(t0 + 2 * W + G)
    (s,) = c.collect()
    assert (s.window_start_ms, s.count_acked, s.seq_min, s.is_final) == (t0 + W, 1, 1, True)


def test_late_event_reopens_a_reported_window(fake_clock):
    t0 = aligned(fake_clock)
    c = counter(fake_clock)
    buf = ReportBuffer(ProducerIdentity.new("svc", "h"), W)
    c.settled("pv", c.attempted("pv", t0, [0]), acked=1)
    fake_clock.set(t0 + W + G)
    for s in c.collect():
        buf.offer(s)
    first = buf.head()
    buf.done(first)
    c.settled("pv", c.attempted("pv", t0 + 5, [7]), acked=1)  # late: event time in the closed window
    for s in c.collect():
        buf.offer(s)
    second = buf.head().record
    assert (first.record["revision"], second["revision"]) == (1, 2)
    assert (second["count_acked"], second["seq_max"], second["is_final"]) == (2, 7, True)
    assert second["report_seq"] == first.record["report_seq"] + 1
    assert second["event_id"] != first.record["event_id"]


def test_idle_windows_get_heartbeats(fake_clock):
    t0 = aligned(fake_clock)
    c = counter(fake_clock)
    c.track("quiet")
    c.settled("busy", c.attempted("busy", t0 + 1, [0]), acked=1)
    fake_clock.set(t0 + 3 * W + G)  # windows t0, t0+W, t0+2W closed
    snaps = c.collect()
    quiet = sorted((s.window_start_ms, s.heartbeat, s.count_attempted, s.is_final) for s in snaps if s.topic == "quiet")
    assert quiet == [(t0 + i * W, True, 0, True) for i in range(3)]
    busy = sorted((s.window_start_ms, s.heartbeat) for s in snaps if s.topic == "busy")
    assert busy == [(t0, False), (t0 + W, True), (t0 + 2 * W, True)]
    assert c.collect() == []  # each heartbeat once
    fake_clock.set(t0 + 3 * W + W // 2)
    closing = c.collect(closing=True)  # the current window gets its heartbeat on close
    assert sorted((s.topic, s.window_start_ms, s.heartbeat, s.is_final) for s in closing) == [
        ("busy", t0 + 3 * W, True, True), ("quiet", t0 + 3 * W, True, True)]


def test_closing_reports_open_windows(fake_clock):
    t0 = aligned(fake_clock)
    c = counter(fake_clock, heartbeats=False)
    w = c.attempted("pv", t0 + 5, [0, 1])
    c.settled("pv", w, acked=2, bytes_acked=10)
    (s,) = c.collect(closing=True)
    assert (s.count_acked, s.is_final) == (2, True)
    c2 = counter(fake_clock, heartbeats=False)
    c2.attempted("pv", t0 + 5, [0])  # never settled (broker gone at close)
    (s2,) = c2.collect(closing=True)
    assert (s2.count_attempted, s2.count_acked, s2.is_final) == (1, 0, False)


def test_buffer_coalesces_unsent_snapshots_and_drops_oldest_when_full(fake_clock):
    t0 = aligned(fake_clock)
    c = counter(fake_clock, heartbeats=False, interval_ms=1000)
    buf = ReportBuffer(ProducerIdentity.new("svc", "h"), W, capacity=3)
    w = c.attempted("a", t0, [0])
    for i in range(5):  # five interim snapshots of one window while nothing can be published
        c.settled("a", w, acked=0) if i else None
        c.attempted("a", t0 + i, [i + 1])
        fake_clock.advance(1000)
        for s in c.collect():
            buf.offer(s)
    assert len(buf) == 1  # superseded in place: one event, latest counts
    head = buf.head()
    assert (head.record["count_attempted"], head.record["revision"], head.record["report_seq"]) == (6, 1, 1)
    # head is now frozen (being sent); a newer snapshot becomes a new event
    c.attempted("a", t0 + 9, [9])
    fake_clock.advance(1000)
    for s in c.collect():
        buf.offer(s)
    assert len(buf) == 2
    for topic in ("b", "c"):
        c.settled(topic, c.attempted(topic, t0, [0]), acked=1)
    fake_clock.advance(W + G)
    for s in c.collect():
        buf.offer(s)
    assert buf.dropped == 1 and len(buf) == 3  # capacity 3: the oldest (report_seq 1) dropped
    seqs = []
    while (e := buf.head()) is not None:
        seqs.append(e.record["report_seq"])
        buf.done(e)
    assert seqs[0] == 2 and seqs == sorted(seqs) and buf.published == 3


def test_sample_config_parses_and_hidden_audit_topics_are_refused():
    from pathlib import Path

    import pytest

    from ingest.config import read_properties
    from ingest.errors import ConfigError
    from ingest.events.event_producer_config import EVENTS_CONFIG, split_config

    path = Path(__file__).resolve().parents[2] / "conf" / "producer-events.properties"
    cfg = EVENTS_CONFIG.parse(read_properties(path))
    assert cfg["audit.topic"] == "audit-monitoring" and cfg["monitoring.window.ms"] == 600_000
    with pytest.raises(ConfigError, match="audit.topic"):
        EVENTS_CONFIG.parse({"audit.topic": "_audit"})
    events, producer = split_config({"audit.topic": "a", "batch.size": "5"})
    assert events == {"audit.topic": "a"} and producer == {"batch.size": "5"}


def test_events_older_than_the_horizon_are_not_counted(fake_clock):
    from ingest.events.window_counts import RETAIN_MS

    t0 = aligned(fake_clock)
    c = counter(fake_clock, heartbeats=False)
    ancient = t0 - RETAIN_MS - 2 * W
    w = c.attempted("pv", ancient, [0, 1])
    c.settled("pv", w, acked=2)
    assert c.too_late == 2 and c.collect(closing=True) == []
