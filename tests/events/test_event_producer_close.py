"""``EventProducer.close(timeout_s)`` ends within its timeout when the broker is dead, and what it could
not send is counted failed (data) or unpublished (monitoring), never acknowledged.

A real broker process is SIGKILLed under real producers and the real registry:

- sync producers on a :class:`~ingest.clock.FakeClock` (as the audit tests drive them): ``close(2)``
  used to spin for ever (found after more than 10 minutes) whenever the monitoring back-off left a
  remainder under a millisecond, which the clock's sleep rounded down to nothing, so the fake time
  never reached the deadline. A sync send to the dead broker raises and is counted failed;
- an async producer with 10,000 queued messages: ``close(2)`` used to send batch after batch, each
  with its full retry budget (16 s for 2,000 messages); now the queue is failed once the time is up.
"""
from __future__ import annotations

import threading
import time

import pytest

from ingest.client.producer import Producer
from ingest.clock import FakeClock
from ingest.errors import ConfigError, IngestError
from ingest.events.event_producer import EventProducer
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)

TOPIC = "page-views"
PAGE = {"member_id": 1, "page_key": "home", "url": "/feed", "referrer": None, "user_agent": "ua", "ip": "10.0.0.1",
        "locale": "en_US", "response_ms": 7, "is_guest": False}
HOUR = 3_600_000
# clock starts where sub-millisecond back-off remainders occur (10 of them; most hung before)
STARTS = [(int(time.time() * 1000) // HOUR) * HOUR - 2 * HOUR + 1000 + 137 * i for i in range(10)]


def _close_in_thread(ep: EventProducer, timeout_s: float, wait_s: float) -> dict | None:
    """``ep.close(timeout_s)`` on a daemon thread; its stats, or None if it had not returned after ``wait_s``."""
    out: list[dict] = []
    t = threading.Thread(target=lambda: out.append(ep.close(timeout_s=timeout_s)), daemon=True)
    t.start()
    t.join(wait_s)
    return out[0] if out else None


def _settled(stats: dict) -> bool:
    return stats["attempted"] == stats["acked"] + stats["failed"]


def test_sync_producers_on_a_fake_clock_close_when_the_broker_is_dead(broker_factory, registry):  # noqa: F811
    (broker,) = broker_factory(n=1, num_partitions=1)
    direct = f"{broker.broker_id}:127.0.0.1:{broker.port}"
    producers = []
    for start in STARTS:
        ep = EventProducer({"broker.list": direct, "producer.type": "sync"}, registry, clock=FakeClock(start),
                           background=False)
        ep.send(TOPIC, [PAGE] * 3)
        producers.append(ep)
    broker.kill()
    with pytest.raises(IngestError):
        producers[0].send(TOPIC, [PAGE] * 2)     # sync: refused at once, counted failed
    hung = []
    for start, ep in zip(STARTS, producers):
        stats = _close_in_thread(ep, 2.0, 60.0)
        if stats is None:
            hung.append(start)
            continue
        assert _settled(stats) and stats["acked"] == 3, stats
        assert stats["monitoring_published"] == 0 and stats["monitoring_pending"] >= 1, stats
    assert not hung, f"close(timeout_s=2) still running after 60 s for clocks starting at {hung}"
    assert producers[0].stats()["failed"] == 2


def test_an_async_producer_fails_its_queue_when_the_close_timeout_is_up(broker_factory, registry):  # noqa: F811
    (broker,) = broker_factory(n=1, num_partitions=1)
    ep = EventProducer({"broker.list": f"{broker.broker_id}:127.0.0.1:{broker.port}", "producer.type": "async",
                        "batch.size": 100, "queue.time": 60_000, "queue.size": 100_000}, registry)
    ep.register_topic(TOPIC)
    broker.kill()
    for _ in range(100):
        ep.send(TOPIC, [PAGE] * 100)             # queued: the sender waits for queue.time or a full batch
    began = time.monotonic()
    stats = _close_in_thread(ep, 2.0, 120.0)
    took = time.monotonic() - began
    assert stats is not None, "close(timeout_s=2) still running after 120 s"
    assert (stats["attempted"], stats["acked"], stats["failed"]) == (10_000, 0, 10_000), stats
    assert stats["monitoring_published"] == 0 and stats["monitoring_pending"] >= 1, stats
    # 2 s, plus the batch attempt in flight at the deadline (a refused connection: well under a second);
    # batch after batch with every retry took 16 s per 2,000 messages
    assert took < 30, f"close(timeout_s=2) took {took:.1f} s"


def test_an_async_monitoring_producer_is_refused(registry):
    """An async producer's send only enqueues: a monitoring event would count as published before
    any broker had it (and stay so if it never got there). Monitoring needs a sync producer."""
    mon = Producer({"broker.list": "0:127.0.0.1:1", "producer.type": "async"})
    try:
        with pytest.raises(ConfigError, match=r"monitoring_producer .*producer\.type=async.* sync"):
            EventProducer({"broker.list": "0:127.0.0.1:1"}, registry, monitoring_producer=mon, background=False)
    finally:
        mon.close(timeout_s=0)
