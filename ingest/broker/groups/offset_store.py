"""Committed offsets of the groups this broker coordinates: appended to ``__consumer_offsets``, cached in memory.

Kafka's ``GroupMetadataManager`` without compaction (docs/kafka-protocol.md, "Where committed offsets
live"):

- a group's offsets live in its partition of ``__consumer_offsets`` (:func:`~.offsets_topic.partition_for`),
  a replicated Kafka-format topic; this broker coordinates the group while it leads that partition;
- a commit is one record batch (one record per committed partition, Kafka's record layout) appended
  as an acks=-1 write: it is answered once the partition's in-sync replicas have it (the purgatory
  of acks=-1 produces), and only then is it visible to OffsetFetch; a commit not replicated within
  ``offsets.commit.timeout.ms`` is answered REQUEST_TIMED_OUT and not cached;
- when this broker starts leading a partition (a new leader epoch), the partition is read from its log
  start to its log end before its groups are served: the last record of each (group, topic, partition)
  wins, a tombstone deletes. Loading runs on the request's thread; until it is done no other request
  of that partition is served (measured in docs/kafka-protocol.md);
- a partition this broker no longer leads is forgotten at its next request (NOT_COORDINATOR).

Thread-safety: one lock over the cache, a leaf (nothing else is acquired while it is held; the log is
read and appended to outside it, except while loading).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, NamedTuple

from ingest.broker.delayed import DelayedOp
from ingest.broker.groups.offsets_topic import (OFFSETS_TOPIC, Committed, commit_key, commit_value, partition_for,
                                                read_key, read_value)
from ingest.errors import (GroupRequestError, IngestError, LeaderNotAvailableError, NeedsZooKeeperError,
                           NotLeaderForPartitionError)
from ingest.records.batch import iter_batches
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.record import iter_records
from ingest.wire.errors import KafkaErrorCode, kafka_code

log = logging.getLogger(__name__)

LOAD_CHUNK = 1024 * 1024


class Loaded(NamedTuple):
    """One partition of ``__consumer_offsets`` as loaded here: its leader epoch and its groups' offsets."""

    epoch: int
    offsets: dict   # group -> {(topic, partition): (Committed, record offset)}


