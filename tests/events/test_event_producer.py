"""Event producer and monitoring events against real broker processes and a real registry.

The invariant under test: for every (topic, window), the latest revisions of the
monitoring events, summed over producer sessions, equal the distinct
``(session, seq)`` the broker holds, and equal what was acknowledged.
"""
from __future__ import annotations

import collections

from ingest.client.producer import Producer
from ingest.clock import FakeClock
from ingest.events.envelope import frame
from ingest.events.event_producer import EventProducer
from ingest.events.loadgen import EventGenerator
from tests.events.readback import latest_revisions, read_topic, read_topic_sized
from tests.harness.brokers import broker_factory, broker_list  # noqa: F401  (pytest fixture)

W = 60_000
AUDIT = "audit-monitoring"


def aligned_clock() -> FakeClock:
    start = 1_700_000_000_000
    return FakeClock(start - start % W)


def assert_reconciles(brokers, registry, topic, producers):
    data, failures = read_topic_sized(brokers, topic, registry)
    assert failures == []
    distinct_per_window = collections.Counter()
    held = collections.defaultdict(list)  # (session, window) -> [(seq, framed bytes)] held by the broker
    seen = set()
    for r, size in data:
        key = (r["header"]["session"], r["header"]["seq"])
        if key not in seen:
            seen.add(key)
            window = r["header"]["time"] - r["header"]["time"] % W
            distinct_per_window[window] += 1
            held[(key[0], window)].append((key[1], size))
    mon, mon_failures = read_topic(brokers, AUDIT, registry)
    assert mon_failures == []
    assert len({m["event_id"] for m in mon}) == len({(m["producer_session_id"], m["report_seq"]) for m in mon})
    latest = latest_revisions(m for m in mon if m["topic"] == topic)
    acked_per_window = collections.Counter()
    for (session, _, window), m in latest.items():
        acked_per_window[window] += m["count_acked"]
        assert m["is_final"], m
        assert m["window_end_ms"] - m["window_start_ms"] == m["window_size_ms"] == W
    for (session, _, window), m in latest.items():  # per session too: counts, bytes and the seq range
        mine = held.get((session, window), [])
        assert (m["count_acked"], m["bytes_acked"]) == (len(mine), sum(n for _, n in mine)), (m, len(mine))
        if mine:  # seq range is over attempted events: it covers what was acknowledged
            seqs = [q for q, _ in mine]
            assert m["seq_min"] <= min(seqs) and m["seq_max"] >= max(seqs), m
            if m["count_failed"] == 0:
                assert (m["seq_min"], m["seq_max"]) == (min(seqs), max(seqs)), m
    nonzero = {w: n for w, n in acked_per_window.items() if n}
    assert nonzero == dict(distinct_per_window)
    total_acked = sum(p.stats()["acked"] for p in producers)
    assert sum(nonzero.values()) == len(seen) == total_acked
    for p in producers:  # report_seq has no gaps within a session
        seqs = sorted({m["report_seq"] for m in mon if m["producer_session_id"] == p.session})
        assert seqs == list(range(1, len(seqs) + 1))
    return latest, mon


def make_producer(brokers, registry, clock, **kw):
    cfg = {"broker.list": broker_list(brokers), "producer.type": kw.pop("producer_type", "async"),
           "batch.size": 20, "queue.time": 50, "retry.backoff.ms": 10, "reconnect.backoff.max.ms": 200,
           "socket.timeout.ms": 5000}
    settings = dict(monitoring_window_ms=W, monitoring_grace_ms=5000, monitoring_interval_ms=20_000,
                    service_name="test-svc")
    settings.update(kw)
    return EventProducer(cfg, registry, clock=clock, background=False, **settings)


def test_windows_restarts_and_heartbeats_reconcile(broker_factory, registry):
    brokers = broker_factory(n=2, num_partitions=2)
    clock = aligned_clock()
    t0 = clock.time_ms()
    gen = EventGenerator(seed=7)
    topic = "page-views"
    p1 = make_producer(brokers, registry, clock, topics=[topic, "quiet-topic"])
    # traffic right before and after a window boundary (event time decides the window)
    for i in range(6):
        p1.send(topic, gen.batch(5), time_ms=t0 + W - 3 + i)
    p1.flush()
    clock.set(t0 + W + 5000)  # first window closed + grace
    assert p1.poll() >= 2  # final for window 0, heartbeat for quiet-topic window 0
    p1.send(topic, gen.batch(7), time_ms=clock.time_ms())
    p1.send(topic, gen.batch(3), time_ms=t0 + 10)  # late: reopens window 0 (revision 2)
    # restart mid-window: session 1 closes, session 2 continues in the same window
    stats1 = p1.close()
    assert stats1["acked"] == 40 and stats1["failed"] == 0 and stats1["monitoring_pending"] == 0
    clock.advance(1000)
    p2 = make_producer(brokers, registry, clock)
    assert p2.session != p1.session
    p2.send(topic, gen.batch(11), time_ms=clock.time_ms())
    clock.set(t0 + 3 * W + 5000)  # windows 1 and 2 closed; 2 was idle
    p2.poll()
    p2.close()
    latest, mon = assert_reconciles(brokers, registry, topic, [p1, p2])
    assert latest[(p1.session, topic, t0)]["revision"] == 2
    assert latest[(p1.session, topic, t0)]["count_acked"] == 15 + 3
    assert latest[(p1.session, topic, t0 + W)]["count_acked"] == 15 + 7
    assert latest[(p2.session, topic, t0 + W)]["count_acked"] == 11
    hb = latest[(p2.session, topic, t0 + 2 * W)]
    assert hb["heartbeat"] and hb["count_attempted"] == 0 and hb["seq_min"] is None
    quiet = {m["window_start_ms"]: m for m in mon if m["topic"] == "quiet-topic"}
    assert quiet[t0]["heartbeat"] and quiet[t0]["is_final"]
    m = latest[(p2.session, topic, t0 + W)]
    assert (m["producer_server"], m["service"], m["header"]["session"]) == (p2.identity.server, "test-svc", p2.session)
    assert m["header"]["time"] == m["emitted_at_ms"]


