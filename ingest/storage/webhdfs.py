"""HDFS storage through WebHDFS (the ``hdfs`` package's ``InsecureClient``).

The only module of the product that knows HDFS. URIs:

- ``webhdfs://namenode:9870/path``: WebHDFS at ``http://namenode:9870``; Spark reads
  the same ``webhdfs://`` URI through its own Hadoop client.
- ``hdfs://namenode:8020/path``: Spark reads ``hdfs://`` natively; this module talks to
  the NameNode's WebHDFS endpoint, by default ``http://namenode:9870`` (override with
  the ``webhdfs_url`` argument or the ``INGEST_WEBHDFS_URL`` environment variable).

The user is the ``user`` argument, else ``HADOOP_USER_NAME``, else the login name.

WebHDFS ``RENAME`` returns false when the destination exists, which is exactly the
no-replace rename the commit protocol needs. There is no overwriting rename in
WebHDFS, so :meth:`write_atomic` is write-temp, delete, rename: a reader may briefly
find the file absent (never half-written). The commit protocol only relies on
no-replace renames of fresh names.

Write verification: after every write (``write_bytes``, ``write_atomic``, the
close of ``open_write``) the storage asks the NameNode for the landed file's
checksum (``GETFILECHECKSUM`` through the client's ``checksum()``) and compares it
with the same ``MD5-of-<n>MD5-of-512CRC32C`` computed over the bytes it sent
(:mod:`ingest.storage.checksum`, block geometry taken from the landed file's
status). A mismatch raises :class:`StorageError` naming the path and both
checksums; the landed file is deleted and ``write_atomic`` never renames it over
the old one. Turn off with ``verify_checksums=False`` (one extra round trip and a
CRC pass per file; see docs/storage.md).
"""
from __future__ import annotations

import getpass
import logging
import os
import posixpath
import tempfile
import uuid
from typing import BinaryIO
from urllib.parse import urlparse

from ingest.errors import StorageError
from ingest.storage.base import FileInfo, Storage
from ingest.storage.checksum import DEFAULT_BLOCK_SIZE, FileChecksum, Md5Md5Crc32, parse_algorithm

log = logging.getLogger(__name__)

DEFAULT_WEBHDFS_PORT = 9870
_DOWNLOAD_CHUNK = 1024 * 1024


class _UploadOnClose:
    """A local temp file that is uploaded to HDFS when closed (file-like: write/tell/close)."""

    def __init__(self, storage: "WebHdfsStorage", path: str) -> None:
        self._tmp = tempfile.TemporaryFile(prefix="ingest-upload-")
        self._storage = storage
        self._path = path
        self.closed = False

    def write(self, data) -> int:
        return self._tmp.write(data)

    def tell(self) -> int:
        return self._tmp.tell()

    def flush(self) -> None:
        self._tmp.flush()

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._tmp.flush()
            self._tmp.seek(0)
            self._storage._upload(self._path, self._tmp)
            self._storage._verify(self._path, _file_chunks(self._tmp))
        finally:
            self._tmp.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.closed = True
            self._tmp.close()


