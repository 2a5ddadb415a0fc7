"""ingest.records.crc.crc32 (ISA-L's) returns exactly zlib.crc32's values: random data, lengths, seeds, buffer types."""
from __future__ import annotations

import random
import zlib

from ingest.records import crc
from ingest.records.message import CRC_SEED


def test_isal_is_the_implementation_in_this_environment():
    assert crc.CRC32_IMPLEMENTATION == "isal"  # a declared dependency (pyproject.toml)


def test_crc32_equals_zlib_on_random_data_lengths_seeds_and_buffer_types():
    rng = random.Random(16)
    blob = rng.randbytes(70_000)
    seeds = [0, 1, 0xFFFFFFFF, *CRC_SEED[:3], *(rng.getrandbits(32) for _ in range(5))]
    lengths = [*range(0, 70), 127, 128, 129, 200, 255, 256, 257, 1000, 4096, 65_537]
    for n in lengths:
        start = rng.randrange(0, len(blob) - n)
        data = blob[start:start + n]
        for seed in seeds:
            want = zlib.crc32(data, seed)
            assert crc.crc32(data, seed) == want
            assert crc.crc32(memoryview(blob)[start:start + n], seed) == want
            assert crc.crc32(bytearray(data), seed) == want
        assert crc.crc32(data) == zlib.crc32(data)
