"""One replicated partition on one broker: its role (leader, follower or neither), the in-sync
set, the high watermark, and what a leader tracks of its followers (Kafka 0.8's ``Partition``).

Leader side:

- an append (any acks level) goes to the local log; acks=-1 is refused first while the
  in-sync set is smaller than ``min.insync.replicas`` (nothing is appended);
- a follower's fetch at offset ``o`` says that follower has everything below ``o`` (its log
  end); the leader records it and when the follower last *caught up* (fetched at or past the
  log end the leader had at the follower's previous fetch, Kafka's rule);
- the high watermark (HW) is the smallest log end among the in-sync replicas (the leader's
  included); it only grows. Consumers read below it, acks=-1 is answered once it passes the
  set's end;
- the in-sync set shrinks when a member has not caught up for ``replica.lag.time.max.ms``
  and grows when a follower's log end reaches the HW. Both are conditional writes of the
  state node in ZooKeeper, made by the replica manager (:meth:`isr_change` says what to
  write, :meth:`isr_written` applies it): the leader uses a new set only after ZooKeeper
  accepted it, so a leader cut off from ZooKeeper can never shrink its set to itself and
  keep acknowledging acks=-1 writes alone.

Follower side: the HW is the leader's (as reported in fetch answers), capped at the local
log end; it is what a replica that becomes leader starts from, and where a follower starts
comparing its log with a new leader's (docs/replication.md, "Failover").

Storage failures: an append that fails for the storage's sake (disk full, a failed write or
fsync, the log offline) marks the replica *storage-failed* (:attr:`storage_failure`, the
error's name); the next append that succeeds clears it (an offline log never does: it serves
again only after a restart). ``on_storage`` hears both changes; the replica manager publishes
them in ZooKeeper, and the controller then treats the replica as unable to lead or stay in
sync (docs/replication.md, "A replica that cannot write").

Concurrency: every field is guarded by ``lock``; log I/O happens outside it (the log has its
own lock). Waiters in the purgatory are woken with :meth:`wake` after changes.
"""
from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass
from typing import Callable

from ingest.broker.delayed import Purgatory
from ingest.errors import (DiskFullError, IngestError, LeaderNotAvailableError, LogOfflineError, LogWriteError,
                           NotEnoughReplicasAfterAppendError, NotEnoughReplicasError,
                           NotLeaderForPartitionError, RequestTimedOutError, StaleLeaderEpochError)
from ingest.broker.kafka_log import AppendInfo
from ingest.ratelimited_log import RateLimitedLog
from ingest.records.message_batch import MessageBatch
from ingest.wire.errors import code_for
from ingest.znodes import PartitionState

log = logging.getLogger(__name__)

_storage_log = RateLimitedLog(log, interval_s=60.0)
"""Storage failures and recoveries: a disk that is nearly full can flip them with every write."""


STORAGE_FAILURES = (DiskFullError, LogWriteError, LogOfflineError)
"""What says that a replica's log cannot write: a full disk, a write that failed with an I/O error,
the log offline (a failed fsync or cut-back). Damaged bytes (a CRC failure) are the log's content,
and a failed read or open is not a write: neither counts."""


