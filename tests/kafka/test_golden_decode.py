"""Every request the real clients sent and every answer the peer broker gave (tests/kafka/golden/), for the
APIs and versions the wire layer declares, decodes with our declarations; a client's request encodes back to
the same bytes, and an answer to the same value."""
from __future__ import annotations

import pytest

from ingest.wire.kafka import message as m
from ingest.wire.kafka.apis import APIS
from tests.kafka import golden_frames as g


def _frames():
    for profile in g.profiles():
        _head, frames = g.load(profile)
        for i, fr in enumerate(frames):
            api = APIS.get(fr.api_key)
            if api is None or not api.min_version <= fr.api_version <= api.max_version:
                continue
            if fr.direction == "response" and api.key == 18 and fr.data[4:6] != b"\x00\x00":
                continue   # an ApiVersions error answer is in the v0 layout whatever the version (KIP-511)
            if fr.direction == "response" and api.key == 2 and fr.api_version == 0:
                continue   # the peer broker cannot answer ListOffsets v0 (docs/kafka-protocol.md)
            yield pytest.param(fr, api, id=f"{profile}#{i}-{api.name}-v{fr.api_version}-{fr.direction}")


FRAMES = list(_frames())


def test_the_captures_cover_every_declared_api_in_both_directions():
    seen = {(api.key, fr.direction) for fr, api in (p.values for p in FRAMES)}
    # OffsetForLeaderEpoch: no client sent it against one broker without a leader change (docs/kafka-protocol.md)
    assert seen >= {(k, d) for k in (0, 1, 2, 3, 10, 18, 22) for d in ("request", "response")}


def _librdkafka_metadata_quirk(fr, again: bytes) -> bool:
    """librdkafka 2.16's Metadata v9 for all topics ends with an empty tagged field (tag 0, no bytes) and
    one byte more; Kafka's broker skips the unknown tag and ignores the byte after the body, and so do we."""
    return fr.api_key == 3 and fr.api_version == 9 and fr.data.endswith(b"\x01\x00\x00\x00") \
        and again.endswith(b"\x00") and fr.data[:-4] == again[:-1]


@pytest.mark.parametrize(("fr", "api"), FRAMES)
def test_a_captured_frame_decodes_and_encodes_back(fr, api):
    if fr.direction == "request":
        header, body = m.decode_request(api.request, fr.data)
        assert (header.request_api_key, header.request_api_version, header.correlation_id) == \
            (fr.api_key, fr.api_version, fr.correlation_id)
        again = m.encode_request(body, fr.api_version, header.correlation_id, header.client_id)[4:]
        assert again == fr.data or _librdkafka_metadata_quirk(fr, again)
        return
    correlation_id, body = m.decode_response(api.response, fr.data, fr.api_version)
    assert correlation_id == fr.correlation_id
    # the peer broker writes some tagged fields with their default values, which we leave out
    again = m.encode_response(body, fr.api_version, correlation_id)[4:]
    assert m.decode_response(api.response, again, fr.api_version)[1] == body
