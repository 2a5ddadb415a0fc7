"""Local filesystem storage (the embedded default; ``/path`` or ``file:///path``)."""
from __future__ import annotations

import errno
import logging
import os
import shutil
import uuid
from typing import BinaryIO

from ingest.errors import StorageError
from ingest.storage.base import FileInfo, Storage

log = logging.getLogger(__name__)


class LocalStorage(Storage):
    """Storage over a local directory.

    ``rename`` uses ``link`` + ``unlink`` for files so that it never replaces an
    existing destination (``os.rename`` silently would), matching HDFS.
    """

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.uri = "file://" + self.root

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def status(self, path: str) -> FileInfo | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return FileInfo(path, st.st_size, os.path.isdir(path), st.st_mtime_ns // 1_000_000)

    def list(self, path: str) -> list[FileInfo]:
        try:
            names = sorted(os.listdir(path))
        except FileNotFoundError:
            return []
        except NotADirectoryError as exc:
            raise StorageError(f"cannot list {path}: not a directory") from exc
        out = []
        for name in names:
            info = self.status(os.path.join(path, name))
            if info is not None:  # deleted while listing
                out.append(info)
        return out

    def read_bytes(self, path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc.strerror}") from exc

    def open_read(self, path: str) -> BinaryIO:
        try:
            return open(path, "rb")
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc.strerror}") from exc

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with open(path, "wb" if overwrite else "xb") as f:
                f.write(data)
        except FileExistsError as exc:
            raise StorageError(f"cannot write {path}: it exists (pass overwrite=True to replace)") from exc

    def write_atomic(self, path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(os.path.dirname(path))

    def open_write(self, path: str) -> BinaryIO:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "xb")

    def rename(self, src: str, dst: str) -> None:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            if os.path.isdir(src):
                if os.path.lexists(dst):
                    raise FileExistsError(errno.EEXIST, "exists", dst)
                os.rename(src, dst)
            else:
                os.link(src, dst)
                os.unlink(src)
        except FileExistsError as exc:
            raise StorageError(f"cannot rename {src} to {dst}: destination exists") from exc
        except FileNotFoundError as exc:
            raise StorageError(f"cannot rename {src} to {dst}: source does not exist") from exc
        _fsync_dir(os.path.dirname(dst))

    def delete(self, path: str, recursive: bool = False) -> None:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                if recursive:
                    shutil.rmtree(path)
                else:
                    os.rmdir(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass

    def mkdirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def spark_path(self, path: str) -> str:
        return "file://" + path

    def local_path(self, path: str) -> str | None:
        return path


def _fsync_dir(path: str) -> None:
    # A rename is durable only once its directory is synced (ext4 without it
    # may lose the new name on power loss, which would un-commit a load).
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