def is_storage_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is one of :data:`STORAGE_FAILURES`."""
    return isinstance(exc, STORAGE_FAILURES)


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(slots=True)
class FollowerProgress:
    """What a leader knows of one follower (monotonic milliseconds)."""

    leo: int = -1                 # -1: not fetched from this leader yet
    caught_up_ms: float = 0.0
    last_fetch_leo: int = -1      # the leader's log end at the follower's previous fetch
    last_fetch_ms: float = 0.0


class ReplicatedPartition:
    """See the module docstring. ``now_ms`` is a monotonic millisecond clock."""

    def __init__(self, topic: str, partition: int, broker_id: int, log_, replicas: tuple[int, ...],
                 hw: int, purgatory: Purgatory, now_ms: Callable[[], float]) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log_
        self.replicas = tuple(replicas)
        self.lock = threading.Lock()
        self.role = Role.NONE
        self.leader = -1
        self.epoch = -1
        self.isr: tuple[int, ...] = ()
        self.zk_version = -1
        self.controller_epoch = 0
        self.generation = 0          # grows each time this broker becomes leader
        self.hw = max(0, min(hw, log_.log_end))
        self.followers: dict[int, FollowerProgress] = {}
        self.isr_pending = False
        self.storage_failure: str | None = None   # the error name while the replica cannot write
        self.on_storage: Callable[["ReplicatedPartition"], None] | None = None
        self.epochs = None
        """A Kafka topic replica's :class:`~ingest.broker.leader_epochs.LeaderEpochCache` (None for 0.7)."""
        self._purgatory = purgatory
        self._now_ms = now_ms

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __repr__(self) -> str:
        return (f"{self.topic}-{self.partition}({self.role.value} epoch {self.epoch} leader {self.leader} "
                f"isr {list(self.isr)} hw {self.hw} leo {self.log.log_end})")

    def wake(self) -> None:
        """Let waiting produces and follower fetches re-check (after any change)."""
        self._purgatory.check(("produce",) + self.key)
        self._purgatory.check(("fetch",) + self.key)

    # --- roles -----------------------------------------------------------------------------

    def become_leader(self, state: PartitionState) -> None:
        with self.lock:
            now = self._now_ms()
            if self.role is not Role.LEADER:
                self.generation += 1
                self.followers = {r: FollowerProgress(caught_up_ms=now) for r in self.replicas
                                  if r != self.broker_id}
            for r, f in self.followers.items():
                if r not in state.isr:   # dropped by the controller (dead): it must fetch again to rejoin
                    f.leo, f.caught_up_ms = -1, 0.0
            self.role = Role.LEADER
            self.leader = self.broker_id
            self._take_state(state)
            if self.epochs is not None:   # the new epoch begins at this leader's log end (KIP-101)
                try:
                    self.epochs.assign(state.leader_epoch, self.log.log_end)
                except IngestError as exc:   # kept in memory; a follower of this leader still truncates exactly
                    _storage_log.warning(f"{self.topic}-{self.partition}", "epoch checkpoint",
                                         "%s: %s", self, exc)
            self._advance_hw_locked()
        log.info("%s: now leader", self)
        self.wake()

    def set_replicas(self, replicas: tuple[int, ...]) -> None:
        """The assignment changed (a reassignment): a leader tracks the added replicas as followers that
        have fetched nothing yet (they join the in-sync set once caught up) and forgets the removed ones."""
        with self.lock:
            self.replicas = tuple(replicas)
            if self.role is Role.LEADER:
                self.followers = {r: self.followers.get(r) or FollowerProgress() for r in self.replicas
                                  if r != self.broker_id}
        log.info("%s: replicas now %s", self, list(replicas))
        self.wake()

    def become_follower(self, state: PartitionState) -> None:
        with self.lock:
            self.role = Role.FOLLOWER if state.leader >= 0 else Role.NONE
            self.leader = state.leader
            self.followers = {}
            self._take_state(state)
        log.info("%s: now %s", self, "follower" if state.leader >= 0 else "without a leader")
        self.wake()

    def update_state(self, state: PartitionState) -> None:
        """A state of the same leadership (e.g. this leader's own in-sync set change, read back)."""
        with self.lock:
            if state.zk_version < self.zk_version:
                return
            self._take_state(state)
            self._advance_hw_locked()
        self.wake()

    def _take_state(self, state: PartitionState) -> None:
        self.epoch = state.leader_epoch
        self.isr = tuple(state.isr)
        self.zk_version = state.zk_version
        self.controller_epoch = state.controller_epoch

    # --- the leader's appends and reads ----------------------------------------------------------

    def check_leader(self) -> None:
        """Raise unless this broker leads the partition now."""
        if self.role is not Role.LEADER:
            raise self._not_leader()

    def _not_leader(self) -> IngestError:
        if self.leader < 0:
            return LeaderNotAvailableError(f"{self.topic}-{self.partition} has no leader now")
        return NotLeaderForPartitionError(
            f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition} (leader: broker "
            f"{self.leader}, epoch {self.epoch})")

    def append(self, message_set, acks: int, min_isr: int, expected: int | None = None) -> tuple[int, int, int]:
        """Append as leader; returns ``(first offset, end offset, generation)``. With ``expected``
        (APPEND_AT) only if the log end equals it (:meth:`Log.append <ingest.broker.log.Log.append>`).

        Raises:
            NotLeaderForPartitionError / LeaderNotAvailableError: not the leader.
            NotEnoughReplicasError: acks=-1 and fewer than ``min_isr`` in-sync replicas.
            OffsetMismatchError: the log end is not ``expected``; nothing appended.
        """
        generation, _epoch = self._admit(acks, min_isr)
        offset = self._written(lambda: self.log.append(message_set, expected))
        end = offset + (message_set.size if isinstance(message_set, MessageBatch) else len(message_set))
        return offset, end, generation

    def append_records(self, batch, acks: int, min_isr: int) -> tuple[AppendInfo, int]:
        """Append a producer's record batch as leader of a Kafka topic, stamped with the leader epoch;
        returns ``(append info, generation)``; the batch's end offset is ``info.last_offset + 1``.

        Raises:
            as :meth:`append`, and the batch's validation errors (nothing appended).
        """
        generation, epoch = self._admit(acks, min_isr)
        return self._written(lambda: self.log.append(batch, leader_epoch=epoch)), generation

    def append_copied(self, records, acks: int, min_isr: int, expected: int) -> tuple[AppendInfo, int]:
        """Append another log's batches with their offsets as leader of a Kafka topic (AppendAt), only if
        the log end is ``expected``, stamped with the leader epoch; ``(append info, generation)``.

        Raises:
            as :meth:`append`, and :meth:`KafkaLog.append_copied
            <ingest.broker.kafka_log.KafkaLog.append_copied>`'s errors (nothing appended).
        """
        generation, epoch = self._admit(acks, min_isr)
        return self._written(lambda: self.log.append_copied(records, expected, epoch)), generation

    def _admit(self, acks: int, min_isr: int) -> tuple[int, int]:
        """Check that this broker leads and, for acks=-1, that the in-sync set is large enough;
        ``(generation, leader epoch)`` of the leadership the append belongs to."""
        with self.lock:
            self.check_leader()
            if acks == -1 and len(self.isr) < min_isr:
                never = (f"; it has only {len(self.replicas)} replica(s), so no acks=-1 write can succeed until "
                         f"min.insync.replicas is at most {len(self.replicas)}") if len(self.replicas) < min_isr else ""
                raise NotEnoughReplicasError(
                    f"{self.topic}-{self.partition}: {len(self.isr)} in-sync replica(s) {list(self.isr)}, "
                    f"min.insync.replicas={min_isr}; acks=-1 write refused, nothing appended{never}")
            return self.generation, self.epoch

    def _written(self, write):
        """``write()`` (the log append) with storage failures marked and recoveries noted, then the high
        watermark advanced and waiters woken."""
        try:
            out = write()
        except IngestError as exc:
            if is_storage_failure(exc):
                self.storage_failed(exc)
            raise
        if self.storage_failure is not None:
            self.storage_recovered()
        with self.lock:
            self._advance_hw_locked()
        self.wake()
        return out

    def ack_outcome(self, end: int, generation: int, min_isr: int) -> IngestError | None | bool:
        """For a waiting acks=-1 produce: True once acknowledged, an error to answer, or None (wait)."""
        with self.lock:
            if self.role is not Role.LEADER or self.generation != generation:
                # appended, maybe already copied: not NOT_LEADER, which promises "nothing appended"
                return RequestTimedOutError(
                    f"broker {self.broker_id} lost the leadership of {self.topic}-{self.partition} before the "
                    "in-sync replicas had the set; not acknowledged (it may be stored on the new leader)")
            if self.hw < end:
                return None
            if len(self.isr) < min_isr:
                return NotEnoughReplicasAfterAppendError(
                    f"{self.topic}-{self.partition}: the set was appended, but the in-sync set {list(self.isr)} "
                    f"fell below min.insync.replicas={min_isr}; not acknowledged")
            return True

    def read_limit(self) -> int:
        """The high watermark, for a consumer's read on the leader (raises if not the leader)."""
        self.check_leader()
        return self.hw

    # --- followers' fetches (leader side) ----------------------------------------------------------

    def on_follower_fetch(self, replica_id: int, epoch: int, offset: int) -> tuple[int, int, int, bool]:
        """Record a follower's fetch at ``offset``; returns ``(hw, log_start, log_end, wants_isr_change)``.
        ``replica_id`` -1 is a replica repairing a damaged range: read only, no progress recorded.

        Raises:
            NotLeaderForPartitionError: not the leader, the follower follows a newer epoch, or it
                is not a replica of this partition.
            StaleLeaderEpochError: the follower has not seen this leader's epoch yet.
        """
        with self.lock:
            self.check_leader()
            if epoch > self.epoch:
                raise NotLeaderForPartitionError(
                    f"broker {self.broker_id} leads {self.topic}-{self.partition} in epoch {self.epoch}, "
                    f"the follower is in epoch {epoch}")
            if epoch < self.epoch:
                raise StaleLeaderEpochError(
                    f"{self.topic}-{self.partition}: follower {replica_id} fetches in epoch {epoch}, "
                    f"the leader is in epoch {self.epoch}")
            if replica_id < 0:   # a repair read: no progress to record
                return self.hw, self.log.start_offset, self.log.log_end, False
            f = self.followers.get(replica_id)
            if f is None:
                raise NotLeaderForPartitionError(
                    f"broker {replica_id} is not a replica of {self.topic}-{self.partition} "
                    f"(replicas {list(self.replicas)})")
            now = self._now_ms()
            leo = self.log.log_end
            if offset >= leo:
                f.caught_up_ms = now
            elif offset >= f.last_fetch_leo >= 0:
                f.caught_up_ms = max(f.caught_up_ms, f.last_fetch_ms)
            f.last_fetch_leo, f.last_fetch_ms = leo, now
            f.leo = offset
            advanced = self._advance_hw_locked()
            wants = (replica_id not in self.isr and offset >= self.hw and not self.isr_pending)
            out = (self.hw, self.log.start_offset, leo, wants)
        if advanced:
            self._purgatory.check(("produce",) + self.key)
        return out

    def _advance_hw_locked(self) -> bool:
        if self.role is not Role.LEADER:
            return False
        leos = [self.log.log_end]
        for r in self.isr:
            if r != self.broker_id:
                f = self.followers.get(r)
                leos.append(f.leo if f is not None else -1)
        new = min(leos)
        if new > self.hw:
            self.hw = new
            return True
        return False

    # --- in-sync set changes (leader side; written by the replica manager) --------------------------

    def isr_change(self, lag_ms: float, cannot_write: frozenset[int] = frozenset()
                   ) -> tuple[tuple[int, ...], int, int, int] | None:
        """The in-sync set this leader wants now, if it differs: ``(new_isr, epoch, zk_version,
        controller_epoch)``; marks a change pending (one at a time, until :meth:`isr_written`). None if
        nothing to change or a change is pending. A follower in ``cannot_write`` (its storage failed, or its
        broker is shutting down or gone) does not join, however caught up."""
        with self.lock:
            if self.isr_pending:
                return None
            change = self._wanted_isr_locked(lag_ms, cannot_write)
            self.isr_pending = change is not None
            return change

    def wanted_isr(self, lag_ms: float, cannot_write: frozenset[int] = frozenset()
                   ) -> tuple[tuple[int, ...], int, int, int] | None:
        """As :meth:`isr_change`, for the writer of a pending change that was refused and decides again on
        the state it read back (:meth:`update_state`): marks nothing."""
        with self.lock:
            return self._wanted_isr_locked(lag_ms, cannot_write)

    def _wanted_isr_locked(self, lag_ms: float, cannot_write: frozenset[int]
                           ) -> tuple[tuple[int, ...], int, int, int] | None:
        if self.role is not Role.LEADER:
            return None
        now = self._now_ms()
        # a leader that cannot write drops nobody: its followers' lag is its own doing (they cannot
        # read an offline log); a caught-up follower still joins, and may then take over
        keep = list(self.isr) if self.storage_failure is not None else [
            r for r in self.isr if r == self.broker_id
            or now - self.followers.get(r, FollowerProgress()).caught_up_ms <= lag_ms]
        join = [r for r, f in self.followers.items()
                if r not in self.isr and r not in cannot_write and f.leo >= self.hw
                and now - f.caught_up_ms <= lag_ms]
        new = tuple(sorted(set(keep) | set(join)))
        if new == tuple(sorted(self.isr)):
            return None
        return new, self.epoch, self.zk_version, self.controller_epoch

    def isr_written(self, new_isr: tuple[int, ...] | None, epoch: int, zk_version: int) -> None:
        """The outcome of a state write: applied (``new_isr`` with the node's new version) or not (None)."""
        with self.lock:
            self.isr_pending = False
            if new_isr is not None and self.role is Role.LEADER and self.epoch == epoch \
                    and zk_version > self.zk_version:
                dropped = set(self.isr) - set(new_isr)
                added = set(new_isr) - set(self.isr)
                self.isr = new_isr
                self.zk_version = zk_version
                self._advance_hw_locked()
                log.info("%s: in-sync set changed (left: %s, joined: %s)", self, sorted(dropped) or "-",
                         sorted(added) or "-")
        self.wake()

    # --- storage failures ------------------------------------------------------------------------

    def storage_failed(self, exc: IngestError) -> None:
        """An append (or a follower's copy) failed for the storage's sake: mark the replica."""
        name = code_for(exc).name
        with self.lock:
            changed = self.storage_failure != name
            self.storage_failure = name
        if changed:
            _storage_log.warning(f"{self.topic}-{self.partition}", "storage failed",
                                 "%s: this replica cannot write (%s); it gives up leadership and the in-sync set "
                                 "to replicas that can, until a write succeeds here again", self, name)
            if self.on_storage is not None:
                self.on_storage(self)

    def storage_recovered(self) -> None:
        """A write succeeded again: the replica may rejoin the in-sync set (and lead) once caught up."""
        with self.lock:
            if self.storage_failure is None or self.log.offline:
                return
            self.storage_failure = None
        _storage_log.warning(f"{self.topic}-{self.partition}", "storage recovered",
                             "%s: this replica writes again; it rejoins the in-sync set once it has caught up", self)
        if self.on_storage is not None:
            self.on_storage(self)

    # --- follower side -----------------------------------------------------------------------------

    def follower_hw(self, leader_hw: int) -> None:
        with self.lock:
            new = min(leader_hw, self.log.log_end)
            if new > self.hw:
                self.hw = new

    def truncated(self, offset: int) -> None:
        with self.lock:
            if self.hw > offset:
                self.hw = offset
        if self.epochs is not None:
            self.epochs.truncate_from_end(offset)
