"""A segment's damaged ranges: what failed validation, and the sidecar that keeps them across restarts.

A damaged range is ``[start, end)`` in file positions: the bytes from a message or batch that
failed validation up to the next valid one (or the end of the file). In the 0.7 log offsets are
file positions, so :class:`Damage` needs nothing more; in a Kafka-format segment they are not, and
:class:`KafkaDamage` carries the log offsets the bytes held as well, ``[first_offset,
next_offset)`` (from the offset after the last valid batch before it to the base offset of the
next valid batch; ``next_offset`` None while the damage runs to the end of the file: the log then
skips to the next segment's base offset).

The sidecar ``<base>.damaged`` next to the segment holds one JSON object per range, keys sorted,
written atomically (temp file, fsync, rename) and removed when nothing is damaged; see
docs/log-format.md, "Damaged ranges". Its keys by format::

    0.7:   {"start_offset", "end_offset", "bytes", "messages", "reason", "found_at_ms"}   (log offsets;
           "messages" -1 when unknown)
    Kafka: {"start_position", "end_position", "start_offset", "next_offset", "bytes", "reason",
           "found_at_ms"}
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable, NamedTuple, TypeVar

from ingest.broker.segment_file import read_sidecar, write_sidecar

log = logging.getLogger(__name__)

DAMAGED_SUFFIX = ".damaged"

T = TypeVar("T")


class Damage(NamedTuple):
    """A damaged range of a 0.7 segment: file positions ``[start, end)`` failed validation; ``end`` is
    the next valid message, the end of the file, or, for a file cut short, where the next segment
    starts (then ``end`` lies past the file's end). ``messages``: how many messages the range held
    when the damaged bytes' own headers say it exactly
    (:func:`ingest.broker.segment_scan.damaged_messages`), else -1."""

    start: int
    end: int
    reason: str
    messages: int = -1


class KafkaDamage(NamedTuple):
    """Positions ``[start, end)`` of a Kafka-format segment failed validation; they held offsets
    ``[first_offset, next_offset)``."""

    start: int
    end: int
    first_offset: int
    next_offset: int | None
    reason: str

    def next_or(self, segment_end: int) -> int:
        """The next valid offset: ``next_offset``, or ``segment_end`` when the damage runs to the file's end."""
        return segment_end if self.next_offset is None else self.next_offset


def damaged_path(segment_path: Path) -> Path:
    """The sidecar recording a segment's damaged ranges: ``<base>.damaged``."""
    return segment_path.with_suffix(DAMAGED_SUFFIX)


def _load(segment_path: Path, parse: Callable[[dict], T]) -> list[T]:
    path = damaged_path(segment_path)
    data = read_sidecar(path, "damaged ranges")
    if data is None:
        return []
    out = []
    for line in data.decode().splitlines():
        try:
            out.append(parse(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring a bad line of %s: %r", path, line[:200])
    return out


def _save(segment_path: Path, rows: list[dict], now_ms: int) -> None:
    """Write the sidecar (none when ``rows`` is empty); failures are logged, not raised: the next
    scan finds the damage again."""
    path = damaged_path(segment_path)
    try:
        if not rows:
            path.unlink(missing_ok=True)
            return
        lines = [json.dumps({**row, "found_at_ms": now_ms}, sort_keys=True) for row in rows]
        write_sidecar(path, ("\n".join(lines) + "\n").encode())
    except OSError as exc:
        log.warning("could not save %s: %s", path, exc.strerror)


def load_damaged(segment_path: Path, base_offset: int) -> list[Damage]:
    """The damaged ranges saved for the 0.7 segment at ``base_offset`` (file positions), [] without a
    readable sidecar."""
    return _load(segment_path, lambda d: Damage(int(d["start_offset"]) - base_offset,
                                                 int(d["end_offset"]) - base_offset,
                                                 str(d.get("reason", "")), int(d.get("messages", -1))))


def save_damaged(segment_path: Path, base_offset: int, damaged: list[Damage], now_ms: int) -> None:
    """Save the 0.7 segment's damaged ranges (see :func:`_save`)."""
    _save(segment_path, [{"start_offset": base_offset + d.start, "end_offset": base_offset + d.end,
                          "bytes": d.end - d.start, "messages": d.messages, "reason": d.reason} for d in damaged],
          now_ms)


def _kafka_damage(d: dict) -> KafkaDamage:
    nxt = d.get("next_offset")
    return KafkaDamage(int(d["start_position"]), int(d["end_position"]), int(d["start_offset"]),
                       None if nxt is None else int(nxt), str(d.get("reason", "")))


def load_kafka_damage(segment_path: Path) -> list[KafkaDamage]:
    """The damaged ranges saved next to a Kafka-format segment; [] without a readable sidecar."""
    return _load(segment_path, _kafka_damage)


def save_kafka_damage(segment_path: Path, damaged: list[KafkaDamage], now_ms: int) -> None:
    """Save a Kafka-format segment's damaged ranges (see :func:`_save`)."""
    _save(segment_path, [{"start_position": d.start, "end_position": d.end, "start_offset": d.first_offset,
                          "next_offset": d.next_offset, "bytes": d.end - d.start, "reason": d.reason} for d in damaged],
          now_ms)
