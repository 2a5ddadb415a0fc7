"""The sparse position index of a sealed segment, saved next to it: ``<base>.index``.

In memory a segment's index is an ``array('q')`` of file positions: the first
message at or after every ``log.index.interval.bytes``. It is rebuilt by a
validating scan when missing; saving it when a segment is sealed (rolled,
closed) lets a restarted broker serve reads from old segments at once, while
the background verifier re-checks their CRCs.

Layout (big-endian)::

    magic:4s = b"IDX1"
    segment_size:int64     size of the .kafka file the index describes
    interval:int32         log.index.interval.bytes used to build it
    count:int32            number of entries
    entries:int64[count]   file positions, strictly increasing, first 0
    crc:uint32             CRC-32 of everything above

An index is used only if every field checks out against the segment file
(same size, same interval, sane entries, CRC); otherwise it is ignored and the
segment is scanned.
"""
from __future__ import annotations

import logging
import struct
import sys
import zlib
from array import array
from pathlib import Path

from ingest.broker.segment_file import read_sidecar, write_sidecar

log = logging.getLogger(__name__)

SUFFIX = ".index"
MAGIC = b"IDX1"
HEADER = struct.Struct(">4sqii")
CRC = struct.Struct(">I")


def index_path(segment_path: Path) -> Path:
    return segment_path.with_suffix(SUFFIX)


def save_index(segment_path: Path, index: array, segment_size: int, interval: int) -> None:
    """Write the index atomically (temp file + rename); failures are logged, not raised."""
    entries = array("q", index)
    if sys.byteorder == "little":
        entries.byteswap()
    body = HEADER.pack(MAGIC, segment_size, interval, len(entries)) + entries.tobytes()
    data = body + CRC.pack(zlib.crc32(body))
    path = index_path(segment_path)
    try:
        write_sidecar(path, data)
    except OSError as exc:  # the index is an optimisation: without it the segment is scanned
        log.warning("could not save index %s: %s", path, exc.strerror)


def load_index(segment_path: Path, segment_size: int, interval: int) -> array | None:
    """The saved index if it is valid for this segment file, else None."""
    path = index_path(segment_path)
    data = read_sidecar(path, "index")
    if data is None:
        return None
    why = _check(data, segment_size, interval)
    if why:
        log.info("ignoring index %s: %s; the segment will be scanned", path, why)
        return None
    entries = array("q")
    entries.frombytes(data[HEADER.size:-CRC.size])
    if sys.byteorder == "little":
        entries.byteswap()
    if entries[0] != 0 or entries[-1] >= segment_size or any(a >= b for a, b in zip(entries, entries[1:])):
        log.info("ignoring index %s: entries out of order or out of the file", path)
        return None
    return entries


def delete_index(segment_path: Path) -> None:
    index_path(segment_path).unlink(missing_ok=True)


def _check(data: bytes, segment_size: int, interval: int) -> str | None:
    if len(data) < HEADER.size + CRC.size:
        return "shorter than its header"
    magic, size, saved_interval, count = HEADER.unpack_from(data)
    if magic != MAGIC:
        return f"bad magic {magic!r}"
    if CRC.unpack_from(data, len(data) - CRC.size)[0] != zlib.crc32(data[:-CRC.size]):
        return "CRC mismatch"
    if size != segment_size:
        return f"it describes {size} bytes but the segment has {segment_size}"
    if saved_interval != interval:
        return f"built with interval {saved_interval}, configured {interval}"
    if count <= 0 or len(data) != HEADER.size + 8 * count + CRC.size:
        return f"count {count} does not match its length"
    return None
