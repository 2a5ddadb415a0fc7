"""Hostile clients for broker hardening tests: real sockets, loopback only, bounded in count and time.

Each attack on the network layer is one function here, written against a broker
address ``(host, port)``; every frame is built from
:mod:`ingest.wire.protocol`'s request classes and frame constants, every
message from :mod:`ingest.records.message`'s layout, so the bytes are exactly
what a real (hostile) client sends. Usage guide::

    from tests.harness import hostile as h

    addr = (b.host, b.port)
    with h.ControlClient(addr, topic="t") as ctl:            # latency beside the attack
        h.pipelined_burst(addr, h.metadata_all_topics(), total_bytes=256 * 1024, hold_s=5)
        ctl.probe_for(5.0)
        assert ctl.p99() < 1.0
    with h.half_frames(addr, n_conns=4, announced=8 << 20, sent=7 << 20):   # held until the block ends
        assert h.rss_bytes(b.pid) < ...
    h.fuzz_frames(addr, count=2000, seed=1)
    h.send_produce_ack(addr, "bombs", 0, h.gzip_bomb_message_set(200 << 20))   # -> error code
    with h.connection_flood(addr, 500) as held: ...

Safety: every function refuses an address outside 127.0.0.0/8
(:class:`NotLoopbackError`), and every loop is bounded by a count and a
deadline (``max_seconds`` / ``hold_s`` / ``timeout``), so a forgotten attack
ends by itself. Held connections (:class:`HeldConnections`) are closed by
their context manager. These helpers are for tests and ``bench/soak.py``
only; nothing in ``ingest/`` imports them.
"""
from __future__ import annotations

import fcntl
import functools
import ipaddress
import os
import random
import resource
import socket
import statistics
import struct
import sys
import termios
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ingest.wire import protocol as p
from ingest.records.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CRC_SEED,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    OVERHEAD,
    encode_message,
)
from ingest.records.message_codecs import GZIP_LEVEL, GZIP_WBITS
from ingest.records.message_set import encode_message_set

Addr = tuple[str, int]

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
MAX_CONNECTIONS = 10_000
"""Upper bound of connections any one helper opens (also capped by this process's RLIMIT_NOFILE)."""
MAX_FUZZ_FRAMES = 1_000_000
SEND_CHUNK = 256 * 1024
FD_MARGIN = 64
"""Descriptors left free for the test process itself when flooding."""


class NotLoopbackError(ValueError):
    """A hostile client was pointed at an address outside 127.0.0.0/8."""


def check_loopback(addr: Addr) -> Addr:
    """Return ``addr`` if its host is an IPv4 loopback address (127.0.0.0/8), else raise.

    Host names are resolved first (``localhost`` passes); nothing else ever
    receives a hostile byte from this module.
    """
    host, port = addr
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        try:
            ip = ipaddress.ip_address(socket.gethostbyname(host))
        except OSError as exc:
            raise NotLoopbackError(f"hostile client target {host!r} does not resolve; allowed is 127.0.0.0/8") from exc
    if ip.version != 4 or ip not in LOOPBACK:
        raise NotLoopbackError(f"hostile client target {host}:{port} is not a loopback address; "
                               "allowed is 127.0.0.0/8 only")
    if not 0 < int(port) < 65536:
        raise NotLoopbackError(f"hostile client target port {port} outside 1..65535")
    return str(ip), int(port)


def connect(addr: Addr, timeout: float = 5.0) -> socket.socket:
    """A blocking TCP connection to a loopback ``addr`` (refuses anything else)."""
    return socket.create_connection(check_loopback(addr), timeout=timeout)


def peer_closed(sock: socket.socket) -> bool:
    """True when the peer has closed (or reset) ``sock``; never blocks, never consumes data."""
    timeout = sock.gettimeout()
    try:
        sock.setblocking(False)
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError):
        return False          # open, nothing to read
    except OSError:
        return True
    finally:
        try:
            sock.settimeout(timeout)
        except OSError:
            pass


