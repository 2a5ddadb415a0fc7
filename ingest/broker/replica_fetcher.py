"""A follower's fetch loop for one partition: first agree with the leader, then copy its log.

Agreement (docs/replication.md, "Failover"): when it starts following a leader, the follower
fetches from its own high watermark (everything below it is committed, hence the same bytes
on the leader) and compares what the leader returns with its own bytes at the same offsets.
At the first difference it truncates its log to the start of the message that differs, and
if the leader's log ends before its own, it truncates to the leader's end. Offsets are byte
positions and a message's bytes are the same on every replica, so "the same bytes" is
exactly "the same messages", and truncation always falls on a message boundary. From its
log end on, every fetched byte is appended as it is (``Log.append`` validates every CRC
again), so a message has the same offset on every replica.

Repair: a damaged range of the local log (bytes that failed their CRC at recovery or in the
background verifier, docs/log-format.md) is overwritten with the leader's bytes for the same
offsets once the follower has caught up, and checked again (every 30 s while any is left).

A fetch that lands below the leader's log start (retention, or a new empty replica) resets
the follower's log to start at the leader's log start, after copying the leader's records of
the segments its retention deleted below it (:func:`ingest.broker.deletion_log.adopt_deletions`). A fetch the leader refuses because
the epochs differ waits for the replica manager, which replaces this fetcher when the
partition's state changes.

Concurrency: one thread per followed partition; ``stop`` may be called from any thread and
returns once the thread has finished (the log is never touched after that).
"""
from __future__ import annotations

import logging
import threading
import time

from ingest.broker import protocol as p
from ingest.broker.deletion_log import adopt_deletions
from ingest.broker.message_set import message_bounds, valid_prefix
from ingest.broker.protocol_mirror import DeletedSegmentsRequest, DeletedSegmentsResponse
from ingest.client.connection import BrokerConnection
from ingest.errors import BrokerUnavailableError, ErrorCode, IngestError

log = logging.getLogger(__name__)

REPAIR_INTERVAL_S = 30.0
"""How often a follower looks for damaged ranges (found at recovery or by the verifier) to repair."""
BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0


