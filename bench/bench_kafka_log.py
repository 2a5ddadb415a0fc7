"""Benchmark of the Kafka-format log against the disk's limit, in one run, and the per-record cost of the
record-batch code on the produce path.

Measures, for 200-byte records in batches of 5,000 (about 1 MB, what a producer's ``batch.size``
and ``linger.ms`` make under load):
  * append: ``KafkaLog.append`` of a producer batch (validation: one CRC-32C per batch and the walk of
    the record lengths; offsets assigned; written without a copy), against raw ``os.pwrite`` of the same
    bytes to a file in the same directory; both end with one fdatasync;
  * replica append: ``append(assign_offsets=False)`` of the leader's batches (CRC per batch only);
  * read: ``KafkaLog.read`` of 1 MB fetches + ``pread`` of the slice (what sendfile would send), against
    raw ``os.pread`` of 1 MB chunks of the same file; and the slice look-up alone (what a sendfile fetch
    costs in Python);
  * per record: ``validate_produced`` of one batch of equal 200-byte records and of records of 100-300
    bytes, ``check_batch`` (CRC only), ``iter_records`` (every record decoded, memoryviews).
Each measurement keeps the best of ``--repeats`` runs (the machine is shared); ratios are to the raw limit
measured in the same run.

Usage: python bench/bench_kafka_log.py [--dir DIR] [--messages 1000000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.limits import raw_write  # noqa: E402
from ingest.broker.kafka_log import KafkaLog, KafkaLogSettings  # noqa: E402
from ingest.clock import SystemClock  # noqa: E402
from ingest.records.batch import RECORDS_OFFSET  # noqa: E402
from ingest.records.builder import SimpleRecord, build_batch  # noqa: E402
from ingest.records.crc import CRC32C_IMPLEMENTATION  # noqa: E402
from ingest.records.record import iter_records  # noqa: E402
from ingest.records.validation import check_batch, validate_produced, walk_records  # noqa: E402

RECORD = 200
PER_BATCH = 5000
FETCH = 1 << 20
SETTINGS = KafkaLogSettings(segment_bytes=1 << 30, max_message_bytes=8 << 20)


def best(repeats: int, fn, *args):
    """(seconds, result) of the fastest of ``repeats`` runs."""
    top = None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn(*args)
        t = time.perf_counter() - t
        if top is None or t < top[0]:
            top = (t, out)
    return top


def raw_read(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    size, pos = os.fstat(fd).st_size, 0
    while pos < size:
        pos += len(os.pread(fd, FETCH, pos))
    os.close(fd)
    return pos


def log_append(directory: Path, data: bytes, count: int, assign: bool = True) -> KafkaLog:
    shutil.rmtree(directory, ignore_errors=True)
    log = KafkaLog(directory, SETTINGS, SystemClock())
    if assign:
        for _ in range(count):
            log.append(data)
    else:
        for chunk in data:
            log.append(chunk, assign_offsets=False)
    log.flush()
    return log


def log_read(log: KafkaLog, copy: bool = True) -> int:
    off, n = log.start_offset, 0
    while off < log.end_offset:
        with log.read(off, FETCH) as sl:
            if copy:
                n += len(sl.read_bytes())
            off = sl.next_offset
    return n


def per_record(fn, batch, repeats: int, count: int = PER_BATCH) -> float:
    return best(repeats, fn, batch)[0] / count * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="directory on the disk to test (default: a temp dir)")
    ap.add_argument("--messages", type=int, default=1_000_000, help="records appended per run")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement; the best is kept")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-kafka-log-", dir=args.dir))
    try:
        run(base, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(base: Path, args: argparse.Namespace) -> None:
    rnd = random.Random(26)
    ts = 1_700_000_000_000
    batch = bytes(build_batch([SimpleRecord(rnd.randbytes(RECORD), None, (), ts + i // 100) for i in range(PER_BATCH)]))
    varied = bytes(build_batch([SimpleRecord(rnd.randbytes(rnd.randint(100, 300)), None, (), ts + i // 100)
                                for i in range(PER_BATCH)]))
    count = max(1, args.messages // PER_BATCH)
    msgs = count * PER_BATCH
    reps = args.repeats
    load = os.getloadavg()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}  {os.uname().nodename}  cpus {os.cpu_count()}  "
          f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  CRC-32C: {CRC32C_IMPLEMENTATION}")
    print(f"{msgs:,} records of {RECORD} bytes in {count} batches of {PER_BATCH} ({len(batch):,} bytes each)\n")

    raw_file = base / "raw.bin"
    t_raw_w, _ = best(reps, raw_write, raw_file, batch, count, False)
    t_app, log = best(reps, log_append, base / "t-0", batch, count)
    t_raw_r, nbytes = best(reps, raw_read, raw_file)
    t_read, got = best(reps, log_read, log)
    t_look, _ = best(reps, log_read, log, False)
    leader_batches = []
    off = 0
    while off < log.end_offset:
        with log.read(off, len(batch)) as sl:
            leader_batches.append(sl.read_bytes())
            off = sl.next_offset
    t_rep, replica = best(reps, log_append, base / "r-0", leader_batches, 0, False)
    assert got == nbytes == log.size and replica.end_offset == log.end_offset == msgs
    log.close()
    replica.close()

    table: list[str] = []  # the same rows as markdown tables at the end (bench/ab_trees.py reads them)

    def row(name: str, t: float, ref: float | None) -> None:
        rate = msgs / t
        tail = f" | raw {msgs / ref:>12,.0f} rec/s | ratio {ref / t:5.2f}" if ref else ""
        print(f"{name:<34} {rate:>12,.0f} rec/s {rate * len(batch) / PER_BATCH / 1e6:>8.1f} MB/s{tail}")
        table.append(f"| {name} | {rate:,.0f} | {f'{msgs / ref:,.0f} | {ref / t:.2f}' if ref else ' | '} |")

    row("append (leader, validated)", t_app, t_raw_w)
    row("append (replica, CRC only)", t_rep, t_raw_w)
    row("read 1 MB fetches + pread", t_read, t_raw_r)
    row("read look-up only (sendfile path)", t_look, None)
    print()
    costs: list[str] = []
    for name, fn, b in [("check_batch (CRC-32C only)", check_batch, batch),
                        ("walk_records, equal records", lambda x: walk_records(x, RECORDS_OFFSET, len(x), PER_BATCH),
                         batch),
                        ("walk_records, 100-300 bytes", lambda x: walk_records(x, RECORDS_OFFSET, len(x), PER_BATCH),
                         varied),
                        ("validate_produced, equal", validate_produced, batch),
                        ("validate_produced, 100-300 bytes", validate_produced, varied),
                        ("iter_records (every field)", lambda x: sum(1 for _ in iter_records(x)), batch)]:
        ns = per_record(fn, b, max(reps, 5))
        print(f"{name:<34} {ns:>9.1f} ns/record")
        costs.append(f"| {name} | {ns:.1f} |")
    print("\n| row | records/s | raw records/s | ratio |\n| --- | ---: | ---: | ---: |")
    print("\n".join(table))
    print("\n| work | ns/record |\n| --- | ---: |")
    print("\n".join(costs))


if __name__ == "__main__":
    main()
