"""CRC-32 of message payloads (IEEE polynomial, zlib's values): ISA-L's implementation, else zlib's.

``crc32(data, value=0)`` returns exactly what ``zlib.crc32`` returns (same
polynomial, same seed chaining; tests/broker/test_crc.py compares the two on
random data, lengths and seeds). The validating loops
(:func:`ingest.broker.message_scan.scan`, :class:`ingest.broker.message_batch.MessageBatch`)
call it once per message; ``python-isal`` (``isal.isal_zlib.crc32``, ISA-L's
folding CRC) takes a 200-byte payload in about a third of the time of the
system zlib 1.2.13 (docs/dependencies.md, docs/performance.md "Consumer batches").
When ``isal`` cannot be imported (a platform without its wheel) zlib's is used:
the same values, slower.
"""
from __future__ import annotations

import logging
import zlib

log = logging.getLogger(__name__)

try:
    from isal.isal_zlib import crc32 as _isal_crc32
except ImportError:  # pragma: no cover - isal is a declared dependency; this keeps a wheel-less platform working
    _isal_crc32 = None
    log.debug("isal is not installed: CRC-32 falls back to zlib.crc32 (same values, slower)")

crc32 = _isal_crc32 if _isal_crc32 is not None else zlib.crc32
"""``crc32(data, value=0) -> int``: CRC-32/IEEE of ``data`` (any buffer) continuing from ``value``."""

IMPLEMENTATION = "isal" if _isal_crc32 is not None else "zlib"
