"""Consumer-side iteration with CRC checks: ``iter_messages`` and ``MessageBatch`` against the least work it must do.

One fetch-sized buffer (default 1,400 messages of 200 bytes, ~300 KB, batches of
50) is iterated many times. The reference, run in the same process between the
rounds, is the bare loop a consumer cannot avoid: unpack each header, CRC the
payload and cut it into a ``bytes``. The ratio says what ``iter_messages``
(validation, then one ``MessageAndOffset`` per message) costs above that, and
``MessageBatch.of`` (the same validation, boundaries recorded in one array, no
per-message object: what ``SimpleConsumer.fetch_batch`` does per pull) below it.

    .venv/bin/python bench/bench_iter_messages.py [--messages 1400] [--rounds 7] [--magic 2]

``--magic`` picks the format of the buffer (docs/log-format.md): 2, this
product's default, is the hot path; 1 and 0 (Kafka 0.7's) go through the
per-message slow path of ``message_set.scan``. The reference loop applies the
same magic's CRC rule.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import struct
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest.records.message import CRC_SEED, HEADER, HEADER_SIZE, HEADER_SIZE_V0, LENGTH, LENGTH_SIZE  # noqa: E402
from ingest.records.message_batch import MessageBatch, iter_messages  # noqa: E402
from ingest.records.message_set import encode_message_set  # noqa: E402

CRC_FIELD = struct.Struct(">I")


def reference(buf: bytes) -> int:
    """Header unpack + CRC + one bytes slice per message: the floor for a validating consumer
    (of one known magic: it does not even look at the magic byte)."""
    n, pos, end, unpack, crc32 = 0, 0, len(buf), HEADER.unpack_from, zlib.crc32
    while pos + HEADER_SIZE <= end:
        length, _magic, attributes, crc = unpack(buf, pos)
        nxt = pos + LENGTH_SIZE + length
        payload = buf[pos + HEADER_SIZE:nxt]
        if crc32(payload, CRC_SEED[attributes]) != crc:  # magic 2's rule: attributes + payload
            raise ValueError(f"CRC mismatch at {pos}")
        n += 1
        pos = nxt
    return n


def reference_payload_crc(buf: bytes, header_size: int) -> int:
    """The same floor for Kafka 0.7's formats: CRC over the payload only (magic 0: 9-byte header)."""
    n, pos, end, unpack, crc32 = 0, 0, len(buf), CRC_FIELD.unpack_from, zlib.crc32
    crc_at = header_size - 4
    while pos + header_size <= end:
        (length,) = LENGTH.unpack_from(buf, pos)
        (crc,) = unpack(buf, pos + crc_at)
        nxt = pos + LENGTH_SIZE + length
        payload = buf[pos + header_size:nxt]
        if crc32(payload) != crc:
            raise ValueError(f"CRC mismatch at {pos}")
        n += 1
        pos = nxt
    return n


def product(buf: bytes) -> int:
    n = 0
    for _m in iter_messages(buf, 0):
        n += 1
    return n


def batch(buf: bytes) -> int:
    return len(MessageBatch.of(buf, 0))


def best_ns_per_message(fn, buf: bytes, fetches: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        n = sum(fn(buf) for _ in range(fetches))
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1400)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--fetches", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--magic", type=int, choices=(0, 1, 2), default=2)
    args = ap.parse_args(argv)
    buf = b"".join(encode_message_set([b"x" * args.size] * 50, magic=args.magic) for _ in range(args.messages // 50))
    if args.magic == 2:
        ref_fn = reference
    else:
        hs = HEADER_SIZE_V0 if args.magic == 0 else HEADER_SIZE
        ref_fn = lambda b: reference_payload_crc(b, hs)  # noqa: E731
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.2f}; one fetch of {len(buf):,} bytes, {args.messages:,} messages "
          f"of magic {args.magic}")
    ours = ref = whole = float("inf")
    for _ in range(3):  # interleaved, best of each: the machine's cores are shared
        ref = min(ref, best_ns_per_message(ref_fn, buf, args.fetches, args.rounds))
        ours = min(ours, best_ns_per_message(product, buf, args.fetches, args.rounds))
        whole = min(whole, best_ns_per_message(batch, buf, args.fetches, args.rounds))
    print(f"reference (unpack + CRC + slice): {ref:,.0f} ns/message ({1e9 / ref:,.0f} msg/s)")
    print(f"iter_messages:                    {ours:,.0f} ns/message ({1e9 / ours:,.0f} msg/s)")
    print(f"MessageBatch.of:                  {whole:,.0f} ns/message ({1e9 / whole:,.0f} msg/s)")
    print(f"ratio iter_messages / reference:  {ours / ref:.2f}x")
    print(f"ratio MessageBatch.of / reference: {whole / ref:.2f}x")
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
