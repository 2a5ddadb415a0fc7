"""A Kafka-format segment's damaged ranges: the bytes that failed validation and the offsets they held.

In a Kafka-format segment offsets are not file positions, so a damaged range
carries both: file positions ``[start, end)`` (from the first bad byte to the
next valid batch, or the end of the file) and log offsets
``[first_offset, next_offset)`` (from the offset after the last valid batch
before it to the base offset of the next valid batch). ``next_offset`` is None
while the damage runs to the end of the file; the log then skips to the next
segment's base offset.

The sidecar ``<base>.damaged`` (the name the 0.7 log uses,
:func:`ingest.broker.segment_damage.damaged_path`) holds one JSON object per
range, written atomically (temp file, fsync, rename)::

    {"start_position": 8123, "end_position": 9400, "start_offset": 5000, "next_offset": 5120,
     "bytes": 1277, "reason": "...", "found_at_ms": 1763800000000}
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import NamedTuple

from ingest.broker.segment_damage import DAMAGED_SUFFIX, damaged_path

log = logging.getLogger(__name__)


class KafkaDamage(NamedTuple):
    """Positions ``[start, end)`` failed validation; they held offsets ``[first_offset, next_offset)``."""

    start: int
    end: int
    first_offset: int
    next_offset: int | None
    reason: str


def load_damage(segment_path: Path) -> list[KafkaDamage]:
    """The ranges saved next to the segment; [] without a readable sidecar."""
    path = damaged_path(segment_path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("cannot read %s: %s; its segment is scanned again", path, exc.strerror)
        return []
    out = []
    for line in text.splitlines():
        try:
            d = json.loads(line)
            nxt = d.get("next_offset")
            out.append(KafkaDamage(int(d["start_position"]), int(d["end_position"]), int(d["start_offset"]),
                                   None if nxt is None else int(nxt), str(d.get("reason", ""))))
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring a bad line of %s: %r", path, line[:200])
    return out


def save_damage(segment_path: Path, damaged: list[KafkaDamage], now_ms: int) -> None:
    """Write the sidecar atomically (remove it when nothing is damaged); failures are logged, not raised:
    the next scan finds the damage again."""
    path = damaged_path(segment_path)
    try:
        if not damaged:
            path.unlink(missing_ok=True)
            return
        lines = [json.dumps({"start_position": d.start, "end_position": d.end, "start_offset": d.first_offset,
                             "next_offset": d.next_offset, "bytes": d.end - d.start, "reason": d.reason,
                             "found_at_ms": now_ms}, sort_keys=True) for d in damaged]
        tmp = path.with_suffix(DAMAGED_SUFFIX + ".tmp")
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not save %s: %s", path, exc.strerror)
