"""A real schema registry process with ``--set metrics.port=0``: requests per endpoint and store counts.

Known traffic over HTTP: three registrations (two subjects, one with two versions),
two schema reads, one read of an id that does not exist (404), one unknown path
(404) and one soft delete. The scrape must show exactly those requests, errors,
latency observations, and the live subjects, versions and schemas of the store.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.harness import reaper
from tests.harness.wait import wait_until
from tests.harness.metrics import metrics_url, scrape, series, undocumented, value

pytestmark = pytest.mark.processes  # a registry process

ROOT = Path(__file__).resolve().parents[2]
CONTENT = "application/vnd.schemaregistry.v1+json"


def _schema(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": f, "type": "string", "default": ""} for f in fields]})


def _call(base: str, method: str, path: str, body=None) -> int:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": CONTENT})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    work = tmp_path_factory.mktemp("registry-metrics")
    out_path = work / "registry.out"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(out_path, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ingest.cli", "registry", "start", "--port", "0",
                                 "--store", str(work / "store"), "--set", "metrics.port=0"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(ROOT),
                                env=env, start_new_session=True)
    reaper.watch(proc)
    try:
        output = lambda: out_path.read_text(errors="replace")  # noqa: E731
        url = metrics_url(output)
        base = wait_until(lambda: re.search(r"listening on (http://[\d.]+:\d+)", output()), 30,
                          "the registry's listening line").group(1)
        yield base, url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        reaper.forget(proc)


def test_requests_errors_latency_per_endpoint_and_store_counts(registry):
    base, url = registry
    statuses = [
        _call(base, "POST", "/subjects/clicks-value/versions", {"schema": _schema("Click", "a")}),
        _call(base, "POST", "/subjects/clicks-value/versions", {"schema": _schema("Click", "a", "b")}),
        _call(base, "POST", "/subjects/views-value/versions", {"schema": _schema("View", "v")}),
        _call(base, "GET", "/schemas/ids/1"),
        _call(base, "GET", "/schemas/ids/2"),
        _call(base, "GET", "/schemas/ids/999"),
        _call(base, "GET", "/no/such/endpoint"),
        _call(base, "DELETE", "/subjects/clicks-value/versions/1"),
    ]
    assert statuses == [200, 200, 200, 200, 200, 404, 404, 200]
    m = scrape(url)
    assert series(m, "ingest_registry_requests_total") == {
        frozenset({("endpoint", "register")}): 3, frozenset({("endpoint", "schema_by_id")}): 3,
        frozenset({("endpoint", "unknown")}): 1, frozenset({("endpoint", "delete_version")}): 1}
    assert series(m, "ingest_registry_request_errors_total") == {
        frozenset({("endpoint", "schema_by_id"), ("status", "404")}): 1,
        frozenset({("endpoint", "unknown"), ("status", "404")}): 1}
    assert value(m, "ingest_registry_request_latency_seconds_count", endpoint="register") == 3
    assert value(m, "ingest_registry_request_latency_seconds_bucket", endpoint="schema_by_id", le="+Inf") == 3
    # clicks-value v1 is soft-deleted: 2 live subjects, 2 live versions holding schemas 2 and 3
    assert (value(m, "ingest_registry_subjects"), value(m, "ingest_registry_schema_versions"),
            value(m, "ingest_registry_schemas")) == (2, 2, 2)
    assert url.startswith("http://127.0.0.1:")
    assert undocumented(m, "ingest_registry_") == []
