"""A fetch's region of a Kafka-format segment: whole batches, for ``os.sendfile`` or a copy."""
from __future__ import annotations

from ingest.broker.segment_file import SegmentFile, SegmentSlice


class KafkaLogSlice(SegmentSlice):
    """Whole batches of one segment for a fetch (:class:`~ingest.broker.segment_file.SegmentSlice`:
    ``fileno()``, ``position`` and ``length`` feed ``os.sendfile`` until :meth:`release`).

    ``offset`` is the offset asked for; ``first_offset`` the base offset of the first batch served
    (at or before ``offset``: Kafka serves the whole batch, clients skip the records before
    ``offset``); ``next_offset`` the offset after the last batch served (where the next fetch
    starts). Use as a context manager or call ``release()`` exactly once.
    """

    __slots__ = ("first_offset", "next_offset")

    def __init__(self, segment: SegmentFile | None, offset: int, first_offset: int, next_offset: int,
                 position: int, length: int) -> None:
        super().__init__(segment, offset, position, length)
        self.first_offset = first_offset
        self.next_offset = next_offset

    @classmethod
    def empty(cls, offset: int) -> "KafkaLogSlice":
        return cls(None, offset, offset, offset, 0, 0)