# Kafka's GroupMetadataManager maps the append's errors to what a committing consumer acts on
_COMMIT_ERRORS = {
    KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION: KafkaErrorCode.COORDINATOR_NOT_AVAILABLE,
    KafkaErrorCode.NOT_ENOUGH_REPLICAS: KafkaErrorCode.COORDINATOR_NOT_AVAILABLE,
    KafkaErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: KafkaErrorCode.COORDINATOR_NOT_AVAILABLE,
    KafkaErrorCode.REQUEST_TIMED_OUT: KafkaErrorCode.COORDINATOR_NOT_AVAILABLE,
    KafkaErrorCode.LEADER_NOT_AVAILABLE: KafkaErrorCode.NOT_COORDINATOR,
    KafkaErrorCode.NOT_LEADER_OR_FOLLOWER: KafkaErrorCode.NOT_COORDINATOR,
    KafkaErrorCode.FENCED_LEADER_EPOCH: KafkaErrorCode.NOT_COORDINATOR,
    KafkaErrorCode.KAFKA_STORAGE_ERROR: KafkaErrorCode.NOT_COORDINATOR,
    KafkaErrorCode.MESSAGE_TOO_LARGE: KafkaErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    KafkaErrorCode.RECORD_LIST_TOO_LARGE: KafkaErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def commit_error(code: int) -> int:
    return int(_COMMIT_ERRORS.get(code, code))


class OffsetStore:
    """The offsets of the groups of the ``__consumer_offsets`` partitions this broker leads.

    Args:
        apis: the Kafka handlers' shared state (``cluster``, ``purgatory``, ``config``), read at each call
            (the cluster seam is replaced when ZooKeeper starts).
        clock: ``time_ms`` for commit timestamps.
    """

    def __init__(self, apis, clock) -> None:
        self.apis = apis
        self.clock = clock
        self._lock = threading.Lock()
        self._loading = threading.Lock()    # one load at a time; requests of other partitions go on
        self._parts: dict[int, Loaded] = {}

    # --- where a group lives -------------------------------------------------------------------

    def partition_count(self) -> int | None:
        """Partitions of ``__consumer_offsets``, None while it does not exist."""
        views = self.apis.cluster.describe(OFFSETS_TOPIC)
        return None if views is None else len(views)

    def ensure_topic(self) -> int | None:
        """The partition count, creating ``__consumer_offsets`` first when it does not exist (None: being created).

        Raises:
            NeedsZooKeeperError: on a network thread with ZooKeeper (served again on the coordination thread).
        """
        n = self.partition_count()
        if n is not None:
            return n
        cfg = self.apis.config
        if self.apis.cluster.create_topic(OFFSETS_TOPIC, partitions=cfg["offsets.topic.num.partitions"],
                                          replication_factor=cfg["offsets.topic.replication.factor"]):
            return self.partition_count()
        return None

    def partition_of(self, group_id: str) -> int:
        """The partition of ``group_id``.

        Raises:
            GroupRequestError: COORDINATOR_NOT_AVAILABLE while ``__consumer_offsets`` does not exist.
        """
        n = self.partition_count()
        if n is None:
            raise GroupRequestError(KafkaErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} does not exist yet")
        return partition_for(group_id, n)

    def served(self, group_id: str) -> tuple[int, int]:
        """``(partition, leader epoch)`` of ``group_id`` if this broker coordinates it now, loaded.

        Raises:
            GroupRequestError: NOT_COORDINATOR (another broker leads the partition, or none does),
                COORDINATOR_NOT_AVAILABLE (no offsets topic yet).
        """
        p = self.partition_of(group_id)
        try:
            sp = self.apis.cluster.leader(OFFSETS_TOPIC, p)
        except (NotLeaderForPartitionError, LeaderNotAvailableError, NeedsZooKeeperError) as exc:
            with self._lock:
                self._parts.pop(p, None)
            raise GroupRequestError(KafkaErrorCode.NOT_COORDINATOR, f"group {group_id!r}: {exc}") from None
        except IngestError as exc:
            raise GroupRequestError(KafkaErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id!r}: {exc}") from None
        epoch = sp.leader_epoch()
        with self._lock:
            loaded = self._parts.get(p)
            if loaded is not None and loaded.epoch == epoch:
                return p, epoch
        with self._loading:
            with self._lock:
                loaded = self._parts.get(p)
                if loaded is not None and loaded.epoch == epoch:
                    return p, epoch
            offsets = self._load(p, sp)
            with self._lock:
                self._parts[p] = Loaded(epoch, offsets)
        return p, epoch

    def _load(self, p: int, sp) -> dict:
        """Every offset commit of partition ``p`` from its log start to its log end, the last one winning."""
        started = time.monotonic()
        lg = sp.log
        offsets: dict[str, dict] = {}
        pos, end, records = lg.start_offset, lg.end_offset, 0
        while pos < end:
            with lg.read(pos, LOAD_CHUNK) as sl:
                data = sl.read_bytes()
                nxt = sl.next_offset
            if not data or nxt <= pos:
                break
            for bpos, _h in iter_batches(data):
                for rec in iter_records(data, bpos):
                    if rec.offset < pos:
                        continue
                    records += 1
                    try:
                        key = read_key(rec.key)
                        if key is None:
                            continue
                        value = read_value(rec.value)
                    except (IngestError, ValueError) as exc:
                        log.warning("%s-%d: record at offset %d skipped: %s", OFFSETS_TOPIC, p, rec.offset, exc)
                        continue
                    group = offsets.setdefault(key.group, {})
                    if value is None:
                        group.pop((key.topic, key.partition), None)
                    else:
                        group[(key.topic, key.partition)] = (value, rec.offset)
            pos = nxt
        log.info("loaded %s-%d (leader epoch %d): %d records, %d groups, in %.3f s", OFFSETS_TOPIC, p,
                 sp.leader_epoch(), records, len(offsets), time.monotonic() - started)
        return {g: o for g, o in offsets.items() if o}

    def forget(self, p: int) -> None:
        with self._lock:
            self._parts.pop(p, None)

    # --- reads ---------------------------------------------------------------------------------

    def fetch(self, group_id: str, p: int, wanted: list[tuple[str, int]] | None) -> dict[tuple[str, int], Committed]:
        """The group's committed offsets (all of them when ``wanted`` is None)."""
        with self._lock:
            loaded = self._parts.get(p)
            have = {} if loaded is None else loaded.offsets.get(group_id, {})
            if wanted is None:
                return {tp: c for tp, (c, _o) in have.items()}
            return {tp: have[tp][0] for tp in wanted if tp in have}

    def groups(self) -> dict[str, int]:
        """Every group with committed offsets in a partition loaded here -> its partition."""
        with self._lock:
            return {g: p for p, loaded in self._parts.items() for g in loaded.offsets}

    def loaded_partitions(self) -> dict[int, int]:
        """Partition -> leader epoch, of the partitions loaded here."""
        with self._lock:
            return {p: loaded.epoch for p, loaded in self._parts.items()}

    # --- commits -------------------------------------------------------------------------------

    def commit(self, group_id: str, p: int, epoch: int, items: list[tuple[str, int, Committed]],
               answer: Callable[[int], None]) -> None:
        """Append ``items`` as one batch to partition ``p`` and call ``answer(code)`` once the in-sync replicas
        have it (0), or with the error (Kafka's mapping of append errors to commit errors). Never call with a
        lock held: the wait is registered in the purgatory."""
        if not items:
            answer(0)
            return
        now = self.clock.time_ms()
        batch = build_batch([SimpleRecord(commit_value(c), commit_key(group_id, t, part), (), now)
                             for t, part, c in items])
        try:
            sp = self.apis.cluster.leader(OFFSETS_TOPIC, p)
            if sp.leader_epoch() != epoch:
                raise NotLeaderForPartitionError(f"{OFFSETS_TOPIC}-{p} has a new leader epoch")
            appended = sp.append(sp.log.validate(batch), -1)
        except IngestError as exc:
            answer(commit_error(kafka_code(exc)))
            return
        self.apis.wake_fetches(OFFSETS_TOPIC, p)   # followers waiting for data copy it now
        base = appended.info.first_offset

        def apply() -> None:
            with self._lock:
                loaded = self._parts.get(p)
                if loaded is None or loaded.epoch != epoch:
                    return
                group = loaded.offsets.setdefault(group_id, {})
                for i, (t, part, c) in enumerate(items):
                    old = group.get((t, part))
                    if old is None or old[1] < base + i:
                        group[(t, part)] = (c, base + i)

        if appended.outcome is None:
            apply()
            answer(0)
            return

        def decide(final: bool) -> bool:
            o = appended.outcome()
            if o is None and not final:
                return False
            if o is True:
                apply()
                answer(0)
            else:
                code = KafkaErrorCode.REQUEST_TIMED_OUT if o is None else kafka_code(o)
                answer(commit_error(code))
            return True

        timeout = self.apis.config["offsets.commit.timeout.ms"] / 1000.0
        self.apis.purgatory.add(("produce", OFFSETS_TOPIC, p),
                                DelayedOp(time.monotonic() + timeout, lambda: decide(False), lambda: decide(True)))
