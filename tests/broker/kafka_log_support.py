"""What the Kafka-format log tests share: a log in a temp directory, batches, and reading everything back."""
from __future__ import annotations

import os
from pathlib import Path

from ingest.broker.kafka_log import KafkaLog, KafkaLogSettings
from ingest.clock import FakeClock
from ingest.records.batch import iter_batches
from ingest.records.builder import SimpleRecord, build_batch
from ingest.records.record import iter_records

T = 1_700_000_000_000


def open_log(directory: Path, clock: FakeClock, **settings) -> KafkaLog:
    defaults = {"segment_bytes": 16 * 1024, "index_interval_bytes": 1024}
    defaults.update(settings)
    return KafkaLog(directory, KafkaLogSettings(**defaults), clock)


def batch_of(tag: str, n: int, *, size: int = 60, ts: int = T, codec: int = 0) -> tuple[bytearray, list[bytes]]:
    """One producer batch of ``n`` records with values ``<tag>-<i>-`` padded to ``size``, timestamps ts+i."""
    values = [(f"{tag}-{i}-".encode() + os.urandom(size))[:max(size, 8)] for i in range(n)]
    return build_batch([SimpleRecord(v, None, (), ts + i) for i, v in enumerate(values)], codec=codec), values


def fill(log: KafkaLog, batches: int, per_batch: int = 10, *, size: int = 60, codecs=(0,), ts_step: int = 1000
         ) -> list[bytes]:
    """Append ``batches`` batches; returns every value in offset order."""
    out: list[bytes] = []
    for i in range(batches):
        data, values = batch_of(f"b{i}", per_batch, size=size, ts=T + i * ts_step, codec=codecs[i % len(codecs)])
        log.append(data)
        out += values
    return out


def records_of(data: bytes, start: int = 0) -> list[tuple[int, int, bytes]]:
    """``(offset, timestamp, value)`` of every record of whole batches in ``data`` at or after ``start``."""
    out = []
    for pos, _ in iter_batches(data):
        out += [(r.offset, r.timestamp, bytes(r.value)) for r in iter_records(data, pos) if r.offset >= start]
    return out


def read_all(log: KafkaLog, start: int | None = None, max_bytes: int = 5000) -> list[tuple[int, int, bytes]]:
    """Every record from ``start`` (the log start) to the log end, fetch by fetch as a consumer would."""
    off = log.start_offset if start is None else start
    out = []
    while off < log.end_offset:
        with log.read(off, max_bytes) as sl:
            assert sl.length > 0 and sl.first_offset <= off < sl.next_offset, (off, sl.first_offset, sl.next_offset)
            out += records_of(sl.read_bytes(), off)
            off = sl.next_offset
    return out
