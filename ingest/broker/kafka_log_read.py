"""Reads of a Kafka-format log: the whole batches a fetch gets, from the batch holding its offset.

:class:`KafkaLogReads` is a base of :class:`~ingest.broker.kafka_log.KafkaLog`; it takes no lock (the
log's reader contract, :mod:`ingest.broker.segmented_log`: one view, a reference on the segment read,
a retry when retention deleted it meanwhile). docs/log-format.md, "Kafka-format logs", "Read".
"""
from __future__ import annotations

import os
from bisect import bisect_right

from ingest.broker.kafka_segment import KafkaSegment
from ingest.broker.kafka_slice import KafkaLogSlice
from ingest.errors import LogCorruptionError


class KafkaLogReads:
    """The read path of a :class:`~ingest.broker.kafka_log.KafkaLog` (mixed into it)."""

    def read(self, offset: int, max_bytes: int, limit: int | None = None, *, min_one: bool = True) -> KafkaLogSlice:
        """Whole batches from the one holding ``offset``: as many as fit ``max_bytes``, at least one
        (KIP-74) unless ``min_one`` is False (Kafka's ``minOneMessage``, true for the first partition of a
        fetch only: later ones get nothing when their first batch does not fit). Reading at the end gives
        an empty slice; the caller must ``release()`` the slice.
        ``limit`` (a replicated partition's high watermark) bounds what is served: reads at or
        past it are empty, and no batch holding it is served.

        Raises:
            OffsetOutOfRangeError: ``offset`` is before the log start or after the log end.
            CorruptRangeError: ``offset`` was in a damaged range (``next_offset`` is where valid
                batches start again).
            LogOfflineError: the log is offline.
            InvalidFetchSizeError: ``max_bytes`` is negative.
        """
        self._check_read(max_bytes)
        while True:
            v = self._view
            if offset < v.bases[0] or offset > v.end:
                raise self._out_of_range(offset, v)
            top = v.end if limit is None else min(limit, v.end)
            if offset >= top:
                return KafkaLogSlice.empty(offset)
            i = bisect_right(v.bases, offset) - 1
            sl = self._read_from(v, i, offset, max_bytes, top, min_one)
            if sl is not None:
                return sl

    def _read_from(self, v, i: int, offset: int, max_bytes: int, top: int, min_one: bool) -> KafkaLogSlice | None:
        """The slice from segment ``i`` on; None when a segment was deleted under the reader (retry)."""
        segs = v.segments
        while i < len(segs):
            seg = segs[i]
            seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else v.end
            if offset >= seg_end:
                i += 1
                continue
            if not self._acquire(seg):
                return None
            try:
                d = seg.damage_at(offset, seg_end)
                if d is not None:
                    raise seg.corrupt_range(d, seg_end)
                limit_pos = v.end_position if i == len(segs) - 1 else seg.size
                if top < v.end:
                    cut = seg.locate(top, limit_pos)
                    if cut is not None:
                        limit_pos = min(limit_pos, cut.position)
                loc = seg.locate(offset, limit_pos)
                if loc is None:  # past the segment's last batch (a gap before the next): read on
                    seg.release()
                    i += 1
                    continue
                fd = seg.fileno()
                end = seg.end_of_batches(fd, loc.position, max_bytes, limit_pos)
                if not min_one and end - loc.position > max_bytes:
                    seg.release()
                    return KafkaLogSlice.empty(offset)
                if end == loc.position:  # the batch holding the offset is not whole in the file
                    if seg.verified:
                        raise LogCorruptionError(f"offset {offset} of log {self.name}: the batch at byte "
                                                 f"{loc.position} of {seg.path.name} is not whole")
                    seg.verify()         # a sealed segment cut short: its damage is found and recorded
                    seg.release()
                    continue
                length = seg.validate_served(loc.position, end - loc.position, seg_end)
                end = loc.position + length
                if i == len(segs) - 1 and end == v.end_position:
                    nxt = v.end  # the view's own pair: an append racing this read cannot move it
                else:
                    nxt = self._offset_at(seg, fd, end, seg_end)
            except BaseException:
                seg.release()
                raise
            return KafkaLogSlice(seg, offset, loc.base_offset, nxt, loc.position, length)
        return KafkaLogSlice.empty(offset)

    @staticmethod
    def _offset_at(seg: KafkaSegment, fd: int, position: int, seg_end: int) -> int:
        """The offset of the batch starting at ``position`` (where a slice ending there continues), in a
        sealed segment or before the view's end of the active one."""
        for d in seg.damaged:
            if d.start == position:
                return d.first_offset
        if position >= seg.size:
            return seg.next_offset if seg.next_offset > seg.base_offset else seg_end
        head = os.pread(fd, 8, position)
        return int.from_bytes(head, "big", signed=True)
