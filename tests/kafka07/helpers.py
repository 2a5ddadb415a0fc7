"""Shared steps of the Kafka 0.7 client tests: run samsa operations, read back with this project.

The expected bytes of 0.7 messages are built here from Kafka 0.7's ``Message.scala`` layout,
independently of ``ingest.records.message``: magic 0 ``length:int32 magic:int8=0 crc:uint32
payload`` and magic 1 ``length:int32 magic:int8=1 attributes:int8 crc:uint32 payload``, the
CRC-32 over the payload only in both.
"""
from __future__ import annotations

import struct
import uuid
import zlib
from pathlib import Path
from typing import Any

from ingest.client.simple_consumer import SimpleConsumer
from tests.harness.py27 import b64, run_ops, unb64
from tests.harness.wait import wait_until


def topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def samsa(py27: Path, *ops: dict[str, Any]) -> list[Any]:
    """Run operations through tests/kafka07/drivers/samsa_ops.py (samsa 0.3.11, Python 2.7)."""
    return run_ops(py27, "samsa_ops.py", [_encode(op) for op in ops])


def _encode(op: dict[str, Any]) -> dict[str, Any]:
    op = dict(op)
    if "payloads" in op:
        op["payloads"] = [b64(p) for p in op["payloads"]]
    if "requests" in op:
        op["requests"] = [_encode(r) for r in op["requests"]]
    return op


def ok(result: Any) -> Any:
    """A driver result that must not be an error."""
    assert not (isinstance(result, dict) and "error" in result), result
    return result


def samsa_messages(result: list[dict]) -> list[tuple[int, bytes]]:
    """``(offset, payload)`` of a samsa fetch result."""
    return [(m["offset"], unb64(m["payload"])) for m in ok(result)]


def v07_message(payload: bytes, magic: int, attributes: int = 0) -> bytes:
    """One Kafka 0.7 message, byte for byte (CRC-32 of the payload only)."""
    crc = zlib.crc32(payload) & 0xFFFFFFFF
    if magic == 0:
        return struct.pack(">iBI", 1 + 4 + len(payload), 0, crc) + payload
    return struct.pack(">iBBI", 1 + 1 + 4 + len(payload), 1, attributes, crc) + payload


def read_partition(broker, topic_name: str, partition: int, count: int = 0) -> list[tuple[int, bytes]]:
    """``(offset, payload)`` of every message of one partition, read by this project's SimpleConsumer.

    ``count``: wait (up to 30 s) until at least that many messages are there first. A 0.7 PRODUCE
    has no response, so a client returns before the broker has appended: reads that follow a
    fire-and-forget produce pass the number of messages sent.
    """
    def read():
        with SimpleConsumer(broker.host, broker.port) as c:
            end = c.latest_offset(topic_name, partition)
            return [(m.offset, m.payload) for m in c.iter_range(topic_name, partition, 0, end)]

    if count:
        wait_until(lambda: len(read()) >= count, what=f"{count} messages in {topic_name}-{partition}")
    return read()


def raw_log(broker, topic_name: str, partition: int, size: int = 0) -> bytes:
    """The partition's bytes as the broker serves them (from offset 0 to the end).

    ``size``: wait (up to 30 s) until the partition holds at least that many bytes first (see
    :func:`read_partition`).
    """
    with SimpleConsumer(broker.host, broker.port) as c:
        if size:
            wait_until(lambda: c.latest_offset(topic_name, partition) >= size,
                       what=f"{size} bytes in {topic_name}-{partition}")
        end = c.latest_offset(topic_name, partition)
        return c.fetch_raw(topic_name, partition, 0, max(end, 1))[:end]
