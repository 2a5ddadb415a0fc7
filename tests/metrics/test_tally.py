"""The accounting under the metrics: per-thread tallies sum exactly; copier totals never go down.

Pure data structures, no process: several threads add to one :class:`Tallies` at once
and the sums are exact (no lock on the hot path, nothing lost); histogram buckets use
Prometheus' ``le`` rule and come out cumulative; a copier's counters stay in the mirror's
totals after it ends and a new copier of the same partition starts from 0.
"""
from __future__ import annotations

import threading
from types import SimpleNamespace

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ingest.metrics.mirror import CopierTotals
from ingest.metrics.tally import Tallies, add, observe

BOUNDS = (0.001, 0.01, 0.1)


def test_threads_adding_at_once_sum_exactly_and_histograms_are_cumulative():
    tallies = Tallies(("n", "h"))
    start = threading.Barrier(4)

    def work(i: int) -> None:
        start.wait()
        t = tallies.mine()
        for k in range(5000):
            add(t["n"], "topic", 2)
            observe(t["h"], "PRODUCE", BOUNDS, (0.0005, 0.001, 0.05, 7.0)[k % 4])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert tallies.counts("n") == {"topic": 40_000}
    hist = tallies.histograms("h", len(BOUNDS))["PRODUCE"]
    assert hist[:-1] == [10_000, 0, 5_000, 5_000] and abs(hist[-1] - 4 * 1250 * 7.0515) < 1e-6

    class Collector:
        def collect(self):
            yield tallies.counter_family("n", "x_messages", "doc", ["topic"])
            yield tallies.histogram_family("h", "x_latency_seconds", "doc", BOUNDS, ["type"])

    reg = CollectorRegistry()
    reg.register(Collector())
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(generate_latest(reg).decode()) for s in f.samples}
    assert samples[("x_messages_total", (("topic", "topic"),))] == 40_000
    assert [samples[("x_latency_seconds_bucket", (("le", le), ("type", "PRODUCE")))]
            for le in ("0.001", "0.01", "0.1", "+Inf")] == [10_000, 10_000, 15_000, 20_000]
    assert samples[("x_latency_seconds_count", (("type", "PRODUCE"),))] == 20_000


def test_copier_totals_keep_an_ended_copier_and_count_failures():
    totals = CopierTotals()
    first = SimpleNamespace(stats={"messages": 10, "bytes": 1000, "checkpoints": 3})
    totals.started("clicks", first)
    assert totals.counters() == {"clicks": {"messages": 10, "bytes": 1000, "checkpoints": 3}}
    totals.ended("clicks", first, failed=True)
    first.stats["messages"] = 999          # an ended copier is not read again
    second = SimpleNamespace(stats={"messages": 0, "bytes": 0, "checkpoints": 0})
    totals.started("clicks", second)
    assert totals.counters() == {"clicks": {"messages": 10, "bytes": 1000, "checkpoints": 3}}
    second.stats.update(messages=5, bytes=500, checkpoints=1)
    assert totals.counters() == {"clicks": {"messages": 15, "bytes": 1500, "checkpoints": 4}}
    totals.ended("views", None, failed=True)   # a copier that could not even be built
    totals.step_failed("rebalance")
    assert totals.copier_failures() == {"clicks": 1, "views": 1}
    assert totals.step_failures() == {"rebalance": 1}
