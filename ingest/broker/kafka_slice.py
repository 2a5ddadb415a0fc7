"""A fetch's region of a Kafka-format segment: whole batches, for ``os.sendfile`` or a copy."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the slice only holds a segment reference; no import cycle at run time
    from ingest.broker.kafka_segment import KafkaSegment


class KafkaLogSlice:
    """Whole batches of one segment for a fetch: ``fileno()``, ``position`` and ``length`` feed
    ``os.sendfile``, valid until :meth:`release` (also when retention deletes the segment meanwhile).

    ``offset`` is the offset asked for; ``first_offset`` the base offset of the first batch served
    (at or before ``offset``: Kafka serves the whole batch, clients skip the records before
    ``offset``); ``next_offset`` the offset after the last batch served (where the next fetch
    starts). Use as a context manager or call ``release()`` exactly once.
    """

    __slots__ = ("offset", "first_offset", "next_offset", "position", "length", "_segment")

    def __init__(self, segment: KafkaSegment | None, offset: int, first_offset: int, next_offset: int,
                 position: int, length: int) -> None:
        self._segment = segment
        self.offset = offset
        self.first_offset = first_offset
        self.next_offset = next_offset
        self.position = position
        self.length = length

    @classmethod
    def empty(cls, offset: int) -> "KafkaLogSlice":
        return cls(None, offset, offset, offset, 0, 0)

    def fileno(self) -> int:
        if self._segment is None:
            raise ValueError("KafkaLogSlice already released (or empty)")
        return self._segment.fileno()

    def read_bytes(self) -> bytes:
        if self.length == 0:
            return b""
        if self._segment is None:
            raise ValueError("KafkaLogSlice already released")
        return os.pread(self._segment.fileno(), self.length, self.position)

    def release(self) -> None:
        seg, self._segment = self._segment, None
        if seg is not None:
            seg.release()

    def __enter__(self) -> "KafkaLogSlice":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        if getattr(self, "_segment", None) is not None:
            self.release()
