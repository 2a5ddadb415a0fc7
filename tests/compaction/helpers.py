"""Build loader-shaped hours (small Avro/Parquet files with headers) for compaction tests."""
from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.loader.commit import commit_files, staging_relpath
from ingest.loader.layout import data_file_name, data_file_path, hour_bucket
from ingest.loader.layout import hour_dir as layout_hour_dir
from ingest.loader.records import FileRecord
from ingest.loader.state import LoaderState
from ingest.storage import open_storage

AVRO_SCHEMA = {
    "type": "record", "name": "PageView", "namespace": "ingest.events",
    "fields": [
        {"name": "header", "type": {"type": "record", "name": "EventHeader", "fields": [
            {"name": "time", "type": "long"}, {"name": "server", "type": "string"},
            {"name": "service", "type": "string"}, {"name": "session", "type": "string"},
            {"name": "seq", "type": "long"}]}},
        {"name": "url", "type": "string"},
        {"name": "member_id", "type": "long"},
    ],
}
HOUR_START_MS = 1_790_000_000_000 // 3_600_000 * 3_600_000  # an hour boundary


def record(session: str, seq: int) -> dict:
    return {"header": {"time": HOUR_START_MS + seq * 1000, "server": "web-1", "service": "frontend",
                       "session": session, "seq": seq},
            "url": f"/page/{seq % 17}", "member_id": seq * 7}


def hour_dir(root: Path, topic: str = "page-views") -> Path:
    dt, hour = hour_bucket(HOUR_START_MS)
    return root / layout_hour_dir(topic, dt, hour)


def encode(records: list[dict], fmt: str) -> bytes:
    buf = io.BytesIO()
    if fmt == "avro":
        fastavro.writer(buf, fastavro.parse_schema(AVRO_SCHEMA), records, codec="deflate")
    else:
        pq.write_table(pa.Table.from_pylist(records), buf)
    return buf.getvalue()


def commit_hour_files(root: Path, files: list[tuple[int, int, int, list[dict]]], fmt: str,
                      topic: str = "page-views", run_id: str = "load-1") -> None:
    """Commit ``(partition, start, end, records)`` files through the loader's real commit protocol."""
    storage = open_storage(str(root))
    dt, hour = hour_bucket(HOUR_START_MS)
    added = []
    for partition, start, end, recs in files:
        name = data_file_name(topic, 0, partition, start, end, fmt)
        staged = staging_relpath(run_id, name)
        data = encode(recs, fmt)
        storage.mkdirs(storage.join(staging_relpath(run_id)))
        storage.write_bytes(storage.join(staged), data)
        added.append(FileRecord(path=data_file_path(topic, dt, hour, name), topic=topic, broker_id=0,
                                partition=partition, start_offset=start, end_offset=end, rows=len(recs),
                                format=fmt, dt=dt, hour=hour, bytes=len(data), schema_id=1,
                                min_time_ms=HOUR_START_MS, max_time_ms=HOUR_START_MS + 3_599_999,
                                staging=staged, run_id=run_id))
    commit_files(storage, kind="load", run_id=run_id, offsets=[], added=added)


def make_hour(root: Path, fmt: str, files: int = 6, per_file: int = 50, dup_every: int = 10,
              topic: str = "page-views") -> tuple[Path, set[tuple[str, int]]]:
    """``files`` small committed files; every ``dup_every``-th record repeated in the next file."""
    ids: set[tuple[str, int]] = set()
    seq = 0
    carry: list[dict] = []
    out = []
    for f in range(files):
        recs = list(carry)
        carry = []
        for _ in range(per_file):
            r = record("s-a" if seq % 2 else "s-b", seq)
            ids.add((r["header"]["session"], seq))
            recs.append(r)
            if seq % dup_every == 0:
                carry.append(r)  # at-least-once duplicate in the next file
            seq += 1
        out.append((f % 2, f * 1000, f * 1000 + 999, recs))
    commit_hour_files(root, out, fmt, topic, run_id=f"load-{topic}")
    return hour_dir(root, topic), ids


def committed_paths(root: Path, topic: str = "page-views") -> list[str]:
    state = LoaderState.load(open_storage(str(root)))  # reads only: unpublished files are read from staging
    return [state.full_path(f) for f in state.files(topic)]


def read_ids(paths: list[str], fmt: str) -> list[tuple[str, int]]:
    out = []
    for p in paths:
        if fmt == "avro":
            with open(p, "rb") as f:
                out += [(r["header"]["session"], r["header"]["seq"]) for r in fastavro.reader(f)]
        else:
            t = pq.read_table(p).to_pylist()
            out += [(r["header"]["session"], r["header"]["seq"]) for r in t]
    return out
