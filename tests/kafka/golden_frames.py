"""Reading the golden Kafka-protocol frames of tests/kafka/golden/ (captured from real clients).

A ``<profile>.jsonl`` file (in golden/: against the proposed version table; in golden/tansu-ranges/:
against the peer broker's own, wider ranges) holds a header line (client, settings, advertised ranges, the result of every
step) and then one frame per line: step, t_ms, conn, dir (request/response), api_key, api, api_version,
correlation_id, note, hex (the frame without its 4-byte size). Only what the tests need is decoded here:
the request header and the records of Produce requests; the product's own codecs are the wire layer's.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import NamedTuple

GOLDEN = Path(__file__).parent / "golden"
REQUEST_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
FLEXIBLE_FROM = {0: 9, 1: 12, 2: 6, 3: 9, 8: 8, 9: 6, 10: 3, 18: 3, 22: 2, 23: 4, 71: 0}  # first flexible version per api key


class Frame(NamedTuple):
    step: str
    conn: int
    direction: str
    api_key: int
    api_version: int
    correlation_id: int
    note: str
    data: bytes


def profiles() -> list[str]:
    """Every capture, as its path under golden/ without ``.jsonl`` (``tansu-ranges/...`` included)."""
    return sorted(p.relative_to(GOLDEN).with_suffix("").as_posix() for p in GOLDEN.rglob("*.jsonl"))


def load(profile: str) -> tuple[dict, list[Frame]]:
    lines = (GOLDEN / f"{profile}.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    frames = [Frame(f["step"], f["conn"], f["dir"], f["api_key"], f["api_version"], f["correlation_id"],
                    f["note"], bytes.fromhex(f["hex"])) for f in map(json.loads, lines[1:])]
    return head, frames


def flexible(api_key: int, version: int) -> bool:
    return version >= FLEXIBLE_FROM.get(api_key, 1 << 15)


def uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def request_header(frame: bytes) -> tuple[int, int, int, str | None, int]:
    """(api_key, api_version, correlation_id, client_id, position of the body)."""
    key, version, corr, client_len = REQUEST_HEADER.unpack_from(frame)
    pos = REQUEST_HEADER.size + max(client_len, 0)
    client = None if client_len < 0 else frame[REQUEST_HEADER.size:pos].decode()
    if flexible(key, version):  # request header v2: tagged fields
        count, pos = uvarint(frame, pos)
        for _ in range(count):
            _, pos = uvarint(frame, pos)
            size, pos = uvarint(frame, pos)
            pos += size
    return key, version, corr, client, pos


def compact_string(frame: bytes, pos: int) -> tuple[str | None, int]:
    n, pos = uvarint(frame, pos)
    return (None, pos) if n == 0 else (frame[pos:pos + n - 1].decode(), pos + n - 1)


def produce_records(frame: bytes) -> list[tuple[str, int, bytes]]:
    """(topic, partition, records) of every partition of a Produce request, any version."""
    key, version, _, _, pos = request_header(frame)
    assert key == 0, key
    flex = flexible(key, version)

    def count(p):
        if flex:
            n, p = uvarint(frame, p)
            return n - 1, p
        return struct.unpack_from(">i", frame, p)[0], p + 4

    def string(p):
        if flex:
            return compact_string(frame, p)
        (n,) = struct.unpack_from(">h", frame, p)
        return frame[p + 2:p + 2 + n].decode(), p + 2 + max(n, 0)

    def skip_tags(p):
        if flex:
            n, p = uvarint(frame, p)
            assert n == 0, "no client sends tagged fields in Produce"
        return p

    if version >= 3:
        _, pos = string(pos)  # transactional id
    pos += 6  # acks, timeout
    out = []
    n_topics, pos = count(pos)
    for _ in range(n_topics):
        topic, pos = string(pos)
        n_parts, pos = count(pos)
        for _ in range(n_parts):
            (partition,) = struct.unpack_from(">i", frame, pos)
            pos += 4
            size, pos = count(pos)
            out.append((topic, partition, frame[pos:pos + size]))
            pos = skip_tags(pos + size)
        pos = skip_tags(pos)
    skip_tags(pos)
    return out
