"""A follower's fetch loop for one partition of a Kafka topic: truncate by leader epochs, then copy.

The 0.7 fetcher's loop (:class:`~ingest.broker.replica_fetcher.ReplicaFetcher`: back-off, rate-limited
logs, stall reports, ``stop``) speaking Kafka's protocol to the leader's Kafka listener
(``inter.broker.listener.name``), as Kafka's ``ReplicaFetcherThread`` does:

1. **Truncation** (KIP-101, KIP-279), when it starts following a leader: it asks the leader
   (OffsetForLeaderEpoch v3, ``replica_id`` = its broker id, fenced by ``current_leader_epoch``) where the
   newest epoch of its own history ends in the leader's log. Answered ``(E, end)``: when ``E`` is that
   epoch, it truncates to ``end``; when ``E`` is older (the leader never had the follower's newest epoch),
   to the smaller of ``end`` and where ``E`` ends in its own history. A cut that falls inside one of its
   batches removes that batch (Kafka's ``truncateTo``), which is copied again. A follower without
   history (a log written before leader epochs), or a leader that answers UNDEFINED, truncates to its
   high watermark, as Kafka 0.10 did.
2. **Copying**: Fetch v11 (``replica_id`` = its broker id, ``current_leader_epoch``, ``min_bytes`` 1 and
   ``replica.fetch.wait.max.ms``: the leader holds the fetch in its purgatory until something is
   appended) from its log end; the leader's whole batches are appended with their offsets (KafkaLog's
   replica append checks every CRC again; a first batch after the fetch offset is a gap the mirror copied
   into the leader's log from a source that lost those offsets, kept as a gap here too), a batch of a
   newer leader epoch is added to the history, and
   the leader's high watermark becomes its own (capped at its log end). Each fetch tells the leader the
   follower's log end: that is how the leader moves its high watermark and in-sync set.
3. **Errors**: OFFSET_OUT_OF_RANGE below the leader's log start (retention) restarts the log empty there;
   above the leader's end, truncation is done again. A leader that is no longer leader, or in another
   epoch, is left alone with a back-off: the replica manager replaces this fetcher when the state
   changes. A batch that fails its CRC here is a stall (reported and logged once, retried with a growing
   back-off), never a tight loop.

Concurrency: one thread per followed partition, as the 0.7 fetcher.
"""
from __future__ import annotations

import itertools
import logging

from ingest.broker.partition import is_storage_failure
from ingest.broker.replica_fetcher import BACKOFF_S, MAX_BACKOFF_S, ReplicaFetcher, _failures
from ingest.errors import BrokerUnavailableError, CorruptRecordError, IngestError, MalformedResponseError
from ingest.records.batch import iter_batches
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.connection import KafkaConnection, SaslLogin
from ingest.wire.kafka.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from ingest.wire.kafka.message import decode_response, encode_request
from ingest.wire.kafka.offset_for_leader_epoch import (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
                                                       OffsetForLeaderPartition, OffsetForLeaderTopic)

log = logging.getLogger(__name__)

FETCH_VERSION = 11
EPOCH_VERSION = 3
UNDEFINED = -1


