"""Envelope framing and Avro serde against a real registry: round trips, reader schemas, typed errors."""
from __future__ import annotations

import copy
import struct

import pytest

from ingest.errors import EventDecodeError, SchemaError
from ingest.events.envelope import (HEADER_SCHEMA, HeaderFactory, ProducerIdentity, frame, has_header, unframe)
from ingest.events.loadgen import EventGenerator
from ingest.events.schemas import CLICK, PAGE_VIEW, SCHEMA_NAMES, SERVICE_METRIC, load_schema, schema_for_topic
from ingest.events.serde import EventDeserializer, EventSerializer


def test_frame_layout_and_errors():
    framed = frame(258, b"avro")
    assert framed == b"\x00\x00\x00\x01\x02avro"
    sid, body = unframe(framed)
    assert sid == 258 and bytes(body) == b"avro"
    with pytest.raises(EventDecodeError, match=r"topic t offset 7 schema id n/a: magic byte 0x01"):
        unframe(b"\x01" + framed[1:], topic="t", offset=7)
    with pytest.raises(EventDecodeError, match="shorter than the 5-byte"):
        unframe(b"\x00\x00", topic="t", offset=0)


def test_the_loader_strips_exactly_the_envelope_prefix():
    """One framing: the loader's decoder and its generated row decoders start where the envelope ends."""
    from ingest.events.envelope import PREFIX_SIZE
    from ingest.loader.decode import PayloadDecoder, compile_row_layout

    framed = frame(258, b"avro")
    assert bytes(PayloadDecoder.body(framed)) == b"avro" == framed[PREFIX_SIZE:]
    schema = {"type": "record", "name": "E", "fields": [
        {"name": "header", "type": {"type": "record", "name": "H", "fields": [{"name": "time", "type": "long"}]}}]}
    assert compile_row_layout(schema).decode(frame(7, b"\x04")) == (2,)  # zigzag varint 4 -> 2


def test_canonical_form_ignores_docs_and_layout_but_keeps_defaults():
    from ingest.events.schemas import canonical

    a = {"type": "record", "name": "A", "doc": "x", "fields": [
        {"name": "m", "type": {"type": "map", "values": "string"}, "default": {"doc": "kept", "type": "string"}}]}
    b = {"fields": [{"default": {"doc": "kept", "type": "string"}, "type": {"values": {"type": "string"},
                                                                           "type": "map"}, "name": "m"}],
         "name": "A", "type": "record"}
    assert canonical(a) == canonical(b)
    assert '"default":{"doc":"kept","type":"string"}' in canonical(a)
    c = {**b, "fields": [{**b["fields"][0], "default": {}}]}
    assert canonical(c) != canonical(b)


def test_header_factory_numbers_a_session_from_zero(fake_clock):
    ident = ProducerIdentity.new("svc", "host1")
    hf = HeaderFactory(ident, fake_clock)
    h0, h1 = hf.next(), hf.next(time_ms=5)
    assert (h0["seq"], h1["seq"]) == (0, 1)
    assert h0["time"] == fake_clock.time_ms() and h1["time"] == 5
    assert h0["session"] == ident.session and h0["server"] == "host1" and h0["service"] == "svc"
    assert ProducerIdentity.new("svc").session != ident.session


def test_every_example_schema_carries_the_header():
    for name in SCHEMA_NAMES:
        s = load_schema(name)
        assert has_header(s), name
        header = s["fields"][0]["type"]["fields"]
        assert [(f["name"], f["type"]) for f in header] == [(f["name"], f["type"]) for f in HEADER_SCHEMA["fields"]]
    assert schema_for_topic("clicks") == CLICK and schema_for_topic("svc-metrics") == SERVICE_METRIC
    assert schema_for_topic("page-views") == PAGE_VIEW


@pytest.mark.parametrize("name", [PAGE_VIEW, CLICK, SERVICE_METRIC])
def test_round_trip_of_generated_events(registry, name, fake_clock):
    ser = EventSerializer(registry, f"rt-{name}-value", load_schema(name))
    de = EventDeserializer(registry)
    hf = HeaderFactory(ProducerIdentity.new("svc"), fake_clock)
    for record in EventGenerator(name, seed=1).batch(50):
        record["header"] = hf.next()
        payload = ser.serialize(record)
        assert payload[0] == 0 and struct.unpack(">i", payload[1:5])[0] == ser.schema_id
        back = de.deserialize(payload, topic="t", offset=0)
        if name == SERVICE_METRIC:
            assert back["value"] == pytest.approx(record["value"])
            back["value"] = record["value"]
        assert back == record


def test_reader_schema_resolution(registry, fake_clock):
    old = load_schema(PAGE_VIEW)
    new = copy.deepcopy(old)
    new["fields"].append({"name": "experiment", "type": ["null", "string"], "default": None})
    new["fields"] = [f for f in new["fields"] if f["name"] != "ip"]
    ser = EventSerializer(registry, "resolve-value", old)
    record = EventGenerator(PAGE_VIEW, seed=2).page_view()
    record["header"] = HeaderFactory(ProducerIdentity.new("svc"), fake_clock).next()
    back = EventDeserializer(registry, reader_schema=new).deserialize(ser.serialize(record), topic="t", offset=0)
    assert back["experiment"] is None and "ip" not in back and back["member_id"] == record["member_id"]
    assert EventDeserializer(registry).writer_schema(ser.serialize(record))[0] == ser.schema_id


def test_decode_errors_name_topic_offset_and_schema_id(registry, fake_clock):
    ser = EventSerializer(registry, "err-value", load_schema(CLICK))
    de = EventDeserializer(registry)
    record = EventGenerator(CLICK, seed=3).click()
    record["header"] = HeaderFactory(ProducerIdentity.new("svc"), fake_clock).next()
    good = ser.serialize(record)
    with pytest.raises(EventDecodeError, match=r"topic clicks offset 42 schema id 987654: unknown schema id"):
        de.deserialize(frame(987654, good[5:]), topic="clicks", offset=42)
    with pytest.raises(EventDecodeError, match=rf"topic clicks offset 43 schema id {ser.schema_id}: .*does not decode"):
        de.deserialize(good[:12], topic="clicks", offset=43)
    with pytest.raises(EventDecodeError, match=rf"offset 44 schema id {ser.schema_id}: .*left over"):
        de.deserialize(good + b"\x00\x00", topic="clicks", offset=44)
    with pytest.raises(SchemaError, match="does not match schema id"):
        ser.serialize({"header": record["header"], "member_id": "not a number"})
