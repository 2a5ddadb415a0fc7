"""Attacks on a real broker process's network layer: pipelined bursts, accept floods, half frames, bad frames.

Each test does the attack from outside with real sockets against
``ingest broker start`` and asserts on bounds that separate a hardened broker
from the old one by a wide margin (seconds vs minutes, tens vs hundreds of
MB, tens vs thousands of log lines), never on the machine's speed. The attack
code is deliberately minimal; the reusable clients live in
``tests/harness/hostile.py``.
"""
from __future__ import annotations

import os
import resource
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest
from ingest.wire import protocol as p
from ingest.wire.errors import ErrorCode
from ingest.records.message_set import encode_message_set
from tests.harness.brokers import RawClient, broker_cluster, stop_all
from tests.harness.wait import wait_until

pytestmark = pytest.mark.processes  # broker processes

MB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def count_lines(broker, needle: str) -> int:
    return sum(1 for line in broker.output().splitlines() if needle in line)


def offsets_latency(broker, n: int = 10, timeout: float = 20.0) -> float:
    """Worst latency of ``n`` OFFSETS requests on a fresh connection (``timeout`` if one never comes)."""
    worst = 0.0
    try:
        with RawClient(broker.host, broker.port, timeout=timeout) as c:
            for _ in range(n):
                started = time.monotonic()
                resp = p.OffsetsResponse.decode(c.request(p.OffsetsRequest("t0", 0, p.LATEST_TIME, 1)))
                assert resp.error == 0
                worst = max(worst, time.monotonic() - started)
    except socket.timeout:
        return timeout
    return worst


def _burst_broker(tmp_path_factory, hogs: int = 1, **overrides):
    """100 topics, and ``hogs`` clients that each pipeline 32,768 METADATA(all) and never read.

    Connections go round robin to the network threads, so with ``num_threads=hogs``
    each thread gets one hog.
    """
    [b] = broker_cluster(tmp_path_factory, num_partitions=1, **{"num_threads": hogs, **overrides})
    with RawClient(b.host, b.port) as c:
        for i in range(100):
            assert p.ProduceAckResponse.decode(
                c.request(p.ProduceAckRequest(f"t{i}", 0, encode_message_set([b"x"])))).error == 0
    burst = p.MetadataRequest(()).encode() * 32768
    b.rss_before_burst = rss_bytes(b.pid)
    socks = []
    for _ in range(hogs):
        hog = socket.create_connection((b.host, b.port))
        hog.settimeout(30)
        threading.Thread(target=_send_quietly, args=(hog, burst), daemon=True).start()
        socks.append(hog)
    time.sleep(0.5)       # let the broker take the bursts in
    return b, socks


def test_pipelined_burst_from_a_client_that_never_reads_stalls_nobody(tmp_path_factory):
    # unprotected: the other client on the same (only) thread waited 76 s for an OFFSETS reply
    b, hogs = _burst_broker(tmp_path_factory)
    try:
        worst = offsets_latency(b)
        grown = rss_bytes(b.pid) - b.rss_before_burst
        assert worst < 5.0, f"OFFSETS took {worst:.1f} s behind the burst"
        # broken, the replies piled up: 37 -> 113 MB; bound: 256 KB of replies and one read
        assert grown < 30 * MB, f"broker RSS grew {grown / MB:.0f} MB"
        # held back, not dropped: when the hog reads at last, its replies come, complete and in order
        for _ in range(2000):
            md = p.MetadataResponse.decode(p.recv_response(hogs[0]))
            assert md.error == 0 and len(md.topics) == 100
    finally:
        for hog in hogs:
            hog.close()
        stop_all([b])


def test_sigterm_with_stuck_clients_exits_within_the_shutdown_timeout(tmp_path_factory):
    # unprotected: a broker with stuck clients did not exit 30 s after SIGTERM (each busy
    # network thread got its own drain timeout + 5 s, one after the other)
    b, hogs = _burst_broker(tmp_path_factory, hogs=4, shutdown_timeout_ms=2000)
    try:
        half = socket.create_connection((b.host, b.port))
        half.sendall(struct.pack(">ih", 1000, p.RequestType.PRODUCE_ACK) + b"\0" * 10)   # and never the rest
        started = time.monotonic()
        b.proc.send_signal(signal.SIGTERM)
        try:
            code = b.proc.wait(60)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - started
        # 2 s of drain plus flushing and exit; broken, 4 x (2 + 5) s and more
        assert code == 0 and took < 12, f"exit code {code} after {took:.1f} s"
        half.close()
    finally:
        for hog in hogs:
            hog.close()
        b.kill()


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass       # the broker stopped reading (back-pressure) or closed us


