"""Requests that need ZooKeeper, served on a thread of their own instead of a network thread.

A produce naming a topic this broker has neither a log nor a replicated assignment for must ask
ZooKeeper whether the topic is replicated (created there a moment ago), and with
``default.replication.factor`` > 1 write its assignment. ZooKeeper may be slow or away, and a
network thread that waits for it stalls every client it serves. So the handler that finds it
needs ZooKeeper stops before doing anything (:class:`~ingest.errors.NeedsZooKeeperError`) and
the request is handed here: the network thread gets back a deferred reply that *holds* the
connection (its later requests are dispatched only once this one is answered, so their order is
kept, as Kafka mutes a connection with a request in flight) and goes on serving its other
connections. This thread serves the requests one at a time in arrival order, running the same
handler again, now allowed to call ZooKeeper, with bounded calls
(:mod:`ingest.broker.zk_deadline`) that end at the request's deadline.

Bounds:

- a request's deadline is ``timeout_s`` (``zk.connectiontimeout.ms``) after it arrived; one still
  queued at its deadline is answered COORDINATION_UNAVAILABLE without calling ZooKeeper, so every
  request is answered about ``timeout_s`` after it arrived at the latest, however many queue up;
- queued requests hold at most ``max_bytes`` (``queued.max.request.bytes``) of request bodies; a
  request beyond that is answered COORDINATION_UNAVAILABLE at once;
- at ``stop`` the queued requests are answered COORDINATION_UNAVAILABLE.

Thread-safety: :meth:`submit` is called from the network threads; :attr:`deadline` and
:meth:`on_worker` are read by the handlers running on this thread.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable

from ingest.broker.reply import Reply
from ingest.errors import CoordinationUnavailableError, IngestError
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

_failures = RateLimitedLog(log, interval_s=60.0)
"""A bug that every request of a kind meets is logged once a minute, with its traceback, then counted."""

Serve = Callable[[], "Reply | None"]
Refuse = Callable[[IngestError], "Reply | None"]


class CoordinatedRequests:
    """The queue and thread of requests that need ZooKeeper (see the module docstring).

    Args:
        timeout_s: how long after its arrival a request is answered at the latest.
        max_bytes: request bytes that may wait in the queue.
    """

    def __init__(self, timeout_s: float, max_bytes: int, *, name: str = "coordinated-requests") -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.deadline = 0.0          # of the request being served (monotonic), read on this thread only
        self._queue: collections.deque[tuple[float, Serve, Refuse, int, Reply]] = collections.deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "CoordinatedRequests":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Answer every queued request COORDINATION_UNAVAILABLE, let the one being served finish, join."""
        with self._cond:
            self._stopped = True
            pending, self._queue = list(self._queue), collections.deque()
            self._bytes = 0
            self._cond.notify_all()
        for _, _, refuse, _, reply in pending:
            _complete(reply, refuse(CoordinationUnavailableError("the broker is shutting down; retry")))
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def on_worker(self) -> bool:
        """Whether the calling thread is this one (where handlers may call ZooKeeper)."""
        return threading.current_thread() is self._thread

    def submit(self, serve: Serve, refuse: Refuse, size: int) -> Reply:
        """Queue ``serve`` (the request's handler, run here) and return the deferred reply that holds its
        connection; ``refuse(exc)`` builds the answer to a request refused without being served.

        Raises:
            CoordinationUnavailableError: the queue holds ``max_bytes`` already, or the broker is stopping.
        """
        reply = Reply.deferred(hold=True)
        with self._cond:
            if self._stopped:
                raise CoordinationUnavailableError("the broker is shutting down; retry")
            if self._queue and self._bytes + size > self.max_bytes:
                raise CoordinationUnavailableError(
                    f"{len(self._queue)} requests ({self._bytes} bytes) are already waiting for ZooKeeper "
                    f"(queued.max.request.bytes={self.max_bytes}); retry")
            self._queue.append((time.monotonic() + self.timeout_s, serve, refuse, size, reply))
            self._bytes += size
            self._cond.notify()
        return reply

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                deadline, serve, refuse, size, reply = self._queue.popleft()
                self._bytes -= size
            self.deadline = deadline
            try:
                if time.monotonic() >= deadline:
                    answer = refuse(CoordinationUnavailableError(
                        f"the request waited {self.timeout_s:g} s (zk.connectiontimeout.ms) behind others that "
                        "need ZooKeeper; retry"))
                else:
                    answer = serve()
            except Exception:  # noqa: BLE001 - serve answers every failure; this is a bug: drop the connection
                _failures.log(logging.ERROR, "coordination", "request failed unexpectedly",
                              "a request served on the coordination thread failed unexpectedly", exc_info=True)
                answer = Reply([], close_after=True)
            _complete(reply, answer)


def _complete(reply: Reply, answer: Reply | None) -> None:
    """Fill ``reply`` with ``answer`` (None: a request without a response), now or when ``answer``,
    itself deferred (an acks=-1 produce waiting for its followers), is completed."""
    if answer is None:
        reply.complete([])
    elif not answer.pending:
        reply.complete(answer.parts, answer.close_after)
    else:
        def forward() -> None:
            reply.complete(answer.parts, answer.close_after)

        answer.on_complete = forward
        if not answer.pending:   # completed before the hook was in place: nobody called it
            forward()
