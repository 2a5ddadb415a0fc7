"""Slow and idle connections against a real registry process: no thread each, bounded memory, a read timeout.

The attack: thousands of connections that send a request's headers and one byte of
its body, then nothing. Before, each held a thread forever (1,000 connections: 1,001
threads after 77 s; 6,000: 6,001 threads and 257 MB). Now they cost a socket each, the
registry closes them after ``connections.max.idle.ms``, a connection past
``max.connections`` is answered 503 at once, and normal clients are served meanwhile.
"""
from __future__ import annotations

import json
import os
import resource
import selectors
import socket
import time

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

from tests.harness.registry import RegistryProcess

pytestmark = pytest.mark.processes  # registry processes

SLOW_REQUEST = (b"POST /subjects/slow-value/versions HTTP/1.1\r\nHost: registry\r\n"
                b"Content-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: 100\r\n\r\n{")


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


def _open_slow(port: int, count: int, timeout_s: float = 60.0) -> list[socket.socket]:
    """``count`` connections that each sent headers and one body byte of a 100-byte body."""
    socks = []
    with selectors.DefaultSelector() as sel:
        for _ in range(count):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
            sel.register(s, selectors.EVENT_WRITE)
        pending = len(socks)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                sel.unregister(key.fileobj)
                pending -= 1
                try:
                    key.fileobj.send(SLOW_REQUEST)
                except OSError:
                    pass
    return socks


def _closed_by_server(socks: list[socket.socket], wait_s: float) -> int:
    """How many of ``socks`` the server closed (EOF or reset) within ``wait_s``."""
    closed = 0
    with selectors.DefaultSelector() as sel:
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        deadline = time.monotonic() + wait_s
        while closed < len(socks) and time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                sel.unregister(key.fileobj)
                try:
                    data = key.fileobj.recv(4096)
                except OSError:
                    data = b""
                if not data or data.startswith(b"HTTP/1.1 503"):
                    closed += 1
    return closed


def _schema(name: str) -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "fields": [{"name": "a", "type": "int"}]}), "AVRO")


@pytest.mark.slow
def test_ten_thousand_slow_connections_hold_no_thread_and_normal_clients_are_served(tmp_path):
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = min(10_000, soft - 500)  # this process holds the client ends
    assert count >= 2_000, f"descriptor limit {soft} too low for the attack"
    reg = RegistryProcess(tmp_path / "store", overrides={"connections.max.idle.ms": 8000, "num.io.threads": 4})
    reg.start()
    socks: list[socket.socket] = []
    try:
        pid = reg.proc.pid
        threads_idle = _threads(pid)
        socks = _open_slow(reg.port, count)
        time.sleep(1.0)
        threads, rss = _threads(pid), _rss_mb(pid)
        # one event loop and the workers, whatever the number of connections (before: one thread each)
        assert threads <= threads_idle + 2, f"{threads} threads with {count} slow connections ({threads_idle} idle)"
        assert rss < 200, f"{rss:.0f} MB resident with {count} slow connections"
        # normal clients are served within their timeouts meanwhile
        sr = SchemaRegistryClient({"url": reg.url, "max.retries": 0, "timeout": 10})
        for i in range(20):
            sid = sr.register_schema(f"normal-{i}-value", _schema(f"N{i}"))
            assert sr.get_latest_version(f"normal-{i}-value").schema_id == sid
        # the read timeout: connections whose request stopped arriving are closed
        closed = _closed_by_server(socks, wait_s=180)  # generous: the machine may be loaded
        assert closed == count, f"only {closed} of {count} stalled connections were closed by the registry"
        log_text = reg.log_path.read_text()
        assert "stopped arriving" in log_text and len(log_text.splitlines()) < 50, log_text[-3000:]
    finally:
        for s in socks:
            s.close()
        reg.stop()


def test_past_max_connections_a_new_connection_is_refused_with_503_and_served_once_room_is_back(tmp_path):
    reg = RegistryProcess(tmp_path / "store", overrides={"max.connections": 50})
    reg.start()
    socks: list[socket.socket] = []
    try:
        socks = _open_slow(reg.port, 50)
        time.sleep(0.5)
        with socket.create_connection(("127.0.0.1", reg.port), timeout=10) as s:
            s.sendall(b"GET /subjects HTTP/1.1\r\nHost: registry\r\n\r\n")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503"), answer
        refusal = json.loads(body)
        assert refusal["error_code"] == 50302 and "max.connections=50" in refusal["message"]
        # Confluent's client sees a retriable 5xx with the reason
        sr = SchemaRegistryClient({"url": reg.url, "max.retries": 0})
        with pytest.raises(SchemaRegistryError) as info:
            sr.get_subjects()
        assert (info.value.http_status_code, info.value.error_code) == (503, 50302)
        for s in socks:
            s.close()
        socks = []
        deadline = time.monotonic() + 20
        while True:  # the registry notices the closed connections within a loop turn or two
            try:
                assert sr.get_subjects() == []
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert "max.connections=50" in reg.log_path.read_text()
    finally:
        for s in socks:
            s.close()
        reg.stop()
