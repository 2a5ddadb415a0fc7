"""``ingest mirror status`` and ``MirrorMaker.status()``: exact positions, ends and lag."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ingest.client.discovery import start_kazoo
from ingest.client.simple_consumer import SimpleConsumer
from ingest.client.topics_admin import create_topic
from ingest.mirror.mirror_maker import MirrorMaker
from ingest.mirror.status import HEADER, UnitStatus, render
from tests.harness.brokers import broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.wait import wait_until
from tests.mirror.mirror_setup import TargetCluster, chroot, produce, wait_mirrored

ROOT = Path(__file__).resolve().parents[2]


def _status(config_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "ingest.cli", "mirror", "status", "--config", str(config_path),
                           *extra], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=60)


def test_render_is_one_aligned_line_per_partition():
    rows = [UnitStatus("dc1", "clicks", 0, 1, 1, "exactly-once", 10, 10, 120, 150, 120, 30, 2.5, "m-a"),
            UnitStatus("dc2", "late", 3, 0, None, "at-least-once (repartitioned)", 900, None, 900, 900, None, 0,
                       0.0, None)]
    lines = render(rows).splitlines()
    assert lines[0].split("  ")[0] == "source" and len(lines) == 4 and set(lines[1]) == {"-"}
    assert lines[2].split() == ["dc1", "clicks", "0-1", "1", "exactly-once", "120", "150", "120", "30", "2.5", "m-a"]
    assert lines[3].split() == ["dc2", "late", "3-0", "-", "at-least-once", "(repartitioned)", "900", "900", "-",
                                "0", "0.0", "-"]
    assert len(HEADER) == 11


def test_status_shows_exact_lag_after_the_mirror_stopped_and_none_once_caught_up(zookeeper, broker_factory,  # noqa: F811
                                                                                 tmp_path):
    dc1_zk, target_zk = chroot(zookeeper, "dc1"), chroot(zookeeper, "target")
    (dc1,) = broker_factory(1, zk_connect=dc1_zk, num_partitions=2)
    broker_factory(1, zk_connect=target_zk)
    first = [produce(dc1, "clicks", p, [f"m{p}-{i}".encode() * 10 for i in range(25)]) for p in (0, 1)]
    # a target topic that exists with too few partitions: its units fall back to repartitioning
    small = [produce(dc1, "small", p, [f"s{p}-{i}".encode() for i in range(4 + p)]) for p in (0, 1)]
    tzk = start_kazoo(target_zk, connection_timeout_ms=30_000)
    create_topic(tzk, "small", partitions=1, replication_factor=1, manual=None)
    tzk.stop()
    tzk.close()
    props = {"sources": "dc1", "source.dc1.zk.connect": dc1_zk, "target.zk.connect": target_zk,
             "mirror.id": "m-status", "checkpoint.interval.ms": 100, "topic.refresh.ms": 500}
    config_path = tmp_path / "mirror.properties"
    config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    target = TargetCluster(target_zk)
    try:
        mirror = MirrorMaker(props).start()
        try:
            wait_mirrored(target, {("clicks", 0): first[0], ("clicks", 1): first[1]})
            wait_until(lambda: [(r["topic"], r["partition"], r["lag_bytes"], r["lag_seconds"])
                                for r in mirror.status()] ==
                       [("clicks", 0, 0, 0.0), ("clicks", 1, 0, 0.0), ("small", 0, 0, 0.0), ("small", 1, 0, 0.0)],
                       what="the API's rows caught up")
            rows = mirror.status()
            assert [(r["mode"], r["target_partition"], r["position"], r["source_end"], r["target_end"], r["owner"],
                     r["state"]) for r in rows] == [
                ("exactly-once", 0, first[0], first[0], first[0], "m-status", "caught up"),
                ("exactly-once", 1, first[1], first[1], first[1], "m-status", "caught up"),
                ("at-least-once (repartitioned)", None, small[0], small[0], None, "m-status", "caught up"),
                ("at-least-once (repartitioned)", None, small[1], small[1], None, "m-status", "caught up")]
            a = target.leader("small", 0)
            with SimpleConsumer(a.host, a.port) as c:
                wait_until(lambda: len(list(c.iter_range("small", 0, 0, c.latest_offset("small", 0)))) == 9,
                           what="the 9 messages of small in the target's one partition")
        finally:
            stopping_at = time.time()
            mirror.stop()
    finally:
        target.close()
    stopped_at = time.time()
    more = produce(dc1, "clicks", 0, [b"late" * 50 for _ in range(7)])
    asked_at = time.time()
    r = _status(config_path, "--json")
    answered_at = time.time()
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(row["topic"], row["mode"], row["position"], row["lag_bytes"]) for row in rows[2:]] == [
        ("small", "at-least-once (repartitioned)", small[0], 0), ("small", "at-least-once (repartitioned)", small[1], 0)]
    rows = rows[:2]
    assert [{k: v for k, v in row.items() if k != "lag_seconds"} for row in rows] == [
        {"source": "dc1", "topic": "clicks", "broker_id": dc1.broker_id, "partition": 0, "target_partition": 0,
         "mode": "exactly-once", "checkpoint_source_offset": first[0], "checkpoint_target_offset": first[0],
         "position": first[0], "source_end": first[0] + more, "target_end": first[0], "lag_bytes": more,
         "owner": None},
        {"source": "dc1", "topic": "clicks", "broker_id": dc1.broker_id, "partition": 1, "target_partition": 1,
         "mode": "exactly-once", "checkpoint_source_offset": first[1], "checkpoint_target_offset": first[1],
         "position": first[1], "source_end": first[1], "target_end": first[1], "lag_bytes": 0, "owner": None}]
    # behind since the last checkpoint (no owner runs), which the stop wrote
    assert asked_at - stopped_at - 0.001 <= rows[0]["lag_seconds"] <= answered_at - stopping_at + 0.001
    assert rows[1]["lag_seconds"] == 0.0
    text = _status(config_path)
    assert text.returncode == 0, text.stderr
    line = text.stdout.splitlines()[2].split()
    assert line[:9] == ["dc1", "clicks", f"{dc1.broker_id}-0", "0", "exactly-once", str(first[0]),
                        str(first[0] + more), str(first[0]), str(more)] and line[10] == "-"


def test_with_a_registry_the_mirror_publishes_what_it_read_and_the_target_acknowledged(zookeeper, broker_factory,  # noqa: F811
                                                                                        tmp_path):
    from ingest.events.registry_client import RegistryClient
    from ingest.events.serde import EventDeserializer
    from tests.harness.registry import RegistryProcess

    dc1_zk, target_zk = chroot(zookeeper, "dc1"), chroot(zookeeper, "target")
    (dc1,) = broker_factory(1, zk_connect=dc1_zk, num_partitions=1)
    (tb,) = broker_factory(1, zk_connect=target_zk, num_partitions=1)
    n = produce(dc1, "clicks", 0, [f"plain-{i}".encode() for i in range(10)])
    n += produce(dc1, "clicks", 0, [f"zipped-{i}".encode() for i in range(7)], codec=1)   # gzip wrapper: 7 count
    registry = RegistryProcess(tmp_path / "registry").start()
    target = TargetCluster(target_zk)
    try:
        mirror = MirrorMaker({"sources": "dc1", "source.dc1.zk.connect": dc1_zk, "target.zk.connect": target_zk,
                              "mirror.id": "m-counts", "registry.url": registry.url, "checkpoint.interval.ms": 100,
                              "monitoring.interval.ms": 100}).start()
        try:
            wait_mirrored(target, {("clicks", 0): n})
        finally:
            mirror.stop()   # the final checkpoint publishes the closing counts
        deserializer = EventDeserializer(RegistryClient(registry.url))
        with SimpleConsumer(tb.host, tb.port) as c:
            events = [deserializer.deserialize(m.payload)
                      for m in c.iter_range("audit-mirror", 0, 0, c.latest_offset("audit-mirror", 0))]
        session = f"mirror:mirror:dc1:clicks:{dc1.broker_id}-0"
        latest_revision: dict[int, dict] = {}
        for e in events:
            assert e["producer_session_id"] == session and e["service"] == "mirror:dc1", e
            w = e["window_start_ms"]
            if w not in latest_revision or e["revision"] > latest_revision[w]["revision"]:
                latest_revision[w] = e
        assert sum(e["count_attempted"] for e in latest_revision.values()) == 17
        assert sum(e["count_acked"] for e in latest_revision.values()) == 17
    finally:
        target.close()
        registry.stop()
