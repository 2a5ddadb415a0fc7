"""Helpers of the Spark source tests: events with chosen times placed in chosen partitions, exactly.

``Sent`` is what a test expects back from ``format("ingest")``: every message's
partition name, byte offset (computed from the very message set the broker
stores byte for byte), event time and record.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

from ingest.events.envelope import HeaderFactory, ProducerIdentity
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import load_schema
from ingest.events.serde import EventSerializer
from ingest.records.message import CODEC_NONE, MAGIC
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z: event times are T0 + i * 1000 ms


@dataclass(frozen=True)
class Sent:
    partition: str       # the source's partition name: "0" or "<broker>-<partition>"
    offset: int
    time_ms: int
    record: dict


def page_view_schema(extra_field: bool = False) -> dict:
    schema = load_schema("page_view")
    if extra_field:  # version 2: a field with a default, so version-1 events resolve into it
        schema = copy.deepcopy(schema)
        schema["fields"].append({"name": "campaign", "type": ["null", "string"], "default": None})
    return schema


def events(registry_url: str, topic: str, times: list[int], *, seed: int = 1, v2: bool = False) -> list[tuple[bytes, dict, int]]:
    """(payload, record as the reader schema decodes it, time) per time; schema v1 or v2 of ``<topic>-value``."""
    ser = EventSerializer(RegistryClient(registry_url), f"{topic}-value", page_view_schema(v2))
    headers = HeaderFactory(ProducerIdentity("h1", "explore-test", f"session-{topic}-{seed}"))
    out = []
    for t, rec in zip(times, EventGenerator(seed=seed).batch(len(times))):
        rec = {**rec, "header": headers.next(time_ms=t)}
        if v2:
            rec["campaign"] = f"c{t % 7}"
        out.append((ser.serialize(rec), rec, t))
    return out


def offsets_of(message_set: bytes, base: int) -> list[int]:
    return [m.offset for m in iter_messages(message_set, base)]


def send(client, topic: str, partition: int, name: str, batch: list[tuple[bytes, dict, int]], *,
         codec: int = CODEC_NONE, magic: int = MAGIC) -> list[Sent]:
    """PRODUCE (acknowledged) ``batch`` as one message set of ``magic`` to ``partition`` through ``client``
    (a WireClient); with a codec, as one compressed wrapper."""
    from ingest.wire import protocol as proto
    from ingest.wire.errors import ErrorCode

    message_set = encode_message_set([p for p, _, _ in batch], codec, magic)
    resp = client.ask(proto.ProduceAckRequest(topic, partition, message_set), proto.ProduceAckResponse)
    assert resp.error == ErrorCode.NONE, resp
    return [Sent(name, off, t, rec) for off, (_, rec, t) in zip(offsets_of(message_set, resp.offset), batch)]


def expected_row(s: Sent, topic: str, partition: int, broker_id: int | None) -> dict:
    """The row the source returns for ``s`` under the v2 reader schema (``event_time`` as ms, see ``as_compared``)."""
    row = dict(s.record)
    row.setdefault("campaign", None)
    row.update(topic=topic, partition=partition, broker_id=broker_id, offset=s.offset, event_time=s.time_ms)
    return row


def as_compared(row) -> dict:
    """A collected Row as a dict, ``event_time`` as ms since the epoch (pyspark hands back a local naive datetime)."""
    d = row.asDict(recursive=True)
    d["event_time"] = None if d["event_time"] is None else round(d["event_time"].timestamp() * 1000)
    return d


def key(d: dict) -> tuple:
    return (d["partition"], d["broker_id"] if d["broker_id"] is not None else -1, d["offset"], d["header"]["seq"])
