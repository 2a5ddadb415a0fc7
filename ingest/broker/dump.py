"""``ingest log dump PATH [--json] [--deep]``: every message of a segment file, like DumpLogSegments.

For each message: offset (base offset from the file name + position), size on
disk, magic, codec, stored CRC, whether it is valid, payload size, and the
reason when it is not. ``--deep`` also lists the messages inside compressed
wrappers. ``--json`` prints one JSON object per line (fields ``offset``,
``position``, ``size``, ``magic``, ``codec``, ``crc``, ``valid``,
``payload_size``, ``error`` and, for inner messages, ``inner``). PATH may be
a segment file or a partition directory (every ``*.kafka`` in offset order).

Exit status: 0 when every message is valid, 1 when any is invalid or the file
ends in a torn message, 2 when PATH cannot be read.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import zlib
from pathlib import Path
from typing import Iterator, TextIO

from ingest.broker import compression
from ingest.broker.message import CRC_SEED, HEADER, HEADER_SIZE, LENGTH, LENGTH_SIZE, OVERHEAD, check_header
from ingest.broker.message_set import scan
from ingest.broker.segment import parse_segment_name
from ingest.errors import InvalidMessageError, StorageError

EXIT_OK, EXIT_INVALID = 0, 1

DUMP_EXAMPLES = """\
examples:
  ingest log dump /var/kafka-logs/clicks-0/00000000000000000000.kafka
  ingest log dump /var/kafka-logs/clicks-0 --deep      # a whole partition, inside compressed wrappers
  ingest log dump /var/kafka-logs/clicks-0 --json | head
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("log", help="inspect broker log segments", epilog=DUMP_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="log_command", metavar="SUBCOMMAND")
    d = sub.add_parser("dump", help="print every message of a segment file (offset, size, codec, CRC valid)",
                       description="Print every message of a segment file; exit 1 if any is invalid.",
                       epilog=DUMP_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("path", help="a <20-digit base offset>.kafka segment file, or a partition directory")
    d.add_argument("--json", action="store_true", help="one JSON object per line")
    d.add_argument("--deep", action="store_true", help="also list messages inside compressed wrappers")
    d.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if path.is_dir() and not any(parse_segment_name(n) is not None for n in os.listdir(path)):
        raise StorageError(f"no segment files (<20-digit base offset>.kafka) in directory {path}; "
                           f"give a partition directory such as <log.dir>/<topic>-<partition>")
    return dump_path(Path(args.path), as_json=args.json, deep=args.deep, out=sys.stdout)


def dump_path(path: Path, *, as_json: bool = False, deep: bool = False, out: TextIO = sys.stdout) -> int:
    """Dump a segment file or a directory of them; returns the exit status."""
    if path.is_dir():
        files = sorted((b, path / n) for n in os.listdir(path) if (b := parse_segment_name(n)) is not None)
    else:
        files = [(parse_segment_name(path.name) or 0, path)]
    invalid = total = 0
    for base, f in files:
        if not as_json:
            print(f"Dumping {f} (base offset {base})", file=out)
        for rec in dump_records(f, base, deep=deep):
            total += not rec.get("inner", False)
            invalid += not rec["valid"]
            print(json.dumps(rec) if as_json else _text(rec), file=out)
    summary = f"{total} message(s), {invalid} invalid, in {len(files)} file(s)"
    print(summary, file=sys.stderr)
    return EXIT_INVALID if invalid else EXIT_OK


def dump_records(path: Path, base: int, *, deep: bool = False) -> Iterator[dict]:
    """One dict per message of the file (see module docstring for the fields)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return
            # Every memoryview of the map is released by a with-block, so the map can close.
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
                yield from _records(view, base, deep)
    except OSError as exc:
        raise StorageError(f"cannot read segment file {path}: {exc.strerror}") from exc


def _records(buf: memoryview, base: int, deep: bool) -> Iterator[dict]:
    pos, end = 0, len(buf)
    while pos < end:
        rec: dict = {"offset": base + pos, "position": pos}
        if end - pos < HEADER_SIZE:
            rec.update(size=end - pos, valid=False, codec=None, error=f"torn tail: {end - pos} bytes, shorter than a header")
            yield rec
            return
        length, magic, attributes, crc = HEADER.unpack_from(buf, pos)
        nxt = pos + LENGTH_SIZE + length
        codec = attributes & 0x03
        rec.update(size=LENGTH_SIZE + length, magic=magic, codec=compression.codec_name(codec),
                   crc=crc, payload_size=length - OVERHEAD)
        if length < OVERHEAD or nxt > end:
            why = f"length {length} below the minimum {OVERHEAD}" if length < OVERHEAD else \
                f"torn tail: length {length} runs {nxt - end} bytes past the end of the file"
            rec.update(valid=False, error=why + "; cannot find the next message")
            yield rec
            return
        error = check_header(magic, attributes)
        inner: list[dict] = []
        with buf[pos + HEADER_SIZE:nxt] as payload:
            if error is None:
                computed = zlib.crc32(payload, CRC_SEED[attributes & 0xFF])
                if computed != crc:
                    error = f"CRC mismatch: stored 0x{crc:08x}, computed 0x{computed:08x}"
            if error is None and codec:
                error, inner = _inner(codec, payload, base + pos, deep)
        rec.update(valid=error is None, error=error)
        yield rec
        yield from inner
        pos = nxt


def _inner(codec: int, payload: memoryview, offset: int, deep: bool) -> tuple[str | None, list[dict]]:
    try:
        data = compression.decompress(codec, payload)
    except InvalidMessageError as exc:
        return str(exc), []
    r = scan(data)
    if r.error:
        return "inner set: " + r.error, []
    recs = []
    pos = 0
    while pos < len(data):
        length, magic, attributes, crc = HEADER.unpack_from(data, pos)
        if attributes & 0x03:
            return "nested compression is not allowed", []
        if deep:
            recs.append({"offset": offset, "inner": True, "position": pos, "size": LENGTH_SIZE + length,
                         "magic": magic, "codec": "none", "crc": crc, "payload_size": length - OVERHEAD,
                         "valid": True, "error": None})
        pos += LENGTH_SIZE + LENGTH.unpack_from(data, pos)[0]
    return None, recs


def _text(rec: dict) -> str:
    prefix = "  inner " if rec.get("inner") else ""
    parts = [f"{prefix}offset: {rec['offset']}", f"position: {rec['position']}", f"size: {rec['size']}"]
    if "magic" in rec:
        parts += [f"magic: {rec['magic']}", f"codec: {rec['codec']}", f"crc: 0x{rec['crc']:08x}",
                  f"payload_size: {rec['payload_size']}"]
    parts.append(f"valid: {'true' if rec['valid'] else 'false'}")
    if rec.get("error"):
        parts.append(f"error: {rec['error']}")
    return " ".join(parts)


