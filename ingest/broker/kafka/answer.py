"""An answer that may come later: a response given at once, or a deferred reply completed by another thread.

The group coordinator answers a JoinGroup when the join phase ends, a SyncGroup when the leader syncs,
an OffsetCommit when the in-sync replicas have it: possibly on the same thread before the handler
returns, possibly later on another. :class:`Answer` hides which.

Thread-safety: ``give`` may be called from any thread, once; ``result`` once, by the handler.
"""
from __future__ import annotations

import threading

from ingest.broker.reply import Reply


class Answer:
    """Collects one response for ``ctx`` (the request's context)."""

    __slots__ = ("ctx", "_lock", "_value", "_reply")

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        self._value = None
        self._reply: Reply | None = None

    def give(self, response) -> None:
        with self._lock:
            if self._reply is None:
                self._value = response
                return
            reply = self._reply
        reply.complete(self.ctx.reply(response).parts)

    def result(self):
        """The response if it was given already, else a deferred reply that ``give`` completes."""
        with self._lock:
            if self._value is not None:
                return self._value
            self._reply = Reply.deferred()
            return self._reply
