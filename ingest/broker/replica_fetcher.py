"""A follower's fetcher thread for many partitions of 0.7-format replicated topics led by one broker.

The 0.7 counterpart of :class:`ingest.broker.kafka.replica_fetcher.ReplicaFetcherThread` (Kafka's
``ReplicaFetcherThread``): a broker runs at most ``num.replica.fetchers`` of these per leader it copies
0.7 topics from, whatever the number of partitions (:class:`~ingest.broker.kafka.fetcher_manager.ReplicaFetcherManager`
assigns partitions to threads by Kafka's rule). Over one connection to the leader's 0.7 port (or, when the
leader is secured, its inter-broker Kafka listener, :mod:`ingest.wire.kafka.port07_connection`), each round
sends one REPLICA_FETCHES request for every partition that is ready (``replica_id`` = this broker's id,
``min_bytes`` 1, ``replica.fetch.wait.max.ms``: the leader holds it in its purgatory until one of them has
something new; at most ``replica.fetch.response.max.bytes`` for the whole answer and the partition's
``replica.fetch.max.bytes`` each). The partitions' order turns by one each round, so that under the
response budget no partition always comes last.

Each partition (a :class:`~ingest.broker.followed_partition.FollowedPartition07`: agreement with the leader,
copying, repair of damaged ranges, stalls) takes its own part of each answer; an answer refused whole
delays them all. The partition table, the round loop and its back-offs are
:class:`~ingest.broker.fetcher_thread.FetcherThread`'s.

A leader of an older version (a rolling upgrade) does not know REPLICA_FETCHES: on its 0.7 port it answers
UNKNOWN_REQUEST_TYPE, and over the Kafka listener it has not registered the private key 10004. The thread
then sends one REPLICA_FETCH (13) per ready partition, the way such a leader has always been asked, without
its long poll (only a round that copied nothing waits ``replica.fetch.wait.max.ms``), and asks with
REPLICA_FETCHES again after its connection fails (the leader may have restarted upgraded).
"""
from __future__ import annotations

import logging
from typing import Callable

from ingest.broker.fetcher_thread import FetcherThread
from ingest.broker.followed_partition import FollowedPartition07
from ingest.errors import BrokerUnavailableError, IngestError
from ingest.ratelimited_log import RateLimitedLog
from ingest.wire import protocol as p
from ingest.wire.connection import BrokerConnection
from ingest.wire.errors import ErrorCode
from ingest.wire.kafka.port07_connection import Port07OverKafka

log = logging.getLogger(__name__)

MAX_PARTITIONS_PER_REQUEST = 2 ** 15 - 1
"""A REPLICA_FETCHES counts its partitions with an int16; more ready partitions wait for the next rounds
(the turning order reaches every one)."""

_errors = RateLimitedLog(log, interval_s=60.0)
"""A leader that refuses every request (no ClusterAction for this broker, an older leader): once a minute."""


class ReplicaFetcherThread(FetcherThread):
    """Fetches the 0.7 partitions added to it from ``leader = (id, host, port)`` for broker ``broker_id``;
    ``fetcher_id`` is its number among this broker's 0.7 threads towards that leader. ``over_kafka``: the
    address is the leader's inter-broker Kafka listener (with ``ssl_context`` and the ``sasl`` login);
    ``knows_fetches()`` tells whether the leader is known to serve REPLICA_FETCHES there (its registration)."""

    connection_errors = (BrokerUnavailableError, IngestError)   # the connection, or an unreadable answer

    def __init__(self, fetcher_id: int, broker_id: int, leader: tuple[int, str, int], *, wait_ms: int,
                 response_max_bytes: int, socket_timeout_s: float, ssl_context=None, over_kafka: bool = False,
                 sasl=None, knows_fetches: Callable[[], bool] = lambda: True) -> None:
        leader_id = leader[0]
        super().__init__(f"ReplicaFetcherThread07-{fetcher_id}-{leader_id}", f"fetcher07-{fetcher_id}-{leader_id}",
                         fetcher_id, broker_id, leader, wait_ms=wait_ms, response_max_bytes=response_max_bytes)
        timeout_s = socket_timeout_s + wait_ms / 1000.0
        if over_kafka:
            self._conn = Port07OverKafka(self.host, self.port, broker_id=self.leader_id, timeout_s=timeout_s,
                                         ssl_context=ssl_context, client_id=f"replica-{broker_id}", sasl=sasl)
        else:
            self._conn = BrokerConnection(self.host, self.port, broker_id=self.leader_id, timeout_s=timeout_s,
                                          ssl_context=ssl_context)
        self._knows_fetches = knows_fetches
        self.one_by_one = not knows_fetches()
        """The leader does not know REPLICA_FETCHES: one REPLICA_FETCH per partition."""

    def _connection_failed(self) -> None:
        self.one_by_one = not self._knows_fetches()   # the leader may have restarted with another version

    def _round(self, ready: list[FollowedPartition07]) -> None:
        """One REPLICA_FETCHES request for ``ready``; each partition applies its own part of the answer."""
        if self.one_by_one:
            self._one_by_one(ready)
            return
        asked: dict[tuple[str, int], tuple[FollowedPartition07, int]] = {}
        queries = []
        with self._lock:
            for fp in ready[:MAX_PARTITIONS_PER_REQUEST]:
                if self._current(fp):
                    q = fp.query()
                    asked[fp.key] = (fp, q.offset)
                    queries.append(q)
        if not asked:
            return
        req = p.ReplicaFetchesRequest(self.broker_id, self.wait_ms, 1, self.response_max_bytes, tuple(queries))
        resp = self._conn.request(req.encode(), p.ReplicaFetchesResponse)
        if resp.error == ErrorCode.UNKNOWN_REQUEST_TYPE:
            log.info("%s: broker %d does not know REPLICA_FETCHES (an older version): one REPLICA_FETCH per "
                     "partition until it is restarted", self.name, self.leader_id)
            self.one_by_one = True
            return
        if resp.error != ErrorCode.NONE:
            _errors.log(logging.WARNING, self.name, ErrorCode(resp.error).name,
                        "%s: broker %d refused REPLICA_FETCHES for %d partition(s): %s", self.name, self.leader_id,
                        len(asked), ErrorCode(resp.error).name)
            with self._lock:
                for fp, _pos in asked.values():
                    fp.back_off()
            return
        self._apply("REPLICA_FETCHES", asked, {(a.topic, a.partition): a for a in resp.partitions}, self._answered)

    def _answered(self, fp: FollowedPartition07, pos: int, answer) -> None:
        if fp.pos == pos:   # else moved meanwhile (it cannot: only this thread moves it)
            fp.on_answer(answer, self._conn)

    def _one_by_one(self, ready: list[FollowedPartition07]) -> None:
        """One REPLICA_FETCH per partition of ``ready`` (a leader without REPLICA_FETCHES); without a long
        poll, which would hold every later partition behind it: a round that copied nothing waits instead."""
        copied = False
        for fp in ready:
            with self._lock:
                if not self._current(fp):
                    continue
                pos = fp.pos
            req = p.ReplicaFetchRequest(self.broker_id, fp.epoch, 0,
                                        p.FetchRequest(fp.part.topic, fp.part.partition, pos, fp.max_bytes))
            resp = self._conn.request(req.encode(), p.ReplicaFetchResponse)
            with self._lock:
                if self._current(fp) and fp.pos == pos:
                    fp.on_answer(resp, self._conn)
                    copied = copied or fp.pos != pos
        if not copied:
            self._halt.wait(self.wait_ms / 1000.0)
