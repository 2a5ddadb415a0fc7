"""Bounded open segment files: descriptors opened on use, least recently used idle ones closed.

A broker with thousands of partitions must not hold one descriptor per
segment (auto-created topics would reach ``RLIMIT_NOFILE``, and then
produces, accepts and even a restart fail). Each segment file has a
:class:`FileHandle`; :class:`OpenFiles` opens its descriptor when it is used
and keeps at most ``limit`` descriptors open across the broker
(``log.max.open.files``), closing the least recently used *idle* ones first.

A handle is idle when nobody has it pinned (a reader holding a slice for
``sendfile``, a writer inside an append) and it is clean (no bytes written
since its last successful fsync: closing would be safe, but a write error
reported to the closed descriptor could be missed by a later fsync through a
new one, so dirty files stay open until they are flushed). When every open
handle is pinned or dirty the limit is exceeded rather than a request
failed. An ``open`` failing with EMFILE/ENFILE closes one more idle handle and
tries again before giving up.

Concurrency contract: one lock guards every handle's ``fd`` and ``pins`` and
the LRU order; ``dirty`` is set and cleared by the writer while it holds a pin
(so eviction, which needs ``pins == 0``, never races with it).
"""
from __future__ import annotations

import errno
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger(__name__)

_NO_FDS = (errno.EMFILE, errno.ENFILE)


class FileHandle:
    """One segment file's descriptor slot: open while pinned or recently used."""

    __slots__ = ("path", "fd", "pins", "dirty", "closed", "__weakref__")

    def __init__(self, path: Path, fd: int | None = None) -> None:
        self.path = path
        self.fd = fd
        self.pins = 0
        self.dirty = False
        self.closed = False


class OpenFiles:
    """At most ``limit`` open segment descriptors (None: no limit); see the module docstring."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"open file limit {limit} must be >= 1 or None")
        self.limit = limit
        self._lock = threading.Lock()
        self._lru: OrderedDict[FileHandle, None] = OrderedDict()
        self.opened = 0
        """Descriptors opened so far (for tests and logs)."""
        self.evicted = 0
        """Idle descriptors closed to stay within the limit."""

    @property
    def open_count(self) -> int:
        return len(self._lru)

    def adopt(self, handle: FileHandle) -> None:
        """Track a handle whose file was just created with its descriptor already open."""
        with self._lock:
            if handle.fd is not None:
                self._make_room(exclude=handle)
                self._lru[handle] = None

    def pin(self, handle: FileHandle) -> int:
        """The handle's descriptor, opened if needed; it stays open until :meth:`unpin`.

        Raises:
            OSError: the file cannot be opened (ENOENT once deleted, EMFILE with
                no idle descriptor left to close), or the handle is closed (EBADF).
        """
        with self._lock:
            if handle.closed:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF), str(handle.path))
            if handle.fd is not None:
                self._lru.move_to_end(handle)
                handle.pins += 1
                return handle.fd
            self._make_room(exclude=handle)
            fd = self._open_locked(handle.path, os.O_RDWR | os.O_CLOEXEC, 0, exclude=handle)
            self.opened += 1
            handle.fd = fd
            handle.pins += 1
            self._lru[handle] = None
            return fd

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        """``os.open``, closing idle descriptors on EMFILE/ENFILE (the caller closes or adopts the fd).

        Raises:
            OSError: as ``os.open``, when no idle descriptor is left to close.
        """
        with self._lock:
            return self._open_locked(path, flags | os.O_CLOEXEC, mode, exclude=None)

    def _open_locked(self, path: Path, flags: int, mode: int, exclude: FileHandle | None) -> int:
        while True:
            try:
                return os.open(path, flags, mode)
            except OSError as exc:
                if exc.errno not in _NO_FDS or not self._evict_one(exclude):
                    raise

    def unpin(self, handle: FileHandle) -> None:
        with self._lock:
            handle.pins -= 1

    def close(self, handle: FileHandle) -> None:
        """Close the descriptor for good (the segment is closed or deleted and unpinned)."""
        with self._lock:
            handle.closed = True
            self._lru.pop(handle, None)
            fd, handle.fd = handle.fd, None
        if fd is not None:
            os.close(fd)

    def _make_room(self, exclude: FileHandle) -> None:
        if self.limit is None:
            return
        while len(self._lru) >= self.limit:
            if not self._evict_one(exclude):
                log.debug("%d segment files open, above log.max.open.files=%d: all are in use or unflushed",
                          len(self._lru), self.limit)
                return

    def _evict_one(self, exclude: FileHandle | None) -> bool:
        """Close the least recently used idle descriptor (caller holds the lock); False if none is idle."""
        for h in self._lru:
            if h.pins == 0 and not h.dirty and h is not exclude:
                del self._lru[h]
                fd, h.fd = h.fd, None
                os.close(fd)
                self.evicted += 1
                return True
        return False


UNLIMITED = OpenFiles(None)
"""For a Log used on its own (tools, tests): descriptors opened on use and kept open."""
