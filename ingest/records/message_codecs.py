"""The 0.7 messages' codecs: none, gzip, snappy (a raw block); compress a set, inflate a wrapper within bounds.

Kafka's own compression types (lz4, zstd, xerial-framed snappy) are :mod:`ingest.records.compression`.

- gzip: RFC 1952 gzip stream (``zlib`` with ``wbits=31``), what Kafka 0.7's
  ``GZIPOutputStream`` produced. Multi-member streams are accepted on read.
- snappy: the raw Snappy *block* format (no xerial/framing header), produced
  and read with ``cramjam.snappy.compress_raw`` / ``decompress_raw``. It is
  byte-identical to ``python-snappy``'s ``snappy.compress`` (python-snappy 0.7
  is itself a thin layer over cramjam), so we depend on cramjam directly.

Decompression streams and stops at a limit (:func:`inflate`), so a small
hostile wrapper (a "gzip bomb": 1 KB of deflate is up to ~1 MB of output)
costs at most the limit in memory, never what it would inflate to:

- gzip is inflated by ``zlib.decompressobj`` in chunks of at most
  :data:`INFLATE_CHUNK` bytes (``max_length``), and the caller sees each chunk
  before the next is made, so it can stop at the first inner message that is
  too large;
- snappy's raw block states its uncompressed length in a varint preamble, and
  a block can never expand more than 64/3 times (a 3-byte copy element makes
  at most 64 bytes), so the declared length is checked against the limit and
  against the block's size before anything is allocated; the block is then
  decompressed into a buffer of exactly that length
  (``cramjam.snappy.decompress_raw_into``), which refuses to write more.
"""
from __future__ import annotations

import zlib
from typing import Iterator

from ingest.errors import InvalidMessageError, MessageTooLargeError, UnsupportedCodecError
from ingest.records.message import CODEC_GZIP, CODEC_NAMES, CODEC_NONE, CODEC_SNAPPY

MAX_INFLATED_SIZE = 100 * 1024 * 1024
"""Default bound on what one wrapper may inflate to: what one uncompressed request may carry
(the default of the broker's ``max.socket.request.bytes``), so compression never lets a
client smuggle more than a plain request could. Callers that know their bound pass it."""
INFLATE_CHUNK = 256 * 1024
"""Most bytes :func:`inflate` produces per gzip chunk."""
SNAPPY_MAX_EXPANSION = (64, 3)
"""A raw snappy block's body inflates at most 64/3 times (a 3-byte copy-2 element makes 64 bytes)."""
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


def decompress(codec: int, data: bytes | memoryview, *, limit: int = MAX_INFLATED_SIZE) -> bytes:
    """Decompress a wrapper payload whole (at most ``limit`` bytes); see :func:`inflate`."""
    return b"".join(inflate(codec, data, limit=limit))


def inflate(codec: int, data: bytes | memoryview, *, limit: int) -> Iterator[bytes | bytearray]:
    """Decompress a wrapper payload as it streams, in chunks, never past ``limit`` bytes in total.

    Stopping the iteration early stops the decompression: nothing after the
    last chunk taken is ever produced.

    Raises:
        MessageTooLargeError: the payload inflates to more than ``limit`` bytes
            (raised before the chunk that crosses it is handed out).
        InvalidMessageError: the data does not decompress (corrupt, truncated).
        UnsupportedCodecError: unknown codec or snappy without cramjam.
    """
    if codec == CODEC_GZIP:
        return _gunzip(data, limit)
    if codec == CODEC_SNAPPY:
        return iter((_unsnappy(data, limit),))
    if codec == CODEC_NONE:
        if len(data) > limit:
            raise MessageTooLargeError(f"payload of {len(data)} bytes exceeds the limit {limit}")
        return iter((bytes(data),))
    raise UnsupportedCodecError(f"unknown codec {codec}; allowed are {sorted(CODEC_NAMES)}")


def _unsnappy(data: bytes | memoryview, limit: int) -> bytearray:
    if _cramjam is None:
        raise UnsupportedCodecError("snappy needs the 'cramjam' package (pip install cramjam)")
    declared = _snappy_length(data)
    if declared is None:
        raise InvalidMessageError("snappy payload has no valid length preamble")
    if declared > limit:
        raise MessageTooLargeError(
            f"snappy payload declares {declared} uncompressed bytes; allowed is at most {limit}")
    num, den = SNAPPY_MAX_EXPANSION
    if declared * den > len(data) * num:
        raise InvalidMessageError(
            f"snappy payload of {len(data)} bytes declares {declared} uncompressed bytes, more than "
            f"a raw snappy block can expand to ({num}/{den} of its size)")
    out = bytearray(declared)
    try:
        written = _cramjam.snappy.decompress_raw_into(data, out)  # reads any buffer, no copy
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise InvalidMessageError(f"snappy payload does not decompress: {exc}") from exc
    if written != declared:
        raise InvalidMessageError(f"snappy payload declares {declared} bytes but decompresses to {written}")
    return out


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


def _gunzip(data: bytes | memoryview, limit: int) -> Iterator[bytes]:
    """Inflate gzip member after member, at most INFLATE_CHUNK output bytes per step."""
    total = 0
    rest: bytes | memoryview = data
    try:
        while rest:
            d = zlib.decompressobj(GZIP_WBITS)
            pending = rest
            while not d.eof:
                chunk = d.decompress(pending, INFLATE_CHUNK)
                if not chunk and len(d.unconsumed_tail) == len(pending):  # no progress: input ran out
                    raise InvalidMessageError("gzip payload is truncated")
                pending = d.unconsumed_tail
                if not chunk:
                    continue
                total += len(chunk)
                if total > limit:
                    raise MessageTooLargeError(f"gzip payload inflates to more than the limit of {limit} bytes")
                yield chunk
            rest = d.unused_data
    except zlib.error as exc:
        raise InvalidMessageError(f"gzip payload does not decompress: {exc}") from exc
