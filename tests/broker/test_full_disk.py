"""A full disk under a real broker: a refused batch never comes back, DISK_FULL is answered and logged at ERROR.

The broker's ``log.dir`` is a small tmpfs mounted by the test (root only;
skipped otherwise). Each trial fills the file system so that a PRODUCE_ACK
runs out of space in the middle of its set, frees the space, produces
shorter sets of messages of the same size (so a log that kept the refused
set's partial bytes would find them aligned to message boundaries after the
new ones), restarts the broker and fetches everything back.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ingest.client.producer import Producer
from ingest.errors import DiskFullError
from ingest.wire.errors import ErrorCode
from tests.harness.brokers import BrokerProcess
from tests.harness.limits import tmpfs
from tests.harness.wire import fetch_all, produce_ack

pytestmark = pytest.mark.processes  # broker processes on a mounted tmpfs

TRIALS = 10
PAYLOAD = 1000  # every message the same size: stale messages would sit on the boundaries of new ones
REFUSED = 64    # messages in a set that runs out of space
PAGE = 4096


@pytest.fixture
def small_disk(tmp_path):
    with tmpfs(tmp_path / "tmpfs", "4m") as mnt:
        yield mnt


def _payload(tag: str, trial: int, i: int) -> bytes:
    head = f"{tag}{trial:02d}-{i:03d}-".encode()
    return head + b"x" * (PAYLOAD - len(head))



def _fill(mnt: Path, leave: int) -> Path:
    """A file taking all the free space of ``mnt`` but ``leave`` bytes."""
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def test_a_refused_batch_never_reappears_after_a_restart(small_disk, tmp_path):
    b = BrokerProcess(0, tmp_path / "broker", overrides={
        "log.dir": str(small_disk / "logs"), "num.partitions": 1, "log.flush.interval": 1})
    b.start()
    acked: dict[str, list[bytes]] = {}
    refused: set[bytes] = set()
    codes = []
    deadline = time.monotonic() + 120
    try:
        for trial in range(TRIALS):
            assert time.monotonic() < deadline, f"{trial} trials took over 120 s"
            topic = f"full-{trial}"
            first = [_payload("A", trial, i) for i in range(3)]
            assert produce_ack(b, topic, first).error == ErrorCode.NONE
            acked[topic] = list(first)
            # Room for a few pages only: the 64 KB set runs out of space part-way.
            filler = _fill(small_disk, (1 + trial % 4) * PAGE + 300 * trial)
            batch = [_payload("R", trial, i) for i in range(REFUSED)]
            resp = produce_ack(b, topic, batch)
            codes.append(resp.error)
            if resp.error == ErrorCode.NONE:  # not refused: then it must all be served
                acked[topic] += batch
            else:
                assert resp.offset == -1
                refused.update(batch)
            filler.unlink()
            # Shorter sets: on a log that kept the partial bytes, they would end on a stale boundary.
            for j in range(3):
                more = [_payload("B", trial, 10 * j + i) for i in range(2)]
                assert produce_ack(b, topic, more).error == ErrorCode.NONE
                acked[topic] += more
            b.kill()  # a crash: recovery decides what the files hold
            b.start()
            served = {t: fetch_all(b, t) for t in acked}
            back = sorted(m[:8].decode() for msgs in served.values() for m in msgs if m in refused)
            assert not back, f"trial {trial}: messages of refused sets served after a restart: {back}"
            assert served == acked, f"trial {trial}: acknowledged messages not served exactly once, in order"

        assert codes == [ErrorCode.DISK_FULL] * TRIALS, f"answers to the sets that ran out of space: {codes}"
        out = b.output().splitlines()
        errors = [line for line in out if " ERROR " in line and "No space left on device" in line]
        assert len(errors) == TRIALS, errors  # one ERROR line per failed write, naming the cause
        refusals = [line for line in out if "PRODUCE_ACK request refused" in line]
        # (refusal WARNINGs may be rate-limited per client and reason: at least one, all DISK_FULL)
        assert refusals and all("DISK_FULL" in line for line in refusals), refusals[:3]
        assert "Traceback" not in b.output()
    finally:
        b.kill()


def test_the_producer_retries_disk_full_and_counts_the_failures(small_disk, tmp_path):
    """DISK_FULL is retriable later: the producer retries with back-off, then reports the batch failed."""
    b = BrokerProcess(0, tmp_path / "broker", overrides={"log.dir": str(small_disk / "logs"), "num.partitions": 1})
    b.start()
    producer = Producer({"broker.list": b.address, "message.send.max.retries": 2, "retry.backoff.ms": 10})
    try:
        producer.send("t", [b"first"])
        filler = _fill(small_disk, PAGE)
        with pytest.raises(DiskFullError):
            producer.send("t", [_payload("R", 0, i) for i in range(REFUSED)])
        assert producer.stats["failed"] == REFUSED and producer.stats["retries"] == 2
        filler.unlink()
        producer.send("t", [b"second"])
        assert producer.stats["acked"] == 2
        assert fetch_all(b, "t") == [b"first", b"second"]
    finally:
        producer.close()
        b.kill()


def test_refused_writes_on_a_full_disk_are_logged_once_then_counted(small_disk, tmp_path):
    """Each refused write used to log its own ERROR line, onto the same full disk: 200 refusals,
    200 lines. Now the first failure of a log is logged, the repeats are counted (one line per
    minute per log and cause), and each refused request still gets DISK_FULL."""
    b = BrokerProcess(0, tmp_path / "broker", overrides={"log.dir": str(small_disk / "logs"), "num.partitions": 1})
    b.start()
    try:
        assert produce_ack(b, "flood", [b"first"]).error == ErrorCode.NONE
        _fill(small_disk, PAGE)
        batch = [_payload("R", 0, i) for i in range(REFUSED)]
        codes = {produce_ack(b, "flood", batch).error for _ in range(200)}
        assert codes == {ErrorCode.DISK_FULL}
        out = b.output().splitlines()
        errors = [line for line in out if " ERROR " in line]
        assert len(errors) == 1 and "No space left on device" in errors[0], (len(errors), errors[:3])
        assert len(out) < 20, f"{len(out)} log lines for 200 refused writes: {out[-5:]}"
    finally:
        b.kill()
