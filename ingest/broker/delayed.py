"""Requests that wait: an acks=-1 produce until the in-sync replicas have its set, a follower's
fetch until the leader has something new (Kafka's "purgatory").

A :class:`DelayedOp` is registered under a key (a topic-partition). Whoever changes what the
op waits for (a follower's fetch moves the high watermark, an append moves the log end, a
leadership change) calls :meth:`Purgatory.check` for the key; each op's ``try_complete``
decides. Ops that reach their deadline are expired by one timer thread (:class:`DelayTimer`), which a
broker shares between its purgatories (the 0.7 port's and the Kafka listener's). Completion and
expiry happen exactly once per op (its own lock).

Concurrency: thread-safe; ``try_complete`` / ``on_expire`` run on the thread that calls
``check`` (network or fetcher threads) or on the timer thread, never under the purgatory's lock.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable, Hashable

from ingest.broker.thread_names import set_native_name
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

_failures = RateLimitedLog(log, interval_s=60.0)
"""A bug that every expiring request meets is logged once a minute, with its traceback, then counted."""

PRUNE_EVERY = 256
"""Deadlines passed between sweeps of done ops out of the per-key lists."""


class DelayedOp:
    """One waiting request. ``attempt`` returns True when it completed the reply itself."""

    __slots__ = ("deadline", "_attempt", "_expire", "_lock", "done")

    def __init__(self, deadline: float, attempt: Callable[[], bool], expire: Callable[[], None]) -> None:
        self.deadline = deadline
        self._attempt = attempt
        self._expire = expire
        self._lock = threading.Lock()
        self.done = False

    def try_complete(self) -> bool:
        if self.done:
            return True
        with self._lock:
            if self.done:
                return True
            if self._attempt():
                self.done = True
        return self.done

    def expire(self) -> None:
        with self._lock:
            if self.done:
                return
            self.done = True
        try:
            self._expire()
        except Exception:  # noqa: BLE001 - one bad op must not stop the timer
            _failures.log(logging.ERROR, "purgatory", "expiry failed", "expiring a delayed request failed",
                          exc_info=True)


class DelayTimer:
    """The one thread that expires delayed ops at their deadlines, for every purgatory given it (Kafka's
    ``SystemTimer`` with its ``ExpirationReaper``, one per broker here instead of one per purgatory).

    An expiry only completes a reply (a timeout answer); it never waits, so one thread serves the 0.7
    port's and the Kafka listener's purgatories without one delaying the other's deadlines.

    Concurrency: :meth:`add` from any thread; ``on_expire`` runs on the timer thread.
    """

    def __init__(self, name: str = "purgatory-timer") -> None:
        self.name = name
        self._heap: list[tuple[float, int, DelayedOp]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._sweeps: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def add(self, op: DelayedOp) -> bool:
        """Expire ``op`` at its deadline; False (nothing done) after :meth:`close`."""
        with self._cond:
            if self._closed:
                return False
            heapq.heappush(self._heap, (op.deadline, next(self._seq), op))
            self._cond.notify()
        return True

    def on_sweep(self, sweep: Callable[[], None]) -> None:
        """Call ``sweep`` on the timer thread every :data:`PRUNE_EVERY` expiries (a purgatory drops done ops)."""
        with self._cond:
            self._sweeps.append(sweep)

    def _run(self) -> None:
        set_native_name(self.name)
        popped = 0
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic())
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, op = heapq.heappop(self._heap)
                sweeps = list(self._sweeps) if (popped + 1) % PRUNE_EVERY == 0 else ()
            if not op.done:
                op.expire()
            # expired ops leave their key's list at its next check/add, or here every PRUNE_EVERY expiries
            popped += 1
            for sweep in sweeps:
                sweep()

    def close(self) -> None:
        """Stop the thread; ops still waiting are left to their purgatories' :meth:`Purgatory.close`."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(10)


class Purgatory:
    """Delayed ops by key; their deadlines kept by a :class:`DelayTimer` (shared, or its own).

    Args:
        name: names its own timer thread when no ``timer`` is given.
        timer: the broker's shared timer; the purgatory then never closes it.
    """

    def __init__(self, name: str = "purgatory", timer: DelayTimer | None = None) -> None:
        self._ops: dict[Hashable, list[DelayedOp]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._own_timer = timer is None
        self.timer = DelayTimer(name) if timer is None else timer
        self.timer.on_sweep(self._sweep)

    def add(self, key: Hashable, op: DelayedOp) -> None:
        """Watch ``op`` under ``key``; tries it once more after registering (no lost wake-up).
        After :meth:`close`, the op is expired at once."""
        self.watch((key,), op)

    def watch(self, keys, op: DelayedOp) -> None:
        """Watch ``op`` under every one of ``keys`` (a fetch of many partitions), with one deadline; tries it
        once more after registering them all (no lost wake-up), not once per key (Kafka's
        ``tryCompleteElseWatch``). After :meth:`close`, the op is expired at once."""
        keys = list(keys)
        with self._lock:
            closed = self._closed
            if not closed:
                for key in keys:
                    self._ops.setdefault(key, []).append(op)
        if not closed and not self.timer.add(op):   # the broker's timer stopped first: as if closed
            closed = True
        if closed:
            if not op.try_complete():
                op.expire()
            return
        if op.try_complete():
            for key in keys:
                self._prune(key)

    def check(self, key: Hashable) -> int:
        """Try every op under ``key``; returns how many completed."""
        ops = self._ops.get(key)
        if not ops:
            return 0
        n = sum(1 for op in list(ops) if op.try_complete())
        if n:
            self._prune(key)
        return n

    def _prune(self, key: Hashable) -> None:
        with self._lock:
            ops = self._ops.get(key)
            if ops is not None:
                kept = [op for op in ops if not op.done]
                if kept:
                    self._ops[key] = kept
                else:
                    del self._ops[key]

    def _sweep(self) -> None:
        """Drop done ops from every key's list (expired ops stay listed until their key is checked)."""
        with self._lock:
            for key in list(self._ops):
                kept = [o for o in self._ops[key] if not o.done]
                if kept:
                    self._ops[key] = kept
                else:
                    del self._ops[key]

    def close(self) -> None:
        """Expire every waiting op (their requests get their timeout answers); stops the timer if it is its own."""
        with self._lock:
            self._closed = True
            ops = list({id(op): op for waiting in self._ops.values() for op in waiting}.values())
            self._ops.clear()
        if self._own_timer:
            self.timer.close()
        for op in ops:
            op.expire()
