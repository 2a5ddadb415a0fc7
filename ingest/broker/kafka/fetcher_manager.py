"""Which fetcher thread follows which replicated partition (Kafka's ``AbstractFetcherManager``).

The replica manager keeps one of these for Kafka topics' partitions
(:class:`~ingest.broker.kafka.replica_fetcher.ReplicaFetcherThread`, Fetch on the Kafka listener) and one for
0.7-format topics' (:class:`~ingest.broker.replica_fetcher.ReplicaFetcherThread`, REPLICA_FETCHES on the 0.7
port): the two speak different protocols, so a leader of both kinds is followed by up to twice
``num.replica.fetchers`` threads. Either way:

A follower runs at most ``num.replica.fetchers`` threads per leader it copies from, whatever the number of
partitions: partition ``(topic, p)`` goes to thread :func:`fetcher_id` of its leader, Kafka's rule
(``abs(31 * topic.hashCode() + p) % num.replica.fetchers``, with Java's ``String.hashCode``), so the same
partitions share a thread on every broker and run. A thread is made when its first partition arrives
and stopped when its last one leaves (Kafka's ``shutdownIdleFetcherThreads``); adding or removing a
partition never restarts a thread. A leader that moved to another address gets a new thread, and the
old thread's partitions move to it.

Concurrency: called by the replica manager's worker thread (add, remove) and at shutdown (stop); one
lock keeps the table.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from ingest.broker.kafka.followed_partition import FollowedPartition
from ingest.broker.kafka.replica_fetcher import ReplicaFetcherThread

log = logging.getLogger(__name__)

_INT_MIN = -2 ** 31


def _int32(n: int) -> int:
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n & 0x80000000 else n


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32 arithmetic)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """The thread (0 .. ``num_fetchers`` - 1) that follows ``topic``-``partition``, as Kafka numbers it."""
    n = _int32(31 * java_string_hash(topic) + partition)
    return (0 if n == _INT_MIN else abs(n)) % num_fetchers


class ReplicaFetcherManager:
    """The fetcher threads of one broker for one topic format. ``make_thread(fetcher_id, leader)`` builds (does
    not start) the thread for ``leader = (id, host, port)``; a thread has ``add``, ``remove``, ``followed``,
    ``partition_count``, ``take_all`` and ``stop`` as :class:`ReplicaFetcherThread` has, and a partition's
    state (``fp``) has ``part`` and ``key``."""

    def __init__(self, num_fetchers: int, make_thread: Callable[[int, tuple[int, str, int]], ReplicaFetcherThread]):
        self.num_fetchers = num_fetchers
        self._make = make_thread
        self._threads: dict[tuple[int, int], ReplicaFetcherThread] = {}   # (leader id, fetcher id) -> thread
        self._where: dict[tuple[str, int], tuple[int, int]] = {}         # partition -> its thread's key
        self._lock = threading.Lock()

    def add(self, fp: FollowedPartition, leader: tuple[int, str, int]) -> ReplicaFetcherThread:
        """Follow ``fp`` from ``leader`` (after removing it from whichever thread had it)."""
        self.remove(fp.key)
        tkey = (leader[0], fetcher_id(fp.part.topic, fp.part.partition, self.num_fetchers))
        with self._lock:
            t = self._threads.get(tkey)
            moved: list[FollowedPartition] = []
            if t is not None and ((t.host, t.port) != leader[1:] or not t.is_alive()):
                log.info("%s: leader %d is now at %s:%d; a new thread takes its partitions", t.name, leader[0],
                         leader[1], leader[2])
                moved = t.take_all()
                t.stop()
                t = None
            if t is None:
                t = self._threads[tkey] = self._make(tkey[1], leader)
                t.start()
            for other in moved:
                t.add(other)
            t.add(fp)
            self._where[fp.key] = tkey
        return t

    def remove(self, key: tuple[str, int]) -> None:
        """Stop following ``key``; returns once its thread no longer touches its log. A thread left with
        no partition is stopped."""
        with self._lock:
            tkey = self._where.pop(key, None)
            t = self._threads.get(tkey) if tkey is not None else None
            if t is None:
                return
            t.remove(key)
            if t.partition_count() == 0:
                del self._threads[tkey]
            else:
                t = None
        if t is not None:
            t.stop()

    def followed(self, key: tuple[str, int]) -> tuple[ReplicaFetcherThread, FollowedPartition] | None:
        """The live thread that follows ``key`` and its state there, or None."""
        with self._lock:
            tkey = self._where.get(key)
            t = self._threads.get(tkey) if tkey is not None else None
        fp = t.followed(key) if t is not None and t.is_alive() else None
        return (t, fp) if fp is not None else None

    def threads(self) -> list[ReplicaFetcherThread]:
        with self._lock:
            return list(self._threads.values())

    def stop(self) -> None:
        with self._lock:
            threads, self._threads, self._where = list(self._threads.values()), {}, {}
        for t in threads:
            t.stop()
