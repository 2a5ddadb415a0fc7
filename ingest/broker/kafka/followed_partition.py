"""One partition of a Kafka topic as its follower's fetcher thread keeps it: truncate by leader epochs, then copy.

A :class:`~ingest.broker.kafka.replica_fetcher.ReplicaFetcherThread` sends one request for many of these
(Kafka's ``PartitionFetchState``); each holds what is its own, and is answered by its own part of the
answer, so that one partition's trouble never holds up the others:

1. **Truncation** (KIP-101, KIP-279), when it starts following a leader: it asks the leader
   (OffsetForLeaderEpoch v3, ``replica_id`` = its broker id, fenced by ``current_leader_epoch``) where the
   newest epoch of its own history ends in the leader's log. Answered ``(E, end)``: when ``E`` is that
   epoch, it truncates to ``end``; when ``E`` is older (the leader never had the follower's newest epoch),
   to the smaller of ``end`` and where ``E`` ends in its own history. A cut that falls inside one of its
   batches removes that batch (Kafka's ``truncateTo``), which is copied again. A follower without
   history (a log written before leader epochs), or a leader that answers UNDEFINED, truncates to its
   high watermark, as Kafka 0.10 did.
2. **Copying**: its part of the thread's Fetch (``current_leader_epoch``, from its log end); the leader's
   whole batches are appended with their offsets (KafkaLog's replica append checks every CRC again; a
   first batch after the fetch offset is a gap the mirror copied into the leader's log from a source that
   lost those offsets, kept as a gap here too), a batch of a newer leader epoch is added to the history,
   and the leader's high watermark becomes its own (capped at its log end). Each fetch tells the leader
   the follower's log end: that is how the leader moves its high watermark and in-sync set.
3. **Errors** delay this partition only (:meth:`~ingest.broker.fetch_state.PartitionFetchState.back_off`:
   0.1 s doubling to 1 s; the thread leaves it out of its requests meanwhile, as Kafka's ``delayPartitions``): OFFSET_OUT_OF_RANGE
   below the leader's log start (retention) restarts the log empty there; above the leader's end,
   truncation is done again. A leader that is no longer leader, or in another epoch, is left alone with a
   back-off: the replica manager moves the partition when its state changes. A batch that fails its CRC
   here is a stall (reported on the :class:`~ingest.broker.replica_stalls.StallBoard`, logged once,
   retried after :data:`~ingest.broker.fetch_state.STALL_BACKOFF_S` doubling to
   :data:`~ingest.broker.fetch_state.STALL_MAX_BACKOFF_S`), never a tight loop.

Concurrency: touched only by its thread, under the thread's partition lock.
"""
from __future__ import annotations

import logging
from typing import Callable

from ingest.broker.fetch_state import PartitionFetchState, failures
from ingest.broker.partition import is_storage_failure
from ingest.broker.replica_stalls import Stall
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import CorruptRecordError, IngestError
from ingest.records.batch import iter_batches
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.fetch import FetchPartition
from ingest.wire.kafka.offset_for_leader_epoch import OffsetForLeaderPartition

log = logging.getLogger(__name__)

UNDEFINED = -1


