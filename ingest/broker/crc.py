"""CRC-32 of message payloads (IEEE polynomial, zlib's values): ISA-L's implementation, else zlib's.

``crc32(data, value=0)`` returns exactly what ``zlib.crc32`` returns (same
polynomial, same seed chaining; tests/broker/test_crc.py compares the two on
random data, lengths and seeds). The validating loops
(:func:`ingest.broker.message_scan.scan`, :class:`ingest.broker.message_batch.MessageBatch`)
call it once per message; ``python-isal`` (``isal.isal_zlib.crc32``, ISA-L's
folding CRC) takes a 200-byte payload in about a third of the time of the
system zlib 1.2.13 (docs/dependencies.md, docs/performance.md "Consumer batches").
When ``isal`` cannot be imported (a platform without its wheel) zlib's is used:
the same values, slower. The choice is made once, in :mod:`ingest.records.crc`
(which the Kafka formats below the broker share); this module names it for the 0.7 path.
"""
from __future__ import annotations

from ingest.records.crc import CRC32_IMPLEMENTATION as IMPLEMENTATION
from ingest.records.crc import crc32

__all__ = ["IMPLEMENTATION", "crc32"]
