"""The physical limits the benchmarks measure in the same run: loopback TCP and the disk.

* :func:`loopback_seconds`: one sender thread pushes ``nbytes`` with ``sendall`` of ``chunk``-byte
  writes (256 KB unless given: a produce benchmark passes its requests' size); a receiver thread
  takes them with ``recv_into`` of 1 MB.
* :func:`sendfile_loopback_seconds`: the same bytes sent from a file with ``os.sendfile`` in
  ``chunk``-byte calls, as a broker serves a fetch (the file is read once first, so it comes from
  the page cache, as a just-produced log does).
* :func:`raw_write`: sequential ``pwrite`` of a chunk ``count`` times, then ``fdatasync`` (also one
  per chunk if asked): what the disk under a log directory takes.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

RECV_BYTES = 1 << 20


def _sink(srv: socket.socket, nbytes: int) -> threading.Thread:
    def run() -> None:
        conn, _ = srv.accept()
        buf = bytearray(RECV_BYTES)
        got = 0
        while got < nbytes:
            k = conn.recv_into(buf)
            if not k:
                break
            got += k
        conn.close()

    t = threading.Thread(target=run)
    t.start()
    return t


def loopback_seconds(nbytes: int, chunk: int = 256 * 1024) -> float:
    """Seconds to push ``nbytes`` through a loopback TCP connection (sendall ``chunk`` / recv_into 1 MB)."""
    srv = socket.create_server(("127.0.0.1", 0))
    t = _sink(srv, nbytes)
    block = os.urandom(chunk)
    with socket.create_connection(srv.getsockname()) as s:
        t0 = time.perf_counter()
        sent = 0
        while sent < nbytes:
            n = min(chunk, nbytes - sent)
            s.sendall(block if n == chunk else block[:n])
            sent += n
        t.join()
        elapsed = time.perf_counter() - t0
    srv.close()
    return elapsed


def sendfile_loopback_seconds(path: str | Path, chunk: int) -> float:
    """Seconds to send the whole file at ``path`` through loopback TCP with ``os.sendfile`` of ``chunk`` bytes."""
    nbytes = os.path.getsize(path)
    with open(path, "rb") as f:
        while f.read(RECV_BYTES):
            pass  # into the page cache, as a log just written is
    srv = socket.create_server(("127.0.0.1", 0))
    t = _sink(srv, nbytes)
    with socket.create_connection(srv.getsockname()) as s, open(path, "rb") as f:
        fd, out = f.fileno(), s.fileno()
        t0 = time.perf_counter()
        pos = 0
        while pos < nbytes:
            pos += os.sendfile(out, fd, pos, min(chunk, nbytes - pos))
        t.join()
        elapsed = time.perf_counter() - t0
    srv.close()
    return elapsed


def raw_write(path: str | Path, chunk: bytes, count: int, fsync_each: bool) -> None:
    """Write ``chunk`` ``count`` times sequentially to ``path``, then fdatasync (also after each if asked)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    pos = 0
    for _ in range(count):
        os.pwrite(fd, chunk, pos)
        pos += len(chunk)
        if fsync_each:
            os.fdatasync(fd)
    os.fdatasync(fd)
    os.close(fd)
