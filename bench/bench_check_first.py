"""What a leader's check of the first message of each follower fetch costs, in process, in one run.

A follower's REPLICA_FETCH is answered by ``Log.read(offset, max_bytes, limit=log_end,
check_first=True)`` (docs/replication.md, "Damaged bytes on the leader"): one ``pread`` of the
first message and one CRC on top of the read. This bench reads the same verified segment both
ways, in alternating rounds, and prints microseconds per read and the ratio; the bytes are then
sent with ``sendfile`` either way (not measured here).

Usage: python bench/bench_check_first.py [--dir DIR] [--message-size 200] [--fetch 1048576] [--rounds 10]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest.broker.log import Log, LogSettings  # noqa: E402
from ingest.clock import SystemClock  # noqa: E402
from ingest.records.message_set import encode_message_set  # noqa: E402


def fill(lg: Log, message_size: int, total: int) -> list[int]:
    """Append ``total`` bytes of ``message_size``-byte messages in sets of 100; the set offsets."""
    payload = b"x" * (message_size - 10)
    starts = []
    while lg.log_end < total:
        starts.append(lg.append(encode_message_set([payload] * 100)))
    lg.flush()
    return starts


def per_read_us(lg: Log, offsets: list[int], fetch: int, check: bool) -> float:
    began = time.perf_counter()
    for off in offsets:
        lg.read(off, fetch, limit=lg.log_end, check_first=check).release()
    return (time.perf_counter() - began) / len(offsets) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="where the log goes (default: a temp dir)")
    ap.add_argument("--message-size", type=int, default=200)
    ap.add_argument("--fetch", type=int, default=1 << 20, help="bytes per read (replica.fetch.max.bytes)")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-check-first-"))
    try:
        lg = Log(root / "t-0", LogSettings(flush_interval_messages=2**31 - 1, file_size=64 << 20), SystemClock())
        starts = fill(lg, args.message_size, 32 << 20)
        offsets = starts[:: max(1, len(starts) // 2000)]
        per_read_us(lg, offsets, args.fetch, True)   # warm the page cache and the code
        plain, checked = [], []
        for i in range(args.rounds):
            for check in ((False, True) if i % 2 == 0 else (True, False)):
                (checked if check else plain).append(per_read_us(lg, offsets, args.fetch, check))
        p, c = statistics.median(plain), statistics.median(checked)
        print(f"{len(offsets)} reads of up to {args.fetch} bytes, {args.message_size}-byte messages, "
              f"{args.rounds} alternating rounds (median)")
        print(f"  Log.read                     {p:8.2f} us/read")
        print(f"  Log.read(check_first=True)   {c:8.2f} us/read   (+{c - p:.2f} us, {c / p:.2f}x)")
        lg.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
