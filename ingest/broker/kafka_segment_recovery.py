"""Validation of a Kafka-format segment: recovery of the newest, verification of sealed ones, damage.

:class:`KafkaSegmentRecovery` is a base of :class:`~ingest.broker.kafka_segment.KafkaSegment` (its
state, its locks): a full validating scan (:func:`ingest.broker.kafka_scan.scan_segment`) rebuilds the
indexes, truncates a torn tail only where recovery may (the newest segment), records damaged ranges
(:mod:`ingest.broker.segment_damage`, logged at ERROR once), and checks the bytes a sealed segment
serves before it was verified (docs/log-format.md, "Kafka-format logs").
"""
from __future__ import annotations

import logging
import os
from contextlib import suppress

from ingest.broker.kafka_scan import IndexBuilder, scan_segment
from ingest.broker.offset_index import OffsetIndex
from ingest.broker.segment_damage import KafkaDamage, save_kafka_damage
from ingest.broker.time_index import TimeIndex
from ingest.errors import CorruptRangeError, InvalidMessageError
from ingest.records.validation import check_batches

log = logging.getLogger(__name__)


class KafkaSegmentRecovery:
    """Validating scans and damage of a :class:`~ingest.broker.kafka_segment.KafkaSegment` (mixed into it)."""

    def recover(self) -> int:
        """Validate every batch of the newest segment and rebuild its indexes; returns bytes truncated.

        Damaged ranges followed by valid batches are kept and recorded; a tail from which nothing
        valid follows (a torn write, or a damaged last batch) is truncated.
        """
        for p in (self.index_file, self.time_index_file):  # the newest segment may change
            with suppress(FileNotFoundError):
                os.unlink(p)
        return self._rescan(truncate_tail=True)

    def verify(self) -> bool:
        """Validate every batch of a sealed segment once (indexes rebuilt, damage recorded, nothing
        truncated: damage reaching the end of the file is a damaged range); True if intact."""
        with self._scan_lock:
            if not self.verified:
                self._rescan(truncate_tail=False)
                if not self.damaged:
                    self.seal()
            return not self.damaged

    def _rescan(self, *, truncate_tail: bool) -> int:
        index, time_index = OffsetIndex(self.base_offset), TimeIndex(self.base_offset)
        builder = IndexBuilder(index, time_index, self._interval)
        with self.pinned() as fd:
            r = scan_segment(fd, self.size, self.base_offset, builder, max_batch_size=self.max_batch_size)
        damaged = list(r.damaged)
        dropped = 0
        if r.end < self.size:
            if truncate_tail:
                dropped = self.size - r.end
                zeros = not r.cut_off and self._all_zero(r.end, self.size)
                kind = "torn tail" if r.cut_off else "zero-filled tail" if zeros else "invalid batch"
                # a torn write or the zeroed pages a crash leaves are the expected traces of a crash
                level = logging.WARNING if r.cut_off or zeros else logging.ERROR
                log.log(level, "recovery of %s: %s: %s; nothing valid follows it; truncating %d bytes "
                        "(keeping %d bytes, %d batches, offsets %d..%d)", self.path, kind, r.tail_error, dropped,
                        r.end, r.batches, self.base_offset, r.next_offset)
                self.cut_to(r.end)
            else:
                damaged.append(KafkaDamage(r.end, self.size, r.next_offset, None, r.tail_error or "damaged"))
        self.index, self.time_index, self.builder = index, time_index, builder
        self.indexed = self.verified = True
        self.checked_upto = self.size
        if truncate_tail or r.end == self.size:
            self.next_offset = r.next_offset
        else:  # tail damage in a sealed segment: its offsets run on to the next segment's base
            self.next_offset = max(self.next_offset, r.next_offset)
        self._record_damage(damaged)
        return dropped

    def _all_zero(self, start: int, end: int) -> bool:
        with self.pinned() as fd:
            while start < end:
                chunk = os.pread(fd, min(1 << 20, end - start), start)
                if not chunk or chunk.strip(b"\0"):
                    return not chunk
                start += len(chunk)
        return True

    def _record_damage(self, damaged: list[KafkaDamage]) -> None:
        self.damaged = sorted(damaged)
        for d in self.damaged:
            if (d.start, d.end) in self._known_damage:
                log.info("segment %s: damaged range at bytes %d..%d already recorded", self.path, d.start, d.end)
                continue
            log.error("segment %s is corrupt at bytes %d..%d (%d bytes: %s): offsets %d..%s are lost; the valid "
                      "batches after it are kept and served, fetches in it answer CORRUPT_RANGE", self.path,
                      d.start, d.end, d.end - d.start, d.reason, d.first_offset,
                      "the next segment" if d.next_offset is None else d.next_offset)
        if self.damaged or self._known_damage:
            save_kafka_damage(self.path, self.damaged, self._clock.time_ms())
        self._known_damage = {(d.start, d.end) for d in self.damaged}

    def ensure_indexed(self) -> None:
        """Indexes for a segment found without sane saved ones: a validating scan, once."""
        if not self.indexed:
            self.verify()

    def damage_at(self, offset: int, segment_end: int) -> KafkaDamage | None:
        """The damaged range whose offsets hold ``offset`` (its next offset resolved to ``segment_end``
        when the damage runs to the end of the file)."""
        for d in self.damaged:
            if d.first_offset <= offset < d.next_or(segment_end):
                return d
        return None

    def validate_served(self, position: int, length: int, segment_end: int) -> int:
        """CRC-check ``length`` bytes of whole batches at ``position`` before a not yet verified
        segment serves them; returns how many may be served (cut before damage). ``segment_end`` is
        the offset a damaged tail skips to (the next segment's base offset).

        Raises:
            CorruptRangeError: the first batch is damaged (the whole segment was verified).
        """
        if self.verified or position + length <= self.checked_upto:
            return length
        with self.pinned() as fd:
            data = os.pread(fd, length, position)
        try:
            check_batches(data)
        except InvalidMessageError as exc:
            log.error("segment %s: corrupt batch in bytes %d..%d found while serving a read (%s); "
                      "verifying the segment", self.path, position, position + length, exc)
            self.verify()
            for d in self.damaged:
                if d.start <= position < d.end:
                    raise self.corrupt_range(d, segment_end) from None
                if position < d.start < position + length:
                    return d.start - position
            return length
        if position <= self.checked_upto:
            self.checked_upto = position + length
            if self.checked_upto >= self.size:
                self.verified = True
        return length

    def corrupt_range(self, d: KafkaDamage, segment_end: int) -> CorruptRangeError:
        """The error a read at the offsets of damaged range ``d`` raises."""
        nxt = d.next_or(segment_end)
        return CorruptRangeError(
            f"offsets {d.first_offset}..{nxt} of segment {self.path.name} were in damaged bytes {d.start}..{d.end} "
            f"({d.reason}); the next valid offset is {nxt}", start_offset=d.first_offset, next_offset=nxt)

