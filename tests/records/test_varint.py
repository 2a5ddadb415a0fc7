"""Varints (unsigned and zigzag): round trips at every width edge, Kafka's byte forms, malformed ones refused."""
from __future__ import annotations

import pytest

from ingest.errors import InvalidRecordError
from ingest.records.varint import (encode_uvarint, encode_varint, read_uvarint, read_varint, read_varlong,
                                   size_of_uvarint, size_of_varint, zigzag)

EDGES = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, 2**31 - 1, -2**31]
LONG_EDGES = EDGES + [2**31, -2**31 - 1, 2**63 - 1, -2**63]


def test_zigzag_forms_are_kafkas():
    # ByteUtils: 0 -> 00, -1 -> 01, 1 -> 02, -2 -> 03, 300 -> d8 04
    assert [encode_varint(v) for v in (0, -1, 1, -2, 300)] == [b"\x00", b"\x01", b"\x02", b"\x03", b"\xd8\x04"]
    assert [zigzag(v) for v in (0, -1, 1, -2)] == [0, 1, 2, 3]
    assert encode_uvarint(300) == b"\xac\x02"


@pytest.mark.parametrize("value", LONG_EDGES)
def test_varlong_round_trip_and_size(value):
    data = b"\xff" + encode_varint(value) + b"\x7f"
    assert read_varlong(data, 1) == (value, 1 + len(encode_varint(value)))
    assert size_of_varint(value) == len(encode_varint(value))


@pytest.mark.parametrize("value", EDGES)
def test_varint_round_trip(value):
    assert read_varint(encode_varint(value), 0) == (value, len(encode_varint(value)))


@pytest.mark.parametrize("value", [0, 1, 127, 128, 16383, 16384, 2**32 - 1])
def test_uvarint_round_trip(value):
    data = encode_uvarint(value)
    assert read_uvarint(memoryview(bytearray(data)), 0) == (value, len(data)) and size_of_uvarint(value) == len(data)


def test_a_varint_with_six_continuation_bytes_is_refused_naming_its_position():
    with pytest.raises(InvalidRecordError, match="at byte 2 is too long"):
        read_varint(b"\x00\x00" + b"\x80" * 5 + b"\x01", 2)


def test_a_varlong_longer_than_ten_bytes_is_refused():
    with pytest.raises(InvalidRecordError, match="too long"):
        read_varlong(b"\x80" * 10 + b"\x01", 0)


def test_a_cut_off_varint_is_refused():
    with pytest.raises(InvalidRecordError, match="cut off"):
        read_varint(b"\x80\x80", 0)


def test_a_varint_above_32_bits_is_refused():
    with pytest.raises(InvalidRecordError, match="does not fit 32 bits"):
        read_varint(encode_uvarint(2**33), 0)
