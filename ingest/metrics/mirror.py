"""The mirror's series, read from the mirror process at scrape time.

:class:`MirrorCollector` asks the :class:`~ingest.mirror.mirror_maker.MirrorMaker`
for what it already keeps: the copiers' counters summed per topic
(:class:`CopierTotals`, ``mirror.totals``: copiers that ended are folded in, so the
totals never go down while the process lives), copier and control-step failures, and the last sampled lag of each owned
source partition (sampled every ``checkpoint.interval.ms``, the numbers of
``ingest mirror status``). Nothing is updated per copied set for metrics.

prometheus_client is imported inside :meth:`MirrorCollector.collect`: with
``metrics.port=-1`` the mirror never imports it.
"""
from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

log = logging.getLogger(__name__)

COUNTERS = (
    ("messages", "ingest_mirror_messages_copied", "Messages copied to the target (re-reads for counting excluded)"),
    ("bytes", "ingest_mirror_bytes_copied", "Message-set bytes copied to the target"),
    ("checkpoints", "ingest_mirror_checkpoint_writes", "Checkpoints written (source offset, target offset, counts)"),
    ("lost_messages", "ingest_mirror_lost_messages", "Messages gone from the source before they were copied: "
                                                    "deleted by retention or missing segments (estimated when not "
                                                    "exact; see the lost-range records)"),
    ("retries", "ingest_mirror_retries", "Transient errors retried by the copiers (a broker away, a leader change)"),
)
"""(copier stats key, series name, help) of the per-topic counters."""

UNIT_LABELS = ["source", "topic", "broker_id", "partition"]


class MirrorCollector:
    """Series of one mirror group member (see the module docstring)."""

    def __init__(self, mirror) -> None:
        self.mirror = mirror

    def describe(self):
        return []

    def collect(self):
        # deferred: prometheus_client is only imported when metrics are on
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        m = self.mirror
        totals = m.totals.counters()
        for key, name, doc in COUNTERS:
            family = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, stats in sorted(totals.items()):
                family.add_metric([topic], stats.get(key, 0))
            yield family
        failures = CounterMetricFamily("ingest_mirror_copier_failures", "Copiers that ended with an error (each is "
                                       "started again after a back-off)", labels=["topic"])
        for topic, n in sorted(m.totals.copier_failures().items()):
            failures.add_metric([topic], n)
        yield failures
        steps = CounterMetricFamily("ingest_mirror_control_failures", "Failed passes of the control loop "
                                    "(rebalance, lag sample, lag log), retried with a back-off", labels=["step"])
        for step, n in sorted(m.totals.step_failures().items()):
            steps.add_metric([step], n)
        yield steps
        owned = GaugeMetricFamily("ingest_mirror_owned_partitions", "Source partitions this member copies")
        owned.add_metric([], len(m.owned()))
        yield owned
        lag_bytes = GaugeMetricFamily("ingest_mirror_lag_bytes", "Source end minus the copy position, as last "
                                      "sampled", labels=UNIT_LABELS)
        lag_seconds = GaugeMetricFamily("ingest_mirror_lag_seconds", "Seconds the partition has been behind since "
                                        "it was last caught up, as last sampled", labels=UNIT_LABELS)
        for row in m.status():
            labels = [row["source"], row["topic"], str(row["broker_id"]), str(row["partition"])]
            if row.get("lag_bytes") is not None:
                lag_bytes.add_metric(labels, row["lag_bytes"])
            if row.get("lag_seconds") is not None:
                lag_seconds.add_metric(labels, row["lag_seconds"])
        yield lag_bytes
        yield lag_seconds


class CopierTotals:
    """The mirror process's copy counters: running copiers' ``stats`` read live, ended ones folded in.

    Thread-safe (one lock). A copier is registered by :meth:`started` and folded in
    by :meth:`ended` in one step under the lock, so a scrape counts it exactly once
    and a restarted copier never makes a total go down.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, tuple[str, Any]] = {}
        self._ended: dict[str, Counter] = {}
        self._copier_failures: Counter = Counter()
        self._step_failures: Counter = Counter()

    def started(self, topic: str, copier: Any) -> None:
        with self._lock:
            self._live[id(copier)] = (topic, copier)

    def ended(self, topic: str, copier: Any | None, *, failed: bool) -> None:
        """The copier of a partition of ``topic`` ended (``copier`` None: it could not be built)."""
        with self._lock:
            if copier is not None and self._live.pop(id(copier), None) is not None:
                self._ended.setdefault(topic, Counter()).update(_stats(copier))
            if failed:
                self._copier_failures[topic] += 1

    def step_failed(self, step: str) -> None:
        with self._lock:
            self._step_failures[step] += 1

    def counters(self) -> dict[str, dict[str, int]]:
        """Per topic: the copiers' stats (messages, bytes, checkpoints...) summed since the process started."""
        with self._lock:
            out = {topic: Counter(c) for topic, c in self._ended.items()}
            for topic, copier in self._live.values():
                out.setdefault(topic, Counter()).update(_stats(copier))
        return {topic: dict(c) for topic, c in out.items()}

    def copier_failures(self) -> dict[str, int]:
        with self._lock:
            return dict(self._copier_failures)

    def step_failures(self) -> dict[str, int]:
        with self._lock:
            return dict(self._step_failures)


def _stats(copier: Any) -> dict[str, int]:
    """A copier's counters (a test's stand-in copier may have none)."""
    return dict(getattr(copier, "stats", None) or {})
