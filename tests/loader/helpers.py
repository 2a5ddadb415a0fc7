"""Helpers of the loader tests: produce real events, read back what a load committed."""
from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import fastavro
import pyarrow.parquet as pq

from ingest.loader.config import LOADER_CONFIG
from ingest.loader.state import LoaderState
from ingest.storage import open_storage

REPO = Path(__file__).resolve().parents[2]


def loader_config(dest, brokers, registry_url, **overrides):
    raw = {
        "destination": str(dest),
        "brokers": ",".join(f"{b.host}:{b.port}" for b in brokers),
        "registry.url": registry_url,
        "format": "avro",
        "avro.codec": "deflate",
    }
    raw.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LOADER_CONFIG.parse(raw, source="test")


def produce(brokers, registry_url, topic, n, *, time_ms=None, chunk=50, seed=1, key_prefix="k"):
    """Send ``n`` page views (sync, acknowledged) spread over partitions; returns their (session, seq) ids."""
    from ingest.events.event_producer import EventProducer
    from ingest.events.loadgen import EventGenerator
    from ingest.events.registry_client import RegistryClient
    from tests.harness.brokers import broker_list

    gen = EventGenerator(seed=seed)
    ids = []
    with EventProducer({"broker.list": broker_list(brokers)}, RegistryClient(registry_url),
                       monitoring_enable=False, background=False) as ep:
        for i in range(0, n, chunk):
            headers = ep.send(topic, gen.batch(min(chunk, n - i)), key=f"{key_prefix}{i}", time_ms=time_ms)
            ids.extend((h["session"], h["seq"]) for h in headers)
        ep.flush()
    return ids


def read_rows(state: LoaderState, topic: str | None = None) -> list[dict]:
    """Every committed data row (records as decoded), read straight from the files."""
    rows = []
    for rec in state.files(topic):
        path = state.full_path(rec)
        data = state.storage.read_bytes(path)
        import io

        if rec.format == "avro":
            rows.extend(fastavro.reader(io.BytesIO(data)))
        else:
            rows.extend(pq.read_table(io.BytesIO(data)).to_pylist())
    return rows


def committed_ids(dest, topic=None) -> collections.Counter:
    state = LoaderState.load(open_storage(str(dest)))
    return collections.Counter((r["header"]["session"], r["header"]["seq"]) for r in read_rows(state, topic))


def spark_env() -> dict:
    py = sys.executable
    env = dict(os.environ, PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py,
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("INGEST_FAULTS", None)
    return env


def spark_submit() -> str:
    return str(Path(sys.executable).parent / "spark-submit")
