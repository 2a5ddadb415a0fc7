"""Benchmark: the schema registry over HTTPS with basic auth against plain HTTP, in one run, alternating.

Run: ``.venv/bin/python bench/bench_registry_tls.py [--requests 300] [--rounds 3]``.

Two real registry processes (``ingest registry start``): one plain, one with
``listeners=https://...`` and ``authentication.method=BASIC`` (certificate of a CA made here, a user
with a PBKDF2 hash). Each round times ``--requests`` ``GET /subjects`` against each, with:

- confluent-kafka's ``SchemaRegistryClient`` (keep-alive connections: TLS handshake once);
- the product's ``RegistryClient`` (urllib: a new connection, and TLS handshake, per request).

Prints requests per second per round and the HTTPS/HTTP ratio of the sums. Also one PBKDF2 of the
default iterations (what the first request of a user costs the registry).
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402

from ingest.events.registry_client import RegistryClient  # noqa: E402
from ingest.events.registry_users import DEFAULT_ITERATIONS  # noqa: E402
from ingest.registry_client_config import RegistryAuth  # noqa: E402
from tests.harness.registry import RegistryProcess, secured_registry  # noqa: E402


def _rate(call, n: int) -> float:
    began = time.perf_counter()
    for _ in range(n):
        call()
    return n / (time.perf_counter() - began)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    began = time.perf_counter()
    for _ in range(3):
        hashlib.pbkdf2_hmac("sha256", b"password", b"0" * 16, DEFAULT_ITERATIONS)
    print(f"PBKDF2-SHA256, {DEFAULT_ITERATIONS} iterations: {(time.perf_counter() - began) / 3 * 1000:.1f} ms")
    work = Path(tempfile.mkdtemp(prefix="bench-registry-tls-"))
    plain = RegistryProcess(work / "plain").start()
    secured, ca = secured_registry(work / "secured", {"bench": ("bench-pw", ("admin",))})
    secured.start()
    try:
        clients = {
            "confluent-kafka (keep-alive)": (
                SchemaRegistryClient({"url": plain.url}),
                SchemaRegistryClient({"url": secured.url, "ssl.ca.location": str(ca.cert),
                                      "basic.auth.user.info": "bench:bench-pw"}), "get_subjects"),
            "RegistryClient (connection per request)": (
                RegistryClient(plain.url), RegistryClient(secured.url, auth=RegistryAuth("bench:bench-pw", str(ca.cert))),
                "subjects"),
        }
        for name, (http_client, https_client, method) in clients.items():
            getattr(http_client, method)()
            getattr(https_client, method)()  # the PBKDF2 of the first request is not timed
            rates: dict[str, list[float]] = {"http": [], "https+basic": []}
            for _ in range(args.rounds):
                rates["http"].append(_rate(getattr(http_client, method), args.requests))
                rates["https+basic"].append(_rate(getattr(https_client, method), args.requests))
            print(f"{name}: http {[round(r) for r in rates['http']]} req/s, https+basic "
                  f"{[round(r) for r in rates['https+basic']]} req/s, ratio "
                  f"{sum(rates['https+basic']) / sum(rates['http']):.2f}")
    finally:
        plain.stop()
        secured.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
