"""The missing-id sample taken on the driver (bounded ranges) equals the Spark anti-join's on the same input,
and larger ranges fall back to Spark; the sample's Parquet read puts its session/seq filter into the scan.

The driver path collects only the loaded seqs of the asked sessions within their bounds, and takes the
first ``sample.size`` missing ids per window in the order the anti-join gives (session, then seq).
"""
from __future__ import annotations

import logging
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.audit import counts
from ingest.audit.inputs import LoadedFile, read_ids, read_session_seqs
from ingest.loader import layout
from tests.audit.synth import T0, W

IDS = (("topic", "string"), ("session", "string"), ("seq", "long"), ("time", "long"), ("server", "string"))
DRIVER_LOG = "missing-id sample on the driver"


def _case(seed: int):
    """Random loaded ids (some in another topic, some duplicated) and ranges, overlapping ones included."""
    rnd = random.Random(seed)
    sessions = ["s1", "s2", "s3"]
    loaded = [("pv" if rnd.random() < 0.8 else "clicks", s, q, T0 + q, "h")
              for s in sessions for q in range(0, 400) if rnd.random() < 0.9]
    loaded += rnd.sample(loaded, 30)  # duplicates
    ranges = []
    for ws in (T0, T0 + W):
        for s in rnd.sample(sessions, 2):
            lo = rnd.randrange(0, 300)
            ranges.append(("pv", ws, s, lo, lo + rnd.randrange(0, 120)))
    t, ws, s, lo, hi = ranges[0]
    ranges.append((t, ws, s, lo + 5, hi + 40))  # overlaps the first range: its missing seqs twice, as in Spark
    ranges.append(("pv", T0 + 2 * W, "s4", 10, 12))  # a session nothing was loaded of
    return loaded, ranges


def _expected(loaded, ranges, size):
    have = {(s, q) for _, s, q, _, _ in loaded}
    found: dict = {}
    for t, ws, s, lo, hi in ranges:
        found.setdefault((t, ws), []).extend((s, q) for q in range(lo, hi + 1) if (s, q) not in have)
    return {k: [f"{s}:{q}" for s, q in sorted(v)[:size]] for k, v in found.items() if v}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_driver_sample_equals_the_spark_sample_on_the_same_input(spark, caplog, seed):
    loaded, ranges = _case(seed)
    df = counts.local_frame(spark, IDS, loaded)
    for size in (1, 7, 10_000):
        with caplog.at_level(logging.INFO, logger="ingest.audit.counts"):
            caplog.clear()
            on_driver = counts.missing_samples(spark, df, ranges, size, driver_max_ids=10_000)
            assert DRIVER_LOG in caplog.text
            caplog.clear()
            in_spark = counts.missing_samples(spark, df, ranges, size, driver_max_ids=0)
            assert DRIVER_LOG not in caplog.text
        assert on_driver == in_spark == _expected(loaded, ranges, size)
        assert ("pv", T0 + 2 * W) in on_driver  # the session nobody loaded: all of its range is missing


def test_ranges_above_the_bound_are_anti_joined_in_spark(spark, caplog):
    loaded = [("pv", "s1", q, T0 + q, "h") for q in range(100) if q not in (40, 41, 42, 90)]
    ranges = [("pv", T0, "s1", 0, 99), ("pv", T0 + W, "s1", 80, 99)]
    assert counts.expected_ids(ranges) == 120
    df = counts.local_frame(spark, IDS, loaded)
    want = {("pv", T0): ["s1:40", "s1:41", "s1:42"], ("pv", T0 + W): ["s1:90"]}
    with caplog.at_level(logging.INFO, logger="ingest.audit.counts"):
        assert counts.missing_samples(spark, df, ranges, 3, driver_max_ids=120) == want
        assert DRIVER_LOG in caplog.text
        caplog.clear()
        assert counts.missing_samples(spark, df, ranges, 3, driver_max_ids=119) == want
        assert DRIVER_LOG not in caplog.text


HEADER = pa.struct([("time", pa.int64()), ("server", pa.string()), ("session", pa.string()), ("seq", pa.int64())])


def _write(root, name: str, partition: int, headers: list[dict | None], offsets: range) -> LoadedFile:
    rel = layout.data_file_path("pv", "2026-11-28", 3, layout.data_file_name("pv", 0, partition, offsets[0],
                                                                             len(offsets), "parquet"))
    path = root / name / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "header": pa.array(headers, type=HEADER),
        "_partition": pa.array([partition] * len(offsets), pa.int32()),
        "_offset": pa.array(list(offsets), pa.int64()),
        "_timestamp": pa.array([T0 + o for o in offsets], pa.int64()),
    }), path)
    return LoadedFile(topic="pv", path=str(path), spark_path=str(path), format="parquet", hour_start_ms=0)


def test_session_seqs_are_read_with_the_filter_pushed_into_the_parquet_scan(spark, tmp_path):
    files = [_write(tmp_path, f"f{i}", i, [{"time": T0 + q, "server": "h", "session": s, "seq": q}
                                             for s in ("s1", "s2", "s3") for q in range(50)], range(150))
             for i in range(2)]
    files.append(_write(tmp_path, "headerless", 7, [None] * 20, range(100, 120)))  # session partition:7, seq offset
    bounds = {"s1": (10, 20), "s3": (45, 60), "partition:7": (110, 200)}
    df = read_session_seqs(spark, files, bounds)
    plan = df._jdf.queryExecution().executedPlan().toString()
    pushed = [line for line in plan.splitlines() if "PushedFilters" in line]
    assert pushed and "header.session" in pushed[0] and "header.seq" in pushed[0], plan
    assert df.columns == ["session", "seq"]
    every = read_ids(spark, files).collect()
    want = sorted((r.session, r.seq) for r in every
                  if r.session in bounds and bounds[r.session][0] <= r.seq <= bounds[r.session][1])
    assert sorted((r.session, r.seq) for r in df.collect()) == want
    assert ("partition:7", 115) in want and ("s1", 10) in want and ("s2", 15) not in want
    # Past SESSION_PREDICATES_MAX sessions: one IN list and the overall seq bounds (0-200), a superset.
    many = {f"x{i}": (0, 1) for i in range(70)} | bounds
    got = {(r.session, r.seq) for r in read_session_seqs(spark, files, many).collect()}
    assert got == {(r.session, r.seq) for r in every if r.session in bounds}
