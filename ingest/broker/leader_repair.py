"""A leader's damaged ranges overwritten with an in-sync follower's bytes (repair reads, REPLICA_FETCH -1).

A leader finds damage in its own log at start-up, in the background verifier, or
while serving a follower (docs/log-format.md, "Damaged ranges"). Its followers
cannot copy past a damaged range (they must hold the leader's bytes at the
leader's offsets), and consumers lose its messages. Every in-sync follower holds
the same offsets with the same bytes, written when they were good, so the leader
asks them: for each damaged range it sends a *repair read* (REPLICA_FETCH with
replica id -1 in its own leader epoch, which a follower answers from its log up
to its high watermark) to each other in-sync replica in turn, checks that the
answer is whole valid messages that end exactly at the range's end, and
overwrites the range (:meth:`Log.repair <ingest.broker.log.Log.repair>`).
Kafka itself has no such step: its fetcher logs the CRC error and retries the
fetch every ``replica.fetch.backoff.ms``, forever.

Work is asked for (:meth:`LeaderRepair.request`, never blocking: the request
handlers call it on a network thread when a follower's fetch meets damage, the
replica manager when an in-sync set grows) and done by a task on the broker's
:class:`~ingest.broker.scheduler.KafkaScheduler`, at most once per :data:`RETRY_S` per
partition; every :data:`SWEEP_S` the task also looks at every led partition with damage (damage found by consumers' reads
or the verifier). A range that no in-sync replica can supply is logged once per
(partition, range, in-sync set) at WARNING and tried again later; a range past a
segment file's end (a file cut short) cannot be rewritten in place and is left
as it is.

Concurrency: :meth:`request` may be called from any thread; everything else
runs in the repair task (one run at a time). Partitions are read through their own locks.
A run may hold its scheduler thread for as long as repair reads take (each bounded by
``replica.socket.timeout.ms``); the scheduler's other threads go on meanwhile.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from ingest.broker.partition import Role
from ingest.broker.repair_read import read_range
from ingest.broker.scheduler import KafkaScheduler
from ingest.errors import IngestError, OffsetOutOfRangeError
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

_failures = RateLimitedLog(log, interval_s=60.0)
"""A repair pass that keeps failing on a partition is logged once a minute, with its traceback, then counted."""

RETRY_S = 5.0
"""Least time between two repair attempts of one partition."""
SWEEP_S = 30.0
"""How often every led partition with damaged ranges is looked at without being asked."""


class LeaderRepair:
    """The repair task of one broker.

    Args:
        partitions: returns the broker's replicated partitions (``ReplicatedPartition``) now.
        connect: ``connect(broker_id, timeout_s)``: a connection for REPLICA_FETCH to that broker (its 0.7 port,
            or its inter-broker Kafka listener: :class:`~ingest.broker.port07_carrier.Port07Carrier`), None
            while it is not registered.
        timeout_s: socket timeout of one repair read.
        max_bytes: most bytes asked for in one repair read.
        scheduler: the broker's (started by it); None: one of its own, of one thread.
    """

    def __init__(self, broker_id: int, partitions: Callable[[], list], connect: Callable[[int, float], object], *,
                 timeout_s: float, max_bytes: int, scheduler: KafkaScheduler | None = None) -> None:
        self.broker_id = broker_id
        self._partitions = partitions
        self._connect = connect
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._wanted: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_try: dict[tuple[str, int], float] = {}
        self._reported: dict[tuple[str, int, int, int], tuple[int, ...]] = {}  # range -> isr last logged
        self._own_scheduler = scheduler is None
        self._scheduler = scheduler or KafkaScheduler(1, name=f"leader-repair-{broker_id}")
        self._task = self._scheduler.schedule(f"leader-repair-{broker_id}", self._pass, period_s=RETRY_S)
        self._next_sweep = time.monotonic() + SWEEP_S
        self.repaired = 0
        """Damaged ranges this broker overwrote with a follower's bytes (for tests and logs)."""

    def start(self) -> "LeaderRepair":
        if self._own_scheduler:
            self._scheduler.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._task.cancel(wait_s=30)
        if self._own_scheduler:
            self._scheduler.shutdown(30)

    def request(self, key: tuple[str, int]) -> None:
        """Look at partition ``key``'s damaged ranges soon (never blocks; any thread)."""
        with self._lock:
            self._wanted.add(key)
        self._task.wake()

    # --- the task -------------------------------------------------------------------------------

    def _pass(self) -> None:
        """One run: the partitions asked for, and every led one when a sweep is due (every RETRY_S at most)."""
        if self._stop.is_set():
            return
        with self._lock:
            wanted, self._wanted = self._wanted, set()
        now = time.monotonic()
        sweep = now >= self._next_sweep
        if sweep:
            self._next_sweep = now + SWEEP_S
        for part in self._partitions():
            if self._stop.is_set():
                return
            if part.key not in wanted and not sweep:
                continue
            if now - self._last_try.get(part.key, -RETRY_S) < RETRY_S:
                with self._lock:
                    self._wanted.add(part.key)  # asked too soon: keep it for a later pass
                continue
            try:
                self._repair(part)
            except Exception:  # noqa: BLE001 - one partition's failure must not stop the others
                _failures.log(logging.ERROR, f"{part.topic}-{part.partition}", "repair failed",
                              "%s: repairing damaged ranges failed", part, exc_info=True)

    def _repair(self, part) -> None:
        if part.role is not Role.LEADER or not part.log.damaged_ranges():
            return
        self._last_try[part.key] = time.monotonic()
        with part.lock:
            epoch, isr = part.epoch, tuple(part.isr)
        for start, end in part.log.damaged_ranges():
            if self._stop.is_set():
                return
            replica, tried = self._repair_range(part, epoch, [r for r in isr if r != self.broker_id], start, end)
            if replica is None:
                self._report(part, start, end, isr, tried)
                continue
            self.repaired += 1
            self._reported.pop((*part.key, start, end), None)
            log.warning("%s: damaged range %d..%d repaired with broker %d's bytes (%d bytes); followers copy "
                        "past it and consumers read it again", part, start, end, replica, end - start)

    def _repair_range(self, part, epoch: int, sources: list[int], start: int, end: int
                      ) -> tuple[int | None, list[str]]:
        """Overwrite ``[start, end)`` with the first source's good bytes: ``(that source, [])``, or
        ``(None, why each failed)``."""
        tried: list[str] = []
        for replica in sources:
            data, why = self._fetch(part, epoch, replica, start, end)
            if data is None:
                tried.append(f"broker {replica}: {why}")
                continue
            try:
                part.log.repair(start, data)
            except OffsetOutOfRangeError as exc:  # past a segment file's end (cut short): not in place
                return None, tried + [f"not repairable in place: {exc}"]
            except IngestError as exc:
                tried.append(f"writing broker {replica}'s bytes failed: {exc}")
                continue
            return replica, []
        return None, tried

    def _report(self, part, start: int, end: int, isr: tuple[int, ...], tried: list[str]) -> None:
        """Log a range that stays damaged: once per (partition, range, in-sync set)."""
        key = (*part.key, start, end)
        if self._reported.get(key) == isr:
            return
        self._reported[key] = isr
        why = "; ".join(tried) if tried else "no other in-sync replica"
        log.warning("%s: damaged range %d..%d cannot be repaired now (in-sync set %s: %s); followers that must "
                    "copy it wait, consumers skip it (CORRUPT_RANGE); tried again when a replica joins the "
                    "in-sync set and every %.0f s", part, start, end, list(isr), why, SWEEP_S)

    def _fetch(self, part, epoch: int, replica: int, start: int, end: int) -> tuple[bytes | None, str]:
        """``[start, end)`` of ``replica``'s log by repair reads, or ``(None, why not)``."""
        conn = self._connect(replica, self._timeout_s)
        if conn is None:
            return None, "not registered"
        try:
            return read_range(conn, part.topic, part.partition, epoch, start, end, self._max_bytes)
        finally:
            conn.close()
