"""A real broker process with ``metrics.port=0``: real traffic, one scrape, exact values.

One broker (module fixture) receives known traffic: ``N`` acknowledged single-message
produces of a known size (small segments, so the log rolls), pulls of everything,
one produce with a corrupted CRC (a responseless refusal) and one frame with a size
below 2 (refused by the network layer). The scrape, parsed with prometheus_client's
parser, must show exactly those numbers, and the log's size and segment count must
equal the segment files on disk. Also: the endpoint binds 127.0.0.1 by default,
a bad ``metrics.port`` is one clear line and exit 2, and a broker without
``metrics.port`` does not import prometheus_client.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.wire import protocol as p
from ingest.records.message_set import encode_message_set
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.metrics import METRICS_LINE, metrics_url, scrape, series, undocumented, value

pytestmark = pytest.mark.processes  # a broker process

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "metered"
N = 40
PAYLOAD = b"m" * 100
SET = encode_message_set([PAYLOAD])     # one message: 10-byte header + payload
SEGMENT_BYTES = 1000                    # roll every few messages: several segment files


def _request(s: socket.socket, req):
    s.sendall(req.encode())
    return p.recv_response(s)


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    """(broker, scraped samples) after the known traffic."""
    (broker,) = broker_cluster(tmp_path_factory, 1, overrides={"metrics.port": 0, "log.file.size": SEGMENT_BYTES})
    try:
        url = metrics_url(broker.output)
        with socket.create_connection((broker.host, broker.port), timeout=10) as s:
            for _ in range(N):
                resp = p.ProduceAckResponse.decode(_request(s, p.ProduceAckRequest(TOPIC, 0, SET)))
                assert resp.error == 0
            offset = fetches = 0
            while offset < N * len(SET):                          # a fetch answers from one segment
                fetches += 1
                offset += len(_request(s, p.FetchRequest(TOPIC, 0, offset, 1 << 20))) - 2
            assert offset == N * len(SET)
            bad = bytearray(SET)
            bad[-1] ^= 0xFF                                      # payload no longer matches its CRC
            s.sendall(p.ProduceRequest(TOPIC, 0, bytes(bad)).encode())   # refused, no response, stays open
            _request(s, p.OffsetsRequest(TOPIC, 0, p.LATEST_TIME, 1))    # served after it: the refusal is done
        with socket.create_connection((broker.host, broker.port), timeout=10) as s:
            s.sendall(b"\x00\x00\x00\x01\x00")                   # frame size 1: no room for a request type
            assert p.recv_response(s)                             # answered with an error, then closed
        yield broker, url, scrape(url), fetches
    finally:
        stop_all([broker])


def test_messages_and_bytes_in_and_out_per_topic(traffic):
    _, _, m, fetches = traffic
    assert value(m, "ingest_broker_messages_in_total", topic=TOPIC) == N
    assert value(m, "ingest_broker_bytes_in_total", topic=TOPIC) == N * len(SET)
    assert value(m, "ingest_broker_bytes_out_total", topic=TOPIC) == N * len(SET)


def test_requests_errors_and_latency_per_request_type(traffic):
    _, _, m, fetches = traffic
    assert value(m, "ingest_broker_requests_total", type="PRODUCE_ACK") == N
    assert value(m, "ingest_broker_requests_total", type="FETCH") == fetches > 1
    assert value(m, "ingest_broker_requests_total", type="PRODUCE") == 1
    assert value(m, "ingest_broker_requests_total", type="OFFSETS") == 1
    assert series(m, "ingest_broker_request_errors_total") == {
        frozenset({("type", "PRODUCE"), ("code", "INVALID_MESSAGE")}): 1}
    assert value(m, "ingest_broker_request_latency_seconds_count", type="PRODUCE_ACK") == N
    assert value(m, "ingest_broker_request_latency_seconds_bucket", type="PRODUCE_ACK", le="+Inf") == N
    assert 0 < value(m, "ingest_broker_request_latency_seconds_sum", type="PRODUCE_ACK") < N * 10


def test_refused_requests_include_the_produce_refusals_and_refused_frames(traffic):
    _, _, m, fetches = traffic
    assert series(m, "ingest_broker_refused_requests_total") == {
        frozenset({("request", "PRODUCE"), ("reason", "INVALID_MESSAGE")}): 1,
        frozenset({("request", "FRAME"), ("reason", "MALFORMED_REQUEST")}): 1}


def test_log_size_and_segments_equal_the_files_on_disk_and_each_fsync_is_timed(traffic):
    broker, _, m, _ = traffic
    files = sorted((broker.log_dir / f"{TOPIC}-0").glob("*.kafka"))
    assert len(files) > 1, "the test wants several segments"
    assert value(m, "ingest_broker_log_segments", topic=TOPIC, partition=0) == len(files)
    assert value(m, "ingest_broker_log_size_bytes", topic=TOPIC, partition=0) == sum(f.stat().st_size for f in files)
    assert sum(f.stat().st_size for f in files) == N * len(SET)
    # log.flush.interval=1 (harness): every acknowledged produce is one fsync
    assert value(m, "ingest_broker_log_flush_latency_seconds_count") == N
    assert value(m, "ingest_broker_under_replicated_partitions") == 0
    assert value(m, "ingest_broker_offline_logs") == 0


def test_every_series_is_documented(traffic):
    _, _, m, _ = traffic
    assert len({n for n, _ in m if n.startswith("ingest_broker_")}) >= 14
    assert undocumented(m, "ingest_broker_") == []


def test_the_endpoint_binds_loopback_by_default(traffic):
    broker, url, _, _ = traffic
    host, port = METRICS_LINE.search(broker.output()).group(2, 3)
    assert host == "127.0.0.1"
    with pytest.raises(ConnectionRefusedError):      # 127.0.0.2 is loopback too, but not the bound address
        socket.create_connection(("127.0.0.2", int(port)), timeout=5).close()


def _broker_cli(tmp_path, *sets: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "ingest.cli", "broker", "start", "--config", str(ROOT / "conf/server.properties"),
           "--set", f"log.dir={tmp_path / 'logs'}", "--set", "port=0"]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=60)


def test_a_bad_metrics_port_is_one_line_and_exit_2(tmp_path):
    done = _broker_cli(tmp_path, "metrics.port=70000")
    assert done.returncode == 2
    assert "invalid value '70000' for 'metrics.port': allowed is an integer in [-1, 65535]" in done.stderr
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        done = _broker_cli(tmp_path, f"metrics.port={port}")
    finally:
        taken.close()
    assert done.returncode == 2
    assert f"cannot serve metrics on metrics.host=127.0.0.1 metrics.port={port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_metrics_port_nothing_imports_prometheus_client():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("import sys, tempfile\n"
            "from ingest.broker.broker import BrokerServer\n"
            "from ingest.broker.server_config import SERVER_CONFIG\n"
            "import ingest.events.registry_server, ingest.mirror.mirror_maker\n"
            "b = BrokerServer(SERVER_CONFIG.parse({'brokerid': 0, 'port': 0, 'listeners': 'PLAINTEXT://127.0.0.1:0', 'log.dir': tempfile.mkdtemp()})).start()\n"
            "b.stop()\n"
            "print(b.exporter, 'prometheus_client' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == "None False", done.stderr
