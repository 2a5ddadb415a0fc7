"""``ingest mirror status`` and ``MirrorMaker.status()``: exact positions, ends and lag."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

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
    props = {"sources": "dc1", "source.dc1.zk.connect": dc1_zk, "target.zk.connect": target_zk,
             "mirror.id": "m-status", "checkpoint.interval.ms": 100, "topic.refresh.ms": 500}
    config_path = tmp_path / "mirror.properties"
    config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    target = TargetCluster(target_zk)
    try:
        mirror = MirrorMaker(props).start()
        try:
            wait_mirrored(target, {("clicks", 0): first[0], ("clicks", 1): first[1]})
            wait_until(lambda: [(r["partition"], r["lag_bytes"], r["lag_seconds"]) for r in mirror.status()] ==
                       [(0, 0, 0.0), (1, 0, 0.0)], what="the API's rows caught up")
            row = mirror.status()[0]
            assert (row["mode"], row["target_partition"], row["position"], row["source_end"], row["target_end"],
                    row["owner"]) == ("exactly-once", 0, first[0], first[0], first[0], "m-status")
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
