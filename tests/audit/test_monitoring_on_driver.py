"""Monitoring events read and judged on the driver (a small audit topic) give what Spark gives.

The same committed files are audited with ``monitoring.driver.read.max.bytes`` at its default (the
driver path) and at 0 (Spark, the reference): snapshots, report_seq gaps, report rows and errors
must be identical, for both file formats, with every rule exercised (redelivered copies,
revisions, ties, re-sent report_seqs, a missing first event, nulls, the mirror's origin).
"""
from __future__ import annotations

import pytest

from ingest.audit import inputs, job
from ingest.audit.config import AUDIT_CONFIG
from ingest.audit.job import run_audit
from ingest.clock import FakeClock
from tests.audit.synth import AUDIT_TOPIC, MIRROR_TOPIC, T0, W, Destination, events, mon

LATE = T0 + 6 * W + 60_000
BOUND = AUDIT_CONFIG.parse({"destination": "/x"})["monitoring.driver.read.max.bytes"]


def _tricky(dest: Destination) -> None:
    copy = mon("s1", "pv", T0, report_seq=2, acked=6, revision=2, seq_min=0, seq_max=5, event_id="same")
    tie_a = mon("s2", "pv", T0, report_seq=2, acked=4, revision=3, emitted_at=T0 + W + 50, seq_min=0, seq_max=3)
    tie_b = mon("s2", "pv", T0, report_seq=3, acked=3, revision=3, emitted_at=T0 + W + 50, seq_min=0, seq_max=2)
    dest.load({
        "pv": events("s1", range(0, 6), T0) + events("s2", range(0, 4), T0 + 100)
        + events("s3", range(0, 5), T0 + W) + events("s4", range(0, 3), T0 + 2 * W),
        AUDIT_TOPIC: [
            mon("s1", "pv", T0, report_seq=1, acked=3, revision=1, seq_min=0, seq_max=2, final=False),
            copy, dict(copy),                                        # a redelivered copy counts once
            mon("s2", "pv", T0, report_seq=1, acked=2, revision=1, seq_min=0, seq_max=1, server="host-b"),
            tie_a, tie_b,                                            # same revision and emitted_at: report_seq decides
            mon("s3", "pv", T0 + W, report_seq=2, acked=5, seq_min=0, seq_max=4),  # report_seq 1 never seen
            mon("s3", "pv", T0 + 2 * W, report_seq=4, acked=0, heartbeat=True),    # 3 lost; no seqs (nulls)
            mon("s3", "pv", T0 + 2 * W, report_seq=4, acked=0, heartbeat=True, emitted_at=T0 + 3 * W + 9),  # re-sent
            mon("s4", "pv", T0 + 2 * W, report_seq=1, acked=5, seq_min=0, seq_max=4, failed=1),
        ],
    })
    dest.load({MIRROR_TOPIC: [mon("mirror:g:dc1:pv:0-0", "pv", T0, report_seq=1, acked=10, attempted=10,
                                  server="mirror-host")]})


@pytest.fixture(params=["parquet", "avro"])
def dest(request, tmp_path):
    d = Destination(tmp_path / "dest", request.param)
    _tricky(d)
    return d


def _files(dest):
    state = inputs.load_state(dest.root)
    return ([f for f in state.files if f.topic == AUDIT_TOPIC], [f for f in state.files if f.topic == MIRROR_TOPIC])


def test_the_driver_judges_the_monitoring_events_as_spark_does(spark, dest):
    mon_files, mirror_files = _files(dest)
    groups = [("producers", mon_files), ("mirror", mirror_files), ("broker", [])]
    assert inputs.monitoring_on_driver(groups, BOUND) is not None  # the driver path is taken below
    on_driver = job._monitoring(spark, mon_files, mirror_files, W, (), BOUND)
    in_spark = job._monitoring(spark, mon_files, mirror_files, W, (), 0)
    producers, mirror, gaps, sizes, broker = on_driver

    def key(s):
        return (s.origin, s.session, s.topic, s.window_start_ms)

    assert sorted(producers, key=key) == sorted(in_spark[0], key=key)
    assert sorted(mirror, key=key) == sorted(in_spark[1], key=key)
    assert (gaps, sizes, broker) == in_spark[2:]
    by_key = {key(s): s for s in producers}
    assert by_key[("producers", "s1", "pv", T0)].acked == 6
    assert by_key[("producers", "s2", "pv", T0)].report_seq == 3  # the tie goes to the higher report_seq
    assert [(g.session, g.first_missing, g.last_missing) for g in gaps] == [("s3", 1, 1), ("s3", 3, 3)]
    assert [s.session for s in mirror] == ["mirror:g:dc1:pv:0-0"]


def test_the_whole_report_is_the_same_either_way(spark, dest):
    def audit(max_bytes):
        cfg = AUDIT_CONFIG.parse({"destination": dest.root, "grace.ms": 60_000, "window.lookback": 6,
                                  "monitoring.driver.read.max.bytes": max_bytes})
        run = run_audit(spark, cfg, clock=FakeClock(LATE), from_ms=T0, to_ms=T0 + 6 * W, run_id="same",
                        write_history=False)
        return run.rows, run.exit_code, run.nothing_judged

    assert audit(BOUND) == audit(0)


def test_files_over_the_bound_are_left_to_spark(dest):
    mon_files, _ = _files(dest)
    assert inputs.monitoring_on_driver([("producers", mon_files)], 0) is None
    assert inputs.monitoring_on_driver([("producers", mon_files)], 10) is None  # kilobytes > 10 bytes
    assert inputs.monitoring_on_driver([("producers", mon_files)], BOUND) is not None


def test_a_corrupt_monitoring_file_fails_as_it_does_in_spark(spark, dest):
    mon_files, _ = _files(dest)
    path = mon_files[0].path
    with open(path, "r+b") as f:  # really damaged bytes: the middle of the file overwritten
        data = f.read()
        f.seek(len(data) // 3)
        f.write(b"\xff" * (len(data) // 3))
    assert inputs.monitoring_on_driver([("producers", mon_files)], BOUND) is None

    def failure(max_bytes):
        cfg = AUDIT_CONFIG.parse({"destination": dest.root, "monitoring.driver.read.max.bytes": max_bytes})
        with pytest.raises(Exception) as info:
            run_audit(spark, cfg, clock=FakeClock(LATE), from_ms=T0, to_ms=T0 + 6 * W, write_history=False)
        return type(info.value)

    assert failure(BOUND) is failure(0)
