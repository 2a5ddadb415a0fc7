"""The wire bytes of every request and response are those recorded in golden_frames.json."""
from __future__ import annotations

import json

import pytest

from ingest.wire import protocol as p
from tests.wire.golden_frames import DATA, samples

RECORDED = json.loads(DATA.read_text())
SAMPLES = samples()


def test_every_sample_is_recorded_and_every_recording_has_a_sample():
    assert sorted(SAMPLES) == sorted(RECORDED)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_frame_is_byte_identical_and_decodes_to_an_equal_object(name):
    kind, cls, obj, frame = SAMPLES[name]
    assert frame.hex() == RECORDED[name]
    recorded = bytes.fromhex(RECORDED[name])
    if kind == "request":
        decoded = p.decode_request(recorded)
        assert decoded == obj and type(decoded) is type(obj)
    elif kind in ("response", "decode"):
        decoded = cls.decode(recorded[4:])
        assert decoded == obj and type(decoded) is type(obj)
