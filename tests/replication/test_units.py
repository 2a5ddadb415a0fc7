"""The replication core's parts on their own: assignment, log truncation and limits, the
high-watermark checkpoint, the purgatory, and a leader's HW / in-sync set rules over a real log."""
from __future__ import annotations

import threading
import time

import pytest

from ingest import znodes
from ingest.broker import hw_checkpoint
from ingest.broker.assignment import assign, check_manual, parse_manual
from ingest.broker.controller import Controller
from ingest.broker.delayed import DelayedOp, Purgatory
from ingest.broker.log import Log, LogSettings
from ingest.broker.partition import ReplicatedPartition, Role, is_storage_failure
from ingest.clock import SYSTEM_CLOCK
from ingest.errors import (CorruptRangeError, DiskFullError, LogCorruptionError, LogOfflineError, LogWriteError,
                           NotEnoughReplicasAfterAppendError, NotEnoughReplicasError, NotLeaderForPartitionError,
                           OffsetOutOfRangeError, ReplicationConfigError, RequestTimedOutError,
                           StaleLeaderEpochError, StorageError)
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set


# --- assignment -------------------------------------------------------------------------------

def test_assignment_follows_i_plus_j_mod_n_over_sorted_brokers():
    assert assign([12, 10, 11], 4, 3) == {0: [10, 11, 12], 1: [11, 12, 10], 2: [12, 10, 11], 3: [10, 11, 12]}
    assert assign([5, 7], 3, 1) == {0: [5], 1: [7], 2: [5]}


@pytest.mark.parametrize("rf,needle", [(0, "replication factor 0 is not allowed"),
                                       (4, "replication factor 4 is larger than the 3 live broker(s)")])
