"""Build loader-shaped hours (small Avro/Parquet files with headers) for compaction tests."""
from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

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
    from datetime import datetime, timezone

    t = datetime.fromtimestamp(HOUR_START_MS / 1000, tz=timezone.utc)
    return root / topic / f"dt={t:%Y-%m-%d}" / f"hour={t:%H}"


def write_file(path: Path, records: list[dict], fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "avro":
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(AVRO_SCHEMA), records, codec="deflate")
        path.write_bytes(buf.getvalue())
    else:
        pq.write_table(pa.Table.from_pylist(records), path)


def make_hour(root: Path, fmt: str, files: int = 6, per_file: int = 50, dup_every: int = 10,
              topic: str = "page-views") -> tuple[Path, set[tuple[str, int]]]:
    """``files`` small files; every ``dup_every``-th record also repeated in the next file."""
    d = hour_dir(root, topic)
    ids: set[tuple[str, int]] = set()
    seq = 0
    carry: list[dict] = []
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
        write_file(d / f"{topic}.b0.p{f % 2}.{f * 1000}-{f * 1000 + 999}.{fmt}", recs, fmt)
    return d, ids


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
