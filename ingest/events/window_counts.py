"""Producer-side audit counts: per topic and event-time window, and the monitoring events built from them.

A window is ``[start, start + window_ms)`` with ``start = time - time % window_ms``
(event time = ``header.time``). Per (topic, window) the counter keeps
``count_attempted`` (handed to the producer), ``count_acked`` / ``count_failed``
(from the producer's per-batch callback), ``bytes_acked`` (framed payload bytes)
and ``seq_min`` / ``seq_max`` (over attempted ``header.seq``).

When a snapshot is due (:meth:`MonitoringCounter.collect`):

- a window that closed (``now >= end + grace``) and changed since its last report;
- an open window that changed, at most every ``interval_ms`` (interim, ``is_final`` false);
- every known topic's closed windows without traffic get one heartbeat (zero counts);
- on close, everything that changed or was never reported.

``is_final`` = the window closed (or the producer is closing) and every send in it
settled (``attempted == acked + failed``). Late events reopen a window: it is
reported again with a higher revision.

:class:`ReportBuffer` turns snapshots into monitoring events (``event_id``,
``report_seq``, ``revision``) and holds them until published. It is bounded: when
full, the oldest is dropped (counted and logged; its ``report_seq`` is a gap the audit
sees). A snapshot for a (topic, window) whose previous event has not been attempted
yet replaces it in place (same ``report_seq``), so a broker outage does not fill
the buffer with superseded revisions.

Concurrency contract: both classes are thread-safe (one lock each); callbacks
from producer sender threads and the reporter thread may call them concurrently.
"""
from __future__ import annotations

import collections
import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Container, Iterable

from ingest.clock import Clock
from ingest.events.envelope import ProducerIdentity

log = logging.getLogger(__name__)

DEFAULT_AUDIT_TOPIC = "audit-monitoring"
DEFAULT_WINDOW_MS = 600_000
RETAIN_MS = 7 * 24 * 3600 * 1000  # forget finished windows older than a typical retention

COUNT_FIELDS = ("count_attempted", "count_acked", "count_failed", "bytes_acked", "seq_min", "seq_max")


@dataclass
class _Window:
    attempted: int = 0
    acked: int = 0
    failed: int = 0
    bytes_acked: int = 0
    seq_min: int | None = None
    seq_max: int | None = None
    reported: tuple | None = None   # (counts..., is_final) at the last snapshot
    last_report_ms: int = 0         # time of the last snapshot (or of creation)

    def counts(self) -> tuple:
        return (self.attempted, self.acked, self.failed, self.bytes_acked, self.seq_min, self.seq_max)


@dataclass(frozen=True)
class Snapshot:
    """Cumulative counts of one (topic, window), as of ``taken_at_ms``."""

    topic: str
    window_start_ms: int
    window_end_ms: int
    count_attempted: int
    count_acked: int
    count_failed: int
    bytes_acked: int
    seq_min: int | None
    seq_max: int | None
    is_final: bool
    heartbeat: bool
    taken_at_ms: int


