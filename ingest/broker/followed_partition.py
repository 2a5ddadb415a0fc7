"""One partition of a 0.7-format replicated topic as its follower's fetcher thread keeps it: agree, copy, repair.

A :class:`~ingest.broker.replica_fetcher.ReplicaFetcherThread` sends one REPLICA_FETCHES request for many of
these; each holds its own position and back-offs and takes its own part of the answer, so that one
partition's trouble never holds up the others.

Agreement (docs/replication.md, "Failover"): when it starts following a leader, the follower
fetches from its own high watermark (everything below it is committed, hence the same bytes
on the leader) and compares what the leader returns with its own bytes at the same offsets.
At the first difference it truncates its log to the start of the message that differs, and
if the leader's log ends before its own, it truncates to the leader's end. Offsets are byte
positions and a message's bytes are the same on every replica, so "the same bytes" is
exactly "the same messages", and truncation always falls on a message boundary. From its
log end on, every fetched byte is appended as it is (``Log.append`` validates every CRC
again), so a message has the same offset on every replica. Each fetch tells the leader the
follower's position: that is how the leader moves its high watermark and in-sync set.

Repair: a damaged range of the local log (bytes that failed their CRC at recovery or in the
background verifier, docs/log-format.md) is overwritten with the leader's bytes for the same
offsets once the follower has caught up, and checked again (every 30 s while any is left).

A fetch that lands below the leader's log start (retention, or a new empty replica) resets
the follower's log to start at the leader's log start, after copying the leader's records of
the segments its retention deleted below it (:func:`ingest.broker.deletion_log.adopt_deletions`). A fetch
the leader refuses because the epochs differ is delayed: the replica manager moves the partition when
its state changes.

Damaged leader data: when the leader answers CORRUPT_RANGE (its bytes at the fetch offset
are damaged; it repairs them from another in-sync replica when one has good bytes,
:mod:`ingest.broker.leader_repair`), or serves bytes that are not valid messages (a leader
that does not check them), the follower cannot copy past them. It never asks again at once:
the partition stalls (:class:`~ingest.broker.fetch_state.PartitionFetchState`: left out of the thread's
requests, reported, logged once) and goes on by itself once a fetch there returns valid bytes. Any other
error delays this partition alone; no answer makes it ask again at once unless it made progress or asked
for a larger fetch.

Concurrency: touched only by its thread, under the thread's partition lock.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from ingest.broker.deletion_log import adopt_deletions
from ingest.broker.fetch_state import PartitionFetchState
from ingest.broker.partition import is_storage_failure
from ingest.broker.repair_read import read_range
from ingest.broker.replica_stalls import Stall
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import IngestError, MalformedResponseError
from ingest.records.message_set import message_bounds, scan, valid_prefix
from ingest.wire import protocol as p
from ingest.wire.errors import ErrorCode, code_for
from ingest.wire.protocol import DeletedSegmentsRequest, DeletedSegmentsResponse

log = logging.getLogger(__name__)

REPAIR_INTERVAL_S = 30.0
"""How often a follower looks for damaged ranges (found at recovery or by the verifier) to repair."""


class FollowedPartition07(PartitionFetchState):
    """Follows ``part`` (a 0.7-format :class:`~ingest.broker.partition.ReplicatedPartition`) from broker
    ``leader_id`` in leader epoch ``epoch``, from its high watermark on."""

    def __init__(self, part, leader_id: int, epoch: int, *, max_bytes: int,
                 on_stall: Callable[[tuple[str, int], Stall | None], None] | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(part, leader_id, epoch, max_bytes=max_bytes, on_stall=on_stall, clock=clock)
        self.pos = min(part.hw, part.log.log_end)
        """The next fetch offset (below the log end while agreeing with the leader)."""
        self._next_repair = 0.0

    def position(self) -> str:
        return f"from offset {self.pos} (log end {self.part.log.log_end})"

    def query(self) -> p.ReplicaPartitionFetch:
        """This partition's part of the thread's REPLICA_FETCHES request."""
        return p.ReplicaPartitionFetch(self.part.topic, self.part.partition, self.epoch, self.pos, self.max_bytes)

    # --- the answer ------------------------------------------------------------------------------

    def on_answer(self, resp, conn) -> None:
        """The leader's answer (a :class:`~ingest.wire.protocol.ReplicaPartitionData`, or a
        :class:`~ingest.wire.protocol.ReplicaFetchResponse`: the same fields) to a fetch from :attr:`pos`;
        ``conn`` reaches the leader for the deletion records and repair reads this may need."""
        self.fetches += 1
        part, lg = self.part, self.part.log
        pos = self.pos
        try:
            self._answer(pos, resp, conn)
        except IngestError as exc:
            if is_storage_failure(exc):
                part.storage_failed(exc)
            self._failed(pos, code_for(exc).name, exc)
            self.pos = min(self.pos, lg.log_end)

    def _answer(self, pos: int, resp, conn) -> None:
        part, lg = self.part, self.part.log
        if resp.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            moved = self._out_of_range(pos, resp, conn)
            if moved == pos:   # a leader that refuses the very offset it pointed us to: never spin
                self.back_off()
            self.pos = moved
            return
        if resp.error == ErrorCode.CORRUPT_RANGE:
            next_offset, start, messages = _damaged_range(resp)
            self._stalled(pos, "the leader's bytes there are damaged", start, next_offset, messages, ranged=True)
            return
        if resp.error != ErrorCode.NONE:
            log.debug("%s: leader %d answered %s", part, self.leader_id, ErrorCode(resp.error).name)
            self.back_off()
            return
        self.answered()
        data = resp.message_set
        whole = valid_prefix(data)
        if data and whole == 0:
            if len(data) >= self.max_bytes:   # one message larger than a fetch: ask for more
                self.max_bytes *= 2
                log.info("%s: raising the replica fetch size to %d bytes", part, self.max_bytes)
                return
            # not a valid message, and not cut by the fetch size: bytes a leader served unchecked
            self._stalled(pos, f"the leader served bytes that are not a valid message ({scan(data).error})",
                          ranged=True)
            return
        if data:
            self._resumed(pos)
        data = data[:whole]
        before = lg.log_end
        if pos < lg.log_end:
            pos = self._agree(pos, data, resp.log_end)
        elif data:
            lg.append(data)
            pos = lg.log_end
        self.pos = pos
        if pos >= lg.log_end and time.monotonic() >= self._next_repair:
            self._next_repair = time.monotonic() + REPAIR_INTERVAL_S
            self._repair_damage(conn)
        part.follower_hw(resp.high_watermark)
        if part.storage_failure is not None and lg.log_end > before:
            part.storage_recovered()

    # --- agreement -------------------------------------------------------------------------------

    def _agree(self, pos: int, data: bytes, leader_end: int) -> int:
        """Compare ``data`` (the leader's bytes at ``pos``) with the local log; truncate where they
        differ; append what lies beyond the local end. Returns the next fetch offset."""
        lg = self.part.log
        own_end = lg.log_end
        if not data:
            if leader_end <= pos < own_end:      # the leader's log ends here; ours goes on
                self._truncate(pos)
            return lg.log_end if pos >= lg.log_end else pos
        n = min(len(data), own_end - pos)
        own = self._read_local(pos, n)
        k = _common_prefix(own, data[:n])
        if k < n:
            bounds, _ = message_bounds(data)
            cut = max(s for s, _e in bounds if s <= k)
            self._truncate(pos + cut)
            lg.append(data[cut:])
            return lg.log_end
        if n < len(data):                     # agreed up to our end: the rest is new
            lg.append(data[n:])
            return lg.log_end
        return pos + n

    def _repair_damage(self, conn) -> None:
        """Once the log agrees with the leader: overwrite each damaged range with the leader's bytes."""
        part, lg = self.part, self.part.log
        for start, end in lg.damaged_ranges():
            data, why = read_range(conn, part.topic, part.partition, self.epoch, start, end, self.max_bytes)
            if data is None:
                log.warning("%s: the leader cannot supply the damaged range %d..%d (%s); it stays damaged here "
                            "and is tried again in %.0f s", part, start, end, why, REPAIR_INTERVAL_S)
                continue
            try:
                lg.repair(start, data)
            except IngestError as exc:   # e.g. past a segment file's end (cut short): not in place
                log.warning("%s: the damaged range %d..%d cannot be overwritten (%s)", part, start, end, exc)

    def _read_local(self, pos: int, n: int) -> bytes:
        lg = self.part.log
        out = bytearray()
        while len(out) < n:
            chunk = _read_upto(lg, pos + len(out), n - len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def _truncate(self, offset: int) -> None:
        self.part.log.truncate_to(offset)
        self.part.truncated(offset)

    def _out_of_range(self, pos: int, resp, conn) -> int:
        lg = self.part.log
        if resp.log_start > pos:
            log.warning("%s: offset %d is below the leader's log start %d; restarting the local log there",
                        self.part, pos, resp.log_start)
            self._adopt_leader_deletions(resp.log_start, conn)
            lg.reset_to(resp.log_start)
            self.part.truncated(resp.log_start)
            return resp.log_start
        if pos > resp.log_end:
            try:
                self._truncate(resp.log_end)
                return resp.log_end
            except IngestError:
                pass
        # not a message boundary on the leader: the logs differ below our high watermark (only
        # after an unclean election); compare from the start of the local log
        log.warning("%s: offset %d is not a message boundary on leader %d; comparing the whole log",
                    self.part, pos, self.leader_id)
        start = max(lg.start_offset, resp.log_start)
        if start > lg.start_offset:
            self._adopt_leader_deletions(start, conn)
            lg.reset_to(start)
        self.part.truncated(start)
        return start

    def _adopt_leader_deletions(self, upto: int, conn) -> None:
        """Before the local log restarts at ``upto`` (the leader's log start): keep the leader's records of
        the segments its retention deleted from the local start up to there (DELETED_SEGMENTS)."""
        part, lg = self.part, self.part.log
        req = DeletedSegmentsRequest(part.topic, part.partition, lg.start_offset, upto)
        try:
            resp = conn.request(req.encode(), DeletedSegmentsResponse)
            failed = None if resp.error == ErrorCode.NONE else f"error code {resp.error}"
        except IngestError as exc:
            failed = str(exc)
        if failed:
            log.warning("%s: the leader's deletion records below %d could not be read (%s): a reader that asks "
                        "this replica will see that range as missing segments, not retention", part, upto, failed)
            return
        n = adopt_deletions(lg.directory, resp.records, leader=self.leader_id, log_name=lg.name)
        log.info("%s: kept %d of the leader's deletion record(s) below %d", part, n, upto)


def _damaged_range(resp) -> tuple[int, int, int]:
    """``(next_offset, start_offset, messages)`` a CORRUPT_RANGE answer names; -1 for what it does not."""
    try:
        return p.FetchResponse(resp.error, resp.message_set).damaged_range()
    except MalformedResponseError:   # a leader that sent no body
        return -1, -1, -1


def _read_upto(lg, offset: int, n: int) -> bytes:
    """Up to ``n`` of the log's written bytes at ``offset`` (unflushed ones included)."""
    sl = lg.read(offset, n, limit=lg.log_end)
    with sl:
        return sl.read_bytes()


def _common_prefix(a: bytes, b: bytes) -> int:
    if a == b:
        return len(a)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:                      # binary search on equal prefixes (memcmp speed)
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
