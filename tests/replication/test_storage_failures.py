"""A leader that cannot write gives up leadership, and takes it back once it has recovered and caught up.

Real ZooKeeper, three real broker processes; broker 0, the preferred leader,
keeps its ``log.dir`` on a disk the test really breaks (root only; skipped
otherwise):

- a full disk: a small tmpfs filled with a file, so every append of broker 0
  fails with ENOSPC, as a leader and as a follower. The full leader answers
  DISK_FULL (nothing appended), tells ZooKeeper that its replica cannot write,
  and the controller elects another in-sync replica and drops broker 0 from the
  in-sync set. acks=-1 writes (min.insync.replicas=2) go on on the two healthy
  replicas while broker 0's disk stays full, and broker 0 is neither re-elected
  nor let back into the in-sync set meanwhile; ``ingest topics describe`` names
  the replica that cannot write. Once the filler is deleted,
  broker 0 copies what it missed, rejoins the in-sync set, and the
  controller's automatic preferred-leader check
  (``leader.imbalance.check.interval.seconds``) gives it its leadership back.
  The full disk does not flood broker 0's own log: the failed writes and the
  failed copies are logged once a minute, not once per attempt.
- a failing fsync: ext4 on a loop device cut short under the segment
  (tests/harness/failing_disk.py). The leader's log goes offline (LOG_OFFLINE),
  leadership moves the same way, and broker 0 takes it back after its restart
  (an offline log serves again only after recovery) once it has caught up.

Both end the same way: every acknowledged write is served once, in order, no
message of the refused set is, and the replicas are byte-identical up to the
high watermark.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingest.wire.errors import ErrorCode
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.failing_disk import failing_disk  # noqa: F401  (fixture)
from tests.harness.limits import tmpfs
from tests.harness.metrics import metrics_url, scrape_until, value

pytestmark = pytest.mark.slow

TOPIC = "full"
REBALANCE = {"leader.imbalance.check.interval.seconds": 1}
REPO = Path(__file__).resolve().parents[2]


def _fill(mnt: Path, leave: int) -> Path:
    """A file taking all the free space of ``mnt`` but about ``leave`` bytes."""
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def _describe(zk_connect: str) -> dict:
    """``ingest topics describe --json`` of the topic's partition 0."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "ingest.cli", "topics", "describe", "--zookeeper", zk_connect,
                        "--topic", TOPIC, "--json"], cwd=REPO, capture_output=True, text=True, timeout=90, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[0])


class Writes:
    """acks=-1 batches through the harness client (one attempt each); remembers what was acknowledged."""

    def __init__(self, brokers, size: int) -> None:
        self.client = r.AcksClient(brokers, timeout_ms=5000)
        self.size = size
        self.acked: list[int] = []
        self.unacked: set[int] = set()
        self.next_id = 0

    def send(self, n: int) -> r.ProduceResult:
        ids = range(self.next_id, self.next_id + n)
        self.next_id += n
        res = self.client.send(TOPIC, 0, [r.payload(i, self.size) for i in ids])
        (self.acked.extend if res.status == r.ACKED else self.unacked.update)(ids)
        return res

    def acked_by(self, leader: int, n: int = 10) -> r.ProduceResult:
        """Send until a batch is acknowledged by ``leader`` (a client whose metadata still names the
        previous leader is refused first: nothing appended; other failures are not acknowledged)."""
        last: list[r.ProduceResult] = []

        def ok():
            last[:] = [self.send(n)]
            return last[0].status == r.ACKED and last[0].leader == leader
        try:
            r.wait_for(ok, 30, f"a write acknowledged by broker {leader}", interval=0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last answer {last}") from None
        return last[0]


def _cluster(broker_factory, zk_connect, zk, log_dir: Path, **overrides):
    """Broker 0 with ``log_dir``, brokers 1 and 2 on ordinary disks; broker 0 leads ``TOPIC``-0."""
    over = r.replication_overrides(min_isr=2, lag_ms=1500, session_ms=3000, **REBALANCE, **overrides)
    b0 = broker_factory(n=1, zk_connect=zk_connect,
                        overrides={**over, "log.dir": str(log_dir), "metrics.port": 0})[0]
    b0.log_dir = log_dir   # where the harness reads its segment files
    brokers = [b0, *broker_factory(n=2, zk_connect=zk_connect, overrides=over)]
    r.create_topic(zk, TOPIC, {0: [0, 1, 2]})
    r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader == 0 and len(s.isr) == 3, 60,
                     "broker 0 leading with a full in-sync set")
    return brokers