class KafkaReplicaFetcher(ReplicaFetcher):
    """Follows ``part`` (a Kafka topic's :class:`~ingest.broker.partition.ReplicatedPartition`) from the
    leader's Kafka listener at ``leader = (id, host, port)``."""

    def __init__(self, *args, sasl: SaslLogin | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._correlation = itertools.count(1)
        self.client_id = f"replica-{self.part.broker_id}"
        if sasl is not None:   # a SASL inter-broker listener: every new socket logs in first
            self._conn = KafkaConnection(self.host, self.port, client_id=self.client_id, timeout_s=self._conn.timeout_s,
                                         node_id=self.leader_id, ssl_context=self._conn.ssl_context, sasl=sasl)

    def _exchange(self, request, version: int, response_cls):
        frame = encode_request(request, version, next(self._correlation), self.client_id)
        data = self._conn.request_buffer(frame)
        return decode_response(response_cls, data, version)[1]

    def _wait(self, backoff: float) -> float:
        self._halt.wait(backoff)
        return min(MAX_BACKOFF_S, backoff * 2)

    def run(self) -> None:
        part, lg = self.part, self.part.log
        log.info("%s: following broker %d (epoch %d) at %s:%d, log end %d, high watermark %d", part,
                 self.leader_id, self.epoch, self.host, self.port, lg.log_end, part.hw)
        backoff = BACKOFF_S
        truncated = False
        while not self._halt.is_set():
            pos = lg.log_end
            try:
                if not truncated:
                    truncated = self._truncate_by_epochs()
                    if not truncated:
                        backoff = self._wait(backoff)
                    continue
                answer = self._fetch(pos)
                self.fetches += 1
                if self._halt.is_set():
                    return
                code = answer.error_code
                if code == KafkaErrorCode.OFFSET_OUT_OF_RANGE:
                    if 0 <= pos < answer.log_start_offset:
                        log.warning("%s: offset %d is below the leader's log start %d; restarting the local "
                                    "log there", part, pos, answer.log_start_offset)
                        lg.reset_to(answer.log_start_offset)
                        part.truncated(answer.log_start_offset)
                        if part.epochs is not None:
                            part.epochs.clear()
                    else:   # past the leader's end: agree again
                        truncated = False
                    backoff = self._wait(backoff)
                    continue
                if code == KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED:
                    # the leader's authorizer does not take this broker for replica part.broker_id: an ACL
                    # (ClusterAction) or the registered principal is wrong; replication stalls until fixed
                    _failures.log(logging.WARNING, f"{part.topic}-{part.partition}", "not authorized",
                                  "%s: leader %d refused this broker's fetch (CLUSTER_AUTHORIZATION_FAILED): it "
                                  "needs ClusterAction on the cluster for the principal it registered",
                                  part, self.leader_id)
                if code != 0:
                    log.debug("%s: leader %d answered %s", part, self.leader_id, KafkaErrorCode(code).name)
                    backoff = self._wait(backoff)
                    continue
                backoff = BACKOFF_S
                if not self._append(pos, answer.records or b""):
                    truncated = False
                    continue
                part.follower_hw(answer.high_watermark)
            except (BrokerUnavailableError, MalformedResponseError) as exc:
                if self._halt.is_set():
                    return
                log.debug("%s: request to broker %d failed: %s", part, self.leader_id, exc)
                backoff = self._wait(backoff)
            except IngestError as exc:
                if self._halt.is_set():
                    return
                if is_storage_failure(exc):
                    part.storage_failed(exc)
                if isinstance(exc, CorruptRecordError):
                    self._stalled(pos, -1, -1, -1, f"the leader's batches there fail their check ({exc})")
                    continue
                _failures.log(logging.ERROR, f"{part.topic}-{part.partition}", type(exc).__name__,
                              "%s: replicating from broker %d failed at offset %d: %s", part, self.leader_id, pos, exc)
                self._halt.wait(MAX_BACKOFF_S)

    # --- copying -----------------------------------------------------------------------------

    def _fetch(self, pos: int):
        part = self.part
        req = FetchRequest(replica_id=part.broker_id, max_wait_ms=self.wait_ms, min_bytes=1, max_bytes=self.max_bytes,
                           topics=(FetchTopic(part.topic, (FetchPartition(
                               part.partition, current_leader_epoch=self.epoch, fetch_offset=pos,
                               log_start_offset=part.log.start_offset, partition_max_bytes=self.max_bytes),)),))
        resp = self._exchange(req, FETCH_VERSION, FetchResponse)
        for t in resp.responses:
            for p in t.partitions:
                if t.topic == part.topic and p.partition_index == part.partition:
                    return p
        raise MalformedResponseError(f"the leader's Fetch answer has no {part.topic}-{part.partition}")

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

    # --- truncation ------------------------------------------------------------------------------

    def _truncate_by_epochs(self) -> bool:
        """Agree with the leader before copying (module docstring); False when the leader did not answer
        (retried after a back-off)."""
        part, lg = self.part, self.part.log
        mine = part.epochs.latest_epoch() if part.epochs is not None else UNDEFINED
        if mine == UNDEFINED:
            return self._cut(part.hw, "no leader-epoch history here: truncating to the high watermark")
        req = OffsetForLeaderEpochRequest(replica_id=part.broker_id, topics=(OffsetForLeaderTopic(part.topic, (
            OffsetForLeaderPartition(part.partition, current_leader_epoch=self.epoch, leader_epoch=mine),)),))
        resp = self._exchange(req, EPOCH_VERSION, OffsetForLeaderEpochResponse)
        found = [p for t in resp.topics if t.topic == part.topic for p in t.partitions if p.partition == part.partition]
        if not found:
            raise MalformedResponseError(f"the leader's OffsetForLeaderEpoch answer has no {part.topic}-{part.partition}")
        r = found[0]
        if r.error_code != 0:
            log.debug("%s: leader %d answered OffsetForLeaderEpoch with %s", part, self.leader_id,
                      KafkaErrorCode(r.error_code).name)
            return False
        if r.leader_epoch == UNDEFINED or r.end_offset == UNDEFINED:
            return self._cut(part.hw, f"the leader knows no epoch at or below {mine}: truncating to the high "
                                      "watermark")
        target = r.end_offset
        if r.leader_epoch < mine:   # KIP-279: where that older epoch ends here
            _e, own_end = part.epochs.end_offset_for(r.leader_epoch, lg.log_end)
            if own_end != UNDEFINED:
                target = min(target, own_end)
        return self._cut(target, f"epoch {mine} ends at {r.end_offset} on leader {self.leader_id} "
                                 f"(answered for epoch {r.leader_epoch})")

    def _cut(self, offset: int, why: str) -> bool:
        """Truncate the local log to ``offset`` (or the start of the batch holding it)."""
        part, lg = self.part, self.part.log
        if offset >= lg.log_end:
            return True
        offset = max(offset, lg.start_offset)
        if offset > lg.start_offset:
            sl = lg.read(offset, 1)
            with sl:
                if sl.length:
                    offset = sl.first_offset
        log.info("%s: %s; cutting the log end %d back to %d", part, why, lg.log_end, offset)
        lg.truncate_to(offset)
        part.truncated(offset)
        return True