class ReplicaFetcher(threading.Thread):
    """Follows ``part`` (a :class:`~ingest.broker.partition.ReplicatedPartition`) from ``leader``."""

    def __init__(self, part, leader: tuple[int, str, int], epoch: int, *, max_bytes: int, wait_ms: int,
                 socket_timeout_s: float) -> None:
        super().__init__(name=f"replica-fetcher-{part.topic}-{part.partition}", daemon=True)
        self.part = part
        self.leader_id, self.host, self.port = leader
        self.epoch = epoch
        self.max_bytes = max_bytes
        self.wait_ms = wait_ms
        self._halt = threading.Event()
        self._conn = BrokerConnection(self.host, self.port, broker_id=self.leader_id,
                                      timeout_s=socket_timeout_s + wait_ms / 1000.0)
        self.fetches = 0
        self._next_repair = 0.0

    def stop(self) -> None:
        self._halt.set()
        self._conn.close()
        if self is not threading.current_thread() and self.is_alive():
            self.join(30)

    def run(self) -> None:
        part, lg = self.part, self.part.log
        pos = min(part.hw, lg.log_end)
        log.info("%s: following broker %d (epoch %d) from offset %d (log end %d)", part, self.leader_id,
                 self.epoch, pos, lg.log_end)
        backoff = BACKOFF_S
        max_bytes = self.max_bytes
        while not self._halt.is_set():
            req = p.ReplicaFetchRequest(part.broker_id, self.epoch, self.wait_ms,
                                        p.FetchRequest(part.topic, part.partition, pos, max_bytes))
            try:
                resp = self._conn.request(req.encode(), p.ReplicaFetchResponse)
            except (BrokerUnavailableError, IngestError) as exc:
                if self._halt.is_set():
                    return
                log.debug("%s: fetch from broker %d failed: %s", part, self.leader_id, exc)
                self._halt.wait(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
                continue
            self.fetches += 1
            if self._halt.is_set():
                return
            try:
                if resp.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    pos = self._out_of_range(pos, resp)
                    continue
                if resp.error != ErrorCode.NONE:
                    log.debug("%s: leader %d answered %s", part, self.leader_id, ErrorCode(resp.error).name)
                    self._halt.wait(backoff)
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                    continue
                backoff = BACKOFF_S
                data = resp.message_set
                whole = valid_prefix(data)
                if data and whole == 0:
                    if len(data) >= max_bytes:   # one message larger than a fetch: ask for more
                        max_bytes *= 2
                        log.info("%s: raising the replica fetch size to %d bytes", part, max_bytes)
                    continue
                data = data[:whole]
                if pos < lg.log_end:
                    pos = self._agree(pos, data, resp.log_end)
                elif data:
                    lg.append(data)
                    pos = lg.log_end
                if pos >= lg.log_end and time.monotonic() >= self._next_repair:
                    self._next_repair = time.monotonic() + REPAIR_INTERVAL_S
                    self._repair_damage()
                part.follower_hw(resp.high_watermark)
            except IngestError as exc:
                log.error("%s: replicating from broker %d failed at offset %d: %s", part, self.leader_id, pos, exc)
                self._halt.wait(MAX_BACKOFF_S)
                pos = min(pos, lg.log_end)

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

    def _repair_damage(self) -> None:
        """Once the log agrees with the leader: overwrite each damaged range with the leader's bytes."""
        part, lg = self.part, self.part.log
        for start, end in lg.damaged_ranges():
            if self._halt.is_set():
                return
            need = end - start
            req = p.ReplicaFetchRequest(-1, self.epoch, 0, p.FetchRequest(part.topic, part.partition, start,
                                                                           max(need, self.max_bytes)))
            try:
                resp = self._conn.request(req.encode(), p.ReplicaFetchResponse)
            except IngestError as exc:
                log.warning("%s: cannot fetch %d..%d from the leader to repair it: %s", part, start, end, exc)
                return
            data = resp.message_set[:need]
            if resp.error != ErrorCode.NONE or len(data) < need or valid_prefix(data) != need:
                log.warning("%s: the leader cannot supply whole messages for the damaged range %d..%d (%s); "
                            "it stays damaged here", part, start, end, ErrorCode(resp.error).name)
                continue
            lg.repair(start, data)

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

    def _out_of_range(self, pos: int, resp: p.ReplicaFetchResponse) -> int:
        lg = self.part.log
        if resp.log_start > pos:
            log.warning("%s: offset %d is below the leader's log start %d; restarting the local log there",
                        self.part, pos, resp.log_start)
            self._adopt_leader_deletions(resp.log_start)
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
            self._adopt_leader_deletions(start)
            lg.reset_to(start)
        self.part.truncated(start)
        return start


    def _adopt_leader_deletions(self, upto: int) -> None:
        """Before the local log restarts at ``upto`` (the leader's log start): keep the leader's records of
        the segments its retention deleted from the local start up to there (DELETED_SEGMENTS)."""
        part, lg = self.part, self.part.log
        req = DeletedSegmentsRequest(part.topic, part.partition, lg.start_offset, upto)
        try:
            resp = self._conn.request(req.encode(), DeletedSegmentsResponse)
            failed = None if resp.error == ErrorCode.NONE else f"error code {resp.error}"
        except IngestError as exc:
            failed = str(exc)
        if failed:
            log.warning("%s: the leader's deletion records below %d could not be read (%s): a reader that asks "
                        "this replica will see that range as missing segments, not retention", part, upto, failed)
            return
        n = adopt_deletions(lg.directory, resp.records, leader=self.leader_id, log_name=lg.name)
        log.info("%s: kept %d of the leader's deletion record(s) below %d", part, n, upto)


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
