"""Synthetic loader output for audit tests: real files in the loader's layout, committed
through the loader's own commit protocol (so the audit reads them via ingest.loader.state)."""
from __future__ import annotations

import io
import itertools
import json
import uuid
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.loader import commit, layout
from ingest.loader.records import FileRecord, OffsetRecord
from ingest.lost_ranges import LostRange
from ingest.loader.state import LoaderState
from ingest.storage import open_storage

SCHEMAS = Path(__file__).resolve().parents[2] / "conf" / "schemas"
W = 600_000
T0 = 1_763_800_000_000 - 1_763_800_000_000 % 3_600_000  # an hour edge (2025-11-22 08:00 UTC)
AUDIT_TOPIC = "audit-monitoring"
MIRROR_TOPIC = "audit-mirror"          # the mirror's tier counts (monitoring schema)
MIRROR_LOST_TOPIC = "audit-mirror-lost"  # the mirror's lost ranges (MirrorLostRange)

_event_ids = itertools.count()


def event(session: str, seq: int, time_ms: int, server: str = "host-a") -> dict:
    return {
        "header": {"time": time_ms, "server": server, "service": "web", "session": session, "seq": seq},
        "member_id": seq, "page_key": "home", "url": f"/p/{seq}", "referrer": None, "user_agent": "ua",
        "ip": "10.0.0.1", "locale": "en_US", "response_ms": 5, "is_guest": False,
    }


def events(session: str, seqs, time_ms: int, server: str = "host-a") -> list[dict]:
    return [event(session, s, time_ms + i, server) for i, s in enumerate(seqs)]


def mon(session: str, topic: str, window_start: int, *, report_seq: int, acked: int, attempted: int | None = None,
        failed: int = 0, revision: int = 1, seq_min: int | None = None, seq_max: int | None = None,
        heartbeat: bool = False, final: bool = True, emitted_at: int | None = None, event_id: str | None = None,
        server: str = "host-a") -> dict:
    emitted = emitted_at if emitted_at is not None else window_start + W + 1000 + report_seq
    return {
        "header": {"time": emitted, "server": server, "service": "web", "session": session, "seq": 1_000_000 + report_seq},
        "event_id": event_id or f"ev-{next(_event_ids)}", "producer_session_id": session, "producer_server": server,
        "service": "web", "report_seq": report_seq, "topic": topic, "window_start_ms": window_start,
        "window_end_ms": window_start + W, "window_size_ms": W, "revision": revision,
        "count_attempted": attempted if attempted is not None else acked + failed, "count_acked": acked,
        "count_failed": failed, "bytes_acked": acked * 100, "seq_min": seq_min, "seq_max": seq_max,
        "is_final": final, "heartbeat": heartbeat, "emitted_at_ms": emitted,
    }


def mirror_lost(topic: str, messages: int, after: int | None, before: int | None, bounds=(), *, exact=True,
                start: int = 0, event_id: str | None = None, cluster: str = "dc1", cause: str = "retention") -> dict:
    """A MirrorLostRange record (conf/schemas/mirror_lost_range.avsc); bounds = [(session, after, before)]."""
    return {
        "header": {"time": before or 1, "server": "mirror-host", "service": f"mirror:{cluster}",
                   "session": "mirror-lost", "seq": start},
        "event_id": event_id or f"lost-{next(_event_ids)}", "mirror_group": "mirror", "source_cluster": cluster,
        "topic": topic, "broker_id": 0, "partition": 0, "start_offset": start, "end_offset": start + 100 * messages,
        "bytes": 100 * messages, "messages": messages, "messages_exact": exact, "cause": cause, "after_time_ms": after,
        "before_time_ms": before,
        "session_bounds": [{"session": s, "after_seq": a, "before_seq": b} for s, a, b in bounds],
        "target_partition": 0, "target_offset": None, "detected_at_ms": 1,
    }


def _schema(topic: str) -> dict:
    name = {AUDIT_TOPIC: "monitoring_event", MIRROR_TOPIC: "monitoring_event",
            MIRROR_LOST_TOPIC: "mirror_lost_range"}.get(topic, "page_view")
    return json.loads((SCHEMAS / f"{name}.avsc").read_text())


