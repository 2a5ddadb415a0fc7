"""A follower's fetcher thread for many partitions of Kafka topics led by one broker (Kafka's ``ReplicaFetcherThread``).

It speaks Kafka's protocol to the leader's Kafka listener (``inter.broker.listener.name``; TLS and the
SASL login of the ``inter.broker.*`` keys) over one connection, and each round sends

- one OffsetForLeaderEpoch v3 request for every partition that has not agreed with the leader yet
  (``replica_id`` = this broker's id), then
- one Fetch v11 request for every partition that has (``replica_id``, ``min_bytes`` 1,
  ``replica.fetch.wait.max.ms``: the leader holds it in its purgatory until one of them has something new;
  at most ``replica.fetch.response.max.bytes`` for the whole answer and ``replica.fetch.max.bytes`` per
  partition). The partitions' order turns by one each round, so that under the response budget no
  partition always comes last.

Each partition (a :class:`~ingest.broker.kafka.followed_partition.FollowedPartition`: truncation by leader
epochs, copying, stalls) takes its own part of each answer. A partition in error is delayed (left out of
the requests for a back-off) without holding the others; a failed connection delays them all (Kafka's
``handlePartitionsWithErrors``). With no partition ready the thread waits for the earliest one, or for
:meth:`ReplicaFetcherThread.add`; it never spins.

With a replication throttle (the broker's follower :class:`~ingest.broker.replication_quota.ReplicationQuota`):
a throttled partition that is not in sync is left out of the requests while the quota is exceeded (Kafka's
``shouldFollowerThrottle``), and the bytes copied for every throttled partition are recorded; the other
partitions are never held back. With nothing else to ask for, the thread waits until the rate falls back.

Partitions are added and removed while it runs (:class:`~ingest.broker.kafka.fetcher_manager.ReplicaFetcherManager`);
the thread is not restarted. An answer is applied under the partition lock, and only to the partition
object the request was built from, so once :meth:`ReplicaFetcherThread.remove` returns the thread never
touches that partition's log again (the replica manager may then make it a leader).
"""
from __future__ import annotations

import itertools
import logging
import threading
import time

from ingest.broker.kafka.followed_partition import FollowedPartition
from ingest.broker.followed_partition import BACKOFF_S, MAX_BACKOFF_S
from ingest.broker.thread_names import set_native_name
from ingest.errors import BrokerUnavailableError, IngestError, MalformedResponseError
from ingest.ratelimited_log import RateLimitedLog
from ingest.wire.connection import BrokerConnection
from ingest.wire.kafka.connection import KafkaConnection, SaslLogin
from ingest.wire.kafka.fetch import FetchRequest, FetchResponse, FetchTopic
from ingest.wire.kafka.message import decode_response, encode_request
from ingest.wire.kafka.offset_for_leader_epoch import (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
                                                       OffsetForLeaderTopic)

log = logging.getLogger(__name__)

FETCH_VERSION = 11
EPOCH_VERSION = 3
IDLE_WAIT_S = 1.0
"""Longest wait of a thread with no partition ready (an :meth:`ReplicaFetcherThread.add` wakes it sooner)."""

_errors = RateLimitedLog(log, interval_s=60.0)

