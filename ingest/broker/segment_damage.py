"""A segment's damaged ranges: what failed validation, and the sidecar that keeps them across restarts.

A damaged range is ``[start, end)`` in file positions: the bytes from a message
that failed validation up to the next valid message (or the end of the file).
The sidecar ``<base>.damaged`` next to the segment holds one JSON object per
range (``start_offset``, ``end_offset``, ``bytes``, ``messages``, ``reason``,
``found_at_ms``; offsets are log offsets; ``messages`` -1 when unknown), written
atomically; see docs/log-format.md, "Damaged ranges".
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger(__name__)

DAMAGED_SUFFIX = ".damaged"


class Damage(NamedTuple):
    """A damaged range of a segment: file positions ``[start, end)`` failed validation; ``end`` is
    the next valid message, the end of the file, or, for a file cut short, where the next segment
    starts (then ``end`` lies past the file's end). ``messages``: how many messages the range held
    when the damaged bytes' own headers say it exactly
    (:func:`ingest.broker.segment_scan.damaged_messages`), else -1."""

    start: int
    end: int
    reason: str
    messages: int = -1


def damaged_path(segment_path: Path) -> Path:
    """The sidecar recording a segment's damaged ranges: ``<base>.damaged``."""
    return segment_path.with_suffix(DAMAGED_SUFFIX)


def load_damaged(segment_path: Path, base_offset: int) -> list[Damage]:
    """The damaged ranges saved for the segment at ``base_offset`` (file positions), [] without a
    readable sidecar."""
    path = damaged_path(segment_path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("cannot read %s: %s; its segment is scanned again", path, exc.strerror)
        return []
    base = base_offset
    out = []
    for line in text.splitlines():
        try:
            d = json.loads(line)
            out.append(Damage(int(d["start_offset"]) - base, int(d["end_offset"]) - base, str(d.get("reason", "")),
                              int(d.get("messages", -1))))
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring a bad line of %s: %r", path, line[:200])
    return out


def save_damaged(segment_path: Path, base_offset: int, damaged: list[Damage], now_ms: int) -> None:
    """Write the sidecar atomically (none when nothing is damaged); failures are logged, not raised:
    the next scan finds the damage again."""
    path = damaged_path(segment_path)
    try:
        if not damaged:
            path.unlink(missing_ok=True)
            return
        lines = [json.dumps({"start_offset": base_offset + d.start, "end_offset": base_offset + d.end,
                             "bytes": d.end - d.start, "messages": d.messages, "reason": d.reason,
                             "found_at_ms": now_ms},
                            sort_keys=True) for d in damaged]
        tmp = path.with_suffix(DAMAGED_SUFFIX + ".tmp")
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not save %s: %s", path, exc.strerror)
