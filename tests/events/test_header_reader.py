"""HeaderReader against the real registry: exact headers from every example schema, the fallback
for a schema whose header is not first, and None for what has no readable header."""
from __future__ import annotations

import copy

import pytest

from ingest.events.envelope import PREFIX, frame
from ingest.events.header_reader import EventHeader, HeaderReader, header_is_first
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import CLICK, MONITORING_EVENT, PAGE_VIEW, SERVICE_METRIC, load_schema
from ingest.events.serde import EventSerializer

HEADERS = [
    EventHeader(1_700_000_123_456, "web-17.dc1", "frontend", "0b7f2a36-5b0e-4c55-9d8b-6a1f0c0e9a11", 123_456),
    EventHeader(0, "", "", "", 0),
    EventHeader(-5, "h", "s", "x", -1),
    EventHeader(63, "ü" * 40, "s" * 63, "é" * 100, 1 << 62),  # multi-byte lengths, non-ASCII
    EventHeader((1 << 63) - 1, "a" * 64, "b" * 300, "c", (1 << 63) - 1),
]


class CountingRegistry(RegistryClient):
    """The real client, counting schema look-ups (to prove the reader caches per id)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.lookups: list[int] = []

    def get_schema(self, schema_id: int) -> dict:
        self.lookups.append(schema_id)
        return super().get_schema(schema_id)


def example_record(name: str, header: EventHeader) -> dict:
    h = header._asdict()
    if name == MONITORING_EVENT:
        return {"header": h, "event_id": "e", "producer_session_id": "p", "producer_server": "s", "service": "v",
                "report_seq": 1, "topic": "t", "window_start_ms": 0, "window_end_ms": 1, "window_size_ms": 1,
                "revision": 1, "count_attempted": 2, "count_acked": 2, "count_failed": 0, "bytes_acked": 9,
                "seq_min": None, "seq_max": None, "is_final": True, "heartbeat": False, "emitted_at_ms": 5}
    if name == "mirror_lost_range":
        return {"header": h, "event_id": "e", "mirror_group": "g", "source_cluster": "dc1", "topic": "t",
                "broker_id": 1, "partition": 0, "start_offset": 0, "end_offset": 10, "bytes": 10, "messages": 1,
                "messages_exact": True, "session_bounds": [{"session": "s", "after_seq": 1, "before_seq": None}],
                "detected_at_ms": 7}
    return {**EventGenerator(name, seed=1).make(), "header": h}


@pytest.mark.parametrize("name", [PAGE_VIEW, CLICK, SERVICE_METRIC, MONITORING_EVENT, "mirror_lost_range"])
def test_every_example_schema_decodes_exactly(registry, name):
    schema = load_schema(name)
    assert header_is_first(schema)
    ser = EventSerializer(registry, f"hr-{name}-value", schema)
    reader = HeaderReader(registry)
    for h in HEADERS:
        payload = ser.serialize(example_record(name, h))
        assert reader.read(payload) == h
        assert reader.time_of(payload) == h.time
        assert reader.read(memoryview(payload)) == h
        assert reader.read(bytearray(payload)) == h


def test_header_not_first_uses_the_fallback(registry):
    schema = copy.deepcopy(load_schema(CLICK))
    schema["name"] = "LateHeader"
    schema["fields"] = [{"name": "first", "type": "string"}] + schema["fields"]
    assert not header_is_first(schema)
    ser = EventSerializer(registry, "hr-late-value", schema)
    reader = HeaderReader(registry)
    for h in HEADERS:
        payload = ser.serialize({**example_record(CLICK, h), "first": "before the header"})
        assert reader.read(payload) == h
        assert reader.time_of(payload) == h.time


def test_reordered_header_fields_use_the_fallback(registry):
    schema = copy.deepcopy(load_schema(PAGE_VIEW))
    schema["name"] = "Reordered"
    fields = schema["fields"][0]["type"]["fields"]
    fields[0], fields[4] = fields[4], fields[0]  # seq first, time last: not the fast layout
    assert not header_is_first(schema)
    ser = EventSerializer(registry, "hr-reordered-value", schema)
    h = HEADERS[0]
    payload = ser.serialize(example_record(PAGE_VIEW, h))
    assert HeaderReader(registry).read(payload) == h


def test_schema_without_header_gives_none(registry):
    schema = {"type": "record", "name": "NoHeader", "fields": [{"name": "x", "type": "long"}]}
    ser = EventSerializer(registry, "hr-noheader-value", schema)
    reader = HeaderReader(registry)
    assert reader.read(ser.serialize({"x": 1_700_000_000_000})) is None
    assert reader.time_of(ser.serialize({"x": 3})) is None


def test_unframed_and_garbled_payloads_give_none(registry):
    ser = EventSerializer(registry, "hr-pv-value", load_schema(PAGE_VIEW))
    good = ser.serialize(example_record(PAGE_VIEW, HEADERS[0]))
    reader = HeaderReader(registry)
    for bad in (b"", b"\x00", good[:5], b"\x01" + good[1:], b"plain text, not an event"):
        assert reader.read(bad) is None, bad
        assert reader.time_of(bad) is None, bad
    assert reader.unreadable == 0  # not framed: nothing was decoded
    cut_in_time, cut_in_server = good[:9], good[:20]  # framed, known schema, body cut short
    assert reader.read(cut_in_time) is None and reader.time_of(cut_in_time) is None
    assert reader.read(cut_in_server) is None
    assert reader.time_of(cut_in_server) == HEADERS[0].time  # the time itself is whole
    assert reader.unreadable == 3
    assert reader.read(good) == HEADERS[0]


def test_unknown_schema_id_gives_none_and_asks_the_registry_once(registry_proc):
    reg = CountingRegistry(registry_proc.url)
    reader = HeaderReader(reg)
    payload = frame(987_654, b"\x02\x00\x00\x00\x00")
    assert [reader.read(payload), reader.time_of(payload), reader.read(payload)] == [None, None, None]
    assert reg.lookups == [987_654]
    assert PREFIX.unpack_from(payload)[1] == 987_654