class ReplicaFetcherThread(threading.Thread):
    """Fetches the partitions added to it from ``leader = (id, host, port)`` for broker ``broker_id``;
    ``fetcher_id`` is its number among this broker's threads towards that leader (``num.replica.fetchers``)."""

    def __init__(self, fetcher_id: int, broker_id: int, leader: tuple[int, str, int], *, wait_ms: int,
                 response_max_bytes: int, socket_timeout_s: float, ssl_context=None,
                 sasl: SaslLogin | None = None, quota=None) -> None:
        self.leader_id, self.host, self.port = leader
        super().__init__(name=f"ReplicaFetcherThread-{fetcher_id}-{self.leader_id}", daemon=True)
        self.native_name = f"fetcher-{fetcher_id}-{self.leader_id}"
        self.fetcher_id = fetcher_id
        self.broker_id = broker_id
        self.wait_ms = wait_ms
        self.response_max_bytes = response_max_bytes
        self.client_id = f"replica-{broker_id}"
        timeout_s = socket_timeout_s + wait_ms / 1000.0
        self._conn = (KafkaConnection(self.host, self.port, client_id=self.client_id, timeout_s=timeout_s,
                                      node_id=self.leader_id, ssl_context=ssl_context, sasl=sasl)
                      if sasl is not None else   # a SASL listener: every new socket logs in first
                      BrokerConnection(self.host, self.port, broker_id=self.leader_id, timeout_s=timeout_s,
                                       ssl_context=ssl_context))
        self._correlation = itertools.count(1)
        self._parts: dict[tuple[str, int], FollowedPartition] = {}
        self._lock = threading.Lock()   # held while an answer is applied, and by add/remove
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._turn = 0
        self.quota = quota
        self.rounds = 0

    def __repr__(self) -> str:
        return f"{self.name} ({self.host}:{self.port}, {len(self._parts)} partition(s))"

    # --- partitions (any thread) -------------------------------------------------------------------

    def add(self, fp: FollowedPartition) -> None:
        """Follow ``fp`` from the next round on (replacing what this thread had for its partition)."""
        with self._lock:
            old = self._parts.pop(fp.key, None)
            self._parts[fp.key] = fp
        if old is not None:
            old.close()
        lg = fp.part.log
        log.info("%s: following %s from log end %d, high watermark %d", self.name, fp, lg.log_end, fp.part.hw)
        self._wake.set()

    def remove(self, key: tuple[str, int]) -> FollowedPartition | None:
        """Stop following ``key``; returns once no answer is being applied to it (the log is never touched
        by this thread after that)."""
        with self._lock:
            fp = self._parts.pop(key, None)
        if fp is not None:
            fp.close()
        return fp

    def followed(self, key: tuple[str, int]) -> FollowedPartition | None:
        return self._parts.get(key)

    def partition_count(self) -> int:
        return len(self._parts)

    def take_all(self) -> list[FollowedPartition]:
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
                self._round(ready)
                backoff = BACKOFF_S
            except (BrokerUnavailableError, MalformedResponseError) as exc:
                if self._halt.is_set():
                    return
                log.debug("%s: request to broker %d failed: %s", self.name, self.leader_id, exc)
                self._halt.wait(backoff)   # every partition waits: they share the connection
                backoff = min(MAX_BACKOFF_S, backoff * 2)
            except Exception:  # noqa: BLE001 - the thread serves many partitions: it must outlive a bug in one
                _errors.log(logging.ERROR, self.name, "round failed", "%s: a fetch round failed", self.name,
                            exc_info=True)
                self._halt.wait(MAX_BACKOFF_S)

    def _ready(self) -> tuple[list[FollowedPartition], float]:
        """The partitions to ask about this round, in turning order; else how long until the first is ready."""
        now = time.monotonic()
        with self._lock:
            parts = list(self._parts.values())
        ready = [fp for fp in parts if fp.ready(now)]
        held = False
        if ready and self.quota is not None and self.quota.is_exceeded():
            kept = [fp for fp in ready if fp.in_sync or not self.quota.is_throttled(*fp.key)]
            held = len(kept) < len(ready)
            ready = kept
        if ready:
            self._turn += 1
            k = self._turn % len(ready)
            return ready[k:] + ready[:k], 0.0
        if not parts:
            return [], IDLE_WAIT_S
        wait = min(IDLE_WAIT_S, min(fp.delayed_until for fp in parts) - now)
        if held:
            wait = min(wait if wait > 0 else IDLE_WAIT_S, self.quota.delay_s())
        return [], max(0.0, wait)

    def _round(self, ready: list[FollowedPartition]) -> None:
        self.rounds += 1
        agreeing = [fp for fp in ready if not fp.truncated]
        copying = [fp for fp in ready if fp.truncated]   # those agreeing now copy from the next round on
        if agreeing:
            self._agree(agreeing)
        if copying and not self._halt.is_set():
            self._copy(copying)

    def _exchange(self, request, version: int, response_cls):
        frame = encode_request(request, version, next(self._correlation), self.client_id)
        data = self._conn.request_buffer(frame)
        return decode_response(response_cls, data, version)[1]

    def _current(self, fp: FollowedPartition) -> bool:
        """``fp`` is still what this thread follows for its partition (under the lock)."""
        return self._parts.get(fp.key) is fp and not self._halt.is_set()

    def _agree(self, parts: list[FollowedPartition]) -> None:
        """One OffsetForLeaderEpoch request for ``parts``; each truncates by its answer."""
        asked: dict[tuple[str, int], tuple] = {}   # key -> (partition, epoch asked, query)
        with self._lock:
            for fp in parts:
                if not self._current(fp):
                    continue
                q = fp.epoch_query()
                if q is None:
                    fp.truncate_without_history()
                else:
                    asked[fp.key] = (fp, q.leader_epoch, q)
        if not asked:
            return
        topics: dict[str, list] = {}
        for (topic, _p), (_fp, _e, q) in asked.items():
            topics.setdefault(topic, []).append(q)
        req = OffsetForLeaderEpochRequest(replica_id=self.broker_id, topics=tuple(
            OffsetForLeaderTopic(t, tuple(qs)) for t, qs in topics.items()))
        resp = self._exchange(req, EPOCH_VERSION, OffsetForLeaderEpochResponse)
        answers = {(t.topic, r.partition): r for t in resp.topics for r in t.partitions}
        with self._lock:
            for key, (fp, epoch, _q) in asked.items():
                if not self._current(fp):
                    continue
                r = answers.get(key)
                if r is None:
                    log.warning("%s: the leader's OffsetForLeaderEpoch answer has no %s-%d", self.name, *key)
                    fp.back_off()
                else:
                    fp.on_epoch_answer(epoch, r)

    def _copy(self, parts: list[FollowedPartition]) -> None:
        """One Fetch request for ``parts``; each applies its own answer."""
        asked: dict[tuple[str, int], tuple[FollowedPartition, int]] = {}
        topics: dict[str, list] = {}
        with self._lock:
            for fp in parts:
                if self._current(fp) and fp.truncated:
                    q = fp.fetch_query()
                    asked[fp.key] = (fp, q.fetch_offset)
                    topics.setdefault(fp.part.topic, []).append(q)
        if not asked:
            return
        req = FetchRequest(replica_id=self.broker_id, max_wait_ms=self.wait_ms, min_bytes=1,
                           max_bytes=self.response_max_bytes,
                           topics=tuple(FetchTopic(t, tuple(qs)) for t, qs in topics.items()))
        resp = self._exchange(req, FETCH_VERSION, FetchResponse)
        answers = {(t.topic, p.partition_index): p for t in resp.responses for p in t.partitions}
        with self._lock:
            for key, (fp, pos) in asked.items():
                if not self._current(fp):
                    continue
                answer = answers.get(key)
                if answer is None:
                    log.warning("%s: the leader's Fetch answer has no %s-%d", self.name, *key)
                    fp.back_off()
                elif fp.part.log.log_end != pos:   # moved meanwhile (it cannot: only this thread appends)
                    fp.truncated = False
                else:
                    fp.on_fetch_answer(pos, answer)
                    if self.quota is not None and answer.records and self.quota.is_throttled(*key):
                        self.quota.record(len(answer.records))
