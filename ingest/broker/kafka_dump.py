"""``ingest log dump`` of Kafka-format segments (``<base offset>.log``): every record batch, like
Kafka's DumpLogSegments.

For each batch: base and last offset, record count, position and size in the file, magic, codec,
stored CRC-32C, whether the batch is valid (framing and CRC-32C over the batch:
:func:`~ingest.records.validation.check_batch`), producer id/epoch, base sequence, partition
leader epoch, whether it is a transactional or control batch, first and max timestamp, and the
reason when it is not valid. ``--deep`` also lists each record of a valid batch (Kafka's
``--deep-iteration``): offset, timestamp, key and value sizes, header keys; a batch whose records
do not read (their lengths lie, or they do not inflate within the bound) is invalid. ``--json``
prints one JSON object per line (records with ``"record": true``).

After a batch that fails its CRC the dump goes on with the next batch (its length field is not
covered by the CRC, as in Kafka's format); a length that runs past the file or is below the batch
minimum ends the dump with a torn-tail line.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Iterator

from ingest.errors import InvalidMessageError, MessageTooLargeError, StorageError
from ingest.records.batch import LENGTH_OFFSET, LOG_OVERHEAD, MIN_LENGTH, RECORD_BATCH_OVERHEAD, read_header
from ingest.records.compression import codec_name
from ingest.records.record import iter_records
from ingest.records.validation import check_batch


def dump_batches(path: Path, *, deep: bool = False) -> Iterator[dict]:
    """One dict per batch of the segment file (and per record with ``deep``); see the module docstring."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return
            # every memoryview of the map is released by a with-block, so the map can close
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
                yield from _batches(view, deep)
    except OSError as exc:
        raise StorageError(f"cannot read segment file {path}: {exc.strerror}") from exc


def _batches(buf: memoryview, deep: bool) -> Iterator[dict]:
    pos, end = 0, len(buf)
    while pos < end:
        if end - pos < RECORD_BATCH_OVERHEAD:
            yield {"position": pos, "size": end - pos, "valid": False,
                   "error": f"torn tail: {end - pos} bytes, less than a batch header ({RECORD_BATCH_OVERHEAD})"}
            return
        h = read_header(buf, pos)
        if h.length < MIN_LENGTH or pos + h.size > end:
            yield {"base_offset": h.base_offset, "position": pos, "size": end - pos, "valid": False,
                   "error": f"torn tail: batch length {h.length} at position {pos + LENGTH_OFFSET} "
                            f"(at least {MIN_LENGTH}, and {end - pos - LOG_OVERHEAD} bytes are left)"}
            return
        rec = {"base_offset": h.base_offset, "last_offset": h.last_offset, "count": h.records_count,
               "position": pos, "size": h.size, "magic": h.magic, "codec": codec_name(h.codec),
               "crc": h.crc, "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
               "base_sequence": h.base_sequence, "partition_leader_epoch": h.partition_leader_epoch,
               "transactional": h.is_transactional, "control": h.is_control,
               "first_timestamp": h.base_timestamp, "max_timestamp": h.max_timestamp, "valid": True, "error": None}
        records: list[dict] = []
        try:
            check_batch(buf, pos, pos + h.size)
            if deep:
                records = [{"record": True, "offset": r.offset, "timestamp": r.timestamp,
                            "key_size": -1 if r.key is None else len(r.key),
                            "value_size": -1 if r.value is None else len(r.value),
                            "header_keys": [k for k, _v in r.headers], "valid": True}
                           for r in iter_records(buf, pos)]
        except (InvalidMessageError, MessageTooLargeError) as exc:
            rec.update(valid=False, error=str(exc))
            records = []
        yield rec
        yield from records
        pos += h.size


def text_line(rec: dict) -> str:
    """One batch or record as a line of ``key: value`` pairs (DumpLogSegments' style)."""
    if rec.get("record"):
        return (f"| offset: {rec['offset']} timestamp: {rec['timestamp']} keySize: {rec['key_size']} "
                f"valueSize: {rec['value_size']} headerKeys: {rec['header_keys']}")
    if "magic" not in rec:
        return f"position: {rec['position']} size: {rec['size']} valid: false error: {rec['error']}"
    line = (f"baseOffset: {rec['base_offset']} lastOffset: {rec['last_offset']} count: {rec['count']} "
            f"position: {rec['position']} size: {rec['size']} magic: {rec['magic']} codec: {rec['codec']} "
            f"crc: 0x{rec['crc']:08x} producerId: {rec['producer_id']} producerEpoch: {rec['producer_epoch']} "
            f"baseSequence: {rec['base_sequence']} partitionLeaderEpoch: {rec['partition_leader_epoch']} "
            f"isTransactional: {str(rec['transactional']).lower()} isControl: {str(rec['control']).lower()} "
            f"firstTimestamp: {rec['first_timestamp']} maxTimestamp: {rec['max_timestamp']} "
            f"valid: {'true' if rec['valid'] else 'false'}")
    return line + (f" error: {rec['error']}" if rec.get("error") else "")
