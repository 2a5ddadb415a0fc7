"""The one small storage interface every loader, audit and compaction path goes through.

A :class:`Storage` is resolved from a URI by :func:`ingest.storage.open_storage`.
Paths are plain strings: absolute POSIX-style paths inside the storage (what
:meth:`Storage.join` returns), never host-qualified URIs; :meth:`Storage.spark_path`
turns one into what Spark's Hadoop client should read.

Atomicity contract (what the commit protocol relies on):

- :meth:`Storage.rename` of a file is atomic and fails with :class:`StorageError`
  when the destination exists (HDFS ``rename`` semantics; locally ``link`` +
  ``unlink``), so two committers can never both win the same name.
- :meth:`Storage.write_atomic` writes a temporary sibling and renames it over the
  destination: a reader sees the old bytes or the new bytes, never a prefix.

Concurrency: a Storage holds no mutable state beyond its client; it may be
shared between threads of one process. It is cheap to re-open from its URI,
which is how Spark tasks get one (URIs pickle; clients do not).
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import BinaryIO, Iterator


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One directory entry."""

    path: str
    size: int
    is_dir: bool
    mtime_ms: int

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


class Storage:
    """Abstract base; see the module docstring for the contract."""

    uri: str
    root: str

    def join(self, *parts: str) -> str:
        """``root`` joined with ``parts`` (a part starting with ``/`` is taken as already rooted)."""
        if parts and parts[0].startswith(self.root):
            return posixpath.join(*parts)
        return posixpath.join(self.root, *parts)

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def status(self, path: str) -> FileInfo | None:
        """The entry at ``path``, or None when absent."""
        raise NotImplementedError

    def list(self, path: str) -> list[FileInfo]:
        """Entries directly under ``path`` sorted by name; [] when ``path`` is absent."""
        raise NotImplementedError

    def walk_files(self, path: str) -> Iterator[FileInfo]:
        """Every file below ``path``, depth first, sorted by name within a directory."""
        for info in self.list(path):
            if info.is_dir:
                yield from self.walk_files(info.path)
            else:
                yield info

    def read_bytes(self, path: str) -> bytes:
        raise NotImplementedError

    def open_read(self, path: str) -> BinaryIO:
        """A seekable binary file opened for reading, for readers that must not hold a whole file in memory."""
        raise NotImplementedError

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        raise NotImplementedError

    def write_atomic(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def open_write(self, path: str) -> BinaryIO:
        """A binary file opened for writing; the file appears complete when closed."""
        raise NotImplementedError

    def rename(self, src: str, dst: str) -> None:
        raise NotImplementedError

    def delete(self, path: str, recursive: bool = False) -> None:
        """Remove ``path``; absent is not an error (deletes are retried by recovery)."""
        raise NotImplementedError

    def mkdirs(self, path: str) -> None:
        raise NotImplementedError

    def spark_path(self, path: str) -> str:
        raise NotImplementedError

    def local_path(self, path: str) -> str | None:
        """A local filesystem path for ``path`` when the storage is local, else None."""
        return None
