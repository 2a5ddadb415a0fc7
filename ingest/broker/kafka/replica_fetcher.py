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
epochs, copying, stalls) takes its own part of each answer. The partition table, the round loop and its
back-offs are :class:`~ingest.broker.fetcher_thread.FetcherThread`'s.

With a replication throttle (the broker's follower :class:`~ingest.broker.replication_quota.ReplicationQuota`):
a throttled partition that is not in sync is left out of the requests while the quota is exceeded (Kafka's
``shouldFollowerThrottle``), and the bytes copied for every throttled partition are recorded; the other
partitions are never held back. With nothing else to ask for, the thread waits until the rate falls back.

Partitions are added and removed while it runs (:class:`~ingest.broker.kafka.fetcher_manager.ReplicaFetcherManager`).
"""
from __future__ import annotations

import itertools

from ingest.broker.fetcher_thread import FetcherThread
from ingest.broker.kafka.followed_partition import FollowedPartition
from ingest.errors import BrokerUnavailableError, MalformedResponseError
from ingest.wire.connection import BrokerConnection
from ingest.wire.kafka.connection import KafkaConnection, SaslLogin
from ingest.wire.kafka.fetch import FetchRequest, FetchResponse, FetchTopic
from ingest.wire.kafka.message import decode_response, encode_request
from ingest.wire.kafka.offset_for_leader_epoch import (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
                                                       OffsetForLeaderTopic)

FETCH_VERSION = 11
EPOCH_VERSION = 3


class ReplicaFetcherThread(FetcherThread):
    """Fetches the partitions added to it from ``leader = (id, host, port)`` for broker ``broker_id``;
    ``fetcher_id`` is its number among this broker's threads towards that leader (``num.replica.fetchers``)."""

    connection_errors = (BrokerUnavailableError, MalformedResponseError)

    def __init__(self, fetcher_id: int, broker_id: int, leader: tuple[int, str, int], *, wait_ms: int,
                 response_max_bytes: int, socket_timeout_s: float, ssl_context=None,
                 sasl: SaslLogin | None = None, quota=None) -> None:
        leader_id = leader[0]
        super().__init__(f"ReplicaFetcherThread-{fetcher_id}-{leader_id}", f"fetcher-{fetcher_id}-{leader_id}",
                         fetcher_id, broker_id, leader, wait_ms=wait_ms, response_max_bytes=response_max_bytes)
        self.client_id = f"replica-{broker_id}"
        timeout_s = socket_timeout_s + wait_ms / 1000.0
        self._conn = (KafkaConnection(self.host, self.port, client_id=self.client_id, timeout_s=timeout_s,
                                      node_id=self.leader_id, ssl_context=ssl_context, sasl=sasl)
                      if sasl is not None else   # a SASL listener: every new socket logs in first
                      BrokerConnection(self.host, self.port, broker_id=self.leader_id, timeout_s=timeout_s,
                                       ssl_context=ssl_context))
        self._correlation = itertools.count(1)
        self.quota = quota

    def _held_back(self, ready: list[FollowedPartition]) -> tuple[list[FollowedPartition], bool]:
        """While the follower's quota is exceeded: the throttled partitions that are not in sync wait."""
        if ready and self.quota is not None and self.quota.is_exceeded():
            kept = [fp for fp in ready if fp.in_sync or not self.quota.is_throttled(*fp.key)]
            return kept, len(kept) < len(ready)
        return ready, False

    def _held_s(self) -> float:
        return self.quota.delay_s()

    def _round(self, ready: list[FollowedPartition]) -> None:
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
        self._apply("OffsetForLeaderEpoch", asked, answers, lambda fp, epoch, _q, r: fp.on_epoch_answer(epoch, r))

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
        self._apply("Fetch", asked, answers, self._fetched)

    def _fetched(self, fp: FollowedPartition, pos: int, answer) -> None:
        """``fp``'s part of the Fetch answer; the bytes copied count against the throttle (under the lock)."""
        if fp.part.log.log_end != pos:   # moved meanwhile (it cannot: only this thread appends)
            fp.truncated = False
            return
        fp.on_fetch_answer(pos, answer)
        if self.quota is not None and answer.records and self.quota.is_throttled(*fp.key):
            self.quota.record(len(answer.records))
