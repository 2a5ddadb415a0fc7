"""The mirror's audit counts of one source partition, and the monitoring events built from them.

A mirror unit (one source partition) counts every message it copied, per event-time window
of ``header.time``, the way producers count what they send
(:class:`ingest.events.window_counts.MonitoringCounter`, same windows, grace, interim
interval, heartbeats, 7-day horizon). A message without a readable header (not framed,
unknown schema, no header) counts in window 0, which the audit reports as out of range.
Messages inside a compressed wrapper count one by one.

Events use the producers' monitoring schema unchanged; for the unit's session
``mirror:<group>:<source>:<topic>:<broker_id>-<partition>``:

- ``count_attempted``: read from the source; ``count_acked``: acknowledged by the target;
  ``count_failed``: read and given up (fallback mode only); ``bytes_acked``: payload bytes;
- ``seq_min`` / ``seq_max``: null (the unit moves many producer sessions' messages);
- ``report_seq``: +1 per event of the session, across restarts and owners (it is in the state);
  ``event_id`` = uuid5(session, report_seq), so a re-published event is the same event;
- ``revision``: +1 per (session, window); the latest is the cumulative count;
- ``header``: time = emitted_at_ms, server = the mirror host, service = ``mirror:<source>``,
  session = the unit's session, seq = report_seq - 1.

Exactly once: the state (counts + pending events) is saved in the unit's checkpoint with the
offsets it counted up to, so after a crash the restored counter plus the re-counted messages
between checkpoint and target end give the same counts as an uninterrupted run.

An event returned by :meth:`PartitionCounter.due_events` is frozen (its content never changes,
it may already be on the broker). While a window has an unpublished event, it gets no new one;
its newer counts come in the next event after :meth:`PartitionCounter.published`. So pending
events are at most one per window.

Concurrency contract: not thread-safe; one unit's copier thread owns its counter.
"""
from __future__ import annotations

import itertools
import logging
import operator
import uuid
from typing import Any, Iterable

from ingest import znodes
from ingest.clock import Clock
from ingest.errors import InvalidMessageError, MessageTooLargeError, MirrorConfigError
from ingest.events.envelope import HEADER_FIELD, ProducerIdentity
from ingest.events.header_reader import NEEDS_PAYLOAD, TIME_PREFIX, HeaderReader
from ingest.events.window_counts import RETAIN_MS, MonitoringCounter, monitoring_record
from ingest.mirror import tier_counts_state
from ingest.records.message import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CODEC_NONE,
    HEADER_SIZE,
    HEADER_SIZE_V0,
    MAGIC_OFFSET,
    MAGIC_V0,
)
from ingest.records.message_set import inner_messages, scan

log = logging.getLogger(__name__)

OUT_OF_RANGE_WINDOW = 0
"""Window start of messages without a readable header."""
EVENT_ID_NAMESPACE = uuid.UUID("6f1d5c1e-8a0b-5d3c-9e47-2b1f0a9c7d13")
"""uuid5 namespace of the mirror's deterministic event ids."""


def unit_session(group: str, source: str, topic: str, broker_id: int, partition: int) -> str:
    """The monitoring session of one mirror unit (stable across restarts and owners)."""
    return f"mirror:{group}:{source}:{topic}:{znodes.partition_name(broker_id, partition)}"


def mirror_service(source: str) -> str:
    return f"mirror:{source}"


def event_id(session: str, report_seq: int) -> str:
    """Deterministic id of the event ``report_seq`` of ``session``."""
    return str(uuid.uuid5(EVENT_ID_NAMESPACE, f"{session}/{report_seq}"))


def plain_runs(message_set: bytes | memoryview) -> list[tuple[bytes, list[int], list[int], int]]:
    """``(buffer, message starts, message ends, header size)`` of the plain messages of a set: the
    set's own uncompressed messages, and the inner set of each compressed wrapper; messages are
    grouped by header size (9 bytes for magic 0, 10 for magic 1 and 2), one run per group.

    Stops quietly at a cut-off last message, like :func:`ingest.records.message_batch.iter_messages`.

    Raises:
        InvalidMessageError / MessageTooLargeError: a bad message or wrapper (names the position).
    """
    data = bytes(message_set) if not isinstance(message_set, bytes) else message_set
    starts: list[int] = []
    wrappers: list[int] = []
    short: list[int] = []
    r = scan(data, index=starts, index_interval=0, wrappers=wrappers, short=short)
    if r.error is not None and not r.cut_off:
        raise InvalidMessageError(r.error)
    ends = starts[1:] + [r.end]
    if not wrappers and not short:
        return [(data, starts, ends, HEADER_SIZE)]
    runs = []
    for s, e in zip(starts, ends):
        if data[s + MAGIC_OFFSET] == MAGIC_V0 or data[s + ATTRIBUTES_OFFSET] & CODEC_MASK == CODEC_NONE:
            continue
        try:
            inner, positions = inner_messages(data[s + ATTRIBUTES_OFFSET] & CODEC_MASK,
                                              memoryview(data)[s + HEADER_SIZE:e])
        except (InvalidMessageError, MessageTooLargeError) as exc:
            raise type(exc)(f"compressed message at position {s}: {exc}") from exc
        inner = bytes(inner)
        runs += _by_header_size(inner, positions, positions[1:] + [len(inner)], lambda q: True)
    runs += _by_header_size(data, starts, ends,
                            lambda q: data[q + MAGIC_OFFSET] == MAGIC_V0
                            or data[q + ATTRIBUTES_OFFSET] & CODEC_MASK == CODEC_NONE)
    return runs


