"""HDFS-compatible file checksums (``MD5-of-<n>MD5-of-<bytesPerCRC>CRC32C``), computed locally.

HDFS keeps a CRC per ``bytes.per.checksum`` (default 512) bytes of every block
(``dfs.checksum.type``, default CRC32C). ``getFileChecksum`` (WebHDFS
``GETFILECHECKSUM``) combines them without reading the data again:

- per block: ``MD5( crc_0 || crc_1 || ... )``, each CRC as a big-endian uint32,
  one per chunk of ``bytes_per_crc`` bytes (the block's last chunk may be short);
- per file: ``MD5( blockmd5_0 || blockmd5_1 || ... )``.

WebHDFS answers ``{"FileChecksum": {"algorithm": "MD5-of-<crcPerBlock>MD5-of-<bytesPerCRC>CRC32C",
"bytes": "<hex>", "length": 28}}`` where the 28 ``bytes`` are::

    offset  size  field
    0       4     bytesPerCRC   int32 big-endian
    4       8     crcPerBlock   int64 big-endian
    12      16    file MD5

``crcPerBlock`` is ``blockSize / bytesPerCRC`` when the file has more than one
block and 0 when it has one (HDFS takes it from the first block only when there
are several: a quirk reproduced here so that the strings compare equal).

Comparing this checksum computed over the bytes we sent with the one the NameNode
reports verifies that what was written is what landed. CRC-32C is not
``zlib.crc32`` (CRC-32/IEEE), which is why ``crcmod`` is a dependency.
"""
from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass
from typing import Callable

import crcmod.predefined

from ingest.errors import StorageError

CHECKSUM_HEADER = struct.Struct(">iq")  # bytesPerCRC, crcPerBlock
CRC = struct.Struct(">I")
DEFAULT_BYTES_PER_CRC = 512
DEFAULT_BLOCK_SIZE = 128 * 1024 * 1024

#: CRC-32C (Castagnoli), check value crc32c(b"123456789") == 0xE3069283.
crc32c: Callable[[bytes], int] = crcmod.predefined.mkCrcFun("crc-32c")

_CRC_FUNCTIONS: dict[str, Callable[[bytes], int]] = {"CRC32C": crc32c, "CRC32": zlib.crc32}


@dataclass(frozen=True, slots=True)
class FileChecksum:
    """An HDFS ``MD5MD5CRC32FileChecksum``: what ``GETFILECHECKSUM`` returns."""

    algorithm: str
    bytes_hex: str
    length: int = 28

    @classmethod
    def from_webhdfs(cls, obj: dict) -> "FileChecksum":
        """From the ``FileChecksum`` JSON object (the ``hdfs`` client's ``checksum()`` result)."""
        try:
            return cls(str(obj["algorithm"]), str(obj["bytes"]).lower(), int(obj["length"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise StorageError(f"malformed WebHDFS FileChecksum {obj!r}: need algorithm, bytes, length") from exc

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.bytes_hex}"


def parse_algorithm(algorithm: str) -> tuple[int, str]:
    """``(bytes_per_crc, crc_type)`` from ``MD5-of-<n>MD5-of-<bytesPerCRC><TYPE>``.

    Raises:
        StorageError: not an MD5-of-MD5 checksum over CRC32 or CRC32C (e.g. COMPOSITE-CRC).
    """
    parts = algorithm.split("MD5-of-")
    if len(parts) == 3 and parts[0] == "":
        tail = parts[2]
        for name in ("CRC32C", "CRC32"):
            if tail.endswith(name) and tail[: -len(name)].isdigit():
                return int(tail[: -len(name)]), name
    raise StorageError(f"unsupported HDFS checksum algorithm {algorithm!r}: allowed are "
                       "MD5-of-<n>MD5-of-<bytesPerCRC>CRC32C and ...CRC32 (dfs.checksum.combine.mode=MD5MD5CRC)")


class Md5Md5Crc32:
    """Streaming computation of the HDFS file checksum over bytes fed in any pieces.

    Not thread-safe: one instance per file being written.
    """

    def __init__(self, *, bytes_per_crc: int = DEFAULT_BYTES_PER_CRC, block_size: int = DEFAULT_BLOCK_SIZE,
                 crc_type: str = "CRC32C") -> None:
        if bytes_per_crc <= 0 or block_size <= 0 or block_size % bytes_per_crc:
            raise StorageError(f"bad checksum geometry: block size {block_size} must be a positive multiple "
                               f"of bytes per CRC {bytes_per_crc}")
        if crc_type not in _CRC_FUNCTIONS:
            raise StorageError(f"unsupported CRC type {crc_type!r}: allowed are {', '.join(_CRC_FUNCTIONS)}")
        self.bytes_per_crc = bytes_per_crc
        self.block_size = block_size
        self.crc_type = crc_type
        self._crc = _CRC_FUNCTIONS[crc_type]
        self._pending = bytearray()  # bytes of the current chunk not yet CRC'd
        self._block_crcs: list[bytes] = []
        self._block_fill = 0  # bytes of the current block seen so far
        self._block_md5s: list[bytes] = []
        self.length = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        self.length += len(view)
        pos = 0
        if self._pending:
            take = min(self.bytes_per_crc - len(self._pending), len(view))
            self._pending += view[:take]
            pos = take
            if len(self._pending) == self.bytes_per_crc:
                self._chunk(bytes(self._pending))
                self._pending.clear()
        n = self.bytes_per_crc
        end = pos + (len(view) - pos) // n * n
        for i in range(pos, end, n):  # whole chunks straight from the caller's buffer
            self._chunk(view[i: i + n])
        self._pending += view[end:]

    def _chunk(self, chunk) -> None:
        self._block_crcs.append(CRC.pack(self._crc(chunk)))
        self._block_fill += len(chunk)
        if self._block_fill == self.block_size:
            self._end_block()

    def _end_block(self) -> None:
        self._block_md5s.append(hashlib.md5(b"".join(self._block_crcs)).digest())
        self._block_crcs = []
        self._block_fill = 0

    def result(self) -> FileChecksum:
        """The checksum of everything fed so far (the instance may not be fed afterwards)."""
        if self._pending:
            self._chunk(bytes(self._pending))
            self._pending.clear()
        if self._block_fill:
            self._end_block()
        crc_per_block = self.block_size // self.bytes_per_crc if len(self._block_md5s) > 1 else 0
        md5 = hashlib.md5(b"".join(self._block_md5s)).digest()
        raw = CHECKSUM_HEADER.pack(self.bytes_per_crc, crc_per_block) + md5
        return FileChecksum(f"MD5-of-{crc_per_block}MD5-of-{self.bytes_per_crc}{self.crc_type}", raw.hex(), len(raw))


def file_checksum(data: bytes, *, bytes_per_crc: int = DEFAULT_BYTES_PER_CRC,
                  block_size: int = DEFAULT_BLOCK_SIZE, crc_type: str = "CRC32C") -> FileChecksum:
    """The HDFS file checksum of ``data`` written with the given block geometry."""
    c = Md5Md5Crc32(bytes_per_crc=bytes_per_crc, block_size=block_size, crc_type=crc_type)
    c.update(data)
    return c.result()
