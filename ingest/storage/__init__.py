"""Storage addressed by URI: local filesystem (default) and HDFS over WebHDFS.

``open_storage(uri)`` resolves ``/path``, ``relative/path``, ``file:///path`` to
:class:`~ingest.storage.local.LocalStorage` and ``webhdfs://`` / ``hdfs://`` to
:class:`~ingest.storage.webhdfs.WebHdfsStorage`. Anything else is refused with the
list of supported schemes. See ``docs/storage.md``.
"""
from __future__ import annotations

from urllib.parse import urlparse

from ingest.errors import StorageError
from ingest.storage.base import FileInfo, Storage
from ingest.storage.local import LocalStorage
from ingest.storage.webhdfs import WebHdfsStorage

__all__ = ["FileInfo", "Storage", "open_storage", "SCHEMES"]

SCHEMES = ("file", "hdfs", "webhdfs")


def open_storage(uri: str, **options) -> Storage:
    """The storage for ``uri``; ``options`` go to the WebHDFS client (``webhdfs_url``, ``user``).

    Raises:
        StorageError: the scheme is not one of :data:`SCHEMES`.
    """
    text = str(uri).strip()
    if not text:
        raise StorageError("empty storage URI; give a path, file:///path, hdfs://host/path or webhdfs://host:port/path")
    parsed = urlparse(text)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and text[1:3] in (":\\", ":/")):
        return LocalStorage(parsed.path if parsed.scheme == "file" else text)
    if parsed.scheme in ("webhdfs", "hdfs"):
        return WebHdfsStorage(text, **options)
    raise StorageError(f"unsupported storage URI scheme {parsed.scheme!r} in {text!r}: allowed are {', '.join(SCHEMES)}")
