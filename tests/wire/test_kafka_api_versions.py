"""ApiVersions v0-v4, declared once, checked byte for byte against kafka-python's own protocol classes
(generated from Kafka's JSON message specs): bodies, whole frames with their headers, both directions."""
from __future__ import annotations

import pytest

from ingest.errors import MalformedRequestError, MalformedResponseError
from ingest.wire.kafka import message as m
from ingest.wire.kafka.api_versions import (ApiVersion, ApiVersionsRequest, ApiVersionsResponse, FinalizedFeatureKey,
                                            SupportedFeatureKey)

kp = pytest.importorskip("kafka.protocol.metadata.api_versions")   # kafka-python >= 3.0 (the test extra)
KRequest, KResponse = kp.ApiVersionsRequest, kp.ApiVersionsResponse

VERSIONS = range(0, 5)
KEYS = ((0, 0, 9), (1, 4, 13), (3, 0, 12), (18, 0, 4))


def _request_pairs(version: int):
    yield ApiVersionsRequest(), KRequest(version=version)
    if version >= 3:
        yield (ApiVersionsRequest("ingest-é", "1.2.3"),
               KRequest(version=version, client_software_name="ingest-é", client_software_version="1.2.3"))


def _response_pairs(version: int):
    throttle = 250 if version >= 1 else 0
    keys = tuple(ApiVersion(*k) for k in KEYS)
    k_keys = [KResponse.ApiVersion(api_key=a, min_version=b, max_version=c) for a, b, c in KEYS]
    yield (ApiVersionsResponse(0, keys, throttle),
           KResponse(version=version, error_code=0, api_keys=k_keys, throttle_time_ms=throttle))
    yield (ApiVersionsResponse(35, (ApiVersion(18, 0, 3),)),             # UNSUPPORTED_VERSION with our range
           KResponse(version=version, error_code=35, api_keys=[KResponse.ApiVersion(api_key=18, min_version=0,
                                                                                    max_version=3)]))
    yield ApiVersionsResponse(0, ()), KResponse(version=version, error_code=0, api_keys=[])
    if version >= 3:                                                     # every tagged field set
        yield (ApiVersionsResponse(0, keys, throttle, (SupportedFeatureKey("metadata.version", 1, 20),), 7,
                                   (FinalizedFeatureKey("metadata.version", 20, 1),), True),
               KResponse(version=version, error_code=0, api_keys=k_keys, throttle_time_ms=throttle,
                         supported_features=[KResponse.SupportedFeatureKey(name="metadata.version", min_version=1,
                                                                           max_version=20)],
                         finalized_features_epoch=7,
                         finalized_features=[KResponse.FinalizedFeatureKey(name="metadata.version", max_version_level=20,
                                                                           min_version_level=1)],
                         zk_migration_ready=True))


def _ours_from_kafka_python(resp) -> ApiVersionsResponse:
    version = resp.version
    return ApiVersionsResponse(
        resp.error_code, tuple(ApiVersion(k.api_key, k.min_version, k.max_version) for k in resp.api_keys),
        resp.throttle_time_ms if version >= 1 else 0,
        tuple(SupportedFeatureKey(f.name, f.min_version, f.max_version) for f in resp.supported_features or ())
        if version >= 3 else (),
        resp.finalized_features_epoch if version >= 3 else -1,
        tuple(FinalizedFeatureKey(f.name, f.max_version_level, f.min_version_level)
              for f in resp.finalized_features or ()) if version >= 3 else (),
        bool(resp.zk_migration_ready) if version >= 3 else False)


@pytest.mark.parametrize("version", VERSIONS)
def test_requests_are_byte_identical_to_kafka_pythons_and_read_back(version):
    for ours, theirs in _request_pairs(version):
        assert ours.encode(version) == theirs.encode()
        assert ApiVersionsRequest.decode(theirs.encode(), version) == ours
        theirs.with_header(correlation_id=1234, client_id="client-1")
        frame = theirs.encode(header=True, framed=True)
        assert m.encode_request(ours, version, 1234, "client-1") == frame
        header, body = m.decode_request(ApiVersionsRequest, frame[4:])
        assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == \
            (18, version, 1234, "client-1")
        assert body == ours