def _handed_over(zk, w: Writes, refused: r.ProduceResult, code: int):
    """The refused write's answer, then the controller's election of a healthy replica."""
    assert (refused.error, refused.leader) == (code, 0), refused
    moved = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in (1, 2) and 0 not in s.isr, 30,
                             "the controller to move leadership off broker 0")
    assert set(moved.isr) == {1, 2}, moved
    for _ in range(10):
        w.acked_by(moved.leader)
    return moved


def _taken_back(zk, zk_connect: str, w: Writes, brokers, moved) -> list[int]:
    """Broker 0 catches up, rejoins the in-sync set and leads again; nothing acknowledged is lost."""
    def back():
        w.send(10)                              # new data for broker 0 to copy
        s = r.partition_state(zk, TOPIC, 0)
        return s if s.leader == 0 and set(s.isr) == {0, 1, 2} else None
    state = r.wait_for(back, 90, "broker 0 to catch up, rejoin the in-sync set and lead again", interval=0.2)
    assert _describe(zk_connect)["cannot_write"] == {}
    assert state.leader_epoch > moved.leader_epoch
    w.acked_by(0)

    b0 = brokers[0]
    hw = r.high_watermark(b0, TOPIC, 0)
    served = [r.payload_id(data) for _, _, data in r.read_committed(b0, TOPIC, 0)]
    assert [i for i in served if i not in w.unacked] == w.acked, \
        "acknowledged writes not served exactly once, in order"
    r.assert_replicas_identical(brokers, TOPIC, 0, hw)
    return served


def test_a_leader_on_a_full_disk_hands_over_leadership_and_takes_it_back(broker_factory, zk_connect, zk,
                                                                         tmp_path):
    with tmpfs(tmp_path / "disk0", "8m") as mnt:
        brokers = _cluster(broker_factory, zk_connect, zk, mnt / "logs")
        b0 = brokers[0]
        try:
            w = Writes(brokers, size=1000)
            for _ in range(4):
                assert w.send(10).status == r.ACKED

            filler = _fill(mnt, leave=16 * 1024)
            refused_ids = range(w.next_id, w.next_id + 64)
            moved = _handed_over(zk, w, w.send(64), ErrorCode.DISK_FULL)     # 64 KB: does not fit
            time.sleep(3)   # three preferred-leader checks and lag checks: none may bring broker 0 back
            held = r.partition_state(zk, TOPIC, 0)
            assert held.leader == moved.leader and 0 not in held.isr, \
                f"broker 0 led or rejoined the in-sync set while its disk was full: {held}"
            assert _describe(zk_connect)["cannot_write"] == {"0": "DISK_FULL"}
            url = metrics_url(b0.output)
            scrape_until(url, lambda m: value(m, "ingest_broker_storage_failed_replicas") == 1,
                         "broker 0's metrics to count its replica that cannot write")

            filler.unlink()
            served = _taken_back(zk, zk_connect, w, brokers, moved)
            assert value(scrape_until(url, lambda m: True, "a scrape"), "ingest_broker_storage_failed_replicas") == 0
            assert not set(refused_ids) & set(served), "messages of the refused set are served"

            out = b0.output().splitlines()
            no_space = [line for line in out if "No space left on device" in line]
            # the first failed write, the first failed copy, the refusal's WARNING: not one per attempt
            assert 1 <= len(no_space) <= 4, (len(no_space), no_space[:6])
            assert "Traceback" not in b0.output()
        finally:
            b0.kill()


def test_a_leader_whose_fsync_fails_hands_over_leadership_and_takes_it_back_after_a_restart(
        broker_factory, zk_connect, zk, failing_disk):
    logs = failing_disk.mountpoint / "logs"
    # no checkpoint file written beside the segment: the disk is cut right after the segment's blocks
    brokers = _cluster(broker_factory, zk_connect, zk, logs,
                       **{"replica.high.watermark.checkpoint.interval.ms": 3_600_000})
    b0 = brokers[0]
    try:
        w = Writes(brokers, size=4000)
        for _ in range(10):    # > 64 KB: ext4 places the segment's next blocks right after it
            assert w.send(4).status == r.ACKED
        failing_disk.fail_after(logs / f"{TOPIC}-0" / f"{0:020d}.kafka")
        moved = _handed_over(zk, w, w.send(8), ErrorCode.LOG_OFFLINE)
        offline = [line for line in b0.output().splitlines() if f"log {TOPIC}-0 is OFFLINE" in line]
        assert len(offline) == 1, offline
        assert _describe(zk_connect)["cannot_write"] == {"0": "LOG_OFFLINE"}

        failing_disk.heal()
        b0.kill()
        failing_disk.remount()   # what the disk holds, not what the page cache remembers
        b0.start()
        _taken_back(zk, zk_connect, w, brokers, moved)
    finally:
        b0.kill()