def unsent_bytes(sock: socket.socket) -> int:
    """Bytes written to ``sock`` not yet delivered to the peer's kernel (our send queue, TIOCOUTQ)."""
    buf = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
    return struct.unpack("i", buf)[0]


def _proc_net_addr(ip: str, port: int) -> str:
    return f"{int.from_bytes(socket.inet_aton(ip), sys.byteorder):08X}:{port:04X}"


def unread_by_peer(sock: socket.socket) -> int:
    """Bytes written to ``sock`` that the peer *application* has not read yet.

    Our send queue plus the receive queue of the peer's socket, read from
    ``/proc/net/tcp`` (loopback peers live in this network namespace). Zero means
    the broker has really taken the bytes in, e.g. before timing what it does
    with them; a broker that applies back-pressure keeps it above zero.
    """
    me, peer = sock.getsockname(), sock.getpeername()
    local, remote = _proc_net_addr(*peer), _proc_net_addr(*me)
    with open("/proc/net/tcp") as f:
        for line in f:
            cols = line.split()
            if len(cols) > 4 and cols[1] == local and cols[2] == remote:
                return unsent_bytes(sock) + int(cols[4].split(":")[1], 16)
    raise ValueError(f"no /proc/net/tcp entry for the peer of {me} (is it on loopback, this namespace?)")


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


# --- frames -----------------------------------------------------------------------------


def metadata_all_topics() -> bytes:
    """One METADATA(all topics) request frame: the most expensive answer per request byte."""
    return p.MetadataRequest(()).encode()


def offsets_latest(topic: str, partition: int = 0) -> bytes:
    return p.OffsetsRequest(topic, partition, p.LATEST_TIME, 1).encode()