@pytest.mark.parametrize("version", VERSIONS)
def test_responses_are_byte_identical_to_kafka_pythons_and_read_back_both_ways(version):
    for ours, theirs in _response_pairs(version):
        assert ours.encode(version) == theirs.encode()
        assert ApiVersionsResponse.decode(theirs.encode(), version) == ours
        # kafka-python reads a response with an error in the v0 layout, as a broker writes it (KIP-511)
        read_as = version if ours.error_code == 0 else 0
        assert _ours_from_kafka_python(KResponse.decode(ours.encode(read_as), version=read_as)) == \
            ApiVersionsResponse.decode(ours.encode(read_as), read_as)
        theirs.with_header(correlation_id=77)
        frame = theirs.encode(header=True, framed=True)
        assert m.encode_response(ours, version, 77) == frame      # header v0 even when flexible
        assert m.decode_response(ApiVersionsResponse, frame[4:], version) == (77, ours)


def test_fields_outside_a_version_take_their_defaults_and_are_not_written():
    full = ApiVersionsResponse(0, (ApiVersion(18, 0, 4),), 99, (), 5, (), True)
    assert ApiVersionsResponse.decode(full.encode(0), 0) == ApiVersionsResponse(0, (ApiVersion(18, 0, 4),))
    assert ApiVersionsResponse.decode(full.encode(2), 2) == ApiVersionsResponse(0, (ApiVersion(18, 0, 4),), 99)
    assert ApiVersionsRequest("x", "y").encode(2) == b""


def test_a_null_client_id_and_a_header_without_one():
    assert m.RequestHeader(18, 0, 5, None).encode(1) == bytes.fromhex("0012 0000 00000005 ffff".replace(" ", ""))
    assert m.RequestHeader.decode(bytes.fromhex("001200000000000affff00"), 2) == m.RequestHeader(18, 0, 10, None)
    assert m.RequestHeader(18, 0, 5, "ignored").encode(0) == bytes.fromhex("0012000000000005")


def test_unknown_tagged_fields_are_skipped_and_bad_ones_named():
    head = ApiVersionsResponse(0, ()).encode(3)[:-1]     # error, no api keys, throttle; then the tagged fields
    unknown = bytes([1, 9, 2, 0xAB, 0xCD])                # one field, tag 9, 2 bytes: not known here, skipped
    assert ApiVersionsResponse.decode(head + unknown, 3) == ApiVersionsResponse(0, ())
    with pytest.raises(MalformedResponseError, match=r"ApiVersionsResponse\.tagged_fields\[9\]: need 2 bytes"):
        ApiVersionsResponse.decode(head + unknown[:-1], 3)
    epoch_too_long = bytes([1, 1, 9]) + bytes(9)           # tag 1 (an int64) said to be 9 bytes long
    with pytest.raises(MalformedResponseError, match=r"finalized_features_epoch: tagged field of 9 bytes holds 8"):
        ApiVersionsResponse.decode(head + epoch_too_long, 3)


def test_a_varint_that_does_not_end_and_a_null_string_that_may_not_be_null():
    with pytest.raises(MalformedRequestError, match=r"ApiVersionsRequest\.client_software_name\.length: .*too long"):
        ApiVersionsRequest.decode(b"\xff" * 6, 3)
    with pytest.raises(MalformedRequestError, match=r"client_software_name: null, but not nullable"):
        ApiVersionsRequest.decode(b"\x00\x00\x00", 3)


def test_every_truncation_of_every_version_is_a_typed_error():
    for version in VERSIONS:
        for ours, _theirs in _response_pairs(version):
            data = ours.encode(version)
            for cut in range(len(data)):
                with pytest.raises(MalformedResponseError):
                    ApiVersionsResponse.decode(data[:cut], version)


def test_a_version_outside_the_declared_range_is_refused_with_the_range():
    with pytest.raises(ValueError, match="ApiVersionsRequest has no version 5; valid versions: 0-4"):
        ApiVersionsRequest().encode(5)
