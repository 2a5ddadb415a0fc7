"""Benchmark of the log storage engine against the disk's physical limit, in one run.

Measures, for 200-byte messages:
  * append throughput in sets of 1 and 50, without flush (page cache) and with
    an fsync per set (log.flush.interval = set size);
  * read throughput in-process: Log.read + pread of ~300 KB slices, then
    (a) nothing (bytes out, what the broker sends), (b) CRC-validate and find
    the last whole message (the minimum a consumer does), (c) full decode to
    MessageAndOffset objects;
  * the cost of one read at a fixed offset, and of rejecting a non-boundary
    offset, as the log grows from 10 MB to --max-size (default 2 GB);
and the reference in the same run: raw sequential os.write / os.pread of the
same bytes to the same directory (and write + fdatasync per set).

Usage: python bench/bench_log.py [--dir DIR] [--max-size 2G] [--messages 2000000]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.limits import raw_write  # noqa: E402
from ingest.broker.log import Log, LogSettings  # noqa: E402
from ingest.clock import SystemClock  # noqa: E402
from ingest.errors import OffsetOutOfRangeError  # noqa: E402
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set, scan  # noqa: E402

MSG = 200
FETCH = 300 * 1024
NO_FLUSH = LogSettings(flush_interval_messages=2**31 - 1, flush_interval_ms=2**31 - 1, max_message_size=10**6)


def size_arg(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * mult[text[-1].upper()]) if text[-1].upper() in mult else int(text)


def payloads(n: int) -> list[bytes]:
    return [os.urandom(MSG) for _ in range(n)]


class Timer:
    """Wall and CPU (this process) seconds: the machine is shared, CPU time shows our own cost."""

    def __enter__(self) -> "Timer":
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def raw_read(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    pos = 0
    while pos < size:
        pos += len(os.pread(fd, FETCH, pos))
    os.close(fd)


def log_append(directory: Path, chunk: bytes, count: int, settings: LogSettings) -> Log:
    lg = Log(directory, settings, SystemClock())
    for _ in range(count):
        lg.append(chunk)
    lg.flush()
    return lg


def log_read(lg: Log, mode: str) -> int:
    off, end, n = lg.start_offset, lg.end_offset, 0
    while off < end:
        with lg.read(off, FETCH) as sl:
            data = sl.read_bytes()
        if mode == "bytes":
            n += len(data) // (MSG + 10)
            off += len(data) - len(data) % (MSG + 10)  # fixed-size messages: the boundary is known
        elif mode == "validate":
            r = scan(data)
            n += r.count
            off += r.end
        else:
            msgs = list(iter_messages(data, off))
            n += len(msgs)
            off = msgs[-1].next_offset
    return n


def fsync_latency(path: Path, chunk: bytes, samples: int) -> float:
    """Median seconds of one fdatasync after appending ``chunk``: the price of a flush."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    times = []
    for i in range(samples):
        os.pwrite(fd, chunk, i * len(chunk))
        t = time.perf_counter()
        os.fdatasync(fd)
        times.append(time.perf_counter() - t)
    os.close(fd)
    path.unlink()
    return statistics.median(times)


def crc_floor(chunk: bytes, count: int) -> None:
    mv = memoryview(chunk)
    crc32 = zlib.crc32
    step = MSG + 10
    for _ in range(count):
        for pos in range(0, len(chunk), step):
            crc32(mv[pos + 10:pos + step])


def scan_only(chunk: bytes, count: int) -> None:
    for _ in range(count):
        scan(chunk, deep=True, index=[])


def best_of(repeats: int, fn, *args) -> tuple[Timer, object]:
    """Run ``fn`` ``repeats`` times; the fastest run's timer and result (the machine is shared)."""
    best: Timer | None = None
    result = None
    for _ in range(repeats):
        with Timer() as t:
            out = fn(*args)
        if best is None or t.wall < best.wall:
            best, result = t, out
        elif isinstance(out, Log):
            out.close()
    assert best is not None
    return best, result