class WebHdfsStorage(Storage):
    """Storage over WebHDFS. Thread-safe as the ``hdfs`` client is (one session per client)."""

    def __init__(self, uri: str, *, webhdfs_url: str | None = None, user: str | None = None,
                 verify_checksums: bool = True) -> None:
        from hdfs import InsecureClient  # imported here: only HDFS users pay for it

        parsed = urlparse(uri)
        if parsed.scheme not in ("webhdfs", "hdfs") or not parsed.hostname:
            raise StorageError(f"not a webhdfs:// or hdfs:// URI with a host: {uri!r}")
        self.scheme = parsed.scheme
        self.netloc = parsed.netloc
        self.root = posixpath.normpath(parsed.path or "/")
        self.uri = f"{parsed.scheme}://{parsed.netloc}{self.root}"
        if webhdfs_url is None:
            webhdfs_url = os.environ.get("INGEST_WEBHDFS_URL")
        if webhdfs_url is None:
            port = parsed.port if parsed.scheme == "webhdfs" and parsed.port else DEFAULT_WEBHDFS_PORT
            webhdfs_url = f"http://{parsed.hostname}:{port}"
        self.webhdfs_url = webhdfs_url
        self.user = user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        self._client = InsecureClient(webhdfs_url, user=self.user)
        self.verify_checksums = verify_checksums

    def __reduce__(self):
        return (_reopen, (self.uri, self.webhdfs_url, self.user, self.verify_checksums))

    # --- reads ----------------------------------------------------------------------

    def _call(self, what: str, path: str, fn, *args, **kwargs):
        from hdfs.util import HdfsError

        try:
            return fn(*args, **kwargs)
        except HdfsError as exc:
            raise StorageError(f"webhdfs {what} {path} failed: {exc}") from exc
        except OSError as exc:  # connection refused, reset
            raise StorageError(f"webhdfs {what} {path} failed: cannot reach {self.webhdfs_url}: {exc}") from exc

    def exists(self, path: str) -> bool:
        return self.status(path) is not None

    def status(self, path: str) -> FileInfo | None:
        st = self._call("status", path, self._client.status, path, strict=False)
        if st is None:
            return None
        return _info(path, st)

    def list(self, path: str) -> list[FileInfo]:
        st = self.status(path)
        if st is None:
            return []
        if not st.is_dir:
            raise StorageError(f"cannot list {path}: not a directory")
        entries = self._call("list", path, self._client.list, path, status=True)
        return sorted((_info(posixpath.join(path, name), s) for name, s in entries), key=lambda i: i.path)

    def read_bytes(self, path: str) -> bytes:
        def _read():
            with self._client.read(path) as reader:
                return reader.read()

        return self._call("read", path, _read)

    def open_read(self, path: str) -> BinaryIO:
        # Parquet readers seek; a WebHDFS read is a forward-only HTTP stream: copy it into a local
        # temporary file in chunks (memory stays one chunk; the file goes away when closed).
        tmp = tempfile.TemporaryFile(prefix="ingest-download-")

        def _download():
            with self._client.read(path, chunk_size=_DOWNLOAD_CHUNK) as chunks:
                for chunk in chunks:
                    tmp.write(chunk)

        try:
            self._call("read", path, _download)
        except BaseException:
            tmp.close()
            raise
        tmp.seek(0)
        return tmp  # type: ignore[return-value]

    # --- writes ---------------------------------------------------------------------

    def _upload(self, path: str, data, overwrite: bool = False) -> None:
        self._call("write", path, self._client.write, path, data=data, overwrite=overwrite)

    def _verify(self, path: str, chunks) -> None:
        """Compare the landed file's HDFS checksum with one computed over ``chunks`` (the bytes sent).

        On mismatch the landed file is deleted (it is not what the caller wrote) and
        StorageError names the path and both checksums.
        """
        if not self.verify_checksums:
            return
        st = self._call("status", path, self._client.status, path)
        local = Md5Md5Crc32(block_size=int(st.get("blockSize") or DEFAULT_BLOCK_SIZE))
        for chunk in chunks:
            local.update(chunk)
        if int(st.get("length", -1)) == 0 and local.length == 0:
            return  # HDFS reports an empty file's checksum without CRCs; equal lengths say it all
        remote = FileChecksum.from_webhdfs(self._call("checksum", path, self._client.checksum, path))
        bytes_per_crc, crc_type = parse_algorithm(remote.algorithm)
        if (bytes_per_crc, crc_type) != (local.bytes_per_crc, local.crc_type):
            local = Md5Md5Crc32(bytes_per_crc=bytes_per_crc, block_size=local.block_size, crc_type=crc_type)
            for chunk in chunks:
                local.update(chunk)
        expected = local.result()
        if (remote.algorithm, remote.bytes_hex) != (expected.algorithm, expected.bytes_hex):
            try:
                self.delete(path)
            finally:
                raise StorageError(f"checksum mismatch after writing {path}: wrote {local.length} bytes with "
                                   f"checksum {expected}, HDFS has {st.get('length')} bytes with checksum {remote}")
        log.debug("verified %s: %s", path, expected)

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        if not overwrite and self.exists(path):
            raise StorageError(f"cannot write {path}: it exists (pass overwrite=True to replace)")
        self._upload(path, data, overwrite=overwrite)
        self._verify(path, (data,))

    def write_atomic(self, path: str, data: bytes) -> None:
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        self._upload(tmp, data)
        self._verify(tmp, (data,))  # before the old file is touched: a bad write leaves it as it was
        self.delete(path)
        self.rename(tmp, path)

    def open_write(self, path: str) -> BinaryIO:
        if self.exists(path):
            raise StorageError(f"cannot write {path}: it exists")
        return _UploadOnClose(self, path)  # type: ignore[return-value]

    def rename(self, src: str, dst: str) -> None:
        # The hdfs client moves src INTO dst when dst is a directory: refuse first.
        if self.exists(dst):
            raise StorageError(f"cannot rename {src} to {dst}: destination exists")
        if not self.exists(src):
            raise StorageError(f"cannot rename {src} to {dst}: source does not exist")
        self.mkdirs(posixpath.dirname(dst))
        self._call("rename", src, self._client.rename, src, dst)

    def delete(self, path: str, recursive: bool = False) -> None:
        self._call("delete", path, self._client.delete, path, recursive=recursive)

    def mkdirs(self, path: str) -> None:
        self._call("mkdirs", path, self._client.makedirs, path)

    def spark_path(self, path: str) -> str:
        return f"{self.scheme}://{self.netloc}{path}"


def _reopen(uri: str, webhdfs_url: str, user: str, verify_checksums: bool) -> WebHdfsStorage:
    return WebHdfsStorage(uri, webhdfs_url=webhdfs_url, user=user, verify_checksums=verify_checksums)


class _file_chunks:
    """Re-iterable 1 MiB chunks of a seekable file, from its start."""

    def __init__(self, f) -> None:
        self._f = f

    def __iter__(self):
        self._f.seek(0)
        while chunk := self._f.read(1 << 20):
            yield chunk


def _info(path: str, st: dict) -> FileInfo:
    return FileInfo(path, int(st.get("length", 0)), st.get("type") == "DIRECTORY", int(st.get("modificationTime", 0)))
