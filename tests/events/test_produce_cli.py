"""``ingest produce`` as a real subprocess against a real broker and registry."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.events.readback import latest_revisions, read_topic
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.net import free_port
from tests.harness.registry import REPO

pytestmark = pytest.mark.processes  # `ingest produce` as a subprocess


def run_produce(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ingest.cli", "produce", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_produce_publishes_events_and_monitoring(broker_factory, registry):
    (broker,) = broker_factory(n=1, num_partitions=2)
    proc = run_produce("--brokers", f"{broker.host}:{broker.port}",  # no broker id: learned via METADATA
                       "--registry", registry.url, "--topic", "clicks-cli", "--count", "700",
                       "--batch-size", "50", "--key-field", "member_id", "--rate", "3000", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["sent"], summary["acknowledged"], summary["failed"]) == (700, 700, 0)
    assert summary["schema"] == "click" and summary["monitoring_pending"] == 0
    assert summary["rate_per_s"] <= 3000 * 1.02  # --rate is an upper bound (the generator sleeps ahead)
    records, failures = read_topic([broker], "clicks-cli", registry)
    assert failures == [] and len(records) == 700
    assert {r["header"]["session"] for r in records} == {summary["session"]}
    assert sorted(r["header"]["seq"] for r in records) == list(range(700))
    assert {r["header"]["service"] for r in records} == {"loadgen"}
    mon, _ = read_topic([broker], "audit-monitoring", registry)
    latest = latest_revisions(m for m in mon if m["producer_session_id"] == summary["session"])
    assert sum(m["count_acked"] for m in latest.values()) == 700
    assert all(m["is_final"] and m["window_size_ms"] == 600_000 for m in latest.values())


def test_produce_exits_nonzero_when_nothing_is_acknowledged(registry):
    proc = run_produce("--brokers", f"0:127.0.0.1:{free_port()}", "--registry", registry.url,
                       "--topic", "page-views-nowhere", "--count", "20", "--close-timeout", "1",
                       "--set", "message.send.max.retries=0", "--set", "retry.backoff.ms=1")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "acknowledged 0, failed 20" in proc.stdout


def test_produce_rejects_a_bad_broker_entry(registry):
    proc = run_produce("--brokers", "not-a-broker", "--registry", registry.url, "--topic", "t", "--count", "1")
    assert proc.returncode == 2 and "not host:port or id:host:port" in proc.stderr


def test_produce_finds_brokers_through_zookeeper(broker_factory, registry, zk_connect):
    brokers = broker_factory(n=2, zk_connect=zk_connect, num_partitions=1)
    proc = run_produce("--zk", zk_connect, "--registry", registry.url, "--topic", "svc-metrics",
                       "--count", "200", "--batch-size", "20", "--json",
                       "--set", "topic.format.default=0.7")   # read back below from the 0.7 port
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["acknowledged"] == 200 and summary["schema"] == "service_metric"
    records, failures = read_topic(brokers, "svc-metrics", registry)
    assert failures == [] and len(records) == 200


def test_unknown_key_field_is_refused_before_anything_is_sent():
    """A usage error (exit 2, one line naming the field and the allowed ones), no broker contacted."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "ingest.cli", "produce", "--brokers", "127.0.0.1:1", "--registry",
         "http://127.0.0.1:1", "--topic", "page-views", "--count", "5", "--key-field", "nope"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "'nope'" in err[0] and "allowed:" in err[0] and "header" in err[0]
    assert "cannot connect" not in proc.stderr