def _by_header_size(data: bytes, starts: list[int], ends: list[int],
                    plain) -> list[tuple[bytes, list[int], list[int], int]]:
    """The plain messages (``plain(start)``) of ``data`` as runs of one header size each."""
    groups: dict[int, tuple[list[int], list[int]]] = {}
    for q, e in zip(starts, ends):
        if plain(q):
            hs = HEADER_SIZE_V0 if data[q + MAGIC_OFFSET] == MAGIC_V0 else HEADER_SIZE
            g = groups.setdefault(hs, ([], []))
            g[0].append(q)
            g[1].append(e)
    return [(data, qs, es, hs) for hs, (qs, es) in groups.items()]


class PartitionCounter:
    """Counts one mirror unit's messages and builds its monitoring events (module docstring)."""

    def __init__(self, *, session: str, topic: str, source: str, mirror_server: str, window_ms: int,
                 interval_ms: int, header_reader: HeaderReader, clock: Clock, state: dict | None = None,
                 grace_ms: int = 60_000) -> None:
        self.session = session
        self.topic = topic
        self.source = source
        self.identity = ProducerIdentity(server=mirror_server, service=mirror_service(source), session=session)
        self.window_ms = window_ms
        self.reader = header_reader
        self.clock = clock
        self._counter = MonitoringCounter(clock, window_ms, grace_ms=grace_ms, interval_ms=interval_ms,
                                          closing_is_final=False, pinned=frozenset({OUT_OF_RANGE_WINDOW}))
        self._report_seq = 0
        self._revisions: dict[int, int] = {}   # window start -> last revision
        self._pending: list[dict] = []          # frozen events, oldest first
        if state is None:
            self._counter.track(topic)
        else:
            self._restore(state)

    # --- counting -------------------------------------------------------------------------

    def count(self, message_set: bytes) -> int:
        """Count every message of ``message_set`` (read and acknowledged by the target); returns how many.

        All or nothing: when a header cannot be read because the registry is unreachable
        (RegistryUnavailableError) nothing of the set is counted, so the caller may retry.

        Raises:
            InvalidMessageError / MessageTooLargeError: like :func:`iter_messages` (the set was
                acknowledged by a broker, which validated it, so not expected).
        """
        per: dict[int, list[int]] = {}
        for data, starts, ends, hs in plain_runs(message_set):
            self._tally_run(data, starts, ends, hs, per)
        return self._add(per, acked=True)

    def count_payloads(self, payloads: Iterable[bytes], *, acked: bool) -> int:
        """Count messages by payload: read and acknowledged (``acked``) or read and given up (fallback mode)."""
        time_of = self.reader.time_of
        w = self.window_ms
        per: dict[int, list[int]] = {}
        for p in payloads:
            t = time_of(p)
            start = OUT_OF_RANGE_WINDOW if t is None else t - t % w
            c = per.setdefault(start, [0, 0])
            c[0] += 1
            c[1] += len(p)
        return self._add(per, acked=acked)

    def _tally_run(self, data: bytes, starts: list[int], ends: list[int], hs: int,
                   per: dict[int, list[int]]) -> None:
        """Add the messages of one plain run (headers of ``hs`` bytes) to ``per`` (window start ->
        [messages, payload bytes]).

        Bulk, with the per-message work in C (``map``, ``Counter``, ``compress``): each payload's
        first :data:`TIME_PREFIX` bytes are cut out, the header time is resolved once per distinct
        prefix (:meth:`HeaderReader.prefix_time`), and sizes are summed per window. Only payloads
        whose prefix does not decide the time are read one by one.
        """
        n = len(starts)
        if not n:
            return
        add, rep = operator.add, itertools.repeat
        sizes = list(map(operator.sub, ends, starts))
        key_ends = map(add, starts, rep(hs + TIME_PREFIX))
        if min(sizes) < hs + TIME_PREFIX:  # a payload shorter than the prefix: its key ends with it
            key_ends = map(min, key_ends, ends)
        keys = list(map(data.__getitem__, map(slice, map(add, starts, rep(hs)), key_ends)))
        w = self.window_ms
        distinct = list(dict.fromkeys(keys))
        window_of: dict[bytes, int | None] = {}  # None: the prefix does not decide the time
        for key, t in zip(distinct, self.reader.prefix_times(distinct)):
            window_of[key] = None if t is NEEDS_PAYLOAD else OUT_OF_RANGE_WINDOW if t is None else t - t % w
        windows = set(window_of.values())
        if None in windows:  # rare: header not first in its schema, or a time beyond 2039
            time_of = self.reader.time_of
            for key, s, e in zip(keys, starts, ends):
                start = window_of[key]
                if start is None:
                    t = time_of(data[s + hs:e])
                    start = OUT_OF_RANGE_WINDOW if t is None else t - t % w
                c = per.setdefault(start, [0, 0])
                c[0] += 1
                c[1] += e - s - hs
            return
        if len(windows) == 1:
            selected = {windows.pop(): sizes}
        else:
            in_window = list(map(window_of.__getitem__, keys))
            selected = {start: list(itertools.compress(sizes, map(start.__eq__, in_window))) for start in windows}
        for start, sel in selected.items():
            c = per.setdefault(start, [0, 0])
            c[0] += len(sel)
            c[1] += sum(sel) - hs * len(sel)

    def _add(self, per: dict[int, list[int]], *, acked: bool) -> int:
        total = 0
        for start, (n, nbytes) in per.items():
            if acked:
                self._counter.counted(self.topic, start, attempted=n, acked=n, bytes_acked=nbytes)
            else:
                self._counter.counted(self.topic, start, attempted=n, failed=n)
            total += n
        return total

    def totals(self) -> dict[str, int]:
        """Sums over the windows the counter remembers (``too_late``: not counted, older than 7 days)."""
        return {**self._counter.totals(), "too_late": self._counter.too_late}

    # --- events -----------------------------------------------------------------------------

    def due_events(self, closing: bool = False) -> list[dict]:
        """Every unpublished event, oldest first: the pending ones, then new ones for the snapshots due now.

        New events get the next ``report_seq`` and their window's next ``revision`` and are
        pending (in :meth:`state`) until :meth:`published`. ``closing``: the unit stops (a
        hand-over or shutdown): every changed window is reported now; windows stay final only
        when closed by time (the session continues with the next owner).
        """
        skip = {(self.topic, e["window_start_ms"]) for e in self._pending}
        for snap in self._counter.collect(closing=closing, skip=skip):
            start = snap.window_start_ms
            revision = self._revisions.get(start, 0) + 1
            self._revisions[start] = revision
            self._report_seq += 1
            record = monitoring_record(snap, self.identity, event_id=event_id(self.session, self._report_seq),
                                       report_seq=self._report_seq, revision=revision, window_ms=self.window_ms)
            record[HEADER_FIELD] = {"time": snap.taken_at_ms, "server": self.identity.server,
                                    "service": self.identity.service, "session": self.session,
                                    "seq": self._report_seq - 1}
            self._pending.append(record)
        self._forget_old_revisions()
        return [dict(e) for e in self._pending]

    def pending(self) -> list[dict]:
        """The unpublished events, oldest first."""
        return [dict(e) for e in self._pending]

    def published(self, event_ids: Iterable[str]) -> None:
        """These events were acknowledged by the target: drop them from pending."""
        done = set(event_ids)
        self._pending = [e for e in self._pending if e["event_id"] not in done]

    def _forget_old_revisions(self) -> None:
        horizon = self.clock.time_ms() - RETAIN_MS - self.window_ms
        if not self._revisions or min(self._revisions) >= horizon:
            return
        keep = self._counter.window_starts(self.topic) | {e["window_start_ms"] for e in self._pending}
        for start in [s for s in self._revisions if s < horizon and s not in keep]:
            del self._revisions[start]  # the counter forgot this window too

    # --- state ------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """JSON-able state for the unit's checkpoint (counts, revisions, report_seq, pending events);
        compact, see :mod:`ingest.mirror.tier_counts_state`."""
        return tier_counts_state.encode(window_ms=self.window_ms, topic=self.topic, counter_state=self._counter.state(),
                                        revisions=self._revisions, report_seq=self._report_seq, pending=self._pending,
                                        closed_before_ms=self.clock.time_ms() - self._counter.grace_ms)

    def _restore(self, state: dict) -> None:
        if state.get("v") != tier_counts_state.STATE_VERSION or state.get("window_ms") != self.window_ms:
            raise MirrorConfigError(
                f"counter state of {self.session}: version {state.get('v')} window {state.get('window_ms')} ms; "
                f"this mirror reads version {tier_counts_state.STATE_VERSION} with window {self.window_ms} ms "
                "(monitoring.window.ms cannot change under a running mirror group)")
        counter_state, self._revisions, self._report_seq, self._pending = tier_counts_state.decode(state, self.topic)
        self._counter.restore(counter_state)
