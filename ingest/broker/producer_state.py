"""The idempotent producers of one Kafka-format partition (KIP-98): each producer id's epoch and last batches.

A leader checks a producer's batch before appending it (Kafka's ``ProducerAppendInfo`` for a client's
append), every replica records the batches it appends (a follower's from the leader's, unchecked, so
that it can check after it becomes leader):

- a batch without producer id (``producer_id`` -1) is not looked at; one with a producer id and no base
  sequence is refused INVALID_RECORD (Kafka's ``LogValidator``);
- a batch whose epoch, first and last sequence equal one of the producer's last :data:`BATCHES_KEPT`
  batches is a **duplicate** (the producer retried after losing an answer): :meth:`ProducerState.check`
  returns the stored batch, whose offsets the leader answers, and nothing is appended;
- an older epoch than the producer's: INVALID_PRODUCER_EPOCH (47), Kafka 2.7+'s answer to a client;
- a newer epoch must start at sequence 0, the same epoch must continue the last sequence by one (after
  2**31 - 1 comes 0): otherwise OUT_OF_ORDER_SEQUENCE_NUMBER (45);
- a producer id the partition has no state of is accepted at any sequence, as Kafka 2.5+ (KIP-360)
  accepts it (its batches may have been removed by retention); Kafka 2.0-2.4 answered
  UNKNOWN_PRODUCER_ID there, which this broker never sends.

State is dropped per producer ``producer.id.expiration.ms`` after its last batch's timestamp (Kafka's
rule and default, one day), checked when the log's retention runs; memory is bounded by the producers
active within that time.

Snapshot file (``<offset, 20 digits>.snapshot``: the state before that offset; all integers big-endian)::

    version:int16=1 crc:uint32 (CRC-32C of what follows) count:int32 Producer*count
    Producer => producer_id:int64 epoch:int16 last_timestamp:int64 batches:int8 Batch*batches
    Batch    => first_seq:int32 last_seq:int32 first_offset:int64 last_offset:int64 max_timestamp:int64

Thread-safety: none of its own; the owning log calls it under its lock.
"""
from __future__ import annotations

import logging
import os
import struct
from collections import deque
from pathlib import Path
from typing import Iterable, NamedTuple

from ingest.errors import InvalidProducerEpochError, InvalidRecordError, OutOfOrderSequenceError
from ingest.records.batch import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from ingest.records.crc import crc32c

log = logging.getLogger(__name__)

BATCHES_KEPT = 5
"""Batches remembered per producer (Kafka's ``NUM_BATCHES_TO_RETAIN``): a producer keeps at most five
requests in flight per partition with idempotence on, so a retry is always among them."""
DEFAULT_EXPIRATION_MS = 86_400_000
"""``producer.id.expiration.ms``'s default (Kafka's)."""
MAX_SEQUENCE = 2 ** 31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1

_HEAD = struct.Struct(">hIi")          # version, crc, count
_PRODUCER = struct.Struct(">qhqb")     # producer_id, epoch, last_timestamp, batches
_BATCH = struct.Struct(">iiqqq")       # first_seq, last_seq, first_offset, last_offset, max_timestamp


class BatchMeta(NamedTuple):
    """One appended batch of a producer: its sequences, offsets and largest timestamp."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


class ProducerEntry:
    """A producer id's epoch and its last batches, oldest first."""

    __slots__ = ("epoch", "batches", "last_timestamp")

    def __init__(self, epoch: int, batches: Iterable[BatchMeta] = (), last_timestamp: int = -1) -> None:
        self.epoch = epoch
        self.batches: deque[BatchMeta] = deque(batches, maxlen=BATCHES_KEPT)
        self.last_timestamp = last_timestamp


def last_sequence(h: BatchHeader) -> int:
    """The sequence of the batch's last record (sequences wrap from 2**31 - 1 to 0, as Kafka's)."""
    return (h.base_sequence + h.last_offset_delta) % (MAX_SEQUENCE + 1)


def _in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == MAX_SEQUENCE)