def timed_reads(lg: Log, offset: int, reps: int) -> tuple[float, float]:
    """Median µs of read(offset)+pread, and of rejecting offset+1."""
    good, bad = [], []
    for _ in range(reps):
        t = time.perf_counter()
        with lg.read(offset, FETCH) as sl:
            sl.read_bytes()
        good.append(time.perf_counter() - t)
        t = time.perf_counter()
        try:
            lg.read(offset + 1, FETCH)
        except OffsetOutOfRangeError:
            pass
        bad.append(time.perf_counter() - t)
    return statistics.median(good) * 1e6, statistics.median(bad) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="directory on the disk to test (default: a temp dir)")
    ap.add_argument("--messages", type=int, default=2_000_000, help="messages for the set-of-50 runs")
    ap.add_argument("--max-size", type=size_arg, default=2 << 30, help="log size for the growth test (e.g. 2G, 200M)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement; the best is kept")
    ap.add_argument("--segment-size", type=size_arg, default=1 << 30, help="log.file.size for the growth test")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-log-", dir=args.dir))
    try:
        run(base, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(base: Path, args: argparse.Namespace) -> None:
    p = payloads(50)
    set50 = encode_message_set(p)
    set1 = encode_message_set(p[:1])
    n50 = max(args.messages // 50, 1)
    n1 = max(args.messages // 10, 1)
    nf50, nf1 = min(n50, 1000), min(n1, 1000)  # fsync per set: bounded by the disk, keep it short
    reps = args.repeats

    table: list[str] = []  # the same rows as a markdown table at the end (bench/ab_trees.py reads it)

    def row(name: str, msgs: int, t: Timer, ref: Timer) -> None:
        rate, ref_rate, per_cpu = msgs / t.wall, msgs / ref.wall, msgs / max(t.cpu, 1e-9)
        print(f"{name:<40} {rate:>11,.0f} msg/s {rate * (MSG + 10) / 1e6:>7.1f} MB/s | raw {ref_rate:>11,.0f} msg/s"
              f" | ratio {rate / ref_rate:5.2f} | per CPU-s {per_cpu:>11,.0f}", flush=True)
        table.append(f"| {name} | {rate:,.0f} | {ref_rate:,.0f} | {rate / ref_rate:.2f} | {per_cpu:,.0f} |")

    counter = iter(range(10**6))

    def fresh(name: str) -> Path:
        path = base / f"{name}{next(counter)}-0"
        return path

    print(f"dir {base}; {MSG} B payloads ({MSG + 10} B on disk); best of {reps} runs; cpu load {os.getloadavg()[0]:.1f}")
    cases = [
        ("append, sets of 50, no flush", set50, n50, 50, NO_FLUSH, False),
        ("append, sets of 1, no flush", set1, n1, 1, NO_FLUSH, False),
        ("append, sets of 50, fsync per set", set50, nf50, 50, LogSettings(flush_interval_messages=50), True),
        ("append, sets of 1, fsync per message", set1, nf1, 1, LogSettings(flush_interval_messages=1), True),
    ]
    keep = None
    for name, chunk, count, per, settings, fsync in cases:
        # Alternate reference and log runs so both see the same (shared, noisy) machine.
        ref = t = None
        lg = None
        for _ in range(reps):
            r, _ = best_of(1, raw_write, base / "raw", chunk, count, fsync)
            ref = r if ref is None or r.wall < ref.wall else ref
            a, run_lg = best_of(1, lambda: log_append(fresh("a"), chunk, count, settings))
            if t is None or a.wall < t.wall:
                t = a
                if lg is not None:
                    lg.close()
                lg = run_lg
            else:
                run_lg.close()
        row(name, count * per, t, ref)
        if keep is None:
            keep = lg
        else:
            lg.close()
    print(f"{'fdatasync after a 10.5 KB append':<40} median {fsync_latency(base / 'fs', set50, 200) * 1e3:.2f} ms "
          f"(200 samples)", flush=True)
    raw_write(base / "raw", set50, n50, False)
    ref, _ = best_of(reps, raw_read, base / "raw")
    for mode, label in (("bytes", "read 300 KB slices, bytes out"),
                        ("validate", "read + CRC-validate (scan)"),
                        ("decode", "read + decode to MessageAndOffset")):
        t, n = best_of(reps, log_read, keep, mode)
        assert n == n50 * 50, (mode, n)
        row(label, n, t, ref)
    # The floor of any per-message validation in Python: one memoryview slice + zlib.crc32 each.
    floor, _ = best_of(reps, crc_floor, set50, n50)
    print(f"{'(floor: slice + zlib.crc32 per message)':<40} {n50 * 50 / floor.wall:>11,.0f} msg/s; "
          f"scan of sets of 50 alone: {n50 * 50 / best_of(reps, scan_only, set50, n50)[0].wall:,.0f} msg/s", flush=True)
    keep.close()
    for f in base.iterdir():
        shutil.rmtree(f) if f.is_dir() else f.unlink()

    print(f"\nread cost at a fixed offset as the log grows (segments of {args.segment_size >> 20} MB)")
    grow = Log(base / "grow-0", LogSettings(flush_interval_messages=2**31 - 1, flush_interval_ms=2**31 - 1,
                                            file_size=args.segment_size), SystemClock())
    fixed = None
    checkpoints = [c for c in (10 << 20, 100 << 20, 500 << 20, 1 << 30, 2 << 30, 4 << 30) if c <= args.max_size]
    if not checkpoints or checkpoints[-1] != args.max_size:
        checkpoints.append(args.max_size)
    results = []
    for target in checkpoints:
        while grow.size < target:
            off = grow.append(set50)
            if fixed is None:
                fixed = off + 25 * len(set1)  # the 26th message: inside the first index interval
        grow.flush()
        g, b = timed_reads(grow, fixed, 2000)
        recent = grow.end_offset - 1000 * len(set1)
        g2, _ = timed_reads(grow, recent, 2000)
        results.append((target, g, b, g2, len(grow.segment_bases())))
        print(f"  log {grow.size / 2**20:>7.0f} MB, {len(grow.segment_bases())} segment(s): read at fixed offset "
              f"{g:6.1f} µs, reject non-boundary {b:5.1f} µs, read near the end {g2:6.1f} µs", flush=True)
    first, last = results[0], results[-1]
    print(f"  growth {first[0] >> 20} MB -> {last[0] >> 20} MB: read cost ratio {last[1] / first[1]:.2f}, "
          f"reject ratio {last[2] / first[2]:.2f}")
    grow.close()
    t = time.perf_counter()
    reopened = Log(base / "grow-0", NO_FLUSH, SystemClock())
    t_open = time.perf_counter() - t
    t = time.perf_counter()
    reopened.read_bytes(fixed, FETCH)
    t_first = time.perf_counter() - t
    segs = reopened.segments()
    print(f"  reopen {t_open:.2f} s (recovery scan of a {segs[-1].size >> 20} MB newest segment)")
    if len(segs) > 1:
        print(f"  first read in a {segs[0].size >> 20} MB older segment with its saved index {t_first * 1e3:.1f} ms")
        with Timer() as tv:
            segs[0].verify()
        print(f"  background verification (CRC scan) of that segment {tv.wall:.2f} s "
              f"({segs[0].size / tv.wall / 2**20:.0f} MB/s, {segs[0].size / tv.cpu / 2**20:.0f} MB per CPU-s)")
        for idx in (base / "grow-0").glob("*.index"):
            idx.unlink()
        reopened.close()
        reopened = Log(base / "grow-0", NO_FLUSH, SystemClock())
        with Timer() as tf:
            reopened.read_bytes(fixed, FETCH)
        print(f"  first read there without a saved index (validating scan builds it) {tf.wall:.2f} s")
    reopened.close()
    print(f"\n| operation ({MSG} B payloads, {MSG + 10} B on disk) | log, msg/s (wall) | raw disk, msg/s | ratio "
          "| log, msg/s per CPU-s |\n| --- | ---: | ---: | ---: | ---: |")
    print("\n".join(table))
    print("\n| log size | segments | read at fixed offset | reject non-boundary | read near the end |\n"
          "| ---: | ---: | ---: | ---: | ---: |")
    for target, g, b, g2, n in results:
        print(f"| {target >> 20} MB | {n} | {g:.1f} µs | {b:.1f} µs | {g2:.1f} µs |")


if __name__ == "__main__":
    main()