class Destination:
    """A destination directory that synthetic loads commit to."""

    def __init__(self, root: Path, fmt: str = "parquet") -> None:
        self.root = str(root)
        self.fmt = fmt
        self.storage = open_storage(self.root)
        self.next_offset: dict[tuple[str, int], int] = {}

    def load(self, batches: dict[str, list[dict]], *, partition: int = 0,
             lost: list[LostRange] = (), fmt: str | None = None) -> str:
        """Commit one load run: each topic's records as files bucketed by event hour."""
        fmt = fmt or self.fmt
        run_id = f"run-{uuid.uuid4().hex[:8]}"
        state = LoaderState.load(self.storage)
        offsets = dict(state.offsets)
        added = []
        for topic, records in batches.items():
            start = self.next_offset.get((topic, partition), 0)
            end = start + 100 * len(records)
            self.next_offset[(topic, partition)] = end
            buckets: dict[tuple[str, int], list[dict]] = {}
            for r in records:
                t = r["header"]["time"]
                try:
                    key = layout.hour_bucket(t)
                except (ValueError, OverflowError, OSError):
                    key = ("1970-01-01", 0)
                buckets.setdefault(key, []).append(r)
            for (dt, hour), recs in sorted(buckets.items()):
                name = layout.data_file_name(topic, 0, partition, start, end, fmt)
                rel = layout.data_file_path(topic, dt, hour, name)
                staged = commit.staging_relpath(run_id, f"{dt}-{hour}-{name}")
                self.storage.write_bytes(self.storage.join(staged), _encode(recs, fmt, topic))
                added.append(FileRecord(
                    path=rel, topic=topic, broker_id=0, partition=partition, start_offset=start, end_offset=end,
                    rows=len(recs), format=fmt, dt=dt, hour=hour, staging=staged, run_id=run_id,
                ))
            offsets[(topic, 0, partition)] = OffsetRecord(topic, 0, partition, end)
        commit.commit_files(self.storage, kind="load", run_id=run_id, offsets=list(offsets.values()),
                            added=added, lost_ranges=list(lost), expected_seq=state.seq)
        return run_id


def lost_range(topic: str, estimated: int, after: int | None, before: int | None, partition: int = 0, *,
               exact: bool = False, bounds=()) -> LostRange:
    return LostRange(topic=topic, broker_id=0, partition=partition, start_offset=0, end_offset=100 * estimated,
                     bytes=100 * estimated, estimated_messages=estimated, after_time_ms=after, before_time_ms=before,
                     run_id="r", detected_at_ms=0, messages_exact=exact, session_bounds=tuple(bounds))


_HEADER = pa.struct([("time", pa.int64()), ("server", pa.string()), ("service", pa.string()),
                     ("session", pa.string()), ("seq", pa.int64())])
_MON_ARROW = pa.schema([("header", _HEADER)] + [
    (n, {"long": pa.int64(), "string": pa.string(), "boolean": pa.bool_(), "int": pa.int32()}[t])
    for n, t in [("event_id", "string"), ("producer_session_id", "string"), ("producer_server", "string"),
                 ("service", "string"), ("report_seq", "long"), ("topic", "string"), ("window_start_ms", "long"),
                 ("window_end_ms", "long"), ("window_size_ms", "long"), ("revision", "int"),
                 ("count_attempted", "long"), ("count_acked", "long"), ("count_failed", "long"),
                 ("bytes_acked", "long"), ("seq_min", "long"), ("seq_max", "long"), ("is_final", "boolean"),
                 ("heartbeat", "boolean"), ("emitted_at_ms", "long")]
])


def _encode(records: list[dict], fmt: str, topic: str) -> bytes:
    buf = io.BytesIO()
    if fmt == "parquet":
        from ingest.loader.writers import arrow_schema  # the loader's own Avro -> Arrow mapping

        schema = _MON_ARROW if topic == AUDIT_TOPIC else (
            arrow_schema(_schema(topic)) if topic in (MIRROR_TOPIC, MIRROR_LOST_TOPIC) else None)
        pq.write_table(pa.Table.from_pylist(records, schema=schema), buf)
    else:
        fastavro.writer(buf, fastavro.parse_schema(_schema(topic)), records)
    return buf.getvalue()
