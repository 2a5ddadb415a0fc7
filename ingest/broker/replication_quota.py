"""A broker's replication throttle on one side (leader or follower): a byte rate and the partitions it applies to.

Kafka's ``ReplicationQuotaManager`` (KIP-73). Each broker keeps two: the *leader* quota (bytes it sends to
followers, bounded by its dynamic config ``leader.replication.throttled.rate``) and the *follower* quota
(bytes its fetchers copy, ``follower.replication.throttled.rate``). A partition is throttled on a side when
its topic's ``leader.replication.throttled.replicas`` (``follower.``...) names ``partition:this broker``
or is ``*``. Only throttled partitions are ever held back, and only while the quota is exceeded; the bytes
of every throttled partition are recorded, in-sync or not, so that the rate bounds all the traffic of the
throttled partitions (Kafka does the same).

The rate is measured as Kafka's ``Rate`` over a ``SampledStat``: ``replication.quota.window.num`` samples of
``replication.quota.window.size.seconds`` each; samples older than all of them are dropped; the rate is the
bytes of the kept samples divided by the time since the oldest began, but never by less than
``window.num - 1`` whole windows (a fresh quota is not exceeded by its first fetch). Exceeded means the rate is
above the bound; the next check after it falls below lets one more fetch through, so the traffic overshoots
the bound by at most one fetch (``replica.fetch.max.bytes``, or one batch when larger) per window span.

Concurrency: shared by the network threads (the leader's fetch answers), the fetcher threads and the
ZooKeeper watches; the samples and the bound are kept under the quota's lock (never held while blocking),
the throttled partitions are a dict replaced whole (readers take a snapshot without the lock).
"""
from __future__ import annotations

import collections
import threading
from typing import Callable, Iterable

from ingest.errors import InvalidConfigError

UNLIMITED = 2 ** 63 - 1
"""Kafka's default of both rates (``Long.MAX_VALUE``): no throttle."""

ALL = "*"
"""A throttled-replicas list naming every replica of the topic."""

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
RATES = (LEADER_RATE, FOLLOWER_RATE)
"""The dynamic broker configs of the throttle (``/config/brokers/[id]``)."""

_MIN_DELAY_S = 0.01


def check_rate(name: str, value: str | None) -> str:
    """A throttled rate in its canonical text: bytes/s, 0 .. 2^63-1 (Kafka's ``atLeast(0)`` long).

    Raises:
        InvalidConfigError: not such a number, naming the config and the value.
    """
    if value is None:
        raise InvalidConfigError(f"Null value not supported for broker config {name}")
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: not a number (bytes per "
                                 f"second, 0..{UNLIMITED})") from None
    if not 0 <= number <= UNLIMITED:
        raise InvalidConfigError(f"Invalid value {number} for configuration {name}: it must be 0..{UNLIMITED} "
                                 "(bytes per second)")
    return str(number)


def check_replicas(name: str, value: str) -> str:
    """A throttled-replicas list in its canonical text: ``*``, empty, or ``partition:broker`` entries joined by
    commas (Kafka's ``ThrottledReplicaListValidator``).

    Raises:
        InvalidConfigError: another form, naming the config, the bad entry and the form allowed.
    """
    text = value.strip()
    if text in ("", ALL):
        return text
    out = []
    for entry in (w.strip() for w in text.split(",")):
        p, sep, b = entry.partition(":")
        if not (sep and p.isdigit() and b.isdigit()):
            raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: entry {entry!r} is not "
                                     "[partitionId]:[brokerId]; allowed: a comma-separated list of "
                                     "[partitionId]:[brokerId], or * for all replicas")
        entry = f"{int(p)}:{int(b)}"
        if entry not in out:
            out.append(entry)
    return ",".join(out)


def throttled_partitions(value: str | None, broker_id: int) -> frozenset[int] | str:
    """The partitions a throttled-replicas list throttles on ``broker_id``: :data:`ALL`, or their numbers."""
    text = (value or "").strip()
    if text == ALL:
        return ALL
    found = set()
    for entry in text.split(","):
        p, _sep, b = entry.strip().partition(":")
        if p.isdigit() and b.isdigit() and int(b) == broker_id:
            found.add(int(p))
    return frozenset(found)


class ReplicationQuota:
    """One side's throttle (see the module docstring).

    Args:
        samples: ``replication.quota.window.num``; window_s: ``replication.quota.window.size.seconds``.
        now: a monotonic clock in seconds.
    """

    def __init__(self, samples: int, window_s: float, now: Callable[[], float]) -> None:
        self.samples = samples
        self.window_s = window_s
        self._now = now
        self._bound = UNLIMITED
        self._throttled: dict[str, frozenset[int] | str] = {}
        self._windows: collections.deque[list] = collections.deque()   # [start, bytes], oldest first
        self._lock = threading.Lock()

    # --- configuration ----------------------------------------------------------------------------

    @property
    def bound(self) -> int:
        return self._bound

    def update_bound(self, bytes_per_s: int) -> None:
        """The rate allowed from now on (:data:`UNLIMITED`: none); the bytes recorded so far are kept."""
        with self._lock:
            self._bound = bytes_per_s

    def mark_throttled(self, topic: str, partitions: frozenset[int] | str) -> None:
        """``topic``'s partitions throttled on this side (:data:`ALL`, or their numbers; empty: none)."""
        with self._lock:
            if partitions:
                self._throttled = {**self._throttled, topic: partitions}
            else:
                self._throttled = {t: p for t, p in self._throttled.items() if t != topic}

    def throttled_topics(self) -> Iterable[str]:
        return list(self._throttled)

    # --- use ----------------------------------------------------------------------------------------

    def is_throttled(self, topic: str, partition: int) -> bool:
        parts = self._throttled.get(topic)
        return parts is not None and (parts == ALL or partition in parts)

    def is_exceeded(self) -> bool:
        """The measured rate is above the bound (never with the bound :data:`UNLIMITED`)."""
        with self._lock:
            if self._bound >= UNLIMITED:
                return False
            total, elapsed = self._measure(self._now())
            return total > self._bound * elapsed

    def record(self, n: int) -> None:
        """``n`` bytes of throttled partitions moved now."""
        if n <= 0:
            return
        with self._lock:
            now = self._now()
            self._expire(now)
            if not self._windows or now - self._windows[-1][0] >= self.window_s:
                self._windows.append([now, 0])
            self._windows[-1][1] += n

    def delay_s(self) -> float:
        """How long until the rate falls to the bound if nothing more is recorded (0 when not exceeded):
        how long a fetcher with only throttled partitions waits before checking again (at most one window)."""
        with self._lock:
            if self._bound >= UNLIMITED:
                return 0.0
            now = self._now()
            total, elapsed = self._measure(now)
            if total <= self._bound * elapsed:
                return 0.0
            wait = total / self._bound - elapsed if self._bound > 0 else self.window_s
            return min(self.window_s, max(_MIN_DELAY_S, wait))

    def _expire(self, now: float) -> None:
        horizon = now - self.samples * self.window_s
        while self._windows and self._windows[0][0] <= horizon:
            self._windows.popleft()

    def _measure(self, now: float) -> tuple[int, float]:
        """(bytes of the kept samples, the time they are divided by) under the lock."""
        self._expire(now)
        if not self._windows:
            return 0, (self.samples - 1) * self.window_s or self.window_s
        elapsed = now - self._windows[0][0]
        full = int(elapsed // self.window_s)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_s
        return sum(w[1] for w in self._windows), max(elapsed, self.window_s / 1000.0)