def test_half_sent_frames_are_bounded_in_memory_and_time_out(tmp_path_factory):
    # half frames: connections announce a large frame, send most of it, and stop
    frame, attackers = 20_000_000, 24
    [b] = broker_cluster(tmp_path_factory, num_threads=2, overrides={
        "max.socket.request.bytes": frame, "queued.max.request.bytes": 2 * frame + MB,
        "request.partial.timeout.ms": 1000})
    socks: list[socket.socket] = []
    try:
        base = rss_bytes(b.pid)
        body = b"\0" * (frame - 1_000_000)
        header = struct.pack(">ih", frame, p.RequestType.PRODUCE_ACK)

        def attack() -> None:
            s = socket.create_connection((b.host, b.port))
            socks.append(s)
            s.settimeout(3)     # a broker that stops reading us makes sendall time out
            _send_quietly(s, header + body)

        threads = [threading.Thread(target=attack, daemon=True) for _ in range(attackers)]
        peak = base
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            peak = max(peak, rss_bytes(b.pid))
            time.sleep(0.05)
        for _ in range(20):
            peak = max(peak, rss_bytes(b.pid))
            time.sleep(0.05)
        # broken: every half frame is buffered (24 x 19 MB = 456 MB more); bound: 2 frames
        assert peak - base < 150 * MB, f"RSS grew {(peak - base) / MB:.0f} MB"
        # a small request is still served while the big ones wait
        assert b.ping(timeout=5)
        # every half-sent connection is closed (partial-request timeout), none hangs forever
        deadline = time.monotonic() + 90
        for s in socks:
            assert RawClient.closed_by_peer(_Wrap(s), timeout=max(1.0, deadline - time.monotonic()))
        assert count_lines(b, "request frame incomplete") >= 1
    finally:
        for s in socks:
            s.close()
        stop_all([b])


class _Wrap:
    """Lets ``RawClient.closed_by_peer`` read from a plain socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock


def test_idle_connections_are_closed(tmp_path_factory):
    [b] = broker_cluster(tmp_path_factory, overrides={"connections.max.idle.ms": 1000})
    try:
        with RawClient(b.host, b.port) as idle, RawClient(b.host, b.port) as busy:
            started = time.monotonic()
            for _ in range(15):         # 3 s of requests: an active connection stays open
                assert p.MetadataResponse.decode(busy.request(p.MetadataRequest(()))).error == 0
                time.sleep(0.2)
            assert idle.closed_by_peer(timeout=15)
            assert time.monotonic() - started < 20
            assert p.MetadataResponse.decode(busy.request(p.MetadataRequest(()))).error == 0
    finally:
        stop_all([b])


def test_accept_backs_off_when_the_broker_is_out_of_descriptors(tmp_path_factory):
    # the accept loop: a real descriptor limit on the broker process and a connection flood
    [b] = broker_cluster(tmp_path_factory)
    flood: list[socket.socket] = []
    try:
        in_use = len(os.listdir(f"/proc/{b.pid}/fd"))
        limit = in_use + 10
        resource.prlimit(b.pid, resource.RLIMIT_NOFILE, (limit, limit))
        for _ in range(40):       # the kernel completes these handshakes; the broker cannot accept them all
            flood.append(socket.create_connection((b.host, b.port), timeout=5))
        wait_until(lambda: count_lines(b, "accept failed") >= 1, timeout=15, what="an accept failure logged")
        cpu_before = _cpu_seconds(b.pid)
        time.sleep(3)
        cpu = _cpu_seconds(b.pid) - cpu_before
        lines = count_lines(b, "accept failed")
        # broken: 855,255 lines in 17 s at 100% CPU; backing off logs a handful
        assert lines < 50, f"{lines} 'accept failed' lines"
        assert cpu < 1.5, f"broker used {cpu:.1f} s of CPU in 3 s while out of descriptors"
        for s in flood:
            s.close()
        flood.clear()
        # descriptors freed: the broker serves new connections again
        wait_until(lambda: b.ping(timeout=2), timeout=20, what="the broker serving after the flood")
    finally:
        for s in flood:
            s.close()
        stop_all([b])


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_refused_frames_are_logged_with_a_limit(tmp_path_factory):
    # log floods: each bad frame used to cost one log line, without limit
    [b] = broker_cluster(tmp_path_factory)
    attempts = 1000
    try:
        for _ in range(attempts):
            with RawClient(b.host, b.port, timeout=5) as c:
                c.send(struct.pack(">i", -1) + b"\0\0")
                assert p.ErrorResponse.decode(p.recv_response(c.sock)).error == ErrorCode.MALFORMED_REQUEST
        lines = count_lines(b, "outside [2,")
        assert 1 <= lines < 20, f"{lines} lines for {attempts} refused frames"
        assert b.ping()
    finally:
        stop_all([b])


def test_refused_requests_are_logged_with_a_limit(tmp_path_factory):
    # log floods, the request handlers' side: well-framed requests the broker refuses
    # (a bad topic name, a wrong partition) used to cost one WARNING line each
    [b] = broker_cluster(tmp_path_factory, num_partitions=1)
    attempts = 600
    try:
        with RawClient(b.host, b.port, timeout=5) as c:
            for i in range(attempts):
                topic, partition = ("bad/topic", 0) if i % 2 else ("ok", 7)
                c.send(p.ProduceAckRequest(topic, partition, encode_message_set([b"x"])).encode())
                code = p.ProduceAckResponse.decode(p.recv_response(c.sock)).error
                assert code in (ErrorCode.INVALID_TOPIC, ErrorCode.WRONG_PARTITION)
        bad_topic, wrong_partition = count_lines(b, "INVALID_TOPIC"), count_lines(b, "WRONG_PARTITION")
        assert 1 <= bad_topic < 10 and 1 <= wrong_partition < 10, (bad_topic, wrong_partition)
        assert b.ping()
    finally:
        stop_all([b])
