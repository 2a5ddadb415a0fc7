"""Idempotent producers against real Kafka-format logs: duplicates answered with their first offsets and not
written again, sequence gaps and fenced epochs refused, the state kept through reopen (snapshot or scan),
truncation, a restart empty, replica appends and expiry (KIP-98's rules as Kafka's ProducerStateManager)."""
from __future__ import annotations

import os

import pytest

from ingest.broker.producer_state import ProducerState
from ingest.clock import FakeClock
from ingest.errors import InvalidProducerEpochError, InvalidRecordError, OutOfOrderSequenceError
from ingest.records.builder import SimpleRecord, build_batch
from tests.broker.kafka_log_support import T, open_log, read_all

PID = 4242


@pytest.fixture
def clock():
    return FakeClock(T + 10_000)


def batch(seq: int, n: int = 3, *, pid: int = PID, epoch: int = 0, tag: str = "v") -> bytearray:
    """``n`` records ``<tag>-<seq + i>`` of producer ``pid`` at sequence ``seq``."""
    return build_batch([SimpleRecord(f"{tag}-{seq + i}".encode(), None, (), T + seq + i) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def values(log) -> list[bytes]:
    return [v for _o, _t, v in read_all(log)]


def test_a_retried_batch_is_answered_with_its_first_offsets_and_not_written_again(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    first = log.append(batch(0))
    log.append(batch(3))
    size = log.size
    again = log.append(batch(0))                       # the producer lost the answer and retried
    assert (again.first_offset, again.last_offset, again.records, again.size) == (0, 2, 0, 0)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert log.log_end == 6 and log.size == size
    assert log.append(batch(3)).first_offset == 3      # any of the last five
    assert log.append(batch(6)).first_offset == 6      # and the sequence goes on
    assert values(log) == [f"v-{i}".encode() for i in range(9)]
    log.close()


def test_a_gap_or_an_old_batch_beyond_the_last_five_is_out_of_order(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    for k in range(7):
        log.append(batch(3 * k))                        # sequences 0..20, seven batches
    end = log.log_end
    with pytest.raises(OutOfOrderSequenceError, match="sent sequence 24, expected 21"):
        log.append(batch(24))                          # a gap: 21..23 lost
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(3))                           # sequences 3..5 are no longer among the last five
    assert log.log_end == end
    assert log.append(batch(6)).first_offset == 6      # the third batch still is
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(1, 3))                        # overlaps a stored batch without matching it
    log.close()


def test_an_older_epoch_is_fenced_and_a_new_epoch_starts_at_sequence_zero(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append(batch(0, epoch=1))
    log.append(batch(3, epoch=1))
    with pytest.raises(InvalidProducerEpochError, match="epoch 0, older than its epoch 1"):
        log.append(batch(6, epoch=0))
    with pytest.raises(OutOfOrderSequenceError, match="new epoch 2 at sequence 6"):
        log.append(batch(6, epoch=2))
    assert log.append(batch(0, epoch=2)).first_offset == 6
    with pytest.raises(InvalidProducerEpochError):     # epoch 1 is fenced now, even its duplicate
        log.append(batch(3, epoch=1))
    log.close()


def test_unknown_producers_start_anywhere_and_non_idempotent_batches_are_not_checked(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    assert log.append(batch(1000, pid=7)).first_offset == 0   # no state of producer 7 here (KIP-360)
    plain = build_batch([b"x"])
    assert [log.append(plain).first_offset for _ in range(2)] == [3, 4]   # producer id -1: stored twice
    with pytest.raises(InvalidRecordError, match="base sequence -1"):
        log.append(build_batch([b"y"], producer_id=9, producer_epoch=0, base_sequence=-1))
    log.close()


def test_sequences_wrap_after_the_largest_int32(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append(batch(2 ** 31 - 2, 2))                  # last sequence 2**31 - 1
    assert log.append(batch(0, 2)).first_offset == 2
    log.close()


@pytest.mark.parametrize("close", [True, False], ids=["closed", "killed"])
def test_duplicates_are_still_caught_after_the_log_is_opened_again(tmp_path, clock, close):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=600)
    for k in range(20):
        log.append(batch(3 * k))
    assert len(log.segment_bases()) > 3
    snaps = sorted(p for p in os.listdir(tmp_path / "t-0") if p.endswith(".snapshot"))
    assert snaps == [f"{b:020d}.snapshot" for b in log.segment_bases()[1:]]   # one per roll
    if close:
        log.close()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=600)
    end = log.log_end
    assert log.append(batch(57)).first_offset == 57 and log.log_end == end   # the last batch: a duplicate
    assert log.append(batch(45)).first_offset == 45                          # five back
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(42))
    assert log.append(batch(60)).first_offset == end
    log.close()


def test_without_usable_snapshots_the_state_is_rebuilt_from_the_whole_log(tmp_path, clock):
    d = tmp_path / "t-0"
    log = open_log(d, clock, segment_bytes=600)
    for k in range(20):
        log.append(batch(3 * k))
        log.append(batch(2 * k, 2, pid=77))
    log.close()
    snaps = sorted(p for p in os.listdir(d) if p.endswith(".snapshot"))
    (d / snaps[-1]).write_bytes((d / snaps[-1]).read_bytes()[:-3])   # torn
    for name in snaps[:-1]:
        os.unlink(d / name)
    log = open_log(d, clock, segment_bytes=600)
    assert log.append(batch(57)).records == 0 and log.append(batch(38, 2, pid=77)).records == 0
    assert set(log.producers.producers) == {PID, 77}
    log.close()


def test_truncation_forgets_the_batches_cut_off_and_keeps_the_rest(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=600)
    for k in range(12):
        log.append(batch(3 * k))
    log.truncate_to(21)                                 # batches at sequences 21.. are gone
    assert log.log_end == 21
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(24))
    assert log.append(batch(18)).records == 0           # still stored: a duplicate
    info = log.append(batch(21))                        # cut off: appended again, not a duplicate
    assert (info.first_offset, info.records) == (21, 3)
    log.reset_to(100)                                   # a restart empty forgets every producer
    assert len(log.producers) == 0 and log.append(batch(24)).first_offset == 100
    log.close()


def test_a_followers_copied_batches_make_its_state_and_it_catches_duplicates_as_leader(tmp_path, clock):
    leader = open_log(tmp_path / "leader", clock)
    follower = open_log(tmp_path / "follower", clock)
    for k in range(4):
        leader.append(batch(3 * k))
    with leader.read(0, 1 << 20) as sl:
        follower.append(sl.read_bytes(), assign_offsets=False)
    assert follower.log_end == 12
    assert follower.append(batch(9)).records == 0       # the former follower leads: the retry is caught
    assert follower.append(batch(12)).first_offset == 12
    leader.close()
    follower.close()


def test_idle_producer_ids_expire_when_retention_runs(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, producer_id_expiration_ms=60_000)
    log.append(batch(0))
    log.append(batch(0, pid=8))
    log.cleanup(T + 30_000)
    assert set(log.producers.producers) == {PID, 8}
    log.cleanup(T + 90_000)                              # a minute after their batches' timestamps
    assert len(log.producers) == 0
    assert log.append(batch(3)).first_offset == 6       # unknown again: accepted at any sequence
    log.close()


def test_snapshots_round_trip_and_damage_is_refused():
    s = ProducerState("t-0")
    for k in range(7):
        s.update(build_header(3 * k), 100 + 3 * k)
    again = ProducerState.decode("t-0", s.encode())
    assert {p: (e.epoch, list(e.batches), e.last_timestamp) for p, e in again.producers.items()} == \
        {p: (e.epoch, list(e.batches), e.last_timestamp) for p, e in s.producers.items()}
    assert len(again.producers[PID].batches) == 5
    data = bytearray(s.encode())
    data[-1] ^= 1
    with pytest.raises(ValueError, match="CRC"):
        ProducerState.decode("t-0", bytes(data))
    with pytest.raises(ValueError, match="fewer than"):
        ProducerState.decode("t-0", b"\x00\x01")


def build_header(seq: int):
    from ingest.records.batch import read_header
    return read_header(batch(seq))
