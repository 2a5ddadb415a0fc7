"""``ingest log dump PATH [--json] [--deep]``: every message of a segment file, like DumpLogSegments.

For each message: offset (base offset from the file name + position), size on
disk, magic, codec, stored CRC, the CRC rule it satisfies (``crc(payload)``:
magic 0 and Kafka 0.7's magic 1; ``crc(attributes+payload)``: magic 2 and the
legacy magic 1 this product wrote before magic 2; see
:mod:`ingest.records.message`), whether it is valid, payload size, and the
reason when it is not. ``--deep`` also lists the messages inside compressed
wrappers. ``--json`` prints one JSON object per line (fields ``offset``,
``position``, ``size``, ``magic``, ``codec``, ``crc``, ``rule``, ``valid``,
``payload_size``, ``error`` and, for inner messages, ``inner``; ``rule`` is
null for an invalid message). PATH may be
a segment file or a partition directory (every ``*.kafka`` in offset order).

A Kafka-format topic's segment (``<base offset>.log``, or a partition directory of
them) is dumped batch by batch instead, like Kafka's DumpLogSegments
(:mod:`ingest.broker.kafka_dump`); ``--deep`` lists each batch's records.

Exit status: 0 when every message is valid, 1 when any is invalid or the file
ends in a torn message, 2 when PATH cannot be read.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
from pathlib import Path
from typing import Iterator, TextIO

from ingest.broker import kafka_dump
from ingest.broker.kafka_segment import parse_segment_name as parse_kafka_segment_name
from ingest.broker.segment import parse_segment_name
from ingest.errors import InvalidMessageError, MessageTooLargeError, StorageError
from ingest.records import message_codecs
from ingest.records.message import CODEC_MASK, LENGTH_SIZE, crc_rule, min_length, read_header
from ingest.records.message_set import inner_messages, message_bounds

EXIT_OK, EXIT_INVALID = 0, 1

DUMP_EXAMPLES = """\
examples:
  ingest log dump /var/kafka-logs/clicks-0/00000000000000000000.kafka
  ingest log dump /var/kafka-logs/clicks-0 --deep      # a whole partition, inside compressed wrappers
  ingest log dump /var/kafka-logs/clicks-0 --json | head
  ingest log dump /var/kafka-logs/orders-0 --deep      # a Kafka-format topic: batches and their records
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("log", help="inspect broker log segments", epilog=DUMP_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="log_command", metavar="SUBCOMMAND")
    d = sub.add_parser("dump", help="print every message of a segment file (offset, size, codec, CRC valid)",
                       description="Print every message of a segment file; exit 1 if any is invalid.",
                       epilog=DUMP_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("path", help="a <20-digit base offset>.kafka (or, of a Kafka-format topic, .log) segment file, "
                                   "or a partition directory")
    d.add_argument("--json", action="store_true", help="one JSON object per line")
    d.add_argument("--deep", action="store_true", help="also list messages inside compressed wrappers")
    d.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if path.is_dir() and not any(parse_segment_name(n) is not None or parse_kafka_segment_name(n) is not None
                                 for n in os.listdir(path)):
        raise StorageError(f"no segment files (<20-digit base offset>.kafka, or .log for a Kafka-format topic) in "
                           f"directory {path}; give a partition directory such as <log.dir>/<topic>-<partition>")
    return dump_path(Path(args.path), as_json=args.json, deep=args.deep, out=sys.stdout)


def dump_path(path: Path, *, as_json: bool = False, deep: bool = False, out: TextIO = sys.stdout) -> int:
    """Dump a segment file or a directory of them; returns the exit status."""
    if _kafka_format(path):
        return _dump_kafka(path, as_json=as_json, deep=deep, out=out)
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


def _kafka_format(path: Path) -> bool:
    """A Kafka-format segment (``<base>.log``), or a partition directory of them."""
    if path.is_dir():
        return any(parse_kafka_segment_name(n) is not None for n in os.listdir(path))
    return parse_kafka_segment_name(path.name) is not None


def _dump_kafka(path: Path, *, as_json: bool, deep: bool, out: TextIO) -> int:
    """Every record batch of a Kafka-format segment or partition directory (:mod:`ingest.broker.kafka_dump`)."""
    if path.is_dir():
        files = sorted((b, path / n) for n in os.listdir(path) if (b := parse_kafka_segment_name(n)) is not None)
    else:
        files = [(parse_kafka_segment_name(path.name), path)]
    invalid = total = 0
    for base, f in files:
        if not as_json:
            print(f"Dumping {f} (base offset {base})", file=out)
        for rec in kafka_dump.dump_batches(f, deep=deep):
            total += not rec.get("record", False)
            invalid += not rec["valid"]
            print(json.dumps(rec) if as_json else kafka_dump.text_line(rec), file=out)
    print(f"{total} batch(es), {invalid} invalid, in {len(files)} file(s)", file=sys.stderr)
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
    # scan() (through message_bounds) validates; after a bad message whose length is
    # usable, the dump goes on from the next one, as DumpLogSegments does.
    pos, end = 0, len(buf)
    while pos < end:
        bounds, r = message_bounds(buf, pos, origin=base)
        for p, nxt in bounds:
            yield from _valid(buf, base, p, nxt, deep)
        if r.error is None:
            return
        p = r.end
        rec: dict = {"offset": base + p, "position": p}
        h = read_header(buf, p)
        if h is None:
            rec.update(size=end - p, valid=False, codec=None, error="torn tail: " + r.error)
            yield rec
            return
        length, magic, attributes, crc, _hs = h
        rec.update(size=LENGTH_SIZE + length, magic=magic, codec=message_codecs.codec_name(attributes & CODEC_MASK),
                   crc=crc, rule=None, payload_size=length - min_length(magic), valid=False, error=r.error)
        if r.cut_off or length < min_length(magic):
            rec["error"] = ("torn tail: " if r.cut_off else "") + r.error + "; cannot find the next message"
            yield rec
            return
        yield rec
        pos = p + LENGTH_SIZE + length


def _valid(buf: memoryview, base: int, p: int, nxt: int, deep: bool) -> Iterator[dict]:
    """The record of a message scan() accepted, then its inner messages when asked."""
    length, magic, attributes, crc, hs = read_header(buf, p)
    codec = attributes & CODEC_MASK
    error, inner = None, []
    with buf[p + hs:nxt] as payload:
        rule = crc_rule(magic, attributes, crc, payload)
        if codec:
            try:
                data, positions = inner_messages(codec, payload)
            except (InvalidMessageError, MessageTooLargeError) as exc:
                error = str(exc)
            else:
                if deep:
                    inner = [_inner_record(data, base + p, q, e) for q, e in zip(positions, positions[1:] + [len(data)])]
    yield {"offset": base + p, "position": p, "size": LENGTH_SIZE + length, "magic": magic,
           "codec": message_codecs.codec_name(codec), "crc": crc, "rule": rule, "payload_size": length - min_length(magic),
           "valid": error is None, "error": error}
    yield from inner


def _inner_record(data: bytes, offset: int, q: int, e: int) -> dict:
    _length, magic, attributes, crc, hs = read_header(data, q)
    return {"offset": offset, "inner": True, "position": q, "size": e - q, "magic": magic, "codec": "none",
            "crc": crc, "rule": crc_rule(magic, attributes, crc, data[q + hs:e]), "payload_size": e - q - hs,
            "valid": True, "error": None}


def _text(rec: dict) -> str:
    prefix = "  inner " if rec.get("inner") else ""
    parts = [f"{prefix}offset: {rec['offset']}", f"position: {rec['position']}", f"size: {rec['size']}"]
    if "magic" in rec:
        parts += [f"magic: {rec['magic']}", f"codec: {rec['codec']}", f"crc: 0x{rec['crc']:08x}",
                  f"rule: {rec['rule'] or '-'}", f"payload_size: {rec['payload_size']}"]
    parts.append(f"valid: {'true' if rec['valid'] else 'false'}")
    if rec.get("error"):
        parts.append(f"error: {rec['error']}")
    return " ".join(parts)


