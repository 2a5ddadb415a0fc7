"""Benchmark: HTTP servers for the schema registry, normal load and 10,000 slow connections.

Run: ``.venv/bin/python bench/bench_registry_server.py [--connections 10000] [--requests 2000]``.

The same WSGI application (``ingest.events.registry_api.RegistryApp`` over a directory
store holding one schema) behind each candidate server, each in its own process:

- ``threaded``: ``http.server.ThreadingHTTPServer``, one thread per connection, no
  timeout (the registry's layer before this benchmark);
- ``pool``: the same hand-written layer extended: a socket read timeout, a bounded
  pool of worker threads that each serve one connection, and a connection cap that
  answers 503 past it (what extending ``http.server`` can do without an event loop);
- ``waitress``: ``ingest.events.registry_server.RegistryServer`` (waitress, the choice);
- ``uvicorn``: uvicorn with an ASGI adapter that runs the application in a thread pool
  and times out a stalled body read (only when ``uvicorn`` is importable:
  ``pip install uvicorn`` into a throwaway venv and put its site-packages on
  ``PYTHONPATH`` to include it).

Each candidate gets, one after the other in the same run: (1) throughput and latency
of normal requests, 8 client threads on keep-alive connections, half ``GET
/schemas/ids/1`` and half ``POST /subjects/s/versions`` of the registered schema;
(2) ``--connections`` connections that each send a request's headers and 1 byte of
its 100-byte body, then nothing; the server's threads and resident memory once it has
taken them in (its descriptor count stopped growing for 2 s); then 100 normal requests on new connections with a 5 s timeout each, from
10 client threads: how many succeed and their median latency. Ratios are printed against waitress.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import http.client
import io
import json
import os
import queue
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest.events.registry import SchemaRegistry  # noqa: E402
from ingest.events.registry_api import RegistryApp  # noqa: E402
from ingest.events.registry_store import DirectoryStore  # noqa: E402

SCHEMA = json.dumps({"type": "record", "name": "Bench", "fields": [{"name": "a", "type": "int"}]})
SLOW = (b"POST /subjects/slow-value/versions HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{")
WORKERS = 8
TIMEOUT_S = 30
CANDIDATES = ("threaded", "pool", "waitress", "uvicorn")


# --- the candidates (each runs in its own process: python bench_registry_server.py --serve NAME ...) ----------

def _call_app(app: RegistryApp, method: str, target: str, body: bytes) -> tuple[int, list, bytes]:
    out: dict = {}
    environ = {"REQUEST_METHOD": method, "REQUEST_URI": target, "PATH_INFO": target.split("?")[0],
               "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}
    data = b"".join(app(environ, lambda status, headers: out.update(status=status, headers=headers)))
    return int(out["status"].split()[0]), out["headers"], data


def _handler(app: RegistryApp, timeout: float | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            self.timeout = timeout  # StreamRequestHandler applies it to the socket: the read timeout
            super().setup()

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, headers, data = _call_app(app, self.command, self.path, body)
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _any

        def log_message(self, *args: object) -> None:
            pass

    return Handler


class ThreadedServer(ThreadingHTTPServer):
    """The registry's server before: a thread per connection, the listen backlog it had."""

    request_queue_size = 1024
    daemon_threads = True


class PoolServer(HTTPServer):
    """http.server with ``WORKERS`` threads and a queue of accepted connections capped at ``cap``."""

    request_queue_size = 1024
    REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

    def __init__(self, address: tuple, handler: type, cap: int) -> None:
        super().__init__(address, handler)
        self.waiting: queue.Queue = queue.Queue(maxsize=cap)
        for _ in range(WORKERS):
            threading.Thread(target=self._work, daemon=True).start()

    def _work(self) -> None:
        while True:
            request, address = self.waiting.get()
            try:
                self.finish_request(request, address)
            except Exception:  # noqa: BLE001 - a timed out or reset client
                pass
            self.shutdown_request(request)

    def process_request(self, request: socket.socket, client_address: tuple) -> None:
        try:
            self.waiting.put_nowait((request, client_address))
        except queue.Full:
            try:
                request.sendall(self.REFUSAL)
            except OSError:
                pass
            self.shutdown_request(request)


def _serve_uvicorn(app: RegistryApp, port: int, cap: int) -> None:
    import uvicorn

    pool = concurrent.futures.ThreadPoolExecutor(WORKERS)

    async def asgi(scope: dict, receive, send) -> None:  # noqa: ANN001
        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            message = await asyncio.wait_for(receive(), TIMEOUT_S)  # uvicorn has no body read timeout of its own
            body += message.get("body", b"")
            more = message.get("more_body", False)
        target = scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
        status, headers, data = await asyncio.get_running_loop().run_in_executor(
            pool, _call_app, app, scope["method"], target, body)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.lower().encode(), v.encode()) for k, v in headers]})
        await send({"type": "http.response.body", "body": data})

    uvicorn.run(asgi, host="127.0.0.1", port=port, limit_concurrency=cap, timeout_keep_alive=TIMEOUT_S,
                backlog=1024, log_level="error")


def serve(name: str, port: int, store: str, cap: int) -> None:
    registry = SchemaRegistry(DirectoryStore(store))
    app = RegistryApp(registry)
    if name == "threaded":
        ThreadedServer(("127.0.0.1", port), _handler(app, None)).serve_forever()
    elif name == "pool":
        PoolServer(("127.0.0.1", port), _handler(app, TIMEOUT_S), cap).serve_forever()
    elif name == "waitress":
        from ingest.events.registry_server import RegistryServer

        RegistryServer(registry, "127.0.0.1", port, {"max.connections": cap, "num.io.threads": WORKERS,
                                                      "connections.max.idle.ms": TIMEOUT_S * 1000}).serve_forever()
    elif name == "uvicorn":
        _serve_uvicorn(app, port, cap)


