"""RateLimitedLog: first occurrence per (client host, reason) logged, repeats counted, summaries with counts."""
from __future__ import annotations

import logging
import threading

import pytest

from ingest.clock import FakeClock
from ingest.ratelimited_log import RateLimitedLog, client_host, flush_all


@pytest.fixture
def logger(caplog):
    caplog.set_level(logging.INFO, logger="test.ratelimited")
    return logging.getLogger("test.ratelimited")


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.ratelimited"]


def test_client_host_drops_the_port_only():
    assert client_host("10.0.0.7:51234") == "10.0.0.7"
    assert client_host("[::1]:5") == "[::1]"
    assert client_host("listener 127.0.0.1:9092") == "listener 127.0.0.1"
    assert client_host("no-port") == "no-port"
    assert client_host("host:notaport") == "host:notaport"


def test_first_is_logged_repeats_from_other_ports_of_the_same_host_are_counted(logger, caplog):
    clock = FakeClock()
    limited = RateLimitedLog(logger, interval_s=10, monotonic=clock.monotonic)
    for port in range(1000, 1500):
        limited.warning(f"10.0.0.7:{port}", "bad frame", "client 10.0.0.7:%d: bad frame", port)
    assert lines(caplog) == ["client 10.0.0.7:1000: bad frame"]
    clock.advance(10_001)
    limited.flush()
    assert lines(caplog)[1:] == ["499 more 'bad frame' from 10.0.0.7 in the last 10 s (last: client 10.0.0.7:1499: bad frame)"]
    # a quiet pair is forgotten at the next flush; the next occurrence is logged at once
    clock.advance(10_001)
    limited.flush()
    limited.warning("10.0.0.7:1", "bad frame", "again")
    assert lines(caplog)[2:] == ["again"]


def test_other_hosts_and_other_reasons_are_limited_separately(logger, caplog):
    clock = FakeClock()
    limited = RateLimitedLog(logger, interval_s=10, monotonic=clock.monotonic)
    for _ in range(3):
        limited.warning("a:1", "r1", "a r1")
        limited.warning("a:1", "r2", "a r2")
        limited.warning("b:1", "r1", "b r1")
    assert lines(caplog) == ["a r1", "a r2", "b r1"]


def test_a_repeat_after_the_interval_writes_the_summary_then_itself(logger, caplog):
    clock = FakeClock()
    limited = RateLimitedLog(logger, interval_s=10, monotonic=clock.monotonic)
    for i in range(5):
        limited.log(logging.INFO, "h:1", "idle", "idle %d", i)
    clock.advance(10_001)
    limited.log(logging.INFO, "h:1", "idle", "idle %d", 5)
    assert lines(caplog) == ["idle 0", "4 more 'idle' from h in the last 10 s (last: idle 4)", "idle 5"]
    assert [r.levelno for r in caplog.records] == [logging.INFO] * 3


def test_tracked_pairs_are_bounded_the_rest_counted_under_other_clients(logger, caplog):
    clock = FakeClock()
    limited = RateLimitedLog(logger, interval_s=10, max_keys=4, monotonic=clock.monotonic)
    for host in range(100):
        limited.warning(f"10.0.{host}.1:5", "fuzz", "fuzz from %d", host)
    assert len(limited._windows) <= 5       # 4 hosts + the catch-all
    clock.advance(10_001)
    limited.flush()
    assert lines(caplog)[-1].startswith("95 more 'fuzz' from other clients")
    assert len(lines(caplog)) == 6          # 4 hosts, the first of the rest, one summary


def test_many_threads_lose_no_count(logger, caplog):
    clock = FakeClock()
    limited = RateLimitedLog(logger, interval_s=10, monotonic=clock.monotonic)

    def spam():
        for _ in range(1000):
            limited.warning("h:1", "r", "x")

    threads = [threading.Thread(target=spam) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    clock.advance(10_001)
    limited.flush()
    assert lines(caplog) == ["x", "7999 more 'r' from h in the last 10 s (last: x)"]


def test_flush_all_writes_the_summaries_of_every_live_limiter(logger, caplog):
    # the broker's network threads call flush_all(), which also covers the request handlers' limiter
    clock = FakeClock()
    a = RateLimitedLog(logger, interval_s=5, monotonic=clock.monotonic)
    b = RateLimitedLog(logger, interval_s=5, monotonic=clock.monotonic)
    for limiter, reason in ((a, "frames"), (b, "requests")):
        for _ in range(3):
            limiter.warning("10.0.0.9:1", reason, "client 10.0.0.9:1: %s", reason)
    clock.advance(5_001)
    flush_all()
    assert sorted(lines(caplog)[2:]) == [
        "2 more 'frames' from 10.0.0.9 in the last 5 s (last: client 10.0.0.9:1: frames)",
        "2 more 'requests' from 10.0.0.9 in the last 5 s (last: client 10.0.0.9:1: requests)",
    ]


def test_the_written_line_can_carry_the_traceback_the_counted_ones_do_not(logger, caplog):
    clock = FakeClock()
    limited = RateLimitedLog(logger, interval_s=10, monotonic=clock.monotonic)
    for _ in range(3):
        try:
            raise ValueError("boom")
        except ValueError:
            limited.warning("unit-1", "ValueError", "copier of %s failed", "unit-1", exc_info=True)
    records = [r for r in caplog.records if r.name == "test.ratelimited"]
    assert [r.getMessage() for r in records] == ["copier of unit-1 failed"]
    assert records[0].exc_info is not None and records[0].exc_info[0] is ValueError


def test_a_final_flush_writes_the_counts_whose_interval_has_not_ended(logger, caplog):
    # a stopping broker calls flush_all(final=True) last: no repeat goes uncounted
    clock = FakeClock()
    limited = RateLimitedLog(logger, interval_s=60, monotonic=clock.monotonic)
    for _ in range(4):
        limited.warning("topic-a", "refused", "refused %s", "topic-a")
    limited.warning("topic-b", "refused", "refused %s", "topic-b")
    clock.advance(2_000)
    limited.flush()
    assert lines(caplog) == ["refused topic-a", "refused topic-b"]       # the interval has not ended
    limited.flush(final=True)
    assert lines(caplog)[2:] == ["3 more 'refused' from topic-a in the last 2 s (last: refused topic-a)"]