class ProducerState:
    """The producer ids of one partition (see the module docstring); ``name`` names the log in messages."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def check(self, h: BatchHeader) -> BatchMeta | None:
        """A leader's check of a producer's batch before its append: the stored batch it duplicates, or
        None to append it.

        Raises:
            InvalidRecordError: a producer id without a base sequence.
            InvalidProducerEpochError: an older epoch than the producer's.
            OutOfOrderSequenceError: the sequence does not continue the producer's.
        """
        pid = h.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        if h.base_sequence < 0:
            raise InvalidRecordError(f"log {self.name}: a batch of producer id {pid} has base sequence "
                                     f"{h.base_sequence}; an idempotent producer's batch needs one >= 0")
        e = self.producers.get(pid)
        if e is None or not e.batches:   # unknown producer (KIP-360): any sequence
            return None
        first = h.base_sequence
        if h.producer_epoch < e.epoch:
            raise InvalidProducerEpochError(
                f"log {self.name}: producer id {pid} sent epoch {h.producer_epoch}, older than its epoch "
                f"{e.epoch} here (a fenced producer instance); nothing appended")
        if h.producer_epoch != e.epoch:
            if first != 0:
                raise OutOfOrderSequenceError(
                    f"log {self.name}: producer id {pid} starts its new epoch {h.producer_epoch} at sequence "
                    f"{first}; a new epoch starts at 0; nothing appended")
            return None
        expected = e.batches[-1].last_seq
        if _in_sequence(expected, first):   # the common case; a stored batch never continues the sequence
            return None
        last = last_sequence(h)
        for b in e.batches:
            if b.first_seq == first and b.last_seq == last:
                return b
        raise OutOfOrderSequenceError(
            f"log {self.name}: producer id {pid} epoch {e.epoch} sent sequence {first}, expected "
            f"{(expected + 1) % (MAX_SEQUENCE + 1)} (its last appended batch ends at {expected}); "
            "nothing appended")

    def update(self, h: BatchHeader, base_offset: int) -> None:
        """Record an appended batch (``h`` as written, at ``base_offset``); a leader's after :meth:`check`,
        a follower's unchecked (the leader checked it)."""
        pid = h.producer_id
        if pid == NO_PRODUCER_ID or h.base_sequence == NO_SEQUENCE:
            return
        e = self.producers.get(pid)
        if e is None:
            e = self.producers[pid] = ProducerEntry(h.producer_epoch)
        elif e.epoch != h.producer_epoch:   # a new epoch forgets the old one's batches
            e.epoch = h.producer_epoch
            e.batches.clear()
        e.batches.append(BatchMeta(h.base_sequence, last_sequence(h), base_offset,
                                   base_offset + h.last_offset_delta, h.max_timestamp))
        e.last_timestamp = max(e.last_timestamp, h.max_timestamp)

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Drop producers whose last batch is ``expiration_ms`` or more old; returns how many."""
        old = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp >= expiration_ms]
        for pid in old:
            del self.producers[pid]
        return len(old)

    def clear(self) -> None:
        self.producers.clear()

    # --- snapshots ---------------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The snapshot's bytes (module docstring)."""
        body = bytearray()
        for pid, e in self.producers.items():
            body += _PRODUCER.pack(pid, e.epoch, e.last_timestamp, len(e.batches))
            for b in e.batches:
                body += _BATCH.pack(*b)
        return _HEAD.pack(VERSION, crc32c(bytes(body)), len(self.producers)) + bytes(body)

    @classmethod
    def decode(cls, name: str, data: bytes) -> "ProducerState":
        """A state from a snapshot's bytes.

        Raises:
            ValueError: the bytes are not a whole snapshot of this version (short, CRC mismatch).
        """
        if len(data) < _HEAD.size:
            raise ValueError(f"{len(data)} bytes, fewer than a snapshot's {_HEAD.size}-byte header")
        version, crc, count = _HEAD.unpack_from(data)
        if version != VERSION:
            raise ValueError(f"version {version}, not {VERSION}")
        if crc32c(data[_HEAD.size:]) != crc:
            raise ValueError("CRC-32C mismatch")
        out = cls(name)
        p = _HEAD.size
        try:
            for _ in range(count):
                pid, epoch, last_ts, n = _PRODUCER.unpack_from(data, p)
                p += _PRODUCER.size
                batches = []
                for _ in range(n):
                    batches.append(BatchMeta(*_BATCH.unpack_from(data, p)))
                    p += _BATCH.size
                out.producers[pid] = ProducerEntry(epoch, batches, last_ts)
        except struct.error as exc:
            raise ValueError(f"cut off after {p} bytes") from exc
        if p != len(data):
            raise ValueError(f"{len(data) - p} bytes after the last producer")
        return out


def snapshot_path(directory: Path, offset: int) -> Path:
    return Path(directory) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def write_snapshot(state: ProducerState, path: Path) -> None:
    """Write ``state`` to ``path`` (a temporary file renamed into place; not fsynced: a snapshot lost in a
    crash or torn is ignored at the next start, which then scans more of the log).

    Raises:
        OSError: the write failed (the caller logs it; nothing else depends on the file).
    """
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(state.encode())
    os.replace(tmp, path)


def read_snapshot(name: str, path: Path) -> ProducerState | None:
    """The state saved in ``path``; None (logged) when it is unreadable or damaged."""
    try:
        return ProducerState.decode(name, path.read_bytes())
    except (OSError, ValueError) as exc:
        log.warning("log %s: producer-state snapshot %s is unusable (%s); the log is scanned instead",
                    name, path.name, exc)
        return None