# --- the measurements ------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(conn: http.client.HTTPConnection, i: int) -> int:
    if i % 2:
        conn.request("GET", "/schemas/ids/1")
    else:
        conn.request("POST", "/subjects/bench-value/versions", body=json.dumps({"schema": SCHEMA}),
                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    r = conn.getresponse()
    r.read()
    return r.status


def normal_load(port: int, total: int) -> tuple[float, float, float]:
    """(requests/s, median ms, p99 ms) of 8 keep-alive clients."""
    latencies: list[float] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine = []
        for i in range(n):
            t = time.perf_counter()
            assert _request(conn, i) == 200
            mine.append(time.perf_counter() - t)
        conn.close()
        with lock:
            latencies.extend(mine)

    began = time.perf_counter()
    threads = [threading.Thread(target=client, args=(total // 8,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    latencies.sort()
    return len(latencies) / elapsed, statistics.median(latencies) * 1000, latencies[int(len(latencies) * 0.99)] * 1000


def open_slow(port: int, count: int) -> list[socket.socket]:
    socks = []
    with selectors.DefaultSelector() as sel:
        for _ in range(count):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
            sel.register(s, selectors.EVENT_WRITE)
        pending, deadline = count, time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                sel.unregister(key.fileobj)
                pending -= 1
                try:
                    key.fileobj.send(SLOW)
                except OSError:
                    pass
    return socks


def under_attack(port: int, n: int = 100) -> tuple[int, float]:
    """(successes of ``n`` requests on new connections, 5 s timeout each, from 10 client threads;
    median ms of the successes)."""
    latencies: list[float] = []
    lock = threading.Lock()

    def client(first: int) -> None:
        for i in range(first, n, 10):
            t = time.perf_counter()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                ok = _request(conn, i) == 200
                conn.close()
            except OSError:
                ok = False
            if ok:
                with lock:
                    latencies.append(time.perf_counter() - t)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies), (statistics.median(latencies) * 1000 if latencies else float("nan"))


def settle(pid: int, limit_s: float = 60.0) -> None:
    """Wait until the server has taken in the connections: its descriptor count grew no more for 2 s."""
    last, since, deadline = -1, time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() < deadline:
        n = len(os.listdir(f"/proc/{pid}/fd"))
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= 2:
            return
        time.sleep(0.25)


def process_stats(pid: int) -> tuple[int, float]:
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    return len(os.listdir(f"/proc/{pid}/task")), rss


def measure(name: str, store: str, connections: int, requests: int) -> dict | None:
    port = _free_port()
    cap = connections + 1000
    proc = subprocess.Popen([sys.executable, __file__, "--serve", name, "--port", str(port), "--store", store,
                             "--cap", str(cap)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    print(f"{name}: did not start (missing package?)")
                    return None
                time.sleep(0.1)
        normal_load(port, 200)  # warm-up
        rps, p50, p99 = normal_load(port, requests)
        idle_threads, idle_rss = process_stats(proc.pid)
        socks = open_slow(port, connections)
        settle(proc.pid)
        threads, rss = process_stats(proc.pid)
        ok, attacked_p50 = under_attack(port)
        for s in socks:
            s.close()
        return {"rps": rps, "p50": p50, "p99": p99, "idle_threads": idle_threads, "idle_rss": idle_rss,
                "threads": threads, "rss": rss, "ok": ok, "attacked_p50": attacked_p50}
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", choices=CANDIDATES)
    ap.add_argument("--port", type=int)
    ap.add_argument("--store")
    ap.add_argument("--cap", type=int, default=11_000)
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--candidates", default=",".join(CANDIDATES))
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.serve:
        serve(args.serve, args.port, args.store, args.cap)
        return
    store = tempfile.mkdtemp(prefix="bench-registry-")
    SchemaRegistry(DirectoryStore(store)).register("bench-value", SCHEMA)
    with open("/proc/loadavg") as f:
        print(f"load average before: {f.read().split()[:3]}; {os.cpu_count()} cores; "
              f"{args.connections} slow connections, {args.requests} normal requests")
    results = {}
    for name in args.candidates.split(","):
        r = measure(name, store, args.connections, args.requests)
        if r is None:
            continue
        results[name] = r
        print(f"{name:9s} normal: {r['rps']:7.0f} req/s  p50 {r['p50']:6.2f} ms  p99 {r['p99']:6.2f} ms | "
              f"{args.connections} slow: {r['threads']:5d} threads (idle {r['idle_threads']}), "
              f"{r['rss']:6.1f} MB (idle {r['idle_rss']:.1f}); normal clients served {r['ok']}/100, "
              f"p50 {r['attacked_p50']:.1f} ms", flush=True)
    base = results.get("waitress")
    if base:
        for name, r in results.items():
            print(f"{name:9s} / waitress: throughput {r['rps'] / base['rps']:.2f}x, p50 {r['p50'] / base['p50']:.2f}x, "
                  f"RSS under attack {r['rss'] / base['rss']:.2f}x, threads {r['threads'] / base['threads']:.1f}x, "
                  f"served under attack {r['ok']}/{base['ok']}")
    with open("/proc/loadavg") as f:
        print(f"load average after: {f.read().split()[:3]}")


if __name__ == "__main__":
    main()
