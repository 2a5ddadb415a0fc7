"""Offsets of a Kafka-format log by time: ListOffsets (earliest, latest, max timestamp, by timestamp)
through the time index (the 0.7 OFFSETS answer, segment starts before a time, is both formats':
:meth:`~ingest.broker.segmented_log.SegmentedLog.offsets_before`).

:class:`KafkaLogOffsets` is a base of :class:`~ingest.broker.kafka_log.KafkaLog`; it reads one view
and takes no lock (the log's reader contract).
"""
from __future__ import annotations

from typing import NamedTuple

from ingest.broker.segmented_log import EARLIEST_TIME, LATEST_TIME
from ingest.records.batch import NO_TIMESTAMP
from ingest.records.record import iter_records
from ingest.records.validation import default_inflate_limit

LATEST_TIMESTAMP = LATEST_TIME
EARLIEST_TIMESTAMP = EARLIEST_TIME
MAX_TIMESTAMP = -3


class TimestampOffset(NamedTuple):
    """A ListOffsets answer: the offset, and the timestamp of its record (-1 for earliest/latest)."""

    offset: int
    timestamp: int


class KafkaLogOffsets:
    """Offset look-ups of a :class:`~ingest.broker.kafka_log.KafkaLog` (mixed into it)."""

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """Kafka's ``fetchOffsetByTimestamp``: -2 the log start, -1 the log end, -3 the record with the
        largest timestamp, else the first record whose timestamp is at or after ``timestamp``
        (None when there is none: Kafka answers offset -1).

        The segment is the first whose largest timestamp reaches ``timestamp``; in it the time index
        gives the offset to start from, the offset index its position, batch headers the batch,
        and that batch's records (inflated if compressed) the record.
        """
        v = self._view
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(v.bases[0], NO_TIMESTAMP)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(v.end, NO_TIMESTAMP)
        if timestamp == MAX_TIMESTAMP:
            best = None
            for seg in v.segments:
                if seg.max_timestamp != NO_TIMESTAMP and (best is None or seg.max_timestamp > best.max_timestamp):
                    best = seg
            if best is None:
                return None
            return self._first_record_at(best, best.max_timestamp, v.bases[0])
        for seg in v.segments:
            if seg.max_timestamp >= timestamp:
                found = self._first_record_at(seg, timestamp, v.bases[0])
                if found is not None:
                    return found
        return None

    def _first_record_at(self, seg, timestamp: int, start_offset: int) -> TimestampOffset | None:
        if not seg.acquire():
            return None
        try:
            hit = seg.find_timestamp(timestamp, start_offset)
            while hit is not None:
                offset, position = hit
                loc = seg.locate(offset)
                data = seg.batch_bytes(loc.position, loc.size)
                for r in iter_records(data, inflate_limit=default_inflate_limit(self.settings.max_message_bytes)):
                    if r.timestamp >= timestamp and r.offset >= start_offset:
                        return TimestampOffset(r.offset, r.timestamp)
                hit = seg.find_timestamp(timestamp, loc.last_offset + 1) if loc.last_offset + 1 < seg.next_offset \
                    else None
            return None
        finally:
            seg.release()
