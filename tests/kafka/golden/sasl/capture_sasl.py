"""Re-captures the SASL golden frames of tests/kafka/golden/sasl/ (not a test, not run by the suite).

Real clients (confluent-kafka, kafka-python, aiokafka, from the project's .venv) log in to one broker of
this checkout whose Kafka listener speaks SASL_PLAINTEXT (a real ZooKeeper holds the user), through a
recording TCP proxy, and ask Metadata once logged in. Every request and response frame is written to
``<profile>.jsonl`` in the layout of tests/kafka/golden/ (a header line, then one frame per line), and a
summary to ``INDEX.md``. The requests are the clients' own bytes; the answers are this broker's (no
independent SASL broker runs here). Run from the checkout::

    .venv/bin/python -m tests.kafka.golden.sasl.capture_sasl
"""
from __future__ import annotations

import asyncio
import json
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path

from tests.harness import sasl as s
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.zookeeper import ZooKeeperServer, fresh_chroot

HERE = Path(__file__).resolve().parent
NAMES = {3: "Metadata", 17: "SaslHandshake", 18: "ApiVersions", 36: "SaslAuthenticate"}
USER, PASSWORD = "golden", "golden-secret"


class Recorder:
    def __init__(self) -> None:
        self.frames: list[dict] = []
        self.step = ""
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.conns = 0

    def add(self, conn: int, direction: str, key: int, version: int, corr: int, frame: bytes) -> None:
        with self.lock:
            self.frames.append({"step": self.step, "t_ms": int((time.monotonic() - self.start) * 1000),
                                "conn": conn, "dir": direction, "api_key": key, "api": NAMES.get(key, str(key)),
                                "api_version": version, "correlation_id": corr, "note": "", "hex": frame.hex()})


def _frames(sock: socket.socket):
    buf = b""
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            return
        if not data:
            return
        buf += data
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
            n = struct.unpack(">i", buf[:4])[0]
            yield buf[:4 + n]
            buf = buf[4 + n:]


def _proxy(port: int, upstream: int, rec: Recorder) -> socket.socket:
    listener = socket.create_server(("127.0.0.1", port))

    def serve(client: socket.socket) -> None:
        with rec.lock:
            rec.conns += 1
            conn = rec.conns
        broker = socket.create_connection(("127.0.0.1", upstream))
        asked: dict[int, tuple[int, int]] = {}

        def up() -> None:
            for frame in _frames(client):
                key, version, corr = struct.unpack_from(">hhi", frame, 4)
                asked[corr] = (key, version)
                rec.add(conn, "request", key, version, corr, frame[4:])
                broker.sendall(frame)
            broker.close()

        def down() -> None:
            for frame in _frames(broker):
                (corr,) = struct.unpack_from(">i", frame, 4)
                key, version = asked.get(corr, (-1, -1))
                rec.add(conn, "response", key, version, corr, frame[4:])
                client.sendall(frame)
            client.close()

        threading.Thread(target=up, daemon=True).start()
        threading.Thread(target=down, daemon=True).start()

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            serve(client)

    threading.Thread(target=accept, daemon=True).start()
    return listener


def confluent(bootstrap: str, mechanism: str, password: str, timeout: float = 5.0) -> dict:
    from confluent_kafka import __version__
    from confluent_kafka.admin import AdminClient

    errors = []
    admin = AdminClient({"bootstrap.servers": bootstrap, **s.confluent_settings(mechanism, USER, password),
                         "error_cb": lambda e: errors.append(e.str())})
    try:
        topics = sorted(admin.list_topics(timeout=timeout).topics)
        return {"ok": True, "topics": topics, "client_version": __version__}
    except Exception as exc:  # noqa: BLE001 - what the client reports is the result
        return {"ok": False, "error": errors[0] if errors else str(exc), "client_version": __version__}


def kafka_python(bootstrap: str, mechanism: str, password: str) -> dict:
    from kafka import KafkaAdminClient, __version__

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **s.kafka_python_settings(mechanism, USER, password))
    try:
        return {"ok": True, "topics": sorted(admin.list_topics()), "client_version": __version__}
    finally:
        admin.close()


def aiokafka(bootstrap: str, mechanism: str, password: str) -> dict:
    from aiokafka import AIOKafkaProducer, __version__

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, **s.aiokafka_settings(mechanism, USER, password))
        await p.start()
        await p.stop()

    asyncio.run(run())
    return {"ok": True, "client_version": __version__}


PROFILES = [("confluent-kafka-2.16-scram-sha-256", confluent, "SCRAM-SHA-256", PASSWORD),
            ("kafka-python-3.0-scram-sha-512", kafka_python, "SCRAM-SHA-512", PASSWORD),
            ("aiokafka-0.14-plain", aiokafka, "PLAIN", PASSWORD),
            ("confluent-kafka-2.16-wrong-password", lambda b, m, p: confluent(b, m, p, timeout=0.5), "PLAIN",
             "not-the-password")]


def main() -> None:
    zk = ZooKeeperServer().start()
    brokers = []
    try:
        connect = fresh_chroot(zk, "/golden")
        s.add_user(connect, USER, PASSWORD)

        class Tmp:
            def mktemp(self, name):
                return Path(tempfile.mkdtemp(prefix=name))

        brokers = broker_cluster(Tmp(), 1, zk_connect=connect, overrides=s.sasl_broker_overrides())
        index = ["# Golden SASL frames: index", "",
                 "Generated by `capture_sasl.py` (its docstring says how to re-capture): real clients log in to a",
                 "SASL_PLAINTEXT listener of this broker through a recording proxy, then ask Metadata.", ""]
        for profile, run, mechanism, password in PROFILES:
            rec = Recorder()
            rec.step = "login"
            port = socket.create_server(("127.0.0.1", 0)).getsockname()[1]
            listener = _proxy(port, brokers[0].kafka_port, rec)
            try:
                result = {"step": "login", **run(f"127.0.0.1:{port}", mechanism, password)}
            except Exception as exc:  # noqa: BLE001 - what the client reports is the result
                result = {"step": "login", "ok": False, "error": f"{type(exc).__name__}: {exc}"}
            time.sleep(0.5)
            listener.close()
            head = {"profile": profile, "mechanism": mechanism, "settings": {"security.protocol": "SASL_PLAINTEXT"},
                    "client_version": result.get("client_version"), "captured": time.strftime("%Y-%m-%d"),
                    "results": [result]}
            lines = [json.dumps(head)] + [json.dumps(f) for f in rec.frames]
            (HERE / f"{profile}.jsonl").write_text("\n".join(lines) + "\n")
            asked = [f"{f['api']} v{f['api_version']}" for f in rec.frames if f["dir"] == "request"]
            index += [f"## {profile}", "", f"mechanism {mechanism}; result: "
                      f"{'ok' if result.get('ok') else 'refused: ' + str(result.get('error'))[:160]}", "",
                      f"requests: {', '.join(asked)}", ""]
        (HERE / "INDEX.md").write_text("\n".join(index))
    finally:
        stop_all(brokers)
        zk.stop()


if __name__ == "__main__":
    main()
