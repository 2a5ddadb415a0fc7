"""A WebHDFS-protocol HTTP server over a local directory, for tests of the HDFS code path.

No HDFS NameNode/DataNode can be installed on these machines, so the loader's
WebHDFS storage is exercised through the real ``hdfs`` client against this server.
It implements the REST subset the client uses, with HDFS semantics where they
matter to the commit protocol:

- ``GETFILESTATUS``, ``LISTSTATUS`` (FileStatus JSON; 404 ``FileNotFoundException``)
- ``MKDIRS``, ``DELETE`` (``recursive``), ``RENAME`` (``destination``; ``false`` when the
  destination exists or its parent is missing; atomic under the server's lock)
- ``CREATE``: the two-step dance: the first ``PUT`` answers ``307`` with a
  ``Location`` (the "DataNode" URL, here the same server with ``datanode=true``),
  the second ``PUT`` carries the bytes (Content-Length or chunked) and answers 201.
  ``overwrite=false`` on an existing file is ``FileAlreadyExistsException``.
- ``OPEN`` (``offset``, ``length``) answers the bytes directly; ``APPEND`` likewise two-step.
- ``GETFILECHECKSUM``: HDFS's ``MD5-of-<n>MD5-of-512CRC32C`` over the stored bytes,
  computed here independently of ``ingest.storage.checksum`` (own table-driven CRC-32C,
  own block loop) so that a test comparing the two is not comparing a function with itself.

Fault hook: ``server.corrupt_creates("*.tmp")`` makes every later ``CREATE`` whose
HDFS path matches the ``fnmatch`` pattern store its payload with one byte flipped
(what a bad disk or DataNode would land); ``corrupt_creates(None)`` turns it off.

Usage::

    with WebHdfsServer(tmp_path / "hdfs-root") as server:
        uri = server.uri("/data/events")        # webhdfs://127.0.0.1:PORT/data/events
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import struct
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlparse

PREFIX = "/webhdfs/v1"
BLOCK_SIZE = 134217728  # what GETFILESTATUS reports; tests may set server.block_size smaller
BYTES_PER_CRC = 512


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli, reflected
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """Plain table-driven CRC-32C (slow; for tests only)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def hdfs_file_checksum(data: bytes, block_size: int = BLOCK_SIZE, bytes_per_crc: int = BYTES_PER_CRC) -> dict:
    """The ``FileChecksum`` JSON a NameNode returns for ``data`` (MD5 of per-block MD5s of CRC-32Cs)."""
    blocks = [data[i: i + block_size] for i in range(0, len(data), block_size)]
    block_md5s = b""
    for block in blocks:
        crcs = b"".join(struct.pack(">I", crc32c(block[i: i + bytes_per_crc]))
                        for i in range(0, len(block), bytes_per_crc))
        block_md5s += hashlib.md5(crcs).digest()
    crc_per_block = block_size // bytes_per_crc if len(blocks) > 1 else 0  # HDFS: from block 0 only if several
    raw = struct.pack(">iq", bytes_per_crc, crc_per_block) + hashlib.md5(block_md5s).digest()
    return {"algorithm": f"MD5-of-{crc_per_block}MD5-of-{bytes_per_crc}CRC32C", "bytes": raw.hex(),
            "length": len(raw)}


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep test output quiet
        pass

    # --- helpers -----------------------------------------------------------------------

    def _parse(self):
        url = urlparse(self.path)
        if not url.path.startswith(PREFIX):
            return None, {}
        hdfs_path = "/" + unquote(url.path[len(PREFIX):]).strip("/")
        params = {k.lower(): v[-1] for k, v in parse_qs(url.query).items()}
        return hdfs_path, params

    def _local(self, hdfs_path: str) -> Path:
        p = (self.server.root / hdfs_path.lstrip("/")).resolve()
        if not str(p).startswith(str(self.server.root)):
            raise PermissionError(hdfs_path)
        return p

    def _send(self, code: int, body: bytes = b"", ctype: str = "application/json", headers=None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _json(self, obj, code: int = 200) -> None:
        self._send(code, json.dumps(obj).encode())

    def _error(self, code: int, exception: str, message: str) -> None:
        self._json({"RemoteException": {"exception": exception, "javaClassName": f"java.io.{exception}",
                                        "message": message}}, code)

    def _status(self, p: Path, suffix: str) -> dict:
        st = p.stat()
        return {"accessTime": int(st.st_atime * 1000), "blockSize": self.server.block_size, "childrenNum": 0, "fileId": st.st_ino,
                "group": "supergroup", "length": 0 if p.is_dir() else st.st_size,
                "modificationTime": int(st.st_mtime * 1000), "owner": "test", "pathSuffix": suffix,
                "permission": "755" if p.is_dir() else "644", "replication": 0 if p.is_dir() else 1,
                "storagePolicy": 0, "type": "DIRECTORY" if p.is_dir() else "FILE"}

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _redirect(self, hdfs_path: str, params: dict) -> None:
        q = "&".join(f"{k}={quote(str(v))}" for k, v in {**params, "datanode": "true"}.items())
        loc = f"http://127.0.0.1:{self.server.server_address[1]}{PREFIX}{quote(hdfs_path)}?{q}"
        self._body()  # drain whatever the client sent with the first step
        self._send(307, b"", headers={"Location": loc})

    # --- verbs -------------------------------------------------------------------------

    def do_GET(self):
        hdfs_path, params = self._parse()
        if hdfs_path is None:
            return self._send(404)
        op = params.get("op", "").upper()
        p = self._local(hdfs_path)
        if op in ("GETFILESTATUS", "LISTSTATUS", "OPEN", "GETFILECHECKSUM") and not p.exists():
            return self._error(404, "FileNotFoundException", f"File does not exist: {hdfs_path}")
        if op == "GETFILESTATUS":
            return self._json({"FileStatus": self._status(p, "")})
        if op == "LISTSTATUS":
            if p.is_dir():
                entries = [self._status(c, c.name) for c in sorted(p.iterdir())]
            else:
                entries = [self._status(p, "")]
            return self._json({"FileStatuses": {"FileStatus": entries}})
        if op == "OPEN":
            data = p.read_bytes()
            off = int(params.get("offset", 0))
            length = params.get("length")
            data = data[off: off + int(length)] if length is not None else data[off:]
            return self._send(200, data, "application/octet-stream")
        if op == "GETFILECHECKSUM":
            if p.is_dir():
                return self._error(404, "FileNotFoundException", f"Path is not a file: {hdfs_path}")
            return self._json({"FileChecksum": hdfs_file_checksum(p.read_bytes(), self.server.block_size)})
        return self._error(400, "IllegalArgumentException", f"unsupported GET op {op}")

    def do_PUT(self):
        hdfs_path, params = self._parse()
        if hdfs_path is None:
            return self._send(404)
        op = params.get("op", "").upper()
        p = self._local(hdfs_path)
        with self.server.lock:
            if op == "MKDIRS":
                p.mkdir(parents=True, exist_ok=True)
                return self._json({"boolean": True})
            if op == "RENAME":
                dst = self._local(params.get("destination", ""))
                if not p.exists() or dst.exists() or not dst.parent.is_dir():
                    self._body()
                    return self._json({"boolean": False})
                os.rename(p, dst)
                return self._json({"boolean": True})
            if op == "CREATE":
                overwrite = params.get("overwrite", "false").lower() == "true"
                if p.exists() and (not overwrite or p.is_dir()):
                    self._body()
                    return self._error(403, "FileAlreadyExistsException", f"{hdfs_path} already exists")
                if params.get("datanode") != "true":
                    return self._redirect(hdfs_path, params)
                data = self._body()
                pattern = self.server.corrupt_pattern
                if pattern is not None and data and fnmatch.fnmatchcase(hdfs_path, pattern):
                    data = data[:-1] + bytes([data[-1] ^ 0xFF])  # the landed bytes differ from those sent
                p.parent.mkdir(parents=True, exist_ok=True)
                tmp = p.with_name(f".{p.name}.webhdfs-tmp")
                tmp.write_bytes(data)
                os.replace(tmp, p)
                return self._send(201, b"", headers={"Location": f"hdfs://{hdfs_path}"})
        return self._error(400, "IllegalArgumentException", f"unsupported PUT op {op}")

    def do_POST(self):
        hdfs_path, params = self._parse()
        op = params.get("op", "").upper()
        p = self._local(hdfs_path)
        if op != "APPEND":
            return self._error(400, "IllegalArgumentException", f"unsupported POST op {op}")
        if not p.is_file():
            self._body()
            return self._error(404, "FileNotFoundException", f"File does not exist: {hdfs_path}")
        if params.get("datanode") != "true":
            return self._redirect(hdfs_path, params)
        data = self._body()
        with self.server.lock, open(p, "ab") as f:
            f.write(data)
        return self._send(200)

    def do_DELETE(self):
        hdfs_path, params = self._parse()
        p = self._local(hdfs_path)
        recursive = params.get("recursive", "false").lower() == "true"
        with self.server.lock:
            if not p.exists():
                return self._json({"boolean": False})
            if p.is_dir():
                if any(p.iterdir()) and not recursive:
                    return self._error(403, "PathIsNotEmptyDirectoryException", f"{hdfs_path} is non empty")
                shutil.rmtree(p)
            else:
                p.unlink()
            return self._json({"boolean": True})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    root: Path
    lock: threading.Lock
    block_size: int
    corrupt_pattern: str | None


class WebHdfsServer:
    """A WebHDFS endpoint on 127.0.0.1 over ``root`` (in a background thread of this process)."""

    def __init__(self, root: str | Path, port: int = 0) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.root = self.root
        self._server.lock = threading.Lock()
        self._server.block_size = BLOCK_SIZE
        self._server.corrupt_pattern = None
        self._thread: threading.Thread | None = None

    @property
    def block_size(self) -> int:
        return self._server.block_size

    @block_size.setter
    def block_size(self, value: int) -> None:
        self._server.block_size = value

    def corrupt_creates(self, pattern: str | None) -> None:
        """Flip a byte of every later CREATE payload whose HDFS path matches ``pattern`` (None: stop)."""
        self._server.corrupt_pattern = pattern

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def uri(self, path: str = "/") -> str:
        return f"webhdfs://127.0.0.1:{self.port}{path}"

    def start(self) -> "WebHdfsServer":
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhdfs", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "WebHdfsServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
