"""What a follower's fetcher thread keeps of each partition it follows, whatever the format (Kafka's ``PartitionFetchState``).

A partition is followed from one leader in one leader epoch. It takes its own part of each answer, so
that one partition's trouble never holds up the others: an error delays it alone (:meth:`PartitionFetchState.back_off`:
:data:`BACKOFF_S` doubling to :data:`MAX_BACKOFF_S`; the thread leaves it out of its requests meanwhile,
as Kafka's ``delayPartitions``). Leader bytes that cannot be copied are a *stall*: reported
(:class:`~ingest.broker.replica_stalls.Stall`: metrics, ``ingest topics describe``), logged once per state
(repeats are counted, :mod:`ingest.ratelimited_log`), retried after :data:`STALL_BACKOFF_S` doubling to
:data:`STALL_MAX_BACKOFF_S`, and over once a fetch there returns valid bytes.

The formats add what differs: :class:`~ingest.broker.followed_partition.FollowedPartition07` (0.7 topics:
agreement by bytes, repair) and :class:`~ingest.broker.kafka.followed_partition.FollowedPartition`
(Kafka topics: truncation by leader epochs).

Concurrency: touched only by its thread, under the thread's partition lock.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from ingest.broker.replica_stalls import Stall
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0
STALL_BACKOFF_S = 1.0
"""First wait after the leader's bytes at the fetch offset could not be copied (Kafka's
``replica.fetch.backoff.ms`` default); doubled up to :data:`STALL_MAX_BACKOFF_S`."""
STALL_MAX_BACKOFF_S = 30.0
STALL_LOG_INTERVAL_S = 600.0
"""A stall is logged once when it starts; while it lasts, one line per this interval counts the retries."""

failures = RateLimitedLog(log, interval_s=60.0)
"""A copy that keeps failing (a full disk) is logged once a minute per partition and cause, then counted."""

_stall_log = RateLimitedLog(log, interval_s=STALL_LOG_INTERVAL_S)


class PartitionFetchState:
    """Follows ``part`` (a :class:`~ingest.broker.partition.ReplicatedPartition`) from broker ``leader_id``
    in leader epoch ``epoch``, at most ``max_bytes`` a fetch; ``on_stall(key, stall or None)`` hears when a
    stall starts, changes or ends."""

    def __init__(self, part, leader_id: int, epoch: int, *, max_bytes: int,
                 on_stall: Callable[[tuple[str, int], Stall | None], None] | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.part = part
        self.leader_id = leader_id
        self.epoch = epoch
        self.max_bytes = max_bytes
        self.fetches = 0
        self.stall: Stall | None = None
        """Why this partition cannot copy past its position now (None while it copies)."""
        self._on_stall = on_stall or (lambda key, stall: None)
        self._clock = clock
        self._backoff = BACKOFF_S
        self._stall_backoff = STALL_BACKOFF_S
        self.delayed_until = 0.0
        """``time.monotonic()`` before which the thread leaves this partition out of its requests."""

    @property
    def key(self) -> tuple[str, int]:
        return self.part.key

    def __repr__(self) -> str:
        return f"{self.part} (leader {self.leader_id}, epoch {self.epoch})"

    def position(self) -> str:
        """Where it copies from, for the log."""
        return f"from log end {self.part.log.log_end}, high watermark {self.part.hw}"

    def ready(self, now: float) -> bool:
        return now >= self.delayed_until

    def back_off(self) -> None:
        """Leave this partition out of the thread's requests for a while, longer each time in a row."""
        self.delayed_until = time.monotonic() + self._backoff
        self._backoff = min(MAX_BACKOFF_S, self._backoff * 2)

    def answered(self) -> None:
        """The leader answered without an error: the next error backs off from the shortest delay again."""
        self._backoff = BACKOFF_S

    def close(self) -> None:
        """No longer followed by this thread: a stall it reported is over."""
        if self.stall is not None:
            self.stall = None
            self._on_stall(self.key, None)

    def _stalled(self, pos: int, why: str, start: int = -1, next_offset: int = -1, messages: int = -1,
                 *, ranged: bool = False) -> None:
        """The leader's bytes at ``pos`` cannot be copied (``why``): report, log once per state, delay.
        ``ranged``: the log line names the damaged range ``start..next_offset`` (``pos`` when unknown) and
        the ``messages`` held in it (when known)."""
        part = self.part
        stall = Stall(pos, self.leader_id, self.epoch, why, start, next_offset, self._clock.time_ms())
        if not stall.same_state(self.stall):
            self._stall_backoff = STALL_BACKOFF_S
            self.stall = stall
            self._on_stall(part.key, stall)
        where = f"{start}..{next_offset}" if start >= 0 and next_offset >= 0 else f"{pos}"
        held = f", {messages} message(s)" if messages >= 0 else ""
        detail = f" (damaged range {where}{held})" if ranged else ""
        _stall_log.warning(f"broker {self.leader_id}", f"{part.topic}-{part.partition} stalled at {where}",
                           "%s: cannot copy past offset %d from leader %d: %s%s; retrying every %.0f-%.0f s "
                           "until the leader repairs it from another in-sync replica or leadership moves; this "
                           "replica stays out of the in-sync set meanwhile",
                           part, pos, self.leader_id, why, detail, STALL_BACKOFF_S, STALL_MAX_BACKOFF_S)
        self.delayed_until = time.monotonic() + self._stall_backoff
        self._stall_backoff = min(STALL_MAX_BACKOFF_S, self._stall_backoff * 2)

    def _resumed(self, pos: int) -> None:
        """A fetch returned valid bytes: a stall, if any, is over."""
        if self.stall is None:
            return
        stall, self.stall = self.stall, None
        self._stall_backoff = STALL_BACKOFF_S
        self._on_stall(self.key, None)
        log.info("%s: copying again from leader %d at offset %d (stalled at %d for %d ms)", self.part,
                 self.leader_id, pos, stall.offset, self._clock.time_ms() - stall.since_ms)

    def _failed(self, pos: int, cause: str, exc: Exception) -> None:
        """Copying at ``pos`` failed (``exc``, logged once a minute per ``cause``): this partition waits
        :data:`MAX_BACKOFF_S`."""
        part = self.part
        failures.log(logging.ERROR, f"{part.topic}-{part.partition}", cause,
                     "%s: replicating from broker %d failed at offset %d: %s", part, self.leader_id, pos, exc)
        self.delayed_until = time.monotonic() + MAX_BACKOFF_S
