"""Repair reads: another replica's bytes of a damaged range, fetched with REPLICA_FETCH -1 and checked.

A replica that finds damage in its own log (docs/log-format.md, "Damaged ranges")
asks another replica for the same offsets: a follower asks its leader, a leader an
in-sync follower (docs/replication.md). The answer may come in pieces (a read never
crosses the other replica's segment end, and replicas roll their segments at
different offsets), so the range is read until it is whole; it is used only if it
is whole valid messages that end exactly at the range's end.
"""
from __future__ import annotations

from ingest.wire import protocol as p
from ingest.errors import IngestError
from ingest.wire.errors import ErrorCode, error_name
from ingest.records.message_set import valid_prefix


def read_range(conn, topic: str, partition: int, epoch: int, start: int, end: int,
               max_bytes: int) -> tuple[bytes | None, str]:
    """``[start, end)`` of the replica behind ``conn`` (a BrokerConnection), or ``(None, why not)``."""
    out = bytearray()
    try:
        while start + len(out) < end:
            off = start + len(out)
            req = p.ReplicaFetchRequest(-1, epoch, 0, p.FetchRequest(topic, partition, off, min(end - off, max_bytes)))
            resp = conn.request(req.encode(), p.ReplicaFetchResponse)
            if resp.error != ErrorCode.NONE:
                return None, f"answered {error_name(resp.error)} at {off}"
            if not resp.message_set:
                return None, f"has nothing at {off} (its high watermark is {resp.high_watermark})"
            out += resp.message_set[:end - off]
    except IngestError as exc:
        return None, str(exc)
    data = bytes(out)
    if valid_prefix(data) != len(data):
        return None, "its bytes are not whole valid messages ending at the range's end"
    return data, ""