class FollowedPartition(PartitionFetchState):
    """Follows ``part`` (a Kafka topic's :class:`~ingest.broker.partition.ReplicatedPartition`) from
    broker ``leader_id`` in leader epoch ``epoch``."""

    def __init__(self, part, leader_id: int, epoch: int, *, max_bytes: int,
                 on_stall: Callable[[tuple[str, int], Stall | None], None] | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(part, leader_id, epoch, max_bytes=max_bytes, on_stall=on_stall, clock=clock)
        self.truncated = False
        self.in_sync = False
        """Its last fetch reached the leader's high watermark (Kafka's ``isReplicaInSync``: the follower's
        replication throttle never holds it back then)."""

    # --- truncation ------------------------------------------------------------------------------

    def epoch_query(self) -> OffsetForLeaderPartition | None:
        """This partition's part of an OffsetForLeaderEpoch request; None when it has no history to ask
        about (:meth:`truncate_without_history` then)."""
        latest = self.part.epochs.latest_epoch() if self.part.epochs is not None else UNDEFINED
        if latest == UNDEFINED:
            return None
        return OffsetForLeaderPartition(self.part.partition, current_leader_epoch=self.epoch, leader_epoch=latest)

    def truncate_without_history(self) -> None:
        self._guarded(self.part.log.log_end, lambda: self._cut(
            self.part.hw, "no leader-epoch history here: truncating to the high watermark"))

    def on_epoch_answer(self, asked: int, r) -> None:
        """The leader's answer ``r`` to :meth:`epoch_query` (asked for epoch ``asked``)."""
        self._guarded(self.part.log.log_end, lambda: self._epoch_answer(asked, r))

    def _epoch_answer(self, asked: int, r) -> None:
        part, lg = self.part, self.part.log
        if r.error_code != 0:
            log.debug("%s: leader %d answered OffsetForLeaderEpoch with %s", part, self.leader_id,
                      KafkaErrorCode(r.error_code).name)
            self.back_off()
            return
        if r.leader_epoch == UNDEFINED or r.end_offset == UNDEFINED:
            self._cut(part.hw, f"the leader knows no epoch at or below {asked}: truncating to the high watermark")
            return
        target = r.end_offset
        if r.leader_epoch < asked:   # KIP-279: where that older epoch ends here
            _e, own_end = part.epochs.end_offset_for(r.leader_epoch, lg.log_end)
            if own_end != UNDEFINED:
                target = min(target, own_end)
        self._cut(target, f"epoch {asked} ends at {r.end_offset} on leader {self.leader_id} "
                          f"(answered for epoch {r.leader_epoch})")

    def _cut(self, offset: int, why: str) -> None:
        """Truncate the local log to ``offset`` (or the start of the batch holding it); then copy."""
        part, lg = self.part, self.part.log
        if offset < lg.log_end:
            offset = max(offset, lg.start_offset)
            if offset > lg.start_offset:
                sl = lg.read(offset, 1)
                with sl:
                    if sl.length:
                        offset = sl.first_offset
            log.info("%s: %s; cutting the log end %d back to %d", part, why, lg.log_end, offset)
            lg.truncate_to(offset)
            part.truncated(offset)
        self.truncated = True

    # --- copying -----------------------------------------------------------------------------

    def fetch_query(self) -> FetchPartition:
        """This partition's part of the thread's Fetch request: from its log end."""
        lg = self.part.log
        return FetchPartition(self.part.partition, current_leader_epoch=self.epoch, fetch_offset=lg.log_end,
                              log_start_offset=lg.start_offset, partition_max_bytes=self.max_bytes)

    def on_fetch_answer(self, pos: int, answer) -> None:
        """The leader's ``answer`` (``PartitionData``) to a fetch from ``pos``."""
        self.fetches += 1
        self._guarded(pos, lambda: self._fetch_answer(pos, answer))

    def _fetch_answer(self, pos: int, answer) -> None:
        part, lg = self.part, self.part.log
        code = answer.error_code
        if code == KafkaErrorCode.OFFSET_OUT_OF_RANGE:
            if 0 <= pos < answer.log_start_offset:
                log.warning("%s: offset %d is below the leader's log start %d; restarting the local log there",
                            part, pos, answer.log_start_offset)
                lg.reset_to(answer.log_start_offset)
                part.truncated(answer.log_start_offset)
                if part.epochs is not None:
                    part.epochs.clear()
            else:   # past the leader's end: agree again
                self.truncated = False
            self.back_off()
            return
        if code == KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED:
            # the leader's authorizer does not take this broker for replica part.broker_id: an ACL
            # (ClusterAction) or the registered principal is wrong; replication stalls until fixed
            failures.log(logging.WARNING, f"{part.topic}-{part.partition}", "not authorized",
                         "%s: leader %d refused this broker's fetch (CLUSTER_AUTHORIZATION_FAILED): it "
                         "needs ClusterAction on the cluster for the principal it registered", part, self.leader_id)
        if code != 0:
            log.debug("%s: leader %d answered %s", part, self.leader_id, KafkaErrorCode(code).name)
            self.back_off()
            return
        self.answered()
        if not self._append(pos, answer.records or b""):
            self.truncated = False
            return
        part.follower_hw(answer.high_watermark)
        self.in_sync = lg.log_end >= answer.high_watermark

    def _append(self, pos: int, data) -> bool:
        """Append the whole batches of ``data`` (a cut-off last one is fetched again), noting new epochs.
        False when the leader's first batch does not start at ``pos`` (the logs disagree: truncate again)."""
        part, lg = self.part, self.part.log
        if not data:
            return True
        batches = list(iter_batches(data))
        if not batches:
            if len(data) >= self.max_bytes:   # one batch larger than a fetch: ask for more next time
                self.max_bytes *= 2
                log.info("%s: raising the replica fetch size to %d bytes", part, self.max_bytes)
                return True
            raise CorruptRecordError(f"the leader's answer at {pos} holds no whole record batch ({len(data)} bytes)")
        first = batches[0][1].base_offset
        if first < pos:
            log.warning("%s: the leader's batch at offset %d does not start at this replica's log end %d; "
                        "agreeing on leader epochs again", part, first, pos)
            return False
        self._resumed(pos)
        before = lg.log_end
        last = batches[-1]
        whole = memoryview(data)[:last[0] + last[1].size]
        if first > pos:   # the leader has no offsets pos..first (a mirrored source's gap): nor has this log
            lg.append_copied(whole, pos, None)
        else:
            lg.append(whole, assign_offsets=False)
        if part.epochs is not None:   # after the append, as Kafka: the history never runs ahead of the log
            latest = part.epochs.latest_epoch()
            for _p, h in batches:
                if h.partition_leader_epoch > latest:
                    latest = h.partition_leader_epoch
                    part.epochs.assign(latest, h.base_offset)
        if part.storage_failure is not None and lg.log_end > before:
            part.storage_recovered()
        return True

    # --- failures --------------------------------------------------------------------------------

    def _guarded(self, pos: int, step: Callable[[], None]) -> None:
        """Run ``step``; a failure of this partition's log or of the leader's bytes delays this partition only."""
        part = self.part
        try:
            step()
        except IngestError as exc:
            if is_storage_failure(exc):
                part.storage_failed(exc)
            if isinstance(exc, CorruptRecordError):
                self._stalled(pos, f"the leader's batches there fail their check ({exc})")
                return
            self._failed(pos, type(exc).__name__, exc)