class MonitoringCounter:
    """Counts per (topic, event-time window) and decides which snapshots are due."""

    def __init__(self, clock: Clock, window_ms: int = DEFAULT_WINDOW_MS, *, grace_ms: int = 60_000,
                 interval_ms: int = 60_000, heartbeats: bool = True, closing_is_final: bool = True,
                 pinned: frozenset[int] = frozenset()) -> None:
        """``closing_is_final``: closing makes every window final (a producer session ends); False
        for a counter whose session continues elsewhere (the mirror's unit after a hand-over), where
        closing only reports what changed. ``pinned``: window starts that are never too old to
        count nor forgotten (the mirror's window 0 of messages without a readable header)."""
        if window_ms <= 0:
            raise ValueError(f"window_ms must be positive, got {window_ms}")
        self.clock = clock
        self.window_ms = window_ms
        self.grace_ms = grace_ms
        self.interval_ms = interval_ms
        self.heartbeats = heartbeats
        self.closing_is_final = closing_is_final
        self.pinned = frozenset(pinned)
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, int], _Window] = {}
        # topic -> start of the next window that still needs a heartbeat check
        self._hb_next: dict[str, int] = {}
        self.started_ms = clock.time_ms()
        self.too_late = 0  # events older than the horizon: sent, not counted

    def window_start(self, time_ms: int) -> int:
        return time_ms - time_ms % self.window_ms

    def track(self, topic: str, since_ms: int | None = None) -> None:
        """Heartbeat ``topic``'s idle windows from the window containing ``since_ms`` (default: now)."""
        start = self.window_start(self.clock.time_ms() if since_ms is None else since_ms)
        with self._lock:
            self._hb_next.setdefault(topic, start)

    def _window(self, topic: str, start: int) -> _Window:
        w = self._windows.get((topic, start))
        if w is None:
            w = self._windows[(topic, start)] = _Window(last_report_ms=self.clock.time_ms())
        return w

    def attempted(self, topic: str, time_ms: int, seqs: Iterable[int]) -> int:
        """Count messages handed to the producer; returns the window start.

        A window older than the retention horizon (7 days) was forgotten: its events are
        sent but cannot be reported (counted in ``too_late``, logged).
        """
        start = self.window_start(time_ms)
        if start + self.window_ms < self.clock.time_ms() - RETAIN_MS:
            seqs = list(seqs)
            with self._lock:
                self.too_late += len(seqs)
            log.warning("%d events for topic %s have event time %d, older than the monitoring horizon "
                        "(%d days): sent, not counted in monitoring events", len(seqs), topic, time_ms,
                        RETAIN_MS // 86_400_000)
            return start
        with self._lock:
            self._hb_next.setdefault(topic, start)
            w = self._window(topic, start)
            seqs = list(seqs)
            if seqs:
                lo, hi = min(seqs), max(seqs)
                w.attempted += len(seqs)
                w.seq_min = lo if w.seq_min is None or lo < w.seq_min else w.seq_min
                w.seq_max = hi if w.seq_max is None or hi > w.seq_max else w.seq_max
        return start

    def counted(self, topic: str, window_start: int, *, attempted: int = 0, acked: int = 0, failed: int = 0,
                bytes_acked: int = 0) -> bool:
        """Add counts without sequence numbers (a tier that moves other sessions' messages).

        Returns False (nothing counted, ``too_late`` grows by ``attempted``) when the window is
        older than the retention horizon and not pinned.
        """
        with self._lock:
            if window_start not in self.pinned and (topic, window_start) not in self._windows and \
                    window_start + self.window_ms < self.clock.time_ms() - RETAIN_MS:
                self.too_late += attempted
                return False
            if window_start not in self.pinned:
                self._hb_next.setdefault(topic, window_start)
            w = self._window(topic, window_start)
            w.attempted += attempted
            w.acked += acked
            w.failed += failed
            w.bytes_acked += bytes_acked
        return True

    def settled(self, topic: str, window_start: int, *, acked: int = 0, failed: int = 0,
                bytes_acked: int = 0) -> None:
        """Record the outcome of sends counted by :meth:`attempted`."""
        with self._lock:
            if (topic, window_start) not in self._windows and \
                    window_start + self.window_ms < self.clock.time_ms() - RETAIN_MS:
                return  # counted in too_late by attempted()
            w = self._window(topic, window_start)
            w.acked += acked
            w.failed += failed
            w.bytes_acked += bytes_acked

    def collect(self, *, closing: bool = False, skip: Container[tuple[str, int]] = ()) -> list[Snapshot]:
        """Snapshots due now (see module docstring); marks them reported.

        ``skip``: (topic, window start) keys not to report now (left as they are, so a later
        call reports them).
        """
        now = self.clock.time_ms()
        out: list[Snapshot] = []
        final_on_close = closing and self.closing_is_final
        with self._lock:
            if self.heartbeats:
                self._add_idle_windows(now, final_on_close)
            for (topic, start), w in sorted(self._windows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
                if (topic, start) in skip:
                    continue
                end = start + self.window_ms
                closed = final_on_close or now >= end + self.grace_ms
                settled = w.attempted == w.acked + w.failed
                is_final = closed and settled
                state = w.counts() + (is_final,)
                if state == w.reported:
                    continue
                if not closed and not closing and now - w.last_report_ms < self.interval_ms:
                    continue  # interim reports of an open window: at most one per interval
                w.reported = state
                w.last_report_ms = now
                out.append(Snapshot(topic, start, end, w.attempted, w.acked, w.failed, w.bytes_acked,
                                    w.seq_min, w.seq_max, is_final, w.attempted == 0, now))
            self._prune(now)
        return out

    def _add_idle_windows(self, now: int, closing: bool) -> None:
        # the last window to check: the last closed one, or (closing) the current one
        limit = self.window_start(now) if closing else self.window_start(now - self.grace_ms) - self.window_ms
        for topic, nxt in self._hb_next.items():
            start = nxt
            while start <= limit:
                self._windows.setdefault((topic, start), _Window())
                start += self.window_ms
            self._hb_next[topic] = max(nxt, start)

    def _prune(self, now: int) -> None:
        old = [k for k, w in self._windows.items() if k[1] not in self.pinned and
               k[1] + self.window_ms < now - RETAIN_MS and w.reported is not None and w.reported[-1]]
        for k in old:
            del self._windows[k]

    def totals(self) -> dict[str, int]:
        """Sums over all windows (for summaries)."""
        with self._lock:
            ws = list(self._windows.values())
        return {"attempted": sum(w.attempted for w in ws), "acked": sum(w.acked for w in ws),
                "failed": sum(w.failed for w in ws), "bytes_acked": sum(w.bytes_acked for w in ws)}

    def window_starts(self, topic: str) -> set[int]:
        """Starts of the windows of ``topic`` the counter remembers."""
        with self._lock:
            return {start for t, start in self._windows if t == topic}

    def state(self) -> dict:
        """Everything the counter knows, as JSON-able data (:meth:`restore` takes it back)."""
        with self._lock:
            windows = [[topic, start, *w.counts(), None if w.reported is None else list(w.reported),
                        w.last_report_ms] for (topic, start), w in sorted(self._windows.items())]
            return {"windows": windows, "hb_next": dict(self._hb_next), "too_late": self.too_late}

    def restore(self, state: dict) -> None:
        """Replace the counts by those of a :meth:`state` (same window size)."""
        windows: dict[tuple[str, int], _Window] = {}
        for topic, start, att, acked, failed, nbytes, smin, smax, reported, last in state["windows"]:
            windows[(topic, int(start))] = _Window(att, acked, failed, nbytes, smin, smax,
                                                   None if reported is None else tuple(reported), last)
        with self._lock:
            self._windows = windows
            self._hb_next = {t: int(v) for t, v in state["hb_next"].items()}
            self.too_late = int(state.get("too_late", 0))


def snapshot_values(snap: Snapshot) -> dict:
    """The fields of a monitoring event that a snapshot of a window determines."""
    return {
        "count_attempted": snap.count_attempted, "count_acked": snap.count_acked,
        "count_failed": snap.count_failed, "bytes_acked": snap.bytes_acked,
        "seq_min": snap.seq_min, "seq_max": snap.seq_max, "is_final": snap.is_final,
        "heartbeat": snap.heartbeat, "emitted_at_ms": snap.taken_at_ms,
    }


def monitoring_record(snap: Snapshot, identity: ProducerIdentity, *, event_id: str, report_seq: int,
                      revision: int, window_ms: int) -> dict:
    """A monitoring event (``conf/schemas/monitoring_event.avsc``, without ``header``) of one snapshot."""
    return {
        "event_id": event_id,
        "producer_session_id": identity.session,
        "producer_server": identity.server,
        "service": identity.service,
        "report_seq": report_seq,
        "topic": snap.topic,
        "window_start_ms": snap.window_start_ms,
        "window_end_ms": snap.window_end_ms,
        "window_size_ms": window_ms,
        "revision": revision,
        **snapshot_values(snap),
    }


@dataclass
class PendingEvent:
    """A monitoring event waiting to be published; ``payload`` is fixed at the first attempt."""

    record: dict
    payload: bytes | None = None
    attempts: int = 0
    key: tuple[str, int] = field(default=("", 0))


class ReportBuffer:
    """Bounded ordered queue of monitoring events (see module docstring)."""

    def __init__(self, identity: ProducerIdentity, window_ms: int, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.identity = identity
        self.window_ms = window_ms
        self.capacity = capacity
        self._lock = threading.Lock()
        self._queue: collections.deque[PendingEvent] = collections.deque()
        self._unsent: dict[tuple[str, int], PendingEvent] = {}
        self._revision: dict[tuple[str, int], int] = {}
        self._report_seq = 0
        self.dropped = 0
        self.published = 0

    def offer(self, snap: Snapshot) -> None:
        key = (snap.topic, snap.window_start_ms)
        values = snapshot_values(snap)
        with self._lock:
            pending = self._unsent.get(key)
            if pending is not None:
                pending.record.update(values)  # never attempted: supersede in place
                return
            revision = self._revision.get(key, 0) + 1
            self._revision[key] = revision
            self._report_seq += 1
            record = monitoring_record(snap, self.identity, event_id=str(uuid.uuid4()), report_seq=self._report_seq,
                                       revision=revision, window_ms=self.window_ms)
            if revision == 1 and len(self._revision) % 1024 == 0:
                horizon = snap.taken_at_ms - RETAIN_MS - self.window_ms
                for k in [k for k in self._revision if k[1] < horizon]:
                    del self._revision[k]  # the counter forgot these windows too
            pending = PendingEvent(record, key=key)
            self._queue.append(pending)
            self._unsent[key] = pending
            while len(self._queue) > self.capacity:
                lost = self._queue.popleft()
                if self._unsent.get(lost.key) is lost:
                    del self._unsent[lost.key]
                self.dropped += 1
                log.warning("monitoring buffer full (%d): dropped report_seq %d (%s window %d revision %d); "
                            "%d dropped so far", self.capacity, lost.record["report_seq"], lost.record["topic"],
                            lost.record["window_start_ms"], lost.record["revision"], self.dropped)

    def head(self) -> PendingEvent | None:
        """The oldest event, now frozen (later snapshots of its window get a new event)."""
        with self._lock:
            if not self._queue:
                return None
            head = self._queue[0]
            if self._unsent.get(head.key) is head:
                del self._unsent[head.key]
            return head

    def done(self, event: PendingEvent) -> None:
        """``event`` was acknowledged by the broker: remove it."""
        with self._lock:
            if self._queue and self._queue[0] is event:
                self._queue.popleft()
                self.published += 1

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue)
