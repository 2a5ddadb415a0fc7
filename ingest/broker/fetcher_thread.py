"""What every replica fetcher thread shares, whatever the format (Kafka's ``AbstractFetcherThread``).

A fetcher thread follows many partitions of one leader over one connection. It keeps them in a table
(:meth:`FetcherThread.add`, :meth:`FetcherThread.remove`, :meth:`FetcherThread.take_all`: any thread, while
it runs; it is not restarted), and loops in rounds: each round asks about every partition that is ready
(not delayed by its :class:`~ingest.broker.fetch_state.PartitionFetchState` back-off or stall), in an order
that turns by one each round, so that under the response budget no partition always comes last. With no
partition ready it waits for the earliest one, or for :meth:`FetcherThread.add`; it never spins. A failed
connection delays every partition (they share it: Kafka's ``handlePartitionsWithErrors``), 0.1 s doubling
to 1 s; a bug in a round is logged (once a minute) and the thread goes on.

An answer is applied under the table's lock, and only to the partition object the request was built from
(:meth:`FetcherThread._current`), so once :meth:`FetcherThread.remove` returns the thread never touches
that partition's log again (the replica manager may then make it a leader).

The formats add their requests and answers: :class:`~ingest.broker.kafka.replica_fetcher.ReplicaFetcherThread`
(Kafka topics: OffsetForLeaderEpoch and Fetch, the replication throttle) and
:class:`~ingest.broker.replica_fetcher.ReplicaFetcherThread` (0.7 topics: REPLICA_FETCHES).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from ingest.broker.fetch_state import BACKOFF_S, MAX_BACKOFF_S, PartitionFetchState
from ingest.broker.thread_names import set_native_name
from ingest.errors import BrokerUnavailableError, IngestError
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0
"""Longest wait of a thread with no partition ready (an :meth:`FetcherThread.add` wakes it sooner)."""

_errors = RateLimitedLog(log, interval_s=60.0)
"""A round that fails with a bug: once a minute."""


class FetcherThread(threading.Thread):
    """Follows the partitions added to it from ``leader = (id, host, port)`` for broker ``broker_id``;
    ``fetcher_id`` is its number among this broker's threads of its format towards that leader. ``name``
    is the Python thread's name, ``native_name`` the operating system's (at most 15 bytes).

    A format sets ``self._conn`` (closed by :meth:`stop`) and defines :meth:`_round`; it may hold back
    ready partitions (:meth:`_held_back`) and react to a failed connection (:meth:`_connection_failed`)."""

    connection_errors: tuple[type[Exception], ...] = (BrokerUnavailableError, IngestError)
    """What a round raises when the connection or the leader's answer as a whole failed."""

    def __init__(self, name: str, native_name: str, fetcher_id: int, broker_id: int,
                 leader: tuple[int, str, int], *, wait_ms: int, response_max_bytes: int) -> None:
        self.leader_id, self.host, self.port = leader
        super().__init__(name=name, daemon=True)
        self.native_name = native_name
        self.fetcher_id = fetcher_id
        self.broker_id = broker_id
        self.wait_ms = wait_ms
        self.response_max_bytes = response_max_bytes
        self._conn = None
        self._parts: dict[tuple[str, int], PartitionFetchState] = {}
        self._lock = threading.Lock()   # held while an answer is applied, and by add/remove
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._turn = 0
        self.rounds = 0

    def __repr__(self) -> str:
        return f"{self.name} ({self.host}:{self.port}, {len(self._parts)} partition(s))"

    # --- partitions (any thread) -------------------------------------------------------------------

    def add(self, fp: PartitionFetchState) -> None:
        """Follow ``fp`` from the next round on (replacing what this thread had for its partition)."""
        with self._lock:
            old = self._parts.pop(fp.key, None)
            self._parts[fp.key] = fp
        if old is not None:
            old.close()
        log.info("%s: following %s %s", self.name, fp, fp.position())
        self._wake.set()

    def remove(self, key: tuple[str, int]) -> PartitionFetchState | None:
        """Stop following ``key``; returns once no answer is being applied to it (the log is never touched
        by this thread after that)."""
        with self._lock:
            fp = self._parts.pop(key, None)
        if fp is not None:
            fp.close()
        return fp

    def followed(self, key: tuple[str, int]) -> PartitionFetchState | None:
        return self._parts.get(key)

    def partition_count(self) -> int:
        return len(self._parts)

    def take_all(self) -> list[PartitionFetchState]:
        """Remove every partition (to move them to another thread); the states keep their stalls."""
        with self._lock:
            taken, self._parts = list(self._parts.values()), {}
        return taken

    def stop(self) -> None:
        """Stop the thread (and wait for it); its partitions' stalls are over."""
        self._halt.set()
        self._wake.set()
        self._conn.close()
        if self is not threading.current_thread() and self.is_alive():
            self.join(30)
        with self._lock:
            parts, self._parts = list(self._parts.values()), {}
        for fp in parts:
            fp.close()

    # --- the loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        set_native_name(self.native_name)
        log.info("%s: fetching from broker %d at %s:%d", self.name, self.leader_id, self.host, self.port)
        backoff = BACKOFF_S
        while not self._halt.is_set():
            ready, wait = self._ready()
            if not ready:
                self._wake.wait(wait)
                self._wake.clear()
                continue
            try:
                self.rounds += 1
                self._round(ready)
                backoff = BACKOFF_S
            except self.connection_errors as exc:
                if self._halt.is_set():
                    return
                log.debug("%s: request to broker %d failed: %s", self.name, self.leader_id, exc)
                self._halt.wait(backoff)   # every partition waits: they share the connection
                backoff = min(MAX_BACKOFF_S, backoff * 2)
                self._connection_failed()
            except Exception:  # noqa: BLE001 - the thread serves many partitions: it must outlive a bug in one
                _errors.log(logging.ERROR, self.name, "round failed", "%s: a fetch round failed", self.name,
                            exc_info=True)
                self._halt.wait(MAX_BACKOFF_S)

    def _ready(self) -> tuple[list[PartitionFetchState], float]:
        """The partitions to ask about this round, in turning order; else how long until the first is ready."""
        now = time.monotonic()
        with self._lock:
            parts = list(self._parts.values())
        ready, held = self._held_back([fp for fp in parts if fp.ready(now)])
        if ready:
            self._turn += 1
            k = self._turn % len(ready)
            return ready[k:] + ready[:k], 0.0
        if not parts:
            return [], IDLE_WAIT_S
        wait = min(IDLE_WAIT_S, min(fp.delayed_until for fp in parts) - now)
        if held:
            wait = min(wait if wait > 0 else IDLE_WAIT_S, self._held_s())
        return [], max(0.0, wait)

    def _current(self, fp: PartitionFetchState) -> bool:
        """``fp`` is still what this thread follows for its partition (under the lock)."""
        return self._parts.get(fp.key) is fp and not self._halt.is_set()

    def _apply(self, request: str, asked: dict[tuple[str, int], tuple], answers: dict[tuple[str, int], Any],
               apply: Callable[..., None]) -> None:
        """Under the lock: each partition of ``asked`` (key -> ``(state, what it was asked with...)``) that this
        thread still follows takes its own part of the leader's ``answers`` to ``request``
        (``apply(state, what it was asked with..., answer)``); one the answer leaves out backs off."""
        with self._lock:
            for key, (fp, *asked_with) in asked.items():
                if not self._current(fp):
                    continue
                answer = answers.get(key)
                if answer is None:
                    log.warning("%s: the leader's %s answer has no %s-%d", self.name, request, *key)
                    fp.back_off()
                else:
                    apply(fp, *asked_with, answer)

    # --- what a format defines ---------------------------------------------------------------------

    def _round(self, ready: list) -> None:
        """Ask the leader about ``ready`` (in this order); each partition applies its own part of the answer."""
        raise NotImplementedError

    def _held_back(self, ready: list) -> tuple[list, bool]:
        """The ready partitions this round asks about, and whether any were held back (:meth:`_held_s`)."""
        return ready, False

    def _held_s(self) -> float:
        """How long until the partitions held back may be asked about again."""
        return IDLE_WAIT_S

    def _connection_failed(self) -> None:
        """The connection failed, after the back-off (the leader may have restarted)."""