def test_a_replication_factor_outside_1_to_the_live_brokers_is_refused(rf, needle):
    with pytest.raises(ReplicationConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        assign([0, 1, 2], 2, rf)


def test_manual_assignment_names_unknown_brokers_and_bad_shapes():
    assert check_manual(parse_manual("1:2,2:1"), [1, 2]) == {0: [1, 2], 1: [2, 1]}
    with pytest.raises(ReplicationConfigError, match=r"unknown broker id\(s\) \[9\]"):
        check_manual(parse_manual("1:9"), [1, 2])
    with pytest.raises(ReplicationConfigError, match="lists a broker twice"):
        check_manual(parse_manual("1:1"), [1, 2])
    with pytest.raises(ReplicationConfigError, match="same number"):
        check_manual(parse_manual("1:2,1"), [1, 2])
    with pytest.raises(ReplicationConfigError, match="is not broker ids joined by ':'"):
        parse_manual("1:x")


def test_partition_state_round_trips_kafka_08_json():
    s = znodes.PartitionState(2, 7, (2, 0), 3)
    assert b'"leader":2' in s.encode() and b'"isr":[2,0]' in s.encode()
    assert znodes.PartitionState.parse(s.encode(), 5, 99) == s
    assert znodes.parse_assignment(znodes.assignment_value({0: [1, 2], 1: [2, 1]})) == {0: (1, 2), 1: (2, 1)}
    assert znodes.parse_assignment(b"") is None                          # a Kafka 0.7 topic node
    with pytest.raises(ValueError):
        znodes.parse_assignment(b'{"version":1,"partitions":{"1":[1]}}')  # partitions must start at 0


# --- the log's replica operations ------------------------------------------------------------

def _log(tmp_path, name="t-0", **kw) -> Log:
    return Log(tmp_path / name, LogSettings(flush_interval_messages=10_000, **kw), SYSTEM_CLOCK)


def _payloads(lg: Log, limit: int | None = None) -> list[bytes]:
    end = lg.log_end if limit is None else limit
    return [m.payload for m in iter_messages(lg.read(0, 1 << 20, limit=end).read_bytes())]


def test_truncate_to_cuts_at_a_message_boundary_and_appends_continue(tmp_path):
    lg = _log(tmp_path, file_size=200)
    offs = [lg.append(encode_message_set([b"m%02d" % i])) for i in range(20)]
    assert len(lg.segments()) > 1
    assert lg.truncate_to(offs[7]) > 0
    assert lg.log_end == offs[7]
    assert _payloads(lg) == [b"m%02d" % i for i in range(7)]
    lg.append(encode_message_set([b"new"]))
    assert _payloads(lg)[-1] == b"new"
    with pytest.raises(OffsetOutOfRangeError):
        lg.truncate_to(offs[3] + 1)                          # not a message boundary
    lg.close()
    again = _log(tmp_path, file_size=200)                    # what is on disk agrees
    assert _payloads(again) == [b"m%02d" % i for i in range(7)] + [b"new"]


def test_read_limit_hides_bytes_above_it_as_not_yet_there(tmp_path):
    lg = _log(tmp_path)
    a = lg.append(encode_message_set([b"a"]))
    b = lg.append(encode_message_set([b"b"]))
    assert lg.end_offset == 0 < lg.log_end                 # unflushed: invisible to plain reads
    sl = lg.read(0, 1000, limit=b)
    assert [m.payload for m in iter_messages(sl.read_bytes())] == [b"a"]
    assert lg.read(b, 1000, limit=b).length == 0           # at the limit: empty, not an error
    assert lg.read(b, 1000, limit=a).length == 0           # above the limit, below the end: empty
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(lg.log_end + 1, 10, limit=lg.log_end)


def test_reset_to_starts_an_empty_log_at_the_leaders_start(tmp_path):
    lg = _log(tmp_path)
    lg.append(encode_message_set([b"old"]))
    lg.reset_to(5000)
    assert (lg.start_offset, lg.log_end) == (5000, 5000)
    assert lg.append(encode_message_set([b"x"])) == 5000


def test_hw_checkpoint_round_trips_and_a_damaged_file_means_zero(tmp_path):
    hw_checkpoint.write(tmp_path, {("a", 0): 10, ("b-c", 3): 99})
    assert hw_checkpoint.read(tmp_path) == {("a", 0): 10, ("b-c", 3): 99}
    (tmp_path / hw_checkpoint.FILE_NAME).write_text("0\n5\na 0 1\n")
    assert hw_checkpoint.read(tmp_path) == {}
    assert hw_checkpoint.read(tmp_path / "missing") == {}


# --- purgatory --------------------------------------------------------------------------------

def test_purgatory_completes_on_check_and_expires_at_the_deadline():
    pg = Purgatory()
    try:
        ready, out = threading.Event(), []
        pg.add("k", DelayedOp(time.monotonic() + 30, lambda: ready.is_set() and not out.append("done"),
                              lambda: out.append("expired")))
        assert pg.check("k") == 0 and out == []
        ready.set()
        assert pg.check("k") == 1 and out == ["done"]
        pg.add("k", DelayedOp(time.monotonic() + 0.05, lambda: False, lambda: out.append("expired")))
        deadline = time.monotonic() + 5
        while "expired" not in out and time.monotonic() < deadline:
            time.sleep(0.01)
        assert out == ["done", "expired"]
    finally:
        pg.close()
    late = []
    pg.add("k", DelayedOp(time.monotonic() + 60, lambda: False, lambda: late.append("expired")))
    assert late == ["expired"]                               # after close: answered at once


def test_an_op_watched_under_many_keys_is_tried_once_when_registered_and_completes_on_any_key():
    # a fetch of many partitions waits under each of them: trying it once per key as it is registered
    # would read every partition once per partition (quadratic in the partitions of one request)
    pg = Purgatory()
    try:
        tries, ready, out = [], threading.Event(), []
        keys = [("fetch", "t", p) for p in range(300)]
        pg.watch(keys, DelayedOp(time.monotonic() + 30, lambda: tries.append(1) or ready.is_set(),
                                 lambda: out.append("expired")))
        assert len(tries) == 1
        assert pg.check(keys[7]) == 0 and len(tries) == 2
        ready.set()
        assert pg.check(keys[123]) == 1 and out == []
        expiring = []
        pg.watch(keys[:3], DelayedOp(time.monotonic() + 0.05, lambda: False, lambda: expiring.append(1)))
        deadline = time.monotonic() + 5
        while not expiring and time.monotonic() < deadline:
            time.sleep(0.01)
        assert expiring == [1] and out == []
    finally:
        pg.close()


# --- a leader's rules -----------------------------------------------------------------------------

@pytest.fixture
def leader(tmp_path):
    pg = Purgatory()
    clock = {"ms": 0.0}
    part = ReplicatedPartition("t", 0, 1, _log(tmp_path), (1, 2, 3), 0, pg, lambda: clock["ms"])
    part.become_leader(znodes.PartitionState(1, 4, (1, 2, 3), 1, zk_version=0))
    yield part, clock
    pg.close()


def test_hw_is_the_smallest_log_end_of_the_isr_and_acks_all_waits_for_it(leader):
    part, _ = leader
    off, end, gen = part.append(encode_message_set([b"x"]), -1, 2)
    assert part.hw == 0 and part.ack_outcome(end, gen, 2) is None
    part.on_follower_fetch(2, 4, end)
    assert part.hw == 0                                    # follower 3 has not fetched yet
    part.on_follower_fetch(3, 4, end)
    assert part.hw == end and part.ack_outcome(end, gen, 2) is True
    part.on_follower_fetch(3, 4, 0)                        # a lower fetch never moves the HW back
    assert part.hw == end


def test_min_insync_refuses_before_the_append_and_after_a_shrink(leader):
    part, clock = leader
    part.isr_written((1,), 4, 1)
    end_before = part.log.log_end
    with pytest.raises(NotEnoughReplicasError, match="min.insync.replicas=2"):
        part.append(encode_message_set([b"x"]), -1, 2)
    assert part.log.log_end == end_before                  # nothing appended
    part.append(encode_message_set([b"ok"]), 1, 2)         # acks=1 is not refused
    part.isr_written((1, 2), 4, 2)
    off, end, gen = part.append(encode_message_set([b"y"]), -1, 2)
    part.isr_written((1,), 4, 3)                           # shrinks while the write waits
    assert isinstance(part.ack_outcome(end, gen, 2), NotEnoughReplicasAfterAppendError)


def test_followers_leave_the_isr_after_the_lag_and_rejoin_when_caught_up(leader):
    part, clock = leader
    part.append(encode_message_set([b"x"]), 1, 1)
    end = part.log.log_end
    clock["ms"] = 500
    part.on_follower_fetch(2, 4, end)                      # 2 caught up at 500; 3 never fetched
    clock["ms"] = 1200                                     # 3: 1200 ms without catching up; 2: 700
    new_isr, epoch, version, _ = part.isr_change(lag_ms=1000)
    assert new_isr == (1, 2)
    part.isr_written(new_isr, epoch, version + 1)
    assert part.isr == (1, 2) and part.hw == end           # the HW moves once 3 no longer holds it
    assert part.isr_change(lag_ms=1000) is None            # one change at a time, then nothing to do
    _, _, _, wants = part.on_follower_fetch(3, 4, end)
    assert wants
    assert part.isr_change(lag_ms=1000)[0] == (1, 2, 3)


def test_fetches_are_fenced_by_the_leader_epoch_and_lost_leadership_answers_not_leader(leader):
    part, _ = leader
    with pytest.raises(StaleLeaderEpochError):
        part.on_follower_fetch(2, 3, 0)
    with pytest.raises(NotLeaderForPartitionError):
        part.on_follower_fetch(2, 5, 0)
    off, end, gen = part.append(encode_message_set([b"x"]), -1, 1)
    part.become_follower(znodes.PartitionState(2, 5, (2, 3), 2, zk_version=3))
    assert part.role is Role.FOLLOWER
    assert isinstance(part.ack_outcome(end, gen, 1), RequestTimedOutError)   # appended: "maybe", never NOT_LEADER
    with pytest.raises(NotLeaderForPartitionError, match="leader: broker 2"):
        part.read_limit()


def test_min_insync_above_the_replica_count_says_the_write_can_never_succeed(leader):
    """A topic created with fewer replicas than the brokers' min.insync.replicas (without the checks of
    `topics create --config`, or before min.insync.replicas was raised): the refusal says it is for good."""
    part, _ = leader
    with pytest.raises(NotEnoughReplicasError, match=r"only 3 replica\(s\), so no acks=-1 write can succeed"):
        part.append(encode_message_set([b"x"]), -1, 4)
    with pytest.raises(NotEnoughReplicasError) as err:                    # a shrunk isr: the usual refusal
        part.isr_written((1,), 4, 1)
        part.append(encode_message_set([b"x"]), -1, 2)
    assert "never" not in str(err.value) and "only" not in str(err.value)


# --- replicas that cannot write ----------------------------------------------------------------------

def test_a_storage_failure_marks_the_replica_until_a_write_succeeds_and_blocks_isr_joins(leader):
    part, clock = leader
    heard = []
    part.on_storage = lambda p: heard.append(p.storage_failure)
    part.append(encode_message_set([b"x"]), 1, 1)
    end = part.log.log_end
    part.isr_written((1, 2), 4, 1)
    part.storage_failed(DiskFullError("no space"))
    part.storage_failed(DiskFullError("no space"))         # the same failure again: no new notice
    assert part.storage_failure == "DISK_FULL" and heard == ["DISK_FULL"]
    clock["ms"] = 5000
    assert part.isr_change(lag_ms=1000) is None            # a failed leader drops nobody for lagging
    part.on_follower_fetch(3, 4, end)                      # but a caught-up follower joins (it may take over)
    new_isr, epoch, version, _ = part.isr_change(lag_ms=1000)
    assert new_isr == (1, 2, 3)
    part.isr_written(None, epoch, version)                 # (not written)
    part.append(encode_message_set([b"y"]), 1, 1)          # a write that succeeds clears the mark
    assert part.storage_failure is None and heard == ["DISK_FULL", None]
    end = part.log.log_end
    part.on_follower_fetch(2, 4, end)
    part.on_follower_fetch(3, 4, end)                      # 3 caught up, but its own storage failed
    assert part.isr_change(lag_ms=1000, cannot_write=frozenset({3})) is None
    assert part.isr_change(lag_ms=1000)[0] == (1, 2, 3)


def test_only_failed_writes_count_as_a_storage_failure():
    assert all(is_storage_failure(e) for e in (DiskFullError("x"), LogWriteError("x"), LogOfflineError("x")))
    # damaged bytes, a read that could not open its segment, a closed log: no failed write
    assert not any(is_storage_failure(e) for e in (CorruptRangeError("x"), LogCorruptionError("x"),
                                                    StorageError("x"), NotLeaderForPartitionError("x")))


class _View:
    """What the controller's decisions read of the replication view: live brokers, failures, controlled shutdowns."""

    def __init__(self, brokers, failed=(), stopping=()) -> None:
        self.brokers = {b: ("h", 1) for b in brokers}
        self.failed = {("t", 0): frozenset(failed)}
        self.shutting_down = frozenset(stopping)

    def predates(self, state, broker_id) -> bool:
        return False

    def cannot_write(self, topic, partition) -> frozenset[int]:
        return self.failed.get((topic, partition), frozenset())


@pytest.mark.parametrize("live, failed, state, expected", [
    # a follower that cannot write leaves the in-sync set; the leader stays
    ({1, 2, 3}, {3}, (1, (1, 2, 3)), (1, (1, 2))),
    # a leader that cannot write gives way to the first in-sync replica that can
    ({1, 2, 3}, {1}, (1, (1, 2, 3)), (2, (2, 3))),
    ({1, 2, 3}, {1, 2}, (1, (1, 2, 3)), (3, (3,))),
    # no in-sync replica can write: the leader stays (it serves reads) and the others leave
    ({1, 2, 3}, {1, 2}, (1, (1, 2)), (1, (1,))),
    ({1, 2, 3}, {1}, (1, (1,)), None),
    # the leader died and only a replica that cannot write is in sync: it leads rather than none
    ({2, 3}, {2}, (1, (1, 2)), (2, (2,))),
    # nobody failed: the decisions of before
    ({1, 2, 3}, set(), (1, (1, 2, 3)), None),
    ({2, 3}, set(), (1, (1, 2, 3)), (2, (2, 3))),
])
def test_the_controller_moves_leadership_and_isr_away_from_replicas_that_cannot_write(live, failed, state,
                                                                                     expected):
    c = Controller(0, None, _View(live, failed))
    leader, isr = state
    decided = c._decide("t", 0, (1, 2, 3), set(live), znodes.PartitionState(leader, 7, isr, 1, zk_version=3))
    assert (None if decided is None else (decided.leader, decided.isr)) == expected
    if decided is not None:
        assert decided.leader_epoch == 8


@pytest.mark.parametrize("live, stopping, state, expected", [
    # a stopping leader gives way to the first other in-sync replica, and leaves the in-sync set
    ({1, 2, 3}, {1}, (1, (1, 2, 3)), (2, (2, 3))),
    ({1, 2, 3}, {1}, (1, (1, 3)), (3, (3,))),
    # a stopping follower leaves the in-sync set; the leader stays
    ({1, 2, 3}, {3}, (1, (1, 2, 3)), (1, (1, 2))),
    # alone in its in-sync set: it keeps leading (nothing to move to), as Kafka's
    ({1, 2, 3}, {1}, (1, (1,)), None),
    # two brokers stopping at once: the one left leads
    ({1, 2, 3}, {1, 2}, (1, (1, 2, 3)), (3, (3,))),
    # a request of a broker that is already gone changes nothing beyond its failover
    ({2, 3}, {1}, (1, (1, 2, 3)), (2, (2, 3))),
])
def test_the_controller_moves_leadership_and_isr_away_from_a_broker_in_controlled_shutdown(live, stopping, state,
                                                                                          expected):
    c = Controller(0, None, _View(live, stopping=stopping))
    leader, isr = state
    decided = c._decide("t", 0, (1, 2, 3), set(live), znodes.PartitionState(leader, 7, isr, 1, zk_version=3))
    assert (None if decided is None else (decided.leader, decided.isr)) == expected


# --- fetcher threads ------------------------------------------------------------------------------

def test_a_partitions_fetcher_thread_is_kafkas_hash_of_topic_and_partition():
    from ingest.broker.kafka.fetcher_manager import fetcher_id, java_string_hash

    assert java_string_hash("hello") == 99162322 and java_string_hash("") == 0   # Java's "hello".hashCode()
    assert java_string_hash("a" * 20) == 1542361408                               # int32 overflow wraps
    # abs(31 * 99162322 + 0) as int32 = 1220935314, % 3
    assert fetcher_id("hello", 0, 3) == 1220935314 % 3 == 0
    assert fetcher_id("hello", 1, 3) == 1220935313 % 3
    assert {fetcher_id("many", p, 2) for p in range(30)} == {0, 1}
    assert all(fetcher_id("t", p, 1) == 0 for p in range(100))