def pipeline(request_bytes: bytes, total_bytes: int) -> bytes:
    """``request_bytes`` repeated to fill at most ``total_bytes`` (at least once)."""
    return request_bytes * max(1, total_bytes // len(request_bytes))


def valid_frames(topic: str = "fz") -> list[bytes]:
    """One well-formed frame of every request type: the seeds that :func:`mutate_frame` damages."""
    ms = encode_message_set([b"payload-%d" % i for i in range(5)])
    gz = encode_message_set([b"z" * 300, b"y" * 10], codec=CODEC_GZIP)
    return [
        p.ProduceRequest(topic, 0, ms).encode(),
        p.ProduceAckRequest(topic, 1, gz).encode(),
        p.MultiProduceRequest((p.ProduceRequest(topic, 0, ms), p.ProduceRequest(topic + "y", 1, gz))).encode(),
        p.FetchRequest(topic, 0, 0, 4096).encode(),
        p.MultiFetchRequest((p.FetchRequest(topic, 0, 0, 100), p.FetchRequest(topic, 1, 37, 100))).encode(),
        p.OffsetsRequest(topic, 0, p.LATEST_TIME, 5).encode(),
        p.MetadataRequest((topic, topic + "y")).encode(),
        p.ProduceAcksRequest(-1, 1000, p.ProduceRequest(topic, 0, ms)).encode(),
        p.ReplicaFetchRequest(1, 0, 0, p.FetchRequest(topic, 0, 0, 4096)).encode(),
        p.TopicMetadataRequest((topic,)).encode(),
        p.AppendAtRequest(topic, 0, 0, -1, 1000, gz).encode(),
        p.AppendAtRequest(topic, 1, -1, 1, 0, b"").encode(),           # the query form
        p.DeletedSegmentsRequest(topic, 0, 0, 1 << 40).encode(),
        p.ReplicaFetchesRequest(1, 0, 1, 1 << 20, (p.ReplicaPartitionFetch(topic, 0, 0, 0, 4096),
                                                   p.ReplicaPartitionFetch(topic + "y", 1, -1, 37, 100))).encode(),
    ]


def mutate_frame(rng: random.Random, frames: Sequence[bytes]) -> bytes:
    """A random damaged version of one of ``frames`` (bit flips, truncation, lying size, noise...)."""
    frame = bytearray(rng.choice(frames))
    how = rng.randrange(7)
    if how == 0:                       # flip a few bits anywhere
        for _ in range(rng.randint(1, 4)):
            frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
    elif how == 1:                     # truncate, keeping the size field honest
        frame = frame[:rng.randrange(p.REQUEST_HEADER.size, len(frame))]
        p.SIZE.pack_into(frame, 0, len(frame) - p.SIZE.size)
    elif how == 2:                     # lie about the size
        p.SIZE.pack_into(frame, 0, rng.choice([-1, 0, 1, 2, 2**31 - 1, rng.randrange(-2**31, 2**31)]))
    elif how == 3:                     # another request type
        struct.pack_into(">h", frame, p.SIZE.size, rng.randrange(-2**15, 2**15))
    elif how == 4:                     # flip bits in the body only, size kept
        for _ in range(rng.randint(1, 8)):
            frame[rng.randrange(p.REQUEST_HEADER.size, len(frame))] ^= 1 << rng.randrange(8)
    elif how == 5:                     # random body with an honest header
        body = rng.randbytes(rng.randrange(0, 200))
        frame = bytearray(p.request_frame(rng.choice(list(p.RequestType)), body))
    else:                              # pure noise
        frame = bytearray(rng.randbytes(rng.randrange(1, 300)))
    return bytes(frame)


@functools.lru_cache(maxsize=8)
def gzip_bomb_message_set(inflated_bytes: int) -> bytes:
    """A valid one-message set: a gzip wrapper whose inner set is ONE message of ``inflated_bytes`` bytes.

    The inner set (header + zero payload) is exactly ``inflated_bytes`` long once
    decompressed; it is built and compressed in 1 MB steps, so making a 200 MB
    bomb costs this process about 1 MB, not 200. Byte-identical to
    ``encode_message_set([b"\\0" * (inflated_bytes - 10)], CODEC_GZIP)``
    (the unit test checks that for a small size).
    """
    payload_len = inflated_bytes - HEADER_SIZE
    if payload_len < 0:
        raise ValueError(f"inflated_bytes {inflated_bytes} below the message header size {HEADER_SIZE}")
    step = 1 << 20
    zeros = bytes(min(step, payload_len))
    crc = CRC_SEED[CODEC_NONE]
    left = payload_len
    while left:                        # CRC over the zero payload, in steps
        n = min(step, left)
        crc = zlib.crc32(zeros[:n] if n < len(zeros) else zeros, crc)
        left -= n
    comp = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
    out = [comp.compress(HEADER.pack(OVERHEAD + payload_len, MAGIC, CODEC_NONE, crc))]
    left = payload_len
    while left:
        n = min(step, left)
        out.append(comp.compress(zeros[:n] if n < len(zeros) else zeros))
        left -= n
    out.append(comp.flush())
    return encode_message(b"".join(out), CODEC_GZIP)


def half_frame_prefix(topic: str, announced: int) -> bytes:
    """The first bytes of a PRODUCE frame whose size field announces ``announced`` bytes.

    A genuine prefix: header, topic, partition and a ``set_size`` consistent with
    the announced size; the message set that should follow never fully arrives.
    """
    head = p.ProduceRequest(topic, 0, b"").encode_body()     # topic, partition 0, set_size 0
    set_size = announced - 2 - len(head)                     # 2: the type field
    if set_size < 0:
        raise ValueError(f"announced size {announced} too small for a PRODUCE to {topic!r}")
    return p.REQUEST_HEADER.pack(announced, p.RequestType.PRODUCE) + head[:-4] + struct.pack(">i", set_size)


# --- held connections -------------------------------------------------------------------


@dataclass
class HeldConnections:
    """Connections an attack keeps open; ``close()`` (or the ``with`` block's end) drops them.

    ``bytes_sent`` is what the attack managed to write (a protected broker may
    refuse to read it all); ``failed`` counts connections that could not be opened.
    """

    socks: list[socket.socket] = field(default_factory=list)
    bytes_sent: int = 0
    failed: int = 0
    seconds: float = 0.0

    def alive(self) -> int:
        """Connections the broker has not closed yet (peeks without blocking)."""
        return sum(not peer_closed(s) for s in self.socks)

    def close(self) -> None:
        for s in self.socks:
            _close_quietly(s)
        self.socks.clear()

    def __enter__(self) -> "HeldConnections":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _fd_budget(n: int) -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    free = soft - len(os.listdir("/proc/self/fd")) - FD_MARGIN
    return max(0, min(n, MAX_CONNECTIONS, free))


def send_until(sock: socket.socket, data: bytes | memoryview, deadline: float) -> int:
    """Write as much of ``data`` as the peer accepts before ``deadline``; returns bytes written."""
    view = memoryview(data)
    sent = 0
    while sent < len(view):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(min(left, 1.0))
        try:
            sent += sock.send(view[sent:sent + SEND_CHUNK])
        except (socket.timeout, BlockingIOError, InterruptedError):
            continue
        except OSError:               # the broker closed the connection: the attack is over for it
            break
    return sent


# --- attacks ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BurstResult:
    requests: int
    bytes_sent: int
    seconds: float
    closed_by_broker: bool


def pipelined_burst(addr: Addr, request_bytes: bytes, total_bytes: int = 256 * 1024, *,
                    hold_s: float = 0.0, send_timeout_s: float = 10.0) -> BurstResult:
    """Send ``total_bytes`` of pipelined copies of ``request_bytes`` in one buffer and never read.

    The issue's attack: ``pipelined_burst(addr, metadata_all_topics())`` against
    a broker with 100 topics (32,768 METADATA requests in one 256 KB send).
    Writes for at most ``send_timeout_s`` (a broker applying back-pressure stops
    reading), then keeps the connection open, unread, for ``hold_s`` seconds.
    """
    data = pipeline(request_bytes, total_bytes)
    t0 = time.monotonic()
    sock = connect(addr, timeout=max(0.1, min(5.0, send_timeout_s)))
    try:
        sent = send_until(sock, data, t0 + send_timeout_s)
        end = time.monotonic() + hold_s
        while time.monotonic() < end:
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))
        closed = peer_closed(sock)
    finally:
        _close_quietly(sock)
    return BurstResult(sent // len(request_bytes), sent, time.monotonic() - t0, closed)


def half_frames(addr: Addr, n_conns: int = 16, announced: int = 100 * 1024 * 1024,
                sent: int = 99 * 1024 * 1024, *, topic: str = "half", send_timeout_s: float = 30.0) -> HeldConnections:
    """Open ``n_conns`` connections, each announcing an ``announced``-byte PRODUCE and sending ``sent`` bytes.

    ``sent`` counts the whole frame written so far (size field included) and must
    be below the frame's full length (``announced + 4``). The connections then
    idle, held open until the returned :class:`HeldConnections` is closed. The
    issue's figures: 16 x (100 MB announced, 99 MB sent) took a broker to 1.66 GB.
    """
    if not 0 < sent < announced + p.SIZE.size:
        raise ValueError(f"sent={sent} must be in (0, announced + {p.SIZE.size}) = (0, {announced + p.SIZE.size})")
    prefix = half_frame_prefix(topic, announced)[:sent]
    filler = bytes(min(SEND_CHUNK * 4, max(0, sent - len(prefix))))
    held = HeldConnections()
    t0 = time.monotonic()
    deadline = t0 + send_timeout_s
    for _ in range(_fd_budget(n_conns)):
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            break
        try:
            s = connect(addr, timeout=min(5.0, left_s))
        except OSError:
            held.failed += 1
            continue
        held.socks.append(s)
        n = send_until(s, prefix, deadline)
        left = sent - n if n == len(prefix) else 0
        while left > 0 and time.monotonic() < deadline:
            k = send_until(s, memoryview(filler)[:min(left, len(filler))], deadline)
            if k == 0:
                break
            n += k
            left -= k
        held.bytes_sent += n
    held.seconds = time.monotonic() - t0
    return held


@dataclass(frozen=True)
class FuzzResult:
    frames: int
    answered: int
    seconds: float


def fuzz_frames(addr: Addr, count: int, seed: int, *, max_seconds: float = 60.0, topic: str = "fz",
                frames_per_connection: int = 1) -> FuzzResult:
    """Send ``count`` random and mutated frames (each refusal once cost one log line).

    Each connection gets ``frames_per_connection`` frames, then half-closes and
    reads whatever the broker answers until it closes. Replayable: the same
    ``seed`` gives the same frames. Stops after ``max_seconds``.
    """
    if not 0 <= count <= MAX_FUZZ_FRAMES:
        raise ValueError(f"count {count} outside [0, {MAX_FUZZ_FRAMES}]")
    rng = random.Random(seed)
    seeds = valid_frames(topic)
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    sent = answered = 0
    while sent < count and time.monotonic() < deadline:
        batch = [mutate_frame(rng, seeds) for _ in range(min(frames_per_connection, count - sent))]
        try:
            s = connect(addr, timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        except OSError:
            time.sleep(0.05)
            continue
        try:
            s.sendall(b"".join(batch))
            s.shutdown(socket.SHUT_WR)
            s.settimeout(max(0.1, min(5.0, deadline - time.monotonic())))
            while s.recv(65536):
                answered += 1
        except (OSError, socket.timeout):
            pass
        finally:
            _close_quietly(s)
        sent += len(batch)
    return FuzzResult(sent, answered, time.monotonic() - t0)


def connection_flood(addr: Addr, n: int, *, timeout: float = 2.0, max_seconds: float = 30.0) -> HeldConnections:
    """Open up to ``n`` idle connections and hold them (capped by this process's descriptor limit)."""
    held = HeldConnections()
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    for _ in range(_fd_budget(n)):
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            break
        try:
            held.socks.append(connect(addr, timeout=min(timeout, left_s)))
        except OSError:
            held.failed += 1
    held.seconds = time.monotonic() - t0
    return held


def send_produce_ack(addr: Addr, topic: str, partition: int, message_set: bytes,
                     timeout: float = 30.0) -> int | None:
    """One PRODUCE_ACK round trip; the response's error code (0 = appended), or None if the broker hung up."""
    try:
        with connect(addr, timeout=timeout) as s:
            s.sendall(p.ProduceAckRequest(topic, partition, message_set).encode())
            return p.ProduceAckResponse.decode(p.recv_response(s)).error
    except (OSError, socket.timeout):
        return None


# --- measurement ------------------------------------------------------------------------


class ControlClient:
    """A well-behaved client that measures request round trips while attacks run.

    Holds ``n_conns`` persistent connections (the acceptor deals them round robin,
    so they land on every network thread) and probes them in turn with a cheap
    request (OFFSETS latest of ``topic``, or METADATA of ``topic`` when
    ``kind="metadata"``). A probe that times out or fails counts its elapsed time
    (at least ``timeout``) as its latency and reconnects that slot.

    Thread-safety: one thread probes; ``latencies``/``p50``/``p99`` may be read
    from others (they copy under a lock).
    """

    def __init__(self, addr: Addr, topic: str, *, n_conns: int = 4, timeout: float = 5.0,
                 kind: str = "offsets") -> None:
        self.addr = check_loopback(addr)
        self.timeout = timeout
        self.frame = offsets_latest(topic) if kind == "offsets" else p.MetadataRequest((topic,)).encode()
        self._decode = p.OffsetsResponse.decode if kind == "offsets" else p.MetadataResponse.decode
        self._socks: list[socket.socket | None] = [None] * n_conns
        self._next = 0
        self._lock = threading.Lock()
        self._samples: list[tuple[float, float]] = []   # (monotonic start, latency)
        self.errors = 0

    def _sock(self, i: int) -> socket.socket:
        s = self._socks[i]
        if s is None:
            s = self._socks[i] = connect(self.addr, timeout=self.timeout)
        return s

    def probe(self) -> float:
        """One round trip on the next connection; returns (and records) its latency in seconds."""
        i = self._next
        self._next = (i + 1) % len(self._socks)
        t0 = time.monotonic()
        ok = False
        try:
            s = self._sock(i)
            s.sendall(self.frame)
            ok = self._decode(p.recv_response(s)).error == 0
        except Exception:  # noqa: BLE001 - timeout, reset, garbage: all count as a slow, failed probe
            if self._socks[i] is not None:
                _close_quietly(self._socks[i])
                self._socks[i] = None
        elapsed = time.monotonic() - t0
        if not ok:
            elapsed = max(elapsed, self.timeout)
        with self._lock:
            self._samples.append((t0, elapsed))
            self.errors += not ok
        return elapsed

    def probe_for(self, seconds: float, interval: float = 0.02, stop: threading.Event | None = None) -> None:
        """Probe repeatedly for ``seconds`` (or until ``stop`` is set), ``interval`` apart."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (stop and stop.is_set()):
            self.probe()
            time.sleep(interval)

    def samples(self) -> list[tuple[float, float]]:
        """``(time.monotonic() at the probe's start, latency s)`` of every probe so far."""
        with self._lock:
            return list(self._samples)

    def latencies(self) -> list[float]:
        with self._lock:
            return [lat for _t, lat in self._samples]

    def percentile(self, q: float, since: int = 0) -> float:
        """The ``q``-th percentile (0..100) of latencies from sample index ``since``; 0.0 if none."""
        return percentile(self.latencies()[since:], q)

    def p50(self, since: int = 0) -> float:
        return self.percentile(50, since)

    def p99(self, since: int = 0) -> float:
        return self.percentile(99, since)

    def summary(self) -> dict:
        xs = self.latencies()
        return {"probes": len(xs), "errors": self.errors, "p50_s": self.p50(), "p99_s": self.p99(),
                "max_s": max(xs, default=0.0), "mean_s": statistics.fmean(xs) if xs else 0.0}

    def close(self) -> None:
        for s in self._socks:
            if s is not None:
                _close_quietly(s)
        self._socks = [None] * len(self._socks)

    def __enter__(self) -> "ControlClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100, nearest rank) of ``values``; 0.0 when empty."""
    xs = sorted(values)
    if not xs:
        return 0.0
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def _proc_status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise ValueError(f"/proc/{pid}/status has no {key} line")


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` now (VmRSS), in bytes."""
    return _proc_status_kb(pid, "VmRSS") * 1024


def peak_rss_bytes(pid: int) -> int:
    """Peak resident set size of ``pid`` since it started (VmHWM): catches spikes between samples."""
    return _proc_status_kb(pid, "VmHWM") * 1024


def open_fds(pid: int) -> int:
    """Open file descriptors of ``pid``."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def count_log_lines(path: str | os.PathLike, needles: Iterable[str] = ()) -> int:
    """Lines in the file at ``path`` (0 if missing); with ``needles``, only lines containing one of them."""
    needles = tuple(needles)
    n = 0
    try:
        with open(path, "rb") as f:
            for line in f:
                if not needles or any(k.encode() in line for k in needles):
                    n += 1
    except FileNotFoundError:
        return 0
    return n
