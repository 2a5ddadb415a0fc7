"""bench/bench_loader.py runs end to end at a tiny size (no timing asserted): a real broker process and
registry, the same events in a 0.7 topic (the product's producer) and in a Kafka-format topic
(confluent-kafka through the broker's Kafka listener), each loaded to Avro and to Parquet beside its
limit. The bench itself refuses a load that committed another number of rows than was produced; here
each of the four rows must print that exact count, its throughput, its limit and its ratio, and the
Kafka-format loads their ratio to the 0.7 loads."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.processes, pytest.mark.slow]  # a broker, a registry and a Spark session

REPO = Path(__file__).resolve().parents[2]
COUNT = 3000


def test_the_loader_bench_loads_0_7_and_kafka_format_topics_to_both_formats_beside_their_limits():
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_loader.py"), "--count", str(COUNT)],
                       capture_output=True, text=True, timeout=900, cwd=str(REPO), env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert re.search(r"load average at start \[.+\], at end \[.+\]", out)
    rows = {}
    for kind in ("0.7", "kafka"):
        for fmt in ("avro", "parquet"):
            m = re.search(rf"^{re.escape(kind)}\s+{fmt}\s+([\d,]+)\s+([\d.]+)\s+([\d,]+)\s+([\d.]+)%\s+([\d.]+)\s+"
                          rf"([\d,]+)$", out, re.M)
            assert m, (kind, fmt, out[-2000:])
            rows[kind, fmt] = m.groups()
            assert int(m.group(6).replace(",", "")) == COUNT   # every produced event, once
            assert int(m.group(1).replace(",", "")) > 0 and int(m.group(3).replace(",", "")) > 0
    for fmt in ("avro", "parquet"):
        assert re.search(rf"^kafka/0\.7 {fmt}: loader msg/s [\d.]+, task CPU/msg [\d.]+, limit msg/s [\d.]+$",
                         out, re.M), fmt
    results = json.loads(out[out.index("\n{") + 1:out.index("\n}\n") + 2])
    # both kinds hold the same events: the 0.7 log frames each in 10 bytes, a record batch in its own way
    assert set(results["log_bytes"]) == {"0.7", "kafka"} and all(v > COUNT * 200 for v in results["log_bytes"].values())
    assert {results[k][f]["rows"] for k in ("0.7", "kafka") for f in ("avro", "parquet")} == {COUNT}
