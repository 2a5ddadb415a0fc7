"""A broker's periodic and background work on a fixed pool of threads: Kafka's ``KafkaScheduler``.

The pool has ``background.threads`` threads, instead of a thread per job.

A task is a function run now and then: every ``period_s`` after its last run ended (fixed delay), and
sooner when someone calls :meth:`ScheduledTask.wake` (new work for it: a storage failure to publish, a
topic to register, a damaged range to repair). A task never runs on two threads at once: a wake while it
runs makes it run once more right after. Its return value is ignored; an exception is logged (once a
minute per task, with its traceback) and the task runs again at its next period.

Sharing threads is safe only while no task holds a thread for long, so every task keeps to these rules
(docs/replication.md, "Threads", says which task does what):

- a task that calls ZooKeeper does nothing while the session is not connected (it is woken when the
  connection is back) and bounds each call (:class:`~ingest.broker.zk_deadline.DeadlineCalls`), never
  ``client.retry``'s wait for the whole outage;
- a long job is cut into steps, one step per run (the verifier of old segments: one segment a run), so
  the tasks due meanwhile run between two steps;
- what may still be slow (an fsync of a slow disk, a repair read from a follower that does not answer,
  bounded by ``replica.socket.timeout.ms``) holds one thread: with two threads or more the others go on.

Concurrency: every method may be called from any thread, a task's own run included.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable

from ingest.broker.thread_names import set_native_name
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

_failures = RateLimitedLog(log, interval_s=60.0)
"""A task that fails every run is logged once a minute, with its traceback, then counted."""


class ScheduledTask:
    """One task of a :class:`KafkaScheduler` (made by :meth:`KafkaScheduler.schedule`)."""

    def __init__(self, scheduler: "KafkaScheduler", name: str, fn: Callable[[], object],
                 period_s: float | None) -> None:
        self.name = name
        self.fn = fn
        self.period_s = period_s
        self.runs = 0
        """Runs finished so far (for tests and logs)."""
        self._scheduler = scheduler
        self._next_at: float | None = None   # of its one live heap entry; guarded by the scheduler's lock
        self._running = False
        self._again = False                  # woken while it ran: run once more at once
        self._cancelled = False

    def wake(self, delay_s: float = 0.0) -> None:
        """Run within ``delay_s`` seconds (sooner if it is due sooner); from any thread, its own run too."""
        self._scheduler._wake(self, time.monotonic() + max(0.0, delay_s))

    def cancel(self, wait_s: float = 0.0) -> None:
        """Never run again; waits up to ``wait_s`` for a run in progress to end (not when called from it)."""
        self._scheduler._cancel(self, wait_s)

    @property
    def running(self) -> bool:
        return self._running


class KafkaScheduler:
    """A fixed pool of ``threads`` threads running :class:`ScheduledTask` s (see the module docstring).

    Args:
        threads: ``background.threads``.
        name: the threads are ``<name>-<i>`` in Python's logs, ``scheduler-<i>`` for the OS (15 bytes).
    """

    def __init__(self, threads: int, name: str = "kafka-scheduler") -> None:
        if threads < 1:
            raise ValueError(f"background.threads must be at least 1, got {threads}")
        self.name = name
        self._heap: list[tuple[float, int, ScheduledTask]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._run, args=(i,), name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]
        self._started = False

    def start(self) -> "KafkaScheduler":
        with self._cond:
            if self._started:
                return self
            self._started = True
        for t in self._threads:
            t.start()
        return self

    @property
    def threads(self) -> int:
        return len(self._threads)

    def schedule(self, name: str, fn: Callable[[], object], *, period_s: float | None = None,
                 delay_s: float | None = None) -> ScheduledTask:
        """A task running ``fn`` after ``delay_s`` (default: its period; no period: only when woken), then
        every ``period_s`` after each run ends, and when woken."""
        task = ScheduledTask(self, name, fn, period_s)
        first = delay_s if delay_s is not None else period_s
        if first is not None:
            task.wake(first)
        return task

    def on_thread(self) -> bool:
        """Whether the calling thread is one of this scheduler's."""
        return threading.current_thread() in self._threads

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """No run starts any more; waits up to ``timeout_s`` for the runs in progress. Idempotent."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            if t.is_alive() and t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))

    # --- internals (the task's methods call these) --------------------------------------------------

    def _push(self, task: ScheduledTask, at: float) -> None:
        """Make ``at`` the task's next run (caller holds the lock); older heap entries become stale."""
        task._next_at = at
        heapq.heappush(self._heap, (at, next(self._seq), task))
        self._cond.notify()

    def _wake(self, task: ScheduledTask, at: float) -> None:
        with self._cond:
            if self._closed or task._cancelled:
                return
            if task._next_at is None or at < task._next_at:
                self._push(task, at)

    def _cancel(self, task: ScheduledTask, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        with self._cond:
            task._cancelled = True
            task._next_at = None
            if self.on_thread():
                return   # possibly its own run: waiting would wait for itself
            while task._running and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)

    def _run(self, index: int) -> None:
        set_native_name(f"scheduler-{index}")
        while True:
            with self._cond:
                task = None
                while task is None:
                    if self._closed:
                        return
                    if not self._heap:
                        self._cond.wait()
                        continue
                    at, _, candidate = self._heap[0]
                    now = time.monotonic()
                    if at > now:
                        self._cond.wait(at - now)
                        continue
                    heapq.heappop(self._heap)
                    if candidate._cancelled or candidate._next_at != at:
                        continue   # stale: the task was moved or cancelled
                    candidate._next_at = None
                    if candidate._running:
                        candidate._again = True   # runs again when its current run ends
                        continue
                    task = candidate
                    task._running = True
            try:
                task.fn()
            except Exception:  # noqa: BLE001 - one task's failure must not stop the pool or the task
                _failures.log(logging.ERROR, task.name, "task failed", "%s failed; it runs again at its next "
                              "period", task.name, exc_info=True)
            with self._cond:
                task._running = False
                task.runs += 1
                self._cond.notify_all()   # a cancel waiting for this run
                if self._closed or task._cancelled:
                    continue
                now = time.monotonic()
                nexts = [t for t in (task._next_at, now if task._again else None,
                                     None if task.period_s is None else now + task.period_s) if t is not None]
                task._again = False
                if nexts and min(nexts) != task._next_at:
                    self._push(task, min(nexts))