def test_broker_loss_retries_monitoring_and_reconciles(broker_factory, registry):
    (broker,) = broker_factory(n=1, num_partitions=2)
    clock = aligned_clock()
    t0 = clock.time_ms()
    gen = EventGenerator(seed=8)
    topic = "page-views-loss"
    p = make_producer([broker], registry, clock, monitoring_interval_ms=1000)
    for _ in range(4):
        p.send(topic, gen.batch(10), time_ms=t0 + 100)
    p.flush()
    clock.advance(2000)
    assert p.poll() == 1  # interim report of the open window
    broker.kill()  # SIGKILL: the broker is gone
    for _ in range(2):
        p.send(topic, gen.batch(10), time_ms=t0 + 200)  # never blocks; the batches fail
    p.flush()
    assert p.stats()["failed"] == 20
    clock.set(t0 + W + 5000)
    assert p.poll() == 0  # the final report cannot be published...
    assert p.stats()["monitoring_pending"] == 1  # ...and waits in the buffer
    broker.start()
    clock.advance(11_000)  # past the monitoring back-off and the producer's broker back-off
    p.send(topic, gen.batch(30), time_ms=clock.time_ms())
    p.flush()
    assert p.poll() >= 1 and p.stats()["monitoring_pending"] == 0
    stats = p.close()
    assert (stats["attempted"], stats["acked"], stats["failed"], stats["monitoring_dropped"]) == (90, 70, 20, 0)
    latest, _ = assert_reconciles([broker], registry, topic, [p])
    w0 = latest[(p.session, topic, t0)]
    assert (w0["count_attempted"], w0["count_acked"], w0["count_failed"]) == (60, 40, 20)


def test_sync_producer_counts_and_decode_errors_do_not_stop_reading(broker_factory, registry):
    (broker,) = broker_factory(n=1)
    clock = aligned_clock()
    topic = "clicks-mixed"
    p = make_producer([broker], registry, clock, producer_type="sync")
    p.send(topic, EventGenerator("click", seed=1).batch(3))
    raw = Producer({"broker.list": broker_list([broker])})
    bad = [b"\x07not-framed", frame(424242, b"\x02x"), frame(p.register_topic(topic), b"\xff\xff\xff")]
    raw.send(topic, bad)
    raw.close()
    p.send(topic, EventGenerator("click", seed=2).batch(2))
    p.close()
    records, failures = read_topic([broker], topic, registry)
    assert len(records) == 5 and [r["header"]["seq"] for r in records] == [0, 1, 2, 3, 4]
    assert len(failures) == 3
    messages = [str(f.error) for f in failures]
    assert "magic byte 0x07" in messages[0] and "unknown schema id" in messages[1]
    assert "does not decode" in messages[2]
    for f in failures:
        assert f"topic {topic} offset {f.offset} " in str(f.error)
    assert p.stats()["acked"] == 5


def test_reporter_thread_reports_closed_windows_and_heartbeats_without_close(broker_factory, registry):
    """Real clock, 1 s windows: the background reporter publishes finals and heartbeats on its own."""
    import time

    (broker,) = broker_factory(n=1)
    ep = EventProducer({"broker.list": broker_list([broker]), "producer.type": "sync"}, registry,
                       monitoring_window_ms=1000, monitoring_grace_ms=0, monitoring_interval_ms=100_000,
                       monitoring_tick_ms=20, topics=["idle-topic"], service_name="bg")
    try:
        headers = ep.send("page-views-bg", EventGenerator(seed=3).batch(4))
        window = headers[0]["time"] - headers[0]["time"] % 1000
        deadline = time.monotonic() + 20
        while True:  # poll the broker until the reporter published both, or fail at the deadline
            mon, _ = read_topic([broker], AUDIT, registry)
            mine = [m for m in mon if m["producer_session_id"] == ep.session]
            finals = [m for m in mine if m["topic"] == "page-views-bg" and m["is_final"]]
            idle = [m for m in mine if m["topic"] == "idle-topic" and m["heartbeat"]]
            if finals and idle:
                break
            assert time.monotonic() < deadline, f"reporter published only {mine}"
            time.sleep(0.1)
        acked = sum(m["count_acked"] for m in finals if m["window_start_ms"] == window)
        assert acked == sum(1 for h in headers if h["time"] - h["time"] % 1000 == window)
        assert all(m["count_attempted"] == 0 for m in idle)
    finally:
        ep.close()
