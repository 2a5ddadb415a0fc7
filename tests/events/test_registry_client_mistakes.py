"""Client mistakes get a 4xx with Confluent's codes, never a 5xx that clients retry; debris of crashes goes.

Each test drives a real ``ingest registry start`` process from outside: Confluent's
``SchemaRegistryClient``, ``python-schema-registry-client`` or raw sockets.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from schema_registry.client import SchemaRegistryClient as PyClient
from schema_registry.client.errors import ClientError

from tests.harness.registry import RegistryProcess
from tests.harness.zookeeper import fresh_chroot

pytestmark = pytest.mark.processes  # registry processes


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    proc = RegistryProcess(tmp_path_factory.mktemp("registry")).start()
    yield proc
    proc.stop()


def _sr(reg) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": reg.url, "max.retries": 0})


def _error(fn) -> tuple[int, int, str]:
    with pytest.raises(SchemaRegistryError) as info:
        fn()
    return info.value.http_status_code, info.value.error_code, info.value.error_message


def _record(name: str) -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "fields": [{"name": "a", "type": "int"}]}), "AVRO")


def _records_nested(depth: int) -> str:
    """A record whose only field is a record ... ``depth`` records deep (built as text: json.dumps recurses)."""
    text = '"int"'
    for i in range(depth):
        text = f'{{"type":"record","name":"R{i}","fields":[{{"name":"f","type":{text}}}]}}'
    return text


def _arrays_nested(depth: int) -> str:
    text = '"int"'
    for _ in range(depth):
        text = f'{{"type":"array","items":{text}}}'
    return text


def test_a_subject_longer_than_a_file_name_is_served_like_any_other(reg):
    # 300 ASCII characters, and 120 'é' that percent-encode to 720 bytes: both beyond the 255 bytes
    # of a file name, which once answered 500 "File name too long"
    _long_subjects(reg)


def test_a_long_subject_in_the_zookeeper_store(zookeeper):
    reg = RegistryProcess(zk=fresh_chroot(zookeeper)).start()
    try:
        _long_subjects(reg)
    finally:
        reg.stop()


def _long_subjects(reg: RegistryProcess) -> None:
    sr = _sr(reg)
    for subject in ("a" * 300, "é" * 120 + "-value"):
        sid = sr.register_schema(subject, _record("Long"))
        assert sr.get_latest_version(subject).schema_id == sid
        assert sr.get_versions(subject) == [1]
        assert subject in sr.get_subjects()
        assert sr.lookup_schema(subject, _record("Long")).version == 1
        assert sr.set_compatibility(subject, "FULL") == {"compatibility": "FULL"}
        assert sr.get_compatibility(subject) == "FULL"
        assert sr.delete_subject(subject) == [1]
        assert subject in sr.get_subjects(deleted=True) and subject not in sr.get_subjects()
        assert sr.delete_subject(subject, permanent=True) == [1]
        assert subject not in sr.get_subjects(deleted=True)
    # the state is in the store, not in memory
    long_subject = "b" * 400
    sid = sr.register_schema(long_subject, _record("Kept"))
    reg.stop()
    reg.start()
    assert _sr(reg).get_latest_version(long_subject).schema_id == sid


def test_a_subject_with_control_characters_is_an_invalid_subject(reg):
    # Confluent's QualifiedSubject.isValidSubject: no ISO control characters (42208, HTTP 422)
    status, code, message = _error(lambda: _sr(reg).register_schema("bad\x01subject", _record("C")))
    assert (status, code) == (422, 42208) and "control" in message


@pytest.mark.parametrize("text, what", [
    (_records_nested(500), "records 500 deep"),
    (_arrays_nested(5000), "arrays 5,000 deep"),
    ("[" * 100_000 + "]" * 100_000, "JSON lists 100,000 deep"),
])
def test_a_schema_nested_past_any_stack_is_an_invalid_schema(reg, text, what):
    sr = _sr(reg)
    schema = Schema(text, "AVRO")
    for call in (lambda: sr.register_schema("deep-value", schema),
                 lambda: sr.lookup_schema("deep-value", schema),
                 lambda: sr.test_compatibility("deep-value", schema)):
        status, code, message = _error(call)
        assert (status, code) == (422, 42201), (what, status, code, message)
        assert "nest" in message, message
    # python-schema-registry-client parses a schema itself before sending it (so it cannot send these);
    # one it can parse, deeper than the registry checks, is refused with 422 too
    with pytest.raises(ClientError) as info:
        PyClient(url=reg.url).register("deep-value", _arrays_nested(300))
    assert info.value.http_code == 422
    # and the registry serves the next client
    assert sr.register_schema("after-deep-value", _record("Fine")) > 0


def test_a_request_body_nested_too_deep_is_a_bad_request(reg):
    body = b'{"schema": "\\"int\\"", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with socket.create_connection(("127.0.0.1", reg.port), timeout=10) as s:
        s.sendall(b"POST /subjects/x/versions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), head
    assert json.loads(payload)["error_code"] == 400


def test_clients_that_abort_mid_body_cost_one_rate_limited_line(tmp_path):
    with RegistryProcess(tmp_path / "store") as reg:
        before = reg.log_path.read_text()
        for i in range(200):
            s = socket.create_connection(("127.0.0.1", reg.port), timeout=10)
            s.sendall(b"POST /subjects/abort-value/versions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"schema\": ")
            if i % 2:  # half close with a reset, half with a FIN
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        # the registry still serves, and what it wrote about the 200 aborts is one line
        sr = _sr(reg)
        assert sr.register_schema("abort-value", _record("A")) > 0
        time.sleep(1.0)
        written = reg.log_path.read_text()[len(before):]
    assert "Traceback" not in written, written[:3000]
    about = [line for line in written.splitlines() if "abort" in line.lower() or "closed" in line.lower()]
    assert 1 <= len(about) <= 2, written[:3000]
    assert len(written.splitlines()) <= 5, written[:3000]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_temporary_files_of_interrupted_writes_are_removed_at_start(tmp_path):
    store = tmp_path / "store"
    with RegistryProcess(store) as reg:
        sr = _sr(reg)
        sid = sr.register_schema("tmp-value", _record("T"))
        sr.set_compatibility("tmp-value", "FULL")
        reg.kill()
    # what a SIGKILL between write and rename leaves: .<name>.<pid>.<thread>.tmp next to the target
    dead = _dead_pid()
    subject_dir = next((store / "subjects").iterdir())
    debris = [store / "ids" / f".{sid + 1}.json.{dead}.140123.tmp",
              subject_dir / f".2.{dead}.140123.tmp",
              store / "config" / f".{subject_dir.name}.{dead}.140123.tmp"]
    for path in debris:
        path.write_text('{"half": ')
    # a write in flight by a live process sharing the store is not touched
    live = store / "ids" / f".{sid + 2}.json.{os.getpid()}.140123.tmp"
    live.write_text("{")
    with RegistryProcess(store) as reg:
        assert [p for p in debris if p.exists()] == []
        assert live.exists()
        sr = _sr(reg)
        assert sr.get_latest_version("tmp-value").schema_id == sid
        assert sr.register_schema("tmp2-value", _record("T2")) == sid + 1
