"""The mirror process (spark-free Python API): ``MirrorMaker(config).start()`` ... ``.stop()``.

One control thread; one copier thread per owned unit (source partition). The control loop, woken
by ZooKeeper watches (sources' topics and brokers, the group's members) or every
``topic.refresh.ms``:

1. lists the units of every source (:mod:`ingest.mirror.discovery`, whitelist/blacklist applied),
2. computes this member's share (:mod:`ingest.mirror.group`),
3. stops the copiers of units it no longer owns (each writes its final checkpoint) and starts
   copiers for new ones (a copier that failed is started again after a back-off, doubling up
   to 30 s),
4. every ``checkpoint.interval.ms`` samples each owned unit's lag (source end vs position, see
   :mod:`ingest.mirror.status`) and publishes it in its member node; every
   ``status.log.interval.ms`` logs one line per owned unit::

       mirror lag dc1:clicks:0-1 -> target 1 exactly-once: position 123456 source end 124000 lag 544 B 0.8 s

The copy itself is the data path's :class:`ingest.mirror.copier.PartitionCopier`, built by
:class:`ingest.mirror.wiring.Wiring` (the topic's mapping first, then the copier with the process's
shared clients); ``copier_factory(unit, mirror)`` replaces that in tests. ``run(stop_event)``
copies until the event is set, then writes its final checkpoint and returns.

Metrics (``metrics.port``): the copiers' counters are kept in a
:class:`~ingest.metrics.mirror.CopierTotals` (``mirror.totals``) and read, with
:meth:`MirrorMaker.status`, by :class:`~ingest.metrics.mirror.MirrorCollector` at scrape time.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Mapping, Protocol

from ingest.client.discovery import start_kazoo
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.metrics.exporter import metrics_enabled, new_registry, start_exporter
from ingest.metrics.mirror import CopierTotals, MirrorCollector
from ingest.mirror.config import SourceSpec, mirror_id, parse_mirror_config
from ingest.mirror.discovery import SourceCluster, SourceDiscovery, UnitKey, units_of
from ingest.mirror.group import MirrorGroup
from ingest.mirror.wiring import Wiring
from ingest.mirror.status import NOT_STARTED, read_checkpoint, unit_status
from ingest.ratelimited_log import RateLimitedLog, flush_all
from ingest.zk_security import ZkSecurity

log = logging.getLogger(__name__)

LOG_INTERVAL_S = 60.0
"""A failure that repeats (a copier started again and again, a control step failing) is logged
once per this interval per unit (or step) and cause; the repeats are counted into a summary line."""

MAX_BACKOFF_S = 30.0
STOP_TIMEOUT_S = 60.0


class Copier(Protocol):
    def run(self, stop_event: threading.Event) -> None: ...


CopierFactory = Callable[[UnitKey, "MirrorMaker"], Copier]


@dataclass
class _Running:
    unit: UnitKey
    stop: threading.Event
    thread: threading.Thread
    failures: int = 0
    started: float = 0.0
    copier: Any = None
    error: str | None = None
    done: bool = False


@dataclass
class _Progress:
    started_at_ms: int
    row: Any = None
    state: str | None = None
    caught_up_at_ms: int | None = None


class MirrorMaker:
    """A mirror group member.

    Args:
        config: a mirror config (``ingest.mirror.config``) or a raw dict of its keys.
        copier_factory: builds the copier of one unit (default: the data path's copier).
    """

    def __init__(self, config: Config | Mapping[str, Any], *, copier_factory: CopierFactory | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config if isinstance(config, Config) else parse_mirror_config(config)
        self.mirror_id = mirror_id(self.config)
        self.group_name = self.config["mirror.group"]
        self.clock = clock
        self._factory = copier_factory or (lambda unit, mirror: mirror._wiring.copier(unit))
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[UnitKey, _Running] = {}
        self._retry_at: dict[UnitKey, tuple[float, int]] = {}
        self._progress: dict[UnitKey, _Progress] = {}
        self._control: threading.Thread | None = None
        self.zk = None
        self.sources: SourceDiscovery | None = None
        self.target: SourceCluster | None = None
        self.group: MirrorGroup | None = None
        self.last_error: str | None = None
        self._wiring: Wiring | None = None
        self.totals = CopierTotals()   # copied messages/bytes, checkpoints, failures (the metrics read them)
        self._failures = RateLimitedLog(log, interval_s=LOG_INTERVAL_S, monotonic=clock.monotonic)
        self.exporter = None           # the metrics endpoint (``exporter.url``) when metrics.port is set

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> "MirrorMaker":
        """Connect to the target's ZooKeeper and the sources, join the group, start the control loop.

        Raises:
            CoordinationError: a ZooKeeper cannot be reached; MirrorConfigError: a bad config.
        """
        c = self.config
        try:
            self.zk = start_kazoo(c["target.zk.connect"], session_timeout_ms=c["zk.sessiontimeout.ms"],
                                  connection_timeout_ms=c["zk.connectiontimeout.ms"],
                                  security=ZkSecurity.from_config(c))
            self.target = SourceCluster(SourceSpec("target", zk_connect=c["target.zk.connect"]), zk=self.zk,
                                        socket_timeout_ms=c["socket.timeout.ms"])
            self.sources = SourceDiscovery(c)
            self.sources.add_listener(self._wake.set)
            self.group = MirrorGroup(self.zk, self.group_name, self.mirror_id, on_change=self._wake.set,
                                     clock=self.clock)
            self.group.join()
            self._wiring = Wiring(self.config, self.zk, self.sources, self.target, clock=self.clock)
            if metrics_enabled(c):
                registry = new_registry()   # prometheus_client is imported from here on only
                registry.register(MirrorCollector(self))
                self.exporter = start_exporter(registry, c, f"mirror {self.mirror_id}")
        except BaseException:
            self._close_clients()
            raise
        log.info("mirror %s started: group %s, sources %s, target %s", self.mirror_id, self.group_name,
                 ", ".join(f"{s.name} ({s.spec.where})" for s in self.sources.sources.values()),
                 c["target.zk.connect"])
        self._control = threading.Thread(target=self._run_control, name="mirror-control", daemon=True)
        self._control.start()
        return self

    def stop(self) -> None:
        """Stop every copier (each writes its final checkpoint), leave the group, close connections."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        if self._control is not None:
            self._control.join(STOP_TIMEOUT_S)
        self._stop_units(list(self._running))
        if self.group is not None:
            try:
                self.group.leave()
            except Exception:
                log.exception("leaving the mirror group")
        self._close_clients()
        if self.exporter is not None:
            self.exporter.stop()
        log.info("mirror %s stopped", self.mirror_id)

    def __enter__(self) -> "MirrorMaker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def alive(self) -> bool:
        return self._control is not None and self._control.is_alive()

    def owned(self) -> list[UnitKey]:
        with self._lock:
            return sorted(self._running)

    def status(self) -> list[dict]:
        """The owned units' last sampled status: the fields of ``ingest mirror status --json`` (position
        and target end as the running copier has them) plus the copier's ``state`` ("copying",
        "caught up", "waiting: <why>", ...)."""
        with self._lock:
            rows = [(p.row, p.state) for u, p in sorted(self._progress.items())
                    if u in self._running and p.row is not None]
        return [{**asdict(r), "state": state} for r, state in rows]

    def wake(self) -> None:
        """Rebalance now (e.g. after creating a topic) instead of at the next refresh."""
        self._wake.set()

    # --- control loop ---------------------------------------------------------------------------

    def _run_control(self) -> None:
        c = self.config
        period = {"rebalance": c["topic.refresh.ms"] / 1000.0, "sample": c["checkpoint.interval.ms"] / 1000.0,
                  "log lag": c["status.log.interval.ms"] / 1000.0}
        steps = {"rebalance": self._rebalance, "sample": self._sample, "log lag": self._log_lag}
        due = {"rebalance": 0.0, "sample": 0.0, "log lag": self.clock.monotonic() + period["log lag"]}
        failures = dict.fromkeys(steps, 0)
        while not self._stopping.is_set():
            now = self.clock.monotonic()
            if self._wake.is_set() or self._retry_due(now):
                self._wake.clear()
                due["rebalance"] = min(due["rebalance"], now)
            for name, step in steps.items():
                if now < due[name] or self._stopping.is_set():
                    continue
                try:
                    step(now) if name == "rebalance" else step()
                    failures[name] = 0
                    due[name] = now + period[name]
                except Exception as exc:  # a source or ZooKeeper hiccup: back off this step, the others go on
                    failures[name] += 1
                    self.totals.step_failed(name)
                    delay = min(MAX_BACKOFF_S, 0.5 * 2 ** (failures[name] - 1))
                    due[name] = now + max(delay, min(period[name], 1.0))
                    self.last_error = f"{name}: {type(exc).__name__}: {exc}"
                    self._failures.warning(name, type(exc).__name__,
                                           "mirror %s: %s failed (%d in a row; next try in %.1f s): %s",
                                           self.mirror_id, name, failures[name], due[name] - now, self.last_error,
                                           exc_info=log.isEnabledFor(logging.DEBUG))
            if not any(failures.values()):
                self.last_error = None
            flush_all()   # the counts of repeated failures that stopped reach the log
            wake_at = min(list(due.values()) + [at for at, _ in self._retry_at.values()])
            self._wake.wait(max(0.01, wake_at - self.clock.monotonic()))

    def _retry_due(self, now: float) -> bool:
        return any(at <= now for at, _ in self._retry_at.values())

    def _rebalance(self, now: float) -> None:
        topic_partitions = self.sources.topic_partitions()
        units = units_of(topic_partitions)
        mine = set(self.group.assignment(units))
        self._reap(now)
        gone = [u for u in self._running if u not in mine]
        if gone:
            self._stop_units(gone)
        ready = self._wiring.prepare({u.topic: topic_partitions[u.topic] for u in mine})
        for u in sorted(mine):
            if u in self._running or self._stopping.is_set():
                continue
            at, failures = self._retry_at.get(u, (0.0, 0))
            if at > now:
                continue
            if u.topic not in ready:   # its mapping waits (logged by the wiring): look again in a while
                self._retry_at[u] = (now + min(MAX_BACKOFF_S, 1.0 * 2 ** failures), failures + 1)
                continue
            self._start_unit(u, failures)
        for u in list(self._retry_at):
            if u not in mine:
                del self._retry_at[u]
        if gone or any(u not in self._progress for u in mine):
            log.info("mirror %s owns %d of %d partitions: %s", self.mirror_id, len(mine), len(units),
                     ", ".join(map(str, sorted(mine))) or "none")
        self._report()

    def _reap(self, now: float) -> None:
        """Forget copier threads that ended on their own (a failure): retry them after a back-off."""
        for u, r in list(self._running.items()):
            if r.thread.is_alive():
                continue
            with self._lock:
                del self._running[u]
            # a copier that ran a while before it ended starts its back-off afresh
            failures = (r.failures if now - r.started < MAX_BACKOFF_S * 2 else 0) + 1
            delay = min(MAX_BACKOFF_S, 0.5 * 2 ** (failures - 1))
            self._retry_at[u] = (now + delay, failures)
            self._failures.warning(str(u), "copier ended", "mirror %s: copier of %s ended (%s); starting it again "
                                   "in %.1f s", self.mirror_id, u, r.error or "no error", delay)

    def _start_unit(self, unit: UnitKey, failures: int) -> None:
        stop = threading.Event()
        running = _Running(unit, stop, threading.Thread(), failures, self.clock.monotonic())

        def body() -> None:
            copier = None
            try:
                copier = self._factory(unit, self)
                running.copier = copier
                self.totals.started(unit.topic, copier)
                copier.run(stop)
            except Exception as exc:
                running.error = f"{type(exc).__name__}: {exc}"
                self._failures.warning(str(unit), f"copier failed: {type(exc).__name__}",
                                       "mirror %s: copier of %s failed: %s", self.mirror_id, unit, running.error,
                                       exc_info=True)
            finally:
                self.totals.ended(unit.topic, copier, failed=running.error is not None)
                if copier is not None and hasattr(copier, "close"):
                    try:
                        copier.close()
                    except Exception:
                        log.exception("closing the copier of %s", unit)
                running.done = True
                if not stop.is_set():
                    self._wake.set()

        running.thread = threading.Thread(target=body, name=f"mirror-{unit}", daemon=True)
        with self._lock:
            self._running[unit] = running
            self._progress.setdefault(unit, _Progress(started_at_ms=self.clock.time_ms()))
        self._retry_at.pop(unit, None)
        running.thread.start()

    def _stop_units(self, units: list[UnitKey]) -> None:
        with self._lock:
            stopping = [self._running.pop(u) for u in units if u in self._running]
        for r in stopping:
            r.stop.set()
        for r in stopping:
            r.thread.join(STOP_TIMEOUT_S)
            if r.thread.is_alive():
                log.error("mirror %s: copier of %s did not stop within %.0f s", self.mirror_id, r.unit,
                          STOP_TIMEOUT_S)
            else:
                log.info("mirror %s: stopped %s", self.mirror_id, r.unit)

    # --- lag --------------------------------------------------------------------------------------

    def _sample(self) -> None:
        now_ms = self.clock.time_ms()
        for u in self.owned():
            cluster = self.sources.sources.get(u.source)
            source_end = cluster.latest_offset(u.topic, u.broker_id, u.partition) if cluster else None
            with self._lock:
                running = self._running.get(u)
            copier = running.copier if running is not None else None
            row = unit_status(u, read_checkpoint(self.zk, self.group_name, u), source_end,
                              lambda tp, topic=u.topic: self.target.latest_offset(topic, -1, tp),
                              owner=self.mirror_id, progress=None, now_ms=now_ms)
            position = getattr(copier, "position", None)   # the running copier knows better than its checkpoint
            if position is not None and row.mode != NOT_STARTED:
                lag = max(0, source_end - position) if source_end is not None else None
                row = replace(row, position=position, lag_bytes=lag,
                              target_end=getattr(copier, "target_end", row.target_end))
            with self._lock:
                p = self._progress.setdefault(u, _Progress(started_at_ms=now_ms))
                if row.lag_bytes == 0:
                    p.caught_up_at_ms = now_ms
                # behind since it was last caught up; never seen caught up: since this member took it
                since = p.caught_up_at_ms if p.caught_up_at_ms is not None else p.started_at_ms
                lag_s = 0.0 if row.lag_bytes == 0 else round(max(0, now_ms - since) / 1000.0, 3)
                p.row = replace(row, lag_seconds=lag_s)
                p.state = getattr(copier, "state", None)
        self._report()

    def _report(self) -> None:
        with self._lock:
            owned = sorted(self._running)
            progress = {str(u): {"caught_up_at_ms": p.caught_up_at_ms if p.caught_up_at_ms is not None
                                 else p.started_at_ms}
                        for u in owned if (p := self._progress.get(u)) is not None}
        self.group.report(owned, progress)

    def _log_lag(self) -> None:
        for row in self.status():
            log.info("mirror lag %s:%s:%d-%d -> target %s %s: position %s source end %s lag %s B %s s",
                     row["source"], row["topic"], row["broker_id"], row["partition"],
                     "-" if row["target_partition"] is None else row["target_partition"], row["mode"],
                     row["position"], row["source_end"], row["lag_bytes"], row["lag_seconds"])

    def _close_clients(self) -> None:
        for closing in (self._wiring, self.sources, self.target):
            if closing is not None:
                try:
                    closing.close()
                except Exception:
                    log.exception("closing %s", closing)
        if self.zk is not None:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception:
                log.exception("closing the target ZooKeeper client")
