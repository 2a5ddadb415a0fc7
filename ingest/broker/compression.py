"""Codec table: none, gzip, snappy; compress and decompress a whole message set.

- gzip: RFC 1952 gzip stream (``zlib`` with ``wbits=31``), what Kafka 0.7's
  ``GZIPOutputStream`` produced. Multi-member streams are accepted on read.
- snappy: the raw Snappy *block* format (no xerial/framing header), produced
  and read with ``cramjam.snappy.compress_raw`` / ``decompress_raw``. It is
  byte-identical to ``python-snappy``'s ``snappy.compress`` (python-snappy 0.7
  is itself a thin layer over cramjam), so we depend on cramjam directly.

Decompression is capped at :data:`MAX_DECOMPRESSED_SIZE` so a small corrupt
or hostile wrapper cannot exhaust memory.
"""
from __future__ import annotations

import zlib

from ingest.broker.message import CODEC_GZIP, CODEC_NAMES, CODEC_NONE, CODEC_SNAPPY
from ingest.errors import InvalidMessageError, UnsupportedCodecError

MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024
GZIP_WBITS = 31
GZIP_LEVEL = 6

try:  # cramjam ships manylinux wheels; without it snappy is unavailable, gzip still works
    import cramjam as _cramjam
except ImportError:  # pragma: no cover - cramjam is a declared dependency
    _cramjam = None


def codec_name(codec: int) -> str:
    return CODEC_NAMES.get(codec, f"unknown({codec})")


def snappy_available() -> bool:
    return _cramjam is not None


def compress(codec: int, data: bytes | memoryview) -> bytes:
    """Compress ``data`` (an encoded message set) with ``codec``."""
    if codec == CODEC_GZIP:
        c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
        return c.compress(data) + c.flush()
    if codec == CODEC_SNAPPY:
        if _cramjam is None:
            raise UnsupportedCodecError("snappy needs the 'cramjam' package (pip install cramjam)")
        return bytes(_cramjam.snappy.compress_raw(bytes(data)))
    if codec == CODEC_NONE:
        return bytes(data)
    raise UnsupportedCodecError(f"unknown codec {codec}; allowed are {sorted(CODEC_NAMES)}")


def decompress(codec: int, data: bytes | memoryview, *, limit: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress a wrapper payload.

    Raises:
        InvalidMessageError: the data does not decompress, or exceeds ``limit``.
        UnsupportedCodecError: unknown codec or snappy without cramjam.
    """
    if codec == CODEC_GZIP:
        return _gunzip(data, limit)
    if codec == CODEC_SNAPPY:
        if _cramjam is None:
            raise UnsupportedCodecError("snappy needs the 'cramjam' package (pip install cramjam)")
        declared = _snappy_length(data)
        if declared is None or declared > limit:
            raise InvalidMessageError(
                f"snappy payload declares {declared} uncompressed bytes; allowed is at most {limit}"
                if declared is not None else "snappy payload has no valid length preamble"
            )
        try:
            out = _cramjam.snappy.decompress_raw(bytes(data))
        except Exception as exc:  # cramjam raises its own DecompressionError
            raise InvalidMessageError(f"snappy payload does not decompress: {exc}") from exc
        if len(out) > limit:
            raise InvalidMessageError(f"snappy payload decompresses to {len(out)} bytes, above the limit {limit}")
        return bytes(out)
    if codec == CODEC_NONE:
        return bytes(data)
    raise UnsupportedCodecError(f"unknown codec {codec}; allowed are {sorted(CODEC_NAMES)}")


def _snappy_length(data: bytes | memoryview) -> int | None:
    """The uncompressed length a raw Snappy block declares (its varint preamble)."""
    value = shift = 0
    for i in range(min(len(data), 5)):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    return None


def _gunzip(data: bytes | memoryview, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    rest = bytes(data)
    try:
        while rest:
            d = zlib.decompressobj(GZIP_WBITS)
            chunk = d.decompress(rest, limit - total + 1)
            total += len(chunk)
            parts.append(chunk)
            if total > limit or d.unconsumed_tail:
                raise InvalidMessageError(f"gzip payload decompresses to more than the limit {limit} bytes")
            if not d.eof:
                raise InvalidMessageError("gzip payload is truncated")
            rest = d.unused_data
    except zlib.error as exc:
        raise InvalidMessageError(f"gzip payload does not decompress: {exc}") from exc
    return b"".join(parts)
